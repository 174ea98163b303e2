//! The `.brv` archive end to end through the public API: round trips of the
//! committed checkpoints, every truncation and byte flip of a small archive,
//! replays of the fuzz crash inputs, determinism across thread counts, one
//! tensor decoded alone, and the golden archives of every format version.

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use brevis_core::Archive;
use brevis_core::fuzzing::{Node, program};
use brevis_core::{CompressOptions, compress, decompress};
use sha2::Digest;

/// The fuzz harnesses, shared with `fuzz/fuzz_targets/` so crash inputs
/// replay through exactly the code that found them.
#[allow(dead_code)]
#[path = "../../fuzz/src/lib.rs"]
pub(crate) mod harness;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Files of `dir`'s subfolders whose names satisfy `keep`, sorted.
fn files_in_subdirs(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for sub in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
        for f in std::fs::read_dir(&sub).unwrap().flatten().map(|e| e.path()) {
            if f.is_file() && keep(&f) {
                out.push(f);
            }
        }
    }
    out.sort();
    out
}

/// Whether most tensor bytes of a safetensors file are floating point.
fn is_float_model(file: &[u8]) -> bool {
    let n = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&file[8..8 + n]).unwrap();
    let (mut float, mut total) = (0u64, 0u64);
    for (name, t) in &header {
        if name == "__metadata__" {
            continue;
        }
        let o = &t["data_offsets"];
        let len = o[1].as_u64().unwrap() - o[0].as_u64().unwrap();
        total += len;
        if matches!(t["dtype"].as_str(), Some("F16" | "BF16" | "F32" | "F64")) {
            float += len;
        }
    }
    float * 2 > total
}

/// (1) Every committed checkpoint round-trips; the float ones shrink.
#[test]
fn testdata_checkpoints_round_trip() {
    let files = files_in_subdirs(&root().join("testdata"), |p| {
        p.extension().is_some_and(|e| e == "safetensors")
    });
    assert!(files.len() >= 5, "testdata checkpoints missing: {files:?}");
    let mut seen = HashSet::new();
    for f in files {
        let data = std::fs::read(&f).unwrap();
        // Identical copies (hub-seed is minilm-f32) are checked once.
        if !seen.insert(sha2::Sha256::digest(&data)) {
            continue;
        }
        let archive = compress(&data, &CompressOptions::default())
            .unwrap_or_else(|e| panic!("compressing {}: {e}", f.display()));
        let back = decompress(&archive).unwrap_or_else(|e| panic!("decoding {}: {e}", f.display()));
        assert!(back == data, "{} does not round-trip", f.display());
        if is_float_model(&data) {
            assert!(
                archive.len() < data.len(),
                "{}: archive of {} bytes is not smaller than the {}-byte float model",
                f.display(),
                archive.len(),
                data.len()
            );
        }
    }
}

/// Every level codes every checkpoint exactly; the fastest weighs no
/// context coder (order-1 or conditional rANS), and the default level is
/// what `CompressOptions::default()` does.
#[test]
fn every_level_round_trips_and_the_fastest_has_no_context_coder() {
    use brevis_core::Level;
    for sample in ["astra-bf16", "whisper-tiny-f16", "minilm-f32"] {
        let f = root()
            .join("testdata")
            .join(sample)
            .join("model.safetensors");
        let data = std::fs::read(&f).unwrap();
        let default = compress(&data, &CompressOptions::default()).unwrap();
        for n in 1..=9 {
            let level = Level::new(n).unwrap();
            let a = compress(&data, &CompressOptions::default().level(level)).unwrap();
            assert!(decompress(&a).unwrap() == data, "{sample} at level {n}");
            if level == Level::DEFAULT {
                assert!(a == default, "{sample}: the default is level {n}");
            }
            if level == Level::FASTEST {
                let ar = Archive::new(&a[..]).unwrap();
                for (s, seg) in ar.segments().iter().enumerate() {
                    for r in 0..seg.regions.len() {
                        let text = ar.describe_program(s, r).unwrap().text;
                        assert!(
                            !text.contains("rans1") && !text.contains("rans|"),
                            "{sample} at level 1 has a context coder: {text}"
                        );
                    }
                }
            }
        }
    }
}

/// The sample archive has what the corruption tests rely on: several
/// regions in a segment and a reference to an earlier tensor.
#[test]
fn sample_archive_exercises_regions_and_refs() {
    let (original, archive) = harness::sample_archive();
    let a = Archive::new(&archive[..]).unwrap();
    assert_eq!(a.info().original_len, original.len() as u64);
    assert!(
        a.segments().iter().any(|s| s.regions.len() >= 2),
        "no segment of the sample has two regions"
    );
    let tied = a.find("proj_tied.weight").expect("the duplicated tensor");
    assert!(
        matches!(program(&a, tied, 0).unwrap(), Node::Ref { .. }),
        "the duplicated tensor is no longer coded as a reference"
    );
    assert!(
        (1_000..60_000).contains(&archive.len()),
        "{}",
        archive.len()
    );
}

/// Duplicates are found by a hash of each tensor's edges, then compared
/// byte for byte: a tensor that differs from an earlier one only between
/// its edges is coded on its own, and a later copy of it still becomes a
/// reference to it.
#[test]
fn duplicates_that_differ_only_inside_are_told_apart() {
    use harness::{Rng, TensorSpec, build_safetensors};
    let mut rng = Rng::new(11);
    // 8192 f32s: edges are its first, middle and last 4 KiB.
    let a: Vec<u8> = (0..8192)
        .flat_map(|_| rng.normal(0.05).to_le_bytes())
        .collect();
    let mut b = a.clone();
    b[5000] ^= 0x40;
    let t = |name: &str, data: &Vec<u8>| TensorSpec {
        name: name.into(),
        dtype: "F32",
        shape: vec![64, 128],
        data: data.clone(),
        gap_before: 0,
    };
    let file = build_safetensors(&[t("a", &a), t("b", &b), t("c", &b), t("d", &a)], &[], b"");
    let opts = harness::sample_options();
    let archive = compress(&file, &opts).unwrap();
    assert!(decompress(&archive).unwrap() == file);
    let arc = Archive::new(&archive[..]).unwrap();
    let is_ref = |name: &str| {
        let i = arc.find(name).expect("a tensor of the file");
        match program(&arc, i, 0).unwrap() {
            Node::Ref { segment, .. } => Some(arc.segments()[segment as usize].desc.name.clone()),
            _ => None,
        }
    };
    assert_eq!(is_ref("a"), None);
    assert_eq!(is_ref("b"), None, "b differs from a inside");
    assert_eq!(is_ref("c").as_deref(), Some("b"));
    assert_eq!(is_ref("d").as_deref(), Some("a"));
}

/// (2) Every prefix of a valid archive is an error, never a panic.
#[test]
fn every_truncation_is_an_error() {
    let (_, archive) = harness::sample_archive();
    for cut in 0..archive.len() {
        let part = &archive[..cut];
        assert!(decompress(part).is_err(), "prefix of {cut} bytes decoded");
        assert!(Archive::new(part).is_err(), "prefix of {cut} bytes opened");
    }
}

/// (3) A byte flipped anywhere gives an error or the exact original bytes.
#[test]
fn every_byte_flip_is_an_error_or_the_original() {
    let (original, archive) = harness::sample_archive();
    let mut flipped = archive.clone();
    let mut still_ok = Vec::new();
    for i in 0..archive.len() {
        for x in [0xFF, 0x01] {
            flipped[i] ^= x;
            if let Ok(out) = decompress(&flipped) {
                assert!(
                    out == *original,
                    "byte {i} ^ {x:#04x}: decoded without error to different bytes"
                );
                still_ok.push((i, x));
            }
            flipped[i] ^= x;
        }
    }
    // Flips the checksums cannot see must be rare (padding bits at most).
    assert!(still_ok.len() < archive.len() / 20, "{still_ok:?}");
}

/// Longest a replayed fuzz input may run (timeout-* artifacts are hangs).
const ARTIFACT_SECONDS: u64 = 20;

/// Run `f` on its own thread: `Err` with the panic message, or after
/// `secs` seconds (the thread is left running: a hang must not hang the
/// whole test run).
fn within(secs: u64, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = catch_unwind(AssertUnwindSafe(f)).map_err(|e| {
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        });
        let _ = tx.send(r);
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs))
        .unwrap_or_else(|_| Err(format!("still running after {secs} s")))
}

/// (4) Every committed fuzz crash input replays through `decompress` and
/// through its own target's harness without a panic.
#[test]
fn fuzz_artifacts_replay() {
    let files = files_in_subdirs(&root().join("fuzz/artifacts"), |p| {
        !p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
    });
    let mut failures = Vec::new();
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let target = f
            .parent()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let r = within(ARTIFACT_SECONDS, move || {
            let _ = decompress(&data);
            match target.as_str() {
                "decode_raw" => harness::decode_raw(&data),
                "decode_structured" => harness::decode_structured(&data),
                "roundtrip" => harness::roundtrip(&data),
                "program" => harness::program(&data),
                "serve_request" => harness::serve_request(&data),
                t if t.starts_with("read_") => harness::read_format(&t["read_".len()..], &data),
                other => panic!("artifacts of unknown target {other}"),
            }
        });
        if let Err(msg) = r {
            failures.push(format!("{}: {msg}", f.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} fuzz artifacts still fail:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// A checkpoint with one tensor of many regions (more than a parallel batch).
fn many_regions() -> Vec<u8> {
    let mut rng = harness::Rng::new(3);
    let big: Vec<u8> = (0..20 * 1024)
        .flat_map(|_| rng.normal(0.03).to_le_bytes())
        .collect();
    let mut tensors = harness::sample_tensors();
    tensors.push(harness::TensorSpec {
        name: "big".into(),
        dtype: "F32",
        shape: vec![20, 1024],
        data: big,
        gap_before: 0,
    });
    harness::build_safetensors(&tensors, &[("format", "pt")], b"")
}

/// (5) The archive does not depend on the number of threads.
#[test]
fn archives_are_identical_across_thread_counts() {
    for input in [harness::sample_safetensors(), many_regions()] {
        let opts = |t| CompressOptions::default().threads(t).region_words(1024);
        let one = compress(&input, &opts(1)).unwrap();
        let two = compress(&input, &opts(2)).unwrap();
        assert!(one == two, "threads 1 and 2 give different archives");
        assert_eq!(decompress(&one).unwrap(), input);
    }
}

/// (6) One tensor decodes alone to its bytes, references included.
#[test]
fn one_tensor_decodes_alone() {
    let (_, archive) = harness::sample_archive();
    let a = Archive::new(&archive[..]).unwrap();
    for t in harness::sample_tensors() {
        if let Some(i) = a.find(&t.name) {
            assert!(
                a.decode_segment(i).unwrap() == t.data,
                "tensor {} decoded alone differs",
                t.name
            );
        }
        // By name, whether it has a segment of its own or shares a group.
        let bytes = a
            .tensor(&t.name)
            .unwrap()
            .unwrap_or_else(|| panic!("tensor {} is not listed", t.name));
        assert!(bytes == t.data, "tensor {} decoded alone differs", t.name);
    }
    assert!(a.tensor("no.such.tensor").unwrap().is_none());
    assert!(
        a.find("__header__").is_none(),
        "find() returned a bytes segment"
    );
    assert!(a.find("no.such.tensor").is_none());
    assert!(a.decode_segment(a.segments().len()).is_err());
}

/// (7) The golden archives of every format version still decode to their
/// checkpoints (written by `core/tests/fixtures/regenerate.sh`).
#[test]
fn golden_archives_decode() {
    let dir = root().join("core/tests/fixtures");
    let archives = files_in_subdirs(&dir, |p| p.extension().is_some_and(|e| e == "brv"));
    assert!(
        archives
            .iter()
            .any(|p| p.ends_with("v1/small.safetensors.brv")),
        "the v1 golden archive is missing: {archives:?}"
    );
    for brv in archives {
        let version: u16 = brv
            .parent()
            .and_then(|d| d.file_name())
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix('v'))
            .and_then(|n| n.parse().ok())
            .expect("fixtures live in v<N>/ folders");
        let archive = std::fs::read(&brv).unwrap();
        let expected = std::fs::read(brv.with_extension("")).unwrap();
        let a = Archive::new(&archive[..]).unwrap();
        assert_eq!(a.info().format_version, version, "{}", brv.display());
        let out = decompress(&archive).unwrap_or_else(|e| panic!("{}: {e}", brv.display()));
        assert!(out == expected, "{} decodes to other bytes", brv.display());
    }
}

/// An archive of `original` as one bytes segment coded by the program
/// `program` (serialized), with every checksum right: what a hostile file
/// looks like once it is past the integrity checks, which are no MAC.
fn forge_archive(original: &[u8], program: &[u8]) -> Vec<u8> {
    forge_archive_v(brevis_core::FORMAT_VERSION, original, program)
}

/// [`forge_archive`] with the preamble's format version `version`.
fn forge_archive_v(version: u16, original: &[u8], program: &[u8]) -> Vec<u8> {
    forge_segments(version, &[(original, program)])
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// An archive of format `version` whose bytes segments are `parts` (each
/// its bytes, in one region coded by its program), every checksum right.
fn forge_segments(version: u16, parts: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut table = Vec::new();
    varint(&mut table, parts.len() as u64); // segments
    let (mut offset, mut original, mut programs) = (0u64, Vec::new(), Vec::new());
    for (i, (bytes, program)) in parts.iter().enumerate() {
        let n = bytes.len() as u64;
        let name = format!("part{i}");
        table.push(0); // kind: bytes
        table.push(brevis_core::Dtype::Bytes.wire_id());
        varint(&mut table, name.len() as u64);
        table.extend_from_slice(name.as_bytes());
        varint(&mut table, 0); // dims
        varint(&mut table, offset);
        varint(&mut table, n);
        varint(&mut table, n); // words per region
        varint(&mut table, 1); // regions
        varint(&mut table, program.len() as u64);
        table.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(bytes).to_le_bytes());
        offset += n;
        original.extend_from_slice(bytes);
        programs.extend_from_slice(program);
    }
    // Stored raw: encoding 0, then the raw length.
    let mut stored = vec![0u8];
    varint(&mut stored, table.len() as u64);
    stored.extend_from_slice(&table);
    let table = stored;
    let table_offset = brevis_core::fuzzing::PREAMBLE_LEN + programs.len() as u64;
    let mut a = brevis_core::fuzzing::MAGIC.to_vec();
    a.extend_from_slice(&version.to_le_bytes());
    a.extend_from_slice(&[0, 0]);
    a.extend_from_slice(&offset.to_le_bytes());
    a.extend_from_slice(&sha2::Sha256::digest(&original));
    a.extend_from_slice(&table_offset.to_le_bytes());
    a.extend_from_slice(&(table.len() as u64).to_le_bytes());
    a.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&table).to_le_bytes());
    a.extend_from_slice(&programs);
    a.extend_from_slice(&table);
    a
}

/// A `Ref` decodes the whole region it points into: thousands of one-word
/// references into a 5 MiB region made one small region's program decode
/// gigabytes (the reviewer's argument; with 32 MiB regions, terabytes). A
/// region's references may decode at most 128 MiB: such an archive is
/// refused at once, and one reference still decodes.
#[test]
fn many_references_into_a_large_region_are_refused() {
    let mut big = Vec::new();
    for f in files_in_subdirs(&root().join("testdata"), |_| true) {
        big.extend(std::fs::read(f).unwrap());
    }
    big.truncate(5 << 20);
    let mut raw = vec![1, 8]; // Lit u8, raw
    varint(&mut raw, big.len() as u64);
    raw.push(0);
    varint(&mut raw, big.len() as u64);
    raw.extend_from_slice(&big);
    let reference = |n: u64, at: u64| {
        let mut p = vec![5, 8]; // Ref u8
        varint(&mut p, n);
        varint(&mut p, 0); // segment 0
        varint(&mut p, at);
        p
    };
    // One reference of 1000 words: fine.
    let one = reference(1000, 77);
    let archive = forge_segments(4, &[(&big, &raw), (&big[77..1077], &one)]);
    let mut want = big.clone();
    want.extend_from_slice(&big[77..1077]);
    assert!(decompress(&archive).unwrap() == want);
    // 2000 references of one word each.
    let mut many = vec![3, 8]; // Concat u8
    varint(&mut many, 2000);
    for i in 0..2000 {
        many.extend_from_slice(&reference(1, i));
    }
    let archive = forge_segments(4, &[(&big, &raw), (&big[..2000], &many)]);
    let r = within(20, move || {
        let e = decompress(&archive).unwrap_err();
        assert!(matches!(e, brevis_core::DecodeError::Limit { .. }), "{e}");
    });
    assert!(r.is_ok(), "{}", r.unwrap_err());
}

/// A `Repeat` of nothing used to be accepted (`k * 0 == 0` passes the
/// size limit) and then looped `k` times: a 30-byte archive whose program
/// is `Concat[Repeat[2^60](Concat[]), Const]` hung the decoder for ever. A
/// `Repeat` with `k == 0` ran to its child's words instead of none. Found
/// by the `program` fuzz target (fuzz/artifacts/program/timeout-*, crash-*).
#[test]
fn repeat_of_nothing_is_rejected_quickly() {
    let original = vec![7u8; 100];
    let konst = [2, 8, 100, 7]; // Const u8[100] of 7
    // The forging is right: a plain Const decodes.
    assert_eq!(
        decompress(&forge_archive(&original, &konst)).unwrap(),
        original
    );
    let mut hang = vec![3, 8, 2]; // Concat u8, two parts:
    hang.extend_from_slice(&[4, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]); // Repeat 2^60
    hang.extend_from_slice(&[3, 8, 0]); // of Concat u8 []
    hang.extend_from_slice(&konst);
    let zero = [3, 8, 2, 4, 0, 2, 8, 5, 7, 2, 8, 100, 7]; // Concat[Repeat[0](Const u8[5]), Const u8[100]]
    for (what, program) in [
        ("huge repeat of nothing", hang),
        ("zero repeat", zero.to_vec()),
    ] {
        let archive = forge_archive(&original, &program);
        let r = within(10, move || {
            assert!(decompress(&archive).is_err());
            assert!(brevis_core::fuzzing::wire::read_exact(&program).is_err());
        });
        assert!(r.is_ok(), "{what}: {}", r.unwrap_err());
    }
}

/// Format v4: a bytes segment's region may hold up to 32 MiB, and then it
/// must be one byte literal (raw or zstd) and nothing else; a v3 archive
/// keeps 4 MiB regions. Each refusal is a limit, before any output is made.
#[test]
fn regions_over_4_mib_are_v4_byte_literals_only() {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    // Real bytes: the test checkpoints one after another, cut to 5 MiB.
    let mut original = Vec::new();
    for f in files_in_subdirs(&root().join("testdata"), |_| true) {
        original.extend(std::fs::read(f).unwrap());
    }
    let n = 5usize << 20;
    assert!(
        original.len() >= n,
        "testdata holds {} bytes",
        original.len()
    );
    original.truncate(n);
    let lit = |codec: u8, payload: &[u8]| {
        let mut p = vec![1, 8]; // Lit u8
        varint(&mut p, n as u64);
        p.push(codec);
        varint(&mut p, payload.len() as u64);
        p.extend_from_slice(payload);
        p
    };
    let raw = lit(0, &original);
    let zstd = lit(6, &zstd::bulk::compress(&original, 3).unwrap());
    for program in [&raw, &zstd] {
        assert!(decompress(&forge_archive_v(4, &original, program)).unwrap() == original);
        let Err(e) = decompress(&forge_archive_v(3, &original, program)) else {
            panic!("a v3 archive decoded a region of 5 MiB");
        };
        assert!(e.to_string().contains("words per region"), "v3: {e}");
    }
    // Anything else that large: a constant, a byte literal of another
    // codec, a literal under a Scan, two literals in a Concat.
    let mut konst = vec![2, 8];
    varint(&mut konst, n as u64);
    konst.push(7);
    let huffman = lit(2, &[0; 16]);
    let mut scan = vec![7, 0];
    scan.extend_from_slice(&raw);
    let mut concat = vec![3, 8, 2]; // Concat u8 of two raw halves
    for half in [&original[..n / 2], &original[n / 2..]] {
        concat.extend_from_slice(&[1, 8]);
        varint(&mut concat, half.len() as u64);
        concat.push(0);
        varint(&mut concat, half.len() as u64);
        concat.extend_from_slice(half);
    }
    for (what, program) in [
        ("const", konst),
        ("huffman", huffman),
        ("scan", scan),
        ("concat", concat),
    ] {
        let e = decompress(&forge_archive_v(4, &original, &program)).unwrap_err();
        assert!(
            matches!(e, brevis_core::DecodeError::Limit { .. }),
            "{what}: {e}"
        );
    }
}

/// The encoder codes a plain file of more than 4 MiB in one region of one
/// zstd frame (format v4), and it decodes.
#[test]
fn a_plain_file_over_4_mib_is_one_region() {
    let mut original = b"not a container\n".to_vec();
    for f in files_in_subdirs(&root().join("testdata"), |_| true) {
        original.extend(std::fs::read(f).unwrap());
    }
    original.truncate(6 << 20);
    let archive = compress(&original, &CompressOptions::default()).unwrap();
    let a = Archive::new(&archive[..]).unwrap();
    assert_eq!(a.info().format_version, 4);
    assert_eq!(a.segments().len(), 1);
    assert_eq!(a.segments()[0].regions.len(), 1);
    assert!(matches!(
        program(&a, 0, 0).unwrap(),
        Node::Lit { width: 8, n, .. } if n == original.len() as u64
    ));
    assert!(decompress(&archive).unwrap() == original);
}

/// A real checkpoint through the streaming API: `Encoder` (Write) makes
/// the same archive as `compress`, and `Decoder` (Read) gives back the
/// file in small reads across region boundaries; a damaged archive never
/// reads to its end.
#[test]
fn encoder_and_decoder_stream_a_real_checkpoint() {
    use std::io::{Read, Write};
    let input =
        std::fs::read(root().join("testdata/silero-vad/silero_vad_16k.safetensors")).unwrap();
    let opts = || CompressOptions::default().region_words(4096);
    let mut enc = brevis_core::Encoder::new(Vec::new(), opts());
    for piece in input.chunks(1000) {
        enc.write_all(piece).unwrap();
    }
    let archive = enc.finish().unwrap();
    assert!(archive == compress(&input, &opts()).unwrap());
    assert!(
        Archive::new(&archive[..])
            .unwrap()
            .segments()
            .iter()
            .map(|s| s.regions.len())
            .sum::<usize>()
            > 2
    );

    let mut dec = brevis_core::Decoder::new(&archive[..]).unwrap();
    assert_eq!(dec.info().original_len, input.len() as u64);
    let (mut back, mut buf) = (Vec::new(), [0u8; 777]);
    loop {
        let n = dec.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        back.extend_from_slice(&buf[..n]);
    }
    assert!(back == input, "the stream differs from the file");

    // The last region altered in a way its checksum cannot see is caught
    // by the file's SHA-256 before its bytes are handed out.
    let mut bad = archive.clone();
    let sha_at = 16; // the preamble's SHA-256 (docs/FORMAT.md)
    bad[sha_at] ^= 1;
    let mut dec = brevis_core::Decoder::new(&bad[..]).unwrap();
    let mut sink = Vec::new();
    let e = dec.read_to_end(&mut sink).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(
        sink.len() < input.len(),
        "every byte was handed out before the SHA-256 failed"
    );
    assert!(e.to_string().contains("SHA-256"), "{e}");
}

/// An empty file through `Decoder`: its SHA-256 is checked when it is
/// opened, since there is no last region to check it before.
#[test]
fn decoder_checks_an_empty_files_sha256_too() {
    use std::io::Read;
    let archive = compress(b"", &CompressOptions::default()).unwrap();
    let mut back = Vec::new();
    brevis_core::Decoder::new(&archive[..])
        .unwrap()
        .read_to_end(&mut back)
        .unwrap();
    assert!(back.is_empty());
    let mut bad = archive.clone();
    bad[16] ^= 1; // the preamble's SHA-256 (docs/FORMAT.md)
    let e = brevis_core::Decoder::new(&bad[..])
        .err()
        .expect("a wrong SHA-256 is an error");
    assert!(
        matches!(e, brevis_core::DecodeError::ShaMismatch { .. }),
        "{e}"
    );
}
