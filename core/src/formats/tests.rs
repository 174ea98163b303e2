use super::*;

fn span(name: &str, dtype: Dtype, offset: u64, len: u64) -> Span {
    Span {
        name: name.into(),
        dtype,
        shape: vec![len / dtype.word_bytes() as u64],
        offset,
        len,
    }
}

#[test]
fn tile_covers_the_file_and_drops_what_lies() {
    let spans = vec![
        span("b", Dtype::F32, 40, 16),
        span("a", Dtype::F16, 8, 16),
        span("overlaps_a", Dtype::F32, 20, 8),
        span("past_end", Dtype::F32, 90, 16),
        span("wraps", Dtype::F32, u64::MAX - 3, 8),
        span("empty", Dtype::F32, 60, 0),
        span("odd", Dtype::F16, 60, 3),
    ];
    let segs = tile(spans, 100);
    let names: Vec<&str> = segs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "__header__",
            "a",
            "__gap__",
            "b",
            "__gap__",
            "odd",
            "__trailing__"
        ]
    );
    let mut pos = 0;
    for s in &segs {
        assert_eq!(s.offset, pos);
        assert!(s.len > 0);
        assert_eq!(s.len % s.dtype.word_bytes() as u64, 0);
        pos += s.len;
    }
    assert_eq!(pos, 100);
    assert_eq!(segs[5].dtype, Dtype::U8);
    assert_eq!(tile(vec![], 5)[0].name, "__file__");
    assert!(tile(vec![], 0).is_empty());
}

#[test]
fn cursor_stops_at_the_end() {
    let mut c = Cursor::new(&[1, 0, 2, 0, 0, 0]);
    assert_eq!(c.u16(), Some(1));
    assert_eq!(c.u32(), Some(2));
    assert_eq!(c.take(1), None);
    assert_eq!(c.skip(u64::MAX), None);
    assert_eq!(c.remaining(), 0);
}

#[test]
fn read_meta_refuses_lies() {
    let f = [0u8; 10];
    assert!(read_meta(&&f[..], 10, 8, 4).is_err());
    assert!(read_meta(&&f[..], 10, u64::MAX, 4).is_err());
    assert!(read_meta(&&f[..], 10, 0, MAX_META + 1).is_err());
    assert_eq!(read_meta(&&f[..], 10, 2, 8).unwrap().len(), 8);
}

/// A name longer than the archive takes is cut (on a character
/// boundary), and the file still round-trips: a reader's long name costs
/// nothing.
#[cfg(feature = "search")]
#[test]
fn a_name_longer_than_the_archive_takes_is_cut() {
    let long = "é".repeat(40_000);
    let segs = tile(vec![span(&long, Dtype::F32, 0, 64)], 64);
    let max = crate::container::MAX_NAME_LEN as usize;
    assert!(segs[0].name.len() <= max && segs[0].name.len() > max - 2);
    let data: Vec<u8> = (0..64u8).collect();
    let sidecar = Sidecar::of(vec![span(&long, Dtype::F32, 0, 64)]);
    let opts = crate::CompressOptions::default()
        .threads(1)
        .sidecar(Some(std::sync::Arc::new(sidecar)));
    let archive = crate::compress(&data, &opts).unwrap();
    assert_eq!(crate::decompress(&archive).unwrap(), data);
}
