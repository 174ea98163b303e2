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
