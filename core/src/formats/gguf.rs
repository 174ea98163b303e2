//! GGUF (v2 and v3, little-endian): `GGUF`, a u32 version, u64 tensor and
//! key-value counts, the key-values, the tensor infos (name, dims, ggml
//! type, offset in the data section), then the data section, which starts
//! at the end of the infos rounded up to `general.alignment` (32 unless a
//! u32 key says otherwise).
//!
//! Each tensor of a known ggml type is a span: the plain types (F32, F16,
//! BF16, F64, I8..I64) as their element type with the dims reversed (GGUF's
//! `ne[0]` is the row, the innermost dimension); the block-quantized types
//! as `U8 [rows..., bytes_per_row]`. A tensor of an unknown type id, or
//! whose row is no whole number of blocks, is left out (opaque bytes).
//! Fixed-width numeric key-value arrays of at least [`MIN_ARRAY_SPAN`]
//! bytes (token scores, token types) are spans named by their key; string
//! arrays (tokens, merges) are skipped over and stay header bytes.
//!
//! Nothing is trusted: the header is read in bounded pieces and at most
//! [`MAX_META`] bytes of it; counts only bound loops that consume bytes;
//! offsets and sizes use checked arithmetic; where a tensor's bytes lie
//! past the end or overlap another, [`super::tile`] leaves them opaque.

use super::{MAX_META, MAX_TENSORS, Reader, Span, read_meta};
use crate::container::ReadAt;
use crate::dtype::Dtype;

/// The GGUF reader.
pub(crate) struct Gguf;

/// The versions read (v1 had u32 counts and is not read).
const VERSIONS: [u32; 2] = [2, 3];
/// Most dimensions a tensor has (`GGML_MAX_DIMS`).
const MAX_DIMS: u32 = 4;
/// Alignment of the data section unless `general.alignment` says otherwise.
const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest tensor name read; a longer one is a malformed file.
const MAX_NAME: u64 = 1 << 16;
/// Deepest nesting of arrays in a key-value.
const MAX_DEPTH: u32 = 8;
/// Smallest numeric key-value array listed as a span (smaller ones stay
/// header bytes).
const MIN_ARRAY_SPAN: u64 = 1024;
/// Bytes of header read from the file at a time.
const CHUNK: u64 = 1 << 20;

impl Reader for Gguf {
    fn name(&self) -> &'static str {
        "gguf"
    }

    fn detect(&self, head: &[u8], _len: u64) -> bool {
        match (head.get(..4), head.get(4..8)) {
            (Some(magic), Some(v)) => {
                magic == b"GGUF"
                    && VERSIONS.contains(&u32::from_le_bytes(v.try_into().expect("4 bytes")))
            }
            _ => false,
        }
    }

    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
        read(src, len)
    }
}

/// How a ggml type's bytes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ggml {
    /// One element per word of this type.
    Plain(Dtype),
    /// Blocks of `elems` elements in `bytes` bytes.
    Blocks { elems: u64, bytes: u64 },
}

/// The layout of ggml type `id` (`enum ggml_type`), `None` when unknown.
fn ggml_type(id: u32) -> Option<Ggml> {
    use Ggml::{Blocks, Plain};
    let b = |elems, bytes| Some(Blocks { elems, bytes });
    match id {
        0 => Some(Plain(Dtype::F32)),
        1 => Some(Plain(Dtype::F16)),
        2 => b(32, 18),    // Q4_0
        3 => b(32, 20),    // Q4_1
        6 => b(32, 22),    // Q5_0
        7 => b(32, 24),    // Q5_1
        8 => b(32, 34),    // Q8_0
        9 => b(32, 36),    // Q8_1
        10 => b(256, 84),  // Q2_K
        11 => b(256, 110), // Q3_K
        12 => b(256, 144), // Q4_K
        13 => b(256, 176), // Q5_K
        14 => b(256, 210), // Q6_K
        15 => b(256, 292), // Q8_K
        16 => b(256, 66),  // IQ2_XXS
        17 => b(256, 74),  // IQ2_XS
        18 => b(256, 98),  // IQ3_XXS
        19 => b(256, 50),  // IQ1_S
        20 => b(32, 18),   // IQ4_NL
        21 => b(256, 110), // IQ3_S
        22 => b(256, 82),  // IQ2_S
        23 => b(256, 136), // IQ4_XS
        24 => Some(Plain(Dtype::I8)),
        25 => Some(Plain(Dtype::I16)),
        26 => Some(Plain(Dtype::I32)),
        27 => Some(Plain(Dtype::I64)),
        28 => Some(Plain(Dtype::F64)),
        29 => b(256, 56), // IQ1_M
        30 => Some(Plain(Dtype::BF16)),
        34 => b(256, 54), // TQ1_0
        35 => b(256, 66), // TQ2_0
        39 => b(32, 17),  // MXFP4
        40 => b(64, 36),  // NVFP4
        _ => None,
    }
}

/// Bytes of one element of a fixed-width GGUF value type, `None` for
/// strings, arrays and unknown types.
fn value_width(t: u32) -> Option<u64> {
    match t {
        0 | 1 | 7 => Some(1), // u8, i8, bool
        2 | 3 => Some(2),     // u16, i16
        4..=6 => Some(4),     // u32, i32, f32
        10..=12 => Some(8),   // u64, i64, f64
        _ => None,
    }
}

/// The element type of a fixed-width GGUF value type.
fn value_dtype(t: u32) -> Dtype {
    match t {
        0 => Dtype::U8,
        1 => Dtype::I8,
        2 => Dtype::U16,
        3 => Dtype::I16,
        4 => Dtype::U32,
        5 => Dtype::I32,
        6 => Dtype::F32,
        7 => Dtype::Bool,
        10 => Dtype::U64,
        11 => Dtype::I64,
        12 => Dtype::F64,
        _ => Dtype::Bytes,
    }
}

const STRING: u32 = 8;
const ARRAY: u32 = 9;
const U32: u32 = 4;

/// The header read forward from the start of the file, a [`CHUNK`] at a
/// time, never past the file's end or [`MAX_META`].
struct Stream<'a> {
    src: &'a dyn ReadAt,
    len: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_at: u64,
}

impl<'a> Stream<'a> {
    fn new(src: &'a dyn ReadAt, len: u64) -> Self {
        Stream {
            src,
            len,
            pos: 0,
            buf: Vec::new(),
            buf_at: 0,
        }
    }

    /// The end of `n` more bytes, or why there are not that many.
    fn end(&self, n: u64, what: &str) -> Result<u64, String> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| format!("{what}: {n} bytes at {} overflow", self.pos))?;
        if end > self.len {
            return Err(format!(
                "{what}: {n} bytes at {} run past the {}-byte file",
                self.pos, self.len
            ));
        }
        if end > MAX_META {
            return Err(format!(
                "{what}: the header runs past the {MAX_META} bytes read"
            ));
        }
        Ok(end)
    }

    /// The next `n` (at most [`CHUNK`]) bytes.
    fn take(&mut self, n: u64, what: &str) -> Result<&[u8], String> {
        let end = self.end(n, what)?;
        if n > CHUNK {
            return Err(format!("{what}: {n} bytes, more than {CHUNK} at once"));
        }
        let held = self.buf_at + self.buf.len() as u64;
        if self.pos < self.buf_at || end > held {
            let want = CHUNK.min(self.len - self.pos).min(MAX_META - self.pos);
            self.buf = read_meta(self.src, self.len, self.pos, want)?;
            self.buf_at = self.pos;
        }
        let from = (self.pos - self.buf_at) as usize;
        self.pos = end;
        Ok(&self.buf[from..from + n as usize])
    }

    fn skip(&mut self, n: u64, what: &str) -> Result<(), String> {
        self.pos = self.end(n, what)?;
        Ok(())
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8 bytes"),
        ))
    }

    /// A string of at most `max` bytes (lossy UTF-8).
    fn string(&mut self, max: u64, what: &str) -> Result<String, String> {
        let n = self.u64(what)?;
        if n > max {
            return Err(format!("{what}: a {n}-byte string, longer than {max}"));
        }
        Ok(String::from_utf8_lossy(self.take(n, what)?).into_owned())
    }

    /// Skip a string, returning its length.
    fn skip_string(&mut self, what: &str) -> Result<u64, String> {
        let n = self.u64(what)?;
        self.skip(n, what)?;
        Ok(n)
    }

    /// Skip a value of type `t`; a large fixed-width array becomes a span
    /// in `spans`, named `key`.
    fn skip_value(
        &mut self,
        t: u32,
        depth: u32,
        key: &str,
        spans: &mut Vec<Span>,
        what: &str,
    ) -> Result<(), String> {
        if let Some(w) = value_width(t) {
            return self.skip(w, what);
        }
        match t {
            STRING => self.skip_string(what).map(|_| ()),
            ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(format!("{what}: arrays nested deeper than {MAX_DEPTH}"));
                }
                let et = self.u32(what)?;
                let n = self.u64(what)?;
                if let Some(w) = value_width(et) {
                    let bytes = n
                        .checked_mul(w)
                        .ok_or_else(|| format!("{what}: {n} elements of {w} bytes overflow"))?;
                    let at = self.pos;
                    self.skip(bytes, what)?;
                    if bytes >= MIN_ARRAY_SPAN && depth == 0 && spans.len() < MAX_TENSORS {
                        spans.push(Span {
                            name: key.to_string(),
                            dtype: value_dtype(et),
                            shape: vec![n],
                            offset: at,
                            len: bytes,
                        });
                    }
                    return Ok(());
                }
                // Strings or arrays: each consumes at least 8 bytes, so the
                // loop ends at the file's end or MAX_META whatever `n` says.
                for _ in 0..n {
                    self.skip_value(et, depth + 1, key, spans, what)?;
                }
                Ok(())
            }
            _ => Err(format!("{what}: unknown value type {t}")),
        }
    }
}

/// The tensors of a GGUF file (see the module docs).
fn read(src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
    let mut s = Stream::new(src, len);
    let magic = s.take(4, "magic")?;
    if magic != b"GGUF" {
        return Err("no GGUF magic".into());
    }
    let version = s.u32("version")?;
    if !VERSIONS.contains(&version) {
        return Err(format!("GGUF version {version}, not 2 or 3"));
    }
    let n_tensors = s.u64("tensor count")?;
    let n_kv = s.u64("key-value count")?;
    if n_tensors > MAX_TENSORS as u64 {
        return Err(format!(
            "{n_tensors} tensors, more than the {MAX_TENSORS} read"
        ));
    }
    let mut spans = Vec::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    // Each key-value consumes at least 12 bytes: the loop ends at the
    // file's end or MAX_META whatever `n_kv` says.
    for i in 0..n_kv {
        let what = format!("key-value {i}");
        let key_len = s.u64(&what)?;
        // Only `general.alignment` is looked at; other keys are skipped.
        let key = if key_len <= MAX_NAME {
            String::from_utf8_lossy(s.take(key_len, &what)?).into_owned()
        } else {
            s.skip(key_len, &what)?;
            String::new()
        };
        let t = s.u32(&what)?;
        if key == "general.alignment" {
            if t != U32 {
                return Err(format!("general.alignment of value type {t}, not u32"));
            }
            let a = s.u32(&what)?;
            if a == 0 || !a.is_power_of_two() {
                return Err(format!("general.alignment {a} is no power of two"));
            }
            alignment = a.into();
        } else {
            s.skip_value(t, 0, &key, &mut spans, &what)?;
        }
    }
    let mut infos = Vec::new();
    for i in 0..n_tensors {
        let what = format!("tensor info {i}");
        let name = s.string(MAX_NAME, &what)?;
        let n_dims = s.u32(&what)?;
        if n_dims > MAX_DIMS {
            return Err(format!(
                "{what} ({name}): {n_dims} dims, more than {MAX_DIMS}"
            ));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(s.u64(&what)?);
        }
        let t = s.u32(&what)?;
        let offset = s.u64(&what)?;
        infos.push((name, ne, t, offset));
    }
    let data = s
        .pos
        .checked_next_multiple_of(alignment)
        .ok_or("the data section start overflows")?;
    for (i, (name, ne, t, offset)) in infos.into_iter().enumerate() {
        let at = data
            .checked_add(offset)
            .ok_or_else(|| format!("tensor info {i} ({name}): offset {offset} overflows"))?;
        if let Some((dtype, shape, bytes)) = layout(&ne, t) {
            spans.push(Span {
                name,
                dtype,
                shape,
                offset: at,
                len: bytes,
            });
        }
    }
    Ok(spans)
}

/// Element type, shape (row last) and byte length of a tensor of dims `ne`
/// (`ne[0]` innermost) and ggml type `t`; `None` when the type is unknown,
/// the row is no whole number of blocks, or the size overflows.
fn layout(ne: &[u64], t: u32) -> Option<(Dtype, Vec<u64>, u64)> {
    let mut shape: Vec<u64> = ne.iter().rev().copied().collect();
    let (dtype, row_bytes) = match ggml_type(t)? {
        Ggml::Plain(d) => (d, None),
        Ggml::Blocks { elems, bytes } => {
            let row = ne.first().copied().unwrap_or(1);
            if row % elems != 0 {
                return None;
            }
            (Dtype::U8, Some((row / elems).checked_mul(bytes)?))
        }
    };
    if let Some(rb) = row_bytes {
        match shape.last_mut() {
            Some(last) => *last = rb,
            None => shape.push(rb),
        }
    }
    let words = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let bytes = words.checked_mul(dtype.word_bytes() as u64)?;
    Some((dtype, shape, bytes))
}

// The tests compress and decompress: they need the `search` feature.
#[cfg(all(test, feature = "search"))]
mod tests {
    use super::*;
    use crate::container::SegmentKind;
    use crate::formats::{read_as, tile};
    use crate::{Archive, CompressOptions, compress, decompress};

    fn sample() -> Vec<u8> {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/gguf/gemma-3-270m-cut.gguf"
        );
        std::fs::read(p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn tensors(data: &[u8]) -> Result<Vec<Span>, String> {
        Gguf.tensors(&data, data.len() as u64)
    }

    fn string(s: &[u8]) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(s);
        v
    }

    /// A key-value: key, value type, value bytes.
    fn kv(key: &str, t: u32, value: &[u8]) -> Vec<u8> {
        let mut v = string(key.as_bytes());
        v.extend_from_slice(&t.to_le_bytes());
        v.extend_from_slice(value);
        v
    }

    /// A tensor info.
    fn info(name: &str, ne: &[u64], t: u32, offset: u64) -> Vec<u8> {
        let mut v = string(name.as_bytes());
        v.extend_from_slice(&(ne.len() as u32).to_le_bytes());
        for d in ne {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v.extend_from_slice(&t.to_le_bytes());
        v.extend_from_slice(&offset.to_le_bytes());
        v
    }

    /// A v3 file: the key-values, the infos, zeros up to `align`, `data`.
    fn file(kvs: &[Vec<u8>], infos: &[Vec<u8>], align: usize, data: &[u8]) -> Vec<u8> {
        let mut v = b"GGUF".to_vec();
        v.extend_from_slice(&3u32.to_le_bytes());
        v.extend_from_slice(&(infos.len() as u64).to_le_bytes());
        v.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
        kvs.iter().chain(infos).for_each(|b| v.extend_from_slice(b));
        v.resize(v.len().next_multiple_of(align), 0);
        v.extend_from_slice(data);
        v
    }

    /// Two F32 [2, 4] tensors (32 bytes each) after a u32 key.
    fn small() -> Vec<u8> {
        let data: Vec<u8> = (0..64u8).collect();
        file(
            &[kv("general.name", STRING, &string(b"tiny"))],
            &[info("a", &[4, 2], 0, 0), info("b", &[4, 2], 0, 32)],
            32,
            &data,
        )
    }

    /// Compress and decompress `data` (not tried as one whole byte stream,
    /// so the segments show); the archive's tensor segments' names.
    fn round_trip(data: &[u8]) -> Vec<String> {
        let opts = CompressOptions::default().threads(1).whole_file(false);
        let archive = compress(data, &opts).expect("compress");
        assert!(
            decompress(&archive).expect("decompress") == data,
            "round trip"
        );
        let a = Archive::new(&archive[..]).unwrap();
        a.segments()
            .iter()
            .filter(|s| s.desc.kind == SegmentKind::Tensor)
            .map(|s| s.desc.name.clone())
            .collect()
    }

    #[test]
    fn detects_v2_and_v3_only() {
        let head = sample();
        assert!(Gguf.detect(&head[..64], 1 << 20));
        for (v, yes) in [(1u32, false), (2, true), (3, true), (4, false)] {
            let mut h = b"GGUF".to_vec();
            h.extend_from_slice(&v.to_le_bytes());
            assert_eq!(Gguf.detect(&h, 8), yes, "version {v}");
        }
        assert!(!Gguf.detect(b"GGUF\x03\0\0", 7));
        assert!(!Gguf.detect(b"GGUF\0\0\0\x03", 8));
        assert!(!Gguf.detect(b"GGML\x03\0\0\0", 8));
    }

    #[test]
    fn ggml_types_have_their_layouts() {
        // The block sizes the search deals (search::GGUF_BLOCKS) and the
        // plain element types.
        for (id, bytes) in [(8, 34), (2, 18), (3, 20), (6, 22), (7, 24)] {
            assert_eq!(ggml_type(id), Some(Ggml::Blocks { elems: 32, bytes }));
        }
        for (id, bytes) in [(10, 84), (11, 110), (12, 144), (13, 176), (14, 210)] {
            assert_eq!(ggml_type(id), Some(Ggml::Blocks { elems: 256, bytes }));
        }
        let plain = [
            (0, Dtype::F32),
            (1, Dtype::F16),
            (24, Dtype::I8),
            (25, Dtype::I16),
            (26, Dtype::I32),
            (27, Dtype::I64),
            (28, Dtype::F64),
            (30, Dtype::BF16),
        ];
        for (id, d) in plain {
            assert_eq!(ggml_type(id), Some(Ggml::Plain(d)));
        }
        // Removed (Q4_2, Q4_3, the repacked Q4_0/IQ4_NL) and future ids.
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 41, 1000, u32::MAX] {
            assert_eq!(ggml_type(id), None, "type {id}");
        }
        let known = (0..64).filter(|&id| ggml_type(id).is_some()).count();
        assert_eq!(known, 33);
        // Shape: ne reversed, the row in bytes for blocks.
        assert_eq!(
            layout(&[640, 256], 6),
            Some((Dtype::U8, vec![256, 440], 112640))
        );
        assert_eq!(
            layout(&[8, 3, 2], 30),
            Some((Dtype::BF16, vec![2, 3, 8], 96))
        );
        assert_eq!(layout(&[256], 14), Some((Dtype::U8, vec![210], 210)));
        assert_eq!(layout(&[33, 2], 2), None, "row of no whole block");
        assert_eq!(layout(&[u64::MAX, 2], 0), None, "size overflows");
        assert_eq!(layout(&[], 0), Some((Dtype::F32, vec![], 4)));
    }

    #[test]
    fn sample_reads_as_its_tensors() {
        let data = sample();
        let mut t = tensors(&data).unwrap();
        t.sort_by_key(|s| s.offset);
        let got: Vec<(&str, Dtype, &[u64], u64)> = t
            .iter()
            .map(|s| (s.name.as_str(), s.dtype, &s.shape[..], s.len))
            .collect();
        let want: &[(&str, Dtype, &[u64], u64)] = &[
            ("tokenizer.ggml.scores", Dtype::F32, &[1024], 4096),
            ("tokenizer.ggml.token_type", Dtype::I32, &[1024], 4096),
            ("output_norm.weight", Dtype::F32, &[640], 2560),
            ("token_embd.weight", Dtype::U8, &[128, 680], 87040),
            ("blk.0.attn_k.weight", Dtype::U8, &[256, 440], 112640),
            ("blk.0.attn_k_norm.weight", Dtype::F32, &[256], 1024),
            ("blk.0.attn_norm.weight", Dtype::F32, &[640], 2560),
            ("blk.0.attn_output.weight", Dtype::U8, &[128, 576], 73728),
            ("blk.0.attn_q_norm.weight", Dtype::F32, &[256], 1024),
            ("blk.0.attn_v.weight", Dtype::U8, &[64, 680], 43520),
            ("blk.0.ffn_down.weight", Dtype::U8, &[64, 1680], 107520),
            ("blk.0.ffn_norm.weight", Dtype::F32, &[640], 2560),
            ("blk.0.post_attention_norm.weight", Dtype::F32, &[640], 2560),
            ("blk.0.post_ffw_norm.weight", Dtype::F32, &[640], 2560),
        ];
        assert_eq!(got, want);
        // The data section starts at 24576 (the infos end at 24571, aligned
        // to 32) and the last tensor ends at the file's end.
        assert_eq!(t[2].offset, 24576);
        let last = t.last().unwrap();
        assert_eq!(last.offset + last.len, data.len() as u64);
        let segs = tile(t.clone(), data.len() as u64);
        let kept = segs.iter().filter(|s| s.kind == SegmentKind::Tensor);
        assert_eq!(kept.count(), t.len(), "no span dropped");
    }

    #[test]
    fn sample_round_trips_as_tensors() {
        let names = round_trip(&sample());
        for n in [
            "token_embd.weight",
            "blk.0.ffn_down.weight",
            "output_norm.weight",
        ] {
            assert!(names.iter().any(|s| s == n), "{n} not a tensor: {names:?}");
        }
    }

    #[test]
    fn truncated_sample_is_err_or_spans() {
        let data = sample();
        let header_end = 24571;
        let lens = (0..data.len()).step_by(7).filter(|&l| l < header_end + 64);
        let lens = lens.chain((header_end..data.len()).step_by(4099));
        for l in lens {
            let cut = &data[..l];
            match read_as("gguf", cut).unwrap() {
                Ok(segs) => assert!(l >= header_end, "{l} bytes read as {} segments", segs.len()),
                Err(e) => assert!(l < header_end, "{l} bytes: {e}"),
            }
        }
        // Cut inside the data: the tensors that still fit are kept.
        let cut = &data[..310_000];
        let segs = read_as("gguf", cut).unwrap().unwrap();
        let names: Vec<&str> = segs
            .iter()
            .filter(|s| s.kind == SegmentKind::Tensor)
            .map(|s| s.name.as_str())
            .collect();
        assert!(names.contains(&"blk.0.attn_output.weight"), "{names:?}");
        assert!(!names.contains(&"blk.0.ffn_down.weight"), "{names:?}");
    }

    #[test]
    fn small_file_reads_and_round_trips() {
        let f = small();
        let t = tensors(&f).unwrap();
        assert_eq!(t.len(), 2);
        // 24 + a 36-byte key-value + two 41-byte infos = 142, aligned: 160.
        assert_eq!(
            (t[0].offset, t[0].len, &t[0].shape[..]),
            (160, 32, &[2, 4][..])
        );
        assert_eq!(t[1].offset, 192);
        assert_eq!(round_trip(&f), ["a .. b (2 tensors)"]);
    }

    /// Every hostile file gives Err or spans (never a panic) and round-trips.
    fn hostile(name: &str, f: &[u8], ok: bool) {
        let got = read_as("gguf", f).unwrap();
        assert_eq!(got.is_ok(), ok, "{name}: {got:?}");
        round_trip(f);
    }

    fn set_u64(f: &mut [u8], at: usize, v: u64) {
        f[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn hostile_counts_and_lengths() {
        let mut f = small();
        set_u64(&mut f, 8, 1 << 63);
        hostile("tensor count 2^63", &f, false);
        let mut f = small();
        set_u64(&mut f, 16, 1 << 63);
        hostile("kv count 2^63", &f, false);
        let mut f = small();
        set_u64(&mut f, 8, 1000);
        hostile("more tensors than the file holds", &f, false);
        // The key's length (at 24) past the end, and u64::MAX.
        for n in [f.len() as u64, u64::MAX] {
            let mut f = small();
            set_u64(&mut f, 24, n);
            hostile("key length", &f, false);
        }
        // The string value's length (after "general.name" and its type).
        let mut f = small();
        set_u64(&mut f, 24 + 8 + 12 + 4, u64::MAX - 3);
        hostile("string length", &f, false);
        // A tensor name's length.
        let mut f = file(&[], &[info("a", &[4], 0, 0)], 32, &[0; 16]);
        set_u64(&mut f, 24, MAX_NAME + 1);
        hostile("long name", &f, false);
        // Arrays: 2^63 bytes, 2^63 u64s (overflow), 2^63 strings.
        for (et, n) in [(0u32, 1u64 << 63), (10, 1 << 63), (STRING, 1 << 63)] {
            let mut a = et.to_le_bytes().to_vec();
            a.extend_from_slice(&n.to_le_bytes());
            a.extend_from_slice(&string(b"x"));
            let f = file(
                &[kv("arr", ARRAY, &a)],
                &[info("a", &[4], 0, 0)],
                32,
                &[0; 16],
            );
            hostile("array count", &f, false);
        }
        let f = file(&[kv("v", 13, &[0; 8])], &[], 32, &[]);
        hostile("unknown value type", &f, false);
    }

    #[test]
    fn hostile_tensor_infos() {
        let data = [7u8; 64];
        let f = file(&[], &[info("a", &[1; 1000], 0, 0)], 32, &data);
        hostile("n_dims 1000", &f, false);
        let f = file(&[], &[info("a", &[1; 5], 0, 0)], 32, &data);
        hostile("n_dims 5", &f, false);
        let f = file(&[], &[info("a", &[4], 0, u64::MAX - 8)], 32, &data);
        hostile("offset wraps", &f, false);
        // Past the end, overlapping, unknown type, no whole block: spans or
        // left out, never an error.
        let f = file(&[], &[info("a", &[4], 0, 1 << 40)], 32, &data);
        hostile("offset past the end", &f, true);
        let f = file(
            &[],
            &[info("a", &[16], 0, 0), info("b", &[8], 0, 16)],
            32,
            &data,
        );
        hostile("overlapping", &f, true);
        let segs = read_as("gguf", &f).unwrap().unwrap();
        assert_eq!(
            segs.iter()
                .filter(|s| s.kind == SegmentKind::Tensor)
                .count(),
            1
        );
        let f = file(&[], &[info("a", &[1 << 62, 4], 0, 0)], 32, &data);
        hostile("huge dims", &f, true);
        let f = file(
            &[],
            &[info("a", &[16], 99, 0), info("q", &[33], 2, 0)],
            32,
            &data,
        );
        hostile("unknown type, partial block", &f, true);
        assert!(tensors(&f).unwrap().is_empty());
        // A v2 file reads the same.
        let mut f = small();
        f[4] = 2;
        assert_eq!(tensors(&f).unwrap().len(), 2);
    }

    #[test]
    fn hostile_alignment_and_nesting() {
        let data = [1u8; 64];
        let infos = [info("a", &[4], 0, 0)];
        for a in [0u32, 3, 48, u32::MAX] {
            let f = file(
                &[kv("general.alignment", U32, &a.to_le_bytes())],
                &infos,
                32,
                &data,
            );
            hostile("bad alignment", &f, false);
        }
        let f = file(
            &[kv("general.alignment", STRING, &string(b"64"))],
            &infos,
            32,
            &data,
        );
        hostile("alignment of a string", &f, false);
        let f = file(
            &[kv("general.alignment", U32, &256u32.to_le_bytes())],
            &infos,
            256,
            &data,
        );
        assert_eq!(tensors(&f).unwrap()[0].offset, 256);
        hostile("alignment 256", &f, true);
        // Arrays of arrays: a depth of 3 reads, MAX_DEPTH + 1 does not.
        let nested = |depth: u32| {
            let mut v = 0u32.to_le_bytes().to_vec();
            v.extend_from_slice(&2u64.to_le_bytes());
            v.extend_from_slice(&[5, 6]);
            for _ in 1..depth {
                let mut outer = ARRAY.to_le_bytes().to_vec();
                outer.extend_from_slice(&1u64.to_le_bytes());
                outer.extend_from_slice(&v);
                v = outer;
            }
            file(&[kv("deep", ARRAY, &v)], &infos, 32, &data)
        };
        hostile("depth 3", &nested(3), true);
        hostile("too deep", &nested(MAX_DEPTH + 1), false);
        hostile("deep", &nested(MAX_DEPTH), true);
    }
}
