//! GGUF end to end: the committed gemma cut (testdata/gguf/) read as
//! tensors by the public fuzzing entry and round-tripped at the default
//! options (where a small file may also be coded whole).

use std::path::Path;

use brevis_core::fuzzing::read_as;
use brevis_core::{Archive, CompressOptions, SegmentKind, compress, decompress};

fn sample() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/gguf/gemma-3-270m-cut.gguf");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn gguf_sample_is_tensors_and_round_trips() {
    let data = sample();
    let segs = read_as("gguf", &data)
        .expect("a gguf reader")
        .expect("read");
    let tensors: Vec<&str> = segs
        .iter()
        .filter(|s| s.kind == SegmentKind::Tensor)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(tensors.len(), 14, "{tensors:?}");
    assert!(tensors.contains(&"blk.0.attn_output.weight"));
    let archive = compress(&data, &CompressOptions::default()).unwrap();
    assert!(decompress(&archive).unwrap() == data, "round trip");
    assert!(archive.len() < data.len());
    // One tensor's bytes alone: the Q6_K rows of blk.0.ffn_down.weight.
    let a = Archive::new(&archive[..]).unwrap();
    let down = segs
        .iter()
        .find(|s| s.name == "blk.0.ffn_down.weight")
        .unwrap();
    assert_eq!((down.shape.as_slice(), down.len), (&[64, 1680][..], 107520));
    let (at, end) = (down.offset as usize, (down.offset + down.len) as usize);
    assert!(a.read_range(down.offset, down.len).unwrap() == data[at..end]);
}
