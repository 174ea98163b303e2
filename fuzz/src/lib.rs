//! Fuzz harnesses for Brevis, one function per target in `fuzz_targets/`.
//!
//! Each function takes the raw fuzz input and panics only when an invariant
//! of the decoder is broken (a panic inside `brevis_core` is a finding too).
//! The functions do not depend on libFuzzer: `tests/it/archive.rs` includes
//! this file and replays every committed crash input in `fuzz/artifacts/`
//! through the same function, so a fixed bug stays fixed.
//!
//! The inputs are parsed with a small cursor ([`Input`]) instead of
//! `arbitrary`, so a replay does not depend on that crate's version.

use std::sync::OnceLock;

use brevis_core::fuzzing::{NoRefs, PREAMBLE_LEN, execute, mask, wire};
use brevis_core::{Archive, CompressOptions, DecompressOptions, compress, decompress};

/// A cursor over fuzz input that yields zeros once the input runs out.
pub struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Input<'a> {
    /// Start at the beginning of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Input { data, pos: 0 }
    }
    /// Whether every byte was consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }
    /// The next byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    /// The next little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    /// The next little-endian u32.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// Up to `n` of the next bytes (fewer at the end).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        let end = start.saturating_add(n).min(self.data.len());
        self.pos = start + n;
        &self.data[start..end]
    }
    /// Everything not consumed yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let start = self.pos.min(self.data.len());
        self.pos = self.data.len();
        &self.data[start..]
    }
}

/// One tensor of a synthetic safetensors file.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    /// Name (no characters that need JSON escaping).
    pub name: String,
    /// Safetensors dtype spelling (`"BF16"`, `"F4"`, ...).
    pub dtype: &'static str,
    /// Shape.
    pub shape: Vec<u64>,
    /// Its bytes (must have the size shape and dtype give).
    pub data: Vec<u8>,
    /// Bytes no tensor covers, placed before this one's data.
    pub gap_before: usize,
}

/// Bits per element of a safetensors dtype spelling.
pub fn dtype_bits(dtype: &str) -> u64 {
    match dtype {
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        _ => 64,
    }
}

/// Every dtype spelling safetensors knows.
pub const DTYPES: [&str; 19] = [
    "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I16", "U16",
    "F16", "BF16", "I32", "U32", "F32", "I64", "U64", "F64",
];

/// Bytes a tensor of `dtype` and `shape` takes.
pub fn tensor_bytes(dtype: &str, shape: &[u64]) -> u64 {
    (shape.iter().product::<u64>() * dtype_bits(dtype)).div_ceil(8)
}

/// A safetensors file: 8-byte header length, JSON header padded with spaces
/// to a multiple of 8, tensor data in the given order (with gaps), then
/// `trailing` bytes no tensor covers.
pub fn build_safetensors(
    tensors: &[TensorSpec],
    metadata: &[(&str, &str)],
    trailing: &[u8],
) -> Vec<u8> {
    let mut entries = Vec::new();
    if !metadata.is_empty() {
        let kv: Vec<String> = metadata
            .iter()
            .map(|(k, v)| format!("\"{k}\":\"{v}\""))
            .collect();
        entries.push(format!("\"__metadata__\":{{{}}}", kv.join(",")));
    }
    let mut data = Vec::new();
    for t in tensors {
        data.extend(std::iter::repeat_n(0xA5u8, t.gap_before));
        let start = data.len();
        data.extend_from_slice(&t.data);
        let shape: Vec<String> = t.shape.iter().map(u64::to_string).collect();
        entries.push(format!(
            "\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
            t.name,
            t.dtype,
            shape.join(","),
            start,
            data.len()
        ));
    }
    data.extend_from_slice(trailing);
    let mut header = format!("{{{}}}", entries.join(","));
    while header.len() % 8 != 0 {
        header.push(' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&data);
    out
}

/// A deterministic xorshift generator for synthetic tensor data.
pub struct Rng(u64);

impl Rng {
    /// Seeded (any seed, 0 included).
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    /// Roughly normal value with standard deviation `sd` (sum of uniforms).
    pub fn normal(&mut self, sd: f32) -> f32 {
        let s: f32 = (0..4)
            .map(|_| (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
            .sum();
        (s - 2.0) * sd * 1.7
    }
}

fn f32_to_bf16(x: f32) -> u16 {
    (x.to_bits() >> 16) as u16
}

fn f32_to_f16(x: f32) -> u16 {
    // Enough for small normal weights: round toward zero, no subnormals.
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xFF) as i32 - 127 + 15;
    if exp <= 0 {
        return sign;
    }
    sign | ((exp.min(30) as u16) << 10) | ((b >> 13) & 0x3FF) as u16
}

/// The small synthetic checkpoint the structured fuzz target and the
/// archive tests use: BF16, F16, F32 (two regions at 1024 words a region),
/// I64, U8, an empty tensor, a 0-dim tensor, `__metadata__`, a gap before a
/// tensor, trailing bytes, and a tensor duplicating an earlier one.
pub fn sample_tensors() -> Vec<TensorSpec> {
    let mut rng = Rng::new(7);
    let bf16: Vec<u8> = (0..24 * 50)
        .flat_map(|_| f32_to_bf16(rng.normal(0.02)).to_le_bytes())
        .collect();
    let f16: Vec<u8> = (0..16 * 16)
        .flat_map(|_| f32_to_f16(rng.normal(0.1)).to_le_bytes())
        .collect();
    let f32s: Vec<u8> = (0..1100)
        .flat_map(|_| rng.normal(0.05).to_le_bytes())
        .collect();
    let i64s: Vec<u8> = (0..64i64).flat_map(|i| i.to_le_bytes()).collect();
    let u8s: Vec<u8> = (0..300u32).map(|i| (i * i % 251) as u8).collect();
    let t = |name: &str, dtype, shape: &[u64], data: Vec<u8>, gap_before| TensorSpec {
        name: name.into(),
        dtype,
        shape: shape.to_vec(),
        data,
        gap_before,
    };
    vec![
        t("embed.weight", "BF16", &[24, 50], bf16, 0),
        t("norm.weight", "F16", &[16, 16], f16, 0),
        t("proj.weight", "F32", &[11, 100], f32s.clone(), 0),
        t("position_ids", "I64", &[1, 64], i64s, 13),
        t("mask", "U8", &[300], u8s, 0),
        t("empty", "F32", &[0, 4], vec![], 0),
        t("scale", "F32", &[], 0.125f32.to_le_bytes().to_vec(), 0),
        t("proj_tied.weight", "F32", &[11, 100], f32s, 0),
    ]
}

/// [`sample_tensors`] as a safetensors file (with metadata and trailing bytes).
pub fn sample_safetensors() -> Vec<u8> {
    build_safetensors(
        &sample_tensors(),
        &[("format", "pt"), ("source", "brevis-fuzz")],
        b"\x00trailing bytes after the last tensor",
    )
}

/// Options the sample archive is compressed with: one thread, regions of
/// 1024 words (so the large tensors have two regions).
pub fn sample_options() -> CompressOptions {
    // The sample exists to exercise the tensor path (regions, references),
    // so the whole-file alternative is off.
    CompressOptions::default()
        .threads(1)
        .region_words(1024)
        .whole_file(false)
}

/// `(original, archive)` of the sample, compressed once.
pub fn sample_archive() -> &'static (Vec<u8>, Vec<u8>) {
    static SAMPLE: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
    SAMPLE.get_or_init(|| {
        let original = sample_safetensors();
        let archive = compress(&original, &sample_options()).expect("the sample compresses");
        assert_eq!(
            decompress(&archive).expect("the sample archive decodes"),
            original
        );
        (original, archive)
    })
}

/// Open `bytes` as an archive and decode every segment and program alone
/// (the random-access path, which has no whole-file SHA-256 to lean on).
/// Nothing may panic; results are not checked.
fn random_access(bytes: &[u8]) {
    let Ok(a) = Archive::new(bytes) else {
        return;
    };
    let _ = a.info();
    // In place, into a buffer of the length the archive claims (when
    // small: a claim is not an allocation the fuzzer should make).
    if let Ok(len) = usize::try_from(a.info().original_len)
        && len <= 1 << 24
    {
        let _ = a.decode_to_slice(&mut vec![0u8; len], &two_threads());
    }
    for (s, seg) in a.segments().iter().enumerate() {
        for r in 0..seg.regions.len() {
            let _ = brevis_core::fuzzing::program(&a, s, r);
        }
        let _ = a.decode_segment(s);
    }
}

/// `decode_raw`: arbitrary bytes through `decompress` and random access.
pub fn decode_raw(data: &[u8]) {
    let _ = decompress(data);
    random_access(data);
}

fn table_range(archive: &[u8]) -> Option<(usize, usize)> {
    let off = u64::from_le_bytes(archive.get(48..56)?.try_into().ok()?);
    let len = u64::from_le_bytes(archive.get(56..64)?.try_into().ok()?);
    let off = usize::try_from(off).ok()?;
    let end = off.checked_add(usize::try_from(len).ok()?)?;
    (off <= end && end <= archive.len()).then_some((off, end))
}

/// `decode_structured`: mutate the sample archive as the input says, then
/// decode. Decoding must fail or give exactly the original bytes.
///
/// Input: a flags byte (bit 0: recompute the table checksum after the
/// mutations, so the table parser sees the mutated table; bit 1: also fix
/// the preamble's table offset and length after the size changed), then
/// mutations until the input ends, each a tag byte and its arguments.
pub fn decode_structured(data: &[u8]) {
    let (original, archive) = sample_archive();
    let mut a = archive.clone();
    let mut inp = Input::new(data);
    let flags = inp.u8();
    let (table_start, _) = table_range(&a).expect("the sample has a table");
    let mut table_start = table_start;
    let mut ops = 0;
    while !inp.is_empty() && ops < 64 && !a.is_empty() {
        ops += 1;
        let len = a.len();
        let body = table_start.saturating_sub(PREAMBLE_LEN as usize).max(1);
        match inp.u8() % 9 {
            // Flip one bit anywhere.
            0 => {
                let p = inp.u32() as usize % len;
                a[p] ^= 1 << (inp.u8() % 8);
            }
            // Overwrite a table byte.
            1 => {
                let tl = len.saturating_sub(table_start).max(1);
                let p = (table_start + inp.u16() as usize % tl).min(len - 1);
                a[p] = inp.u8();
            }
            // Overwrite a preamble byte.
            2 => {
                let p = inp.u8() as usize % (PREAMBLE_LEN as usize).min(len);
                a[p] = inp.u8();
            }
            // Overwrite a program byte.
            3 => {
                let p = (PREAMBLE_LEN as usize + inp.u16() as usize % body).min(len - 1);
                a[p] = inp.u8();
            }
            // Truncate.
            4 => {
                let p = inp.u32() as usize % len;
                a.truncate(p);
            }
            // Insert bytes.
            5 => {
                let p = inp.u32() as usize % (len + 1);
                let n = inp.u8() as usize % 16;
                let b = inp.bytes(n).to_vec();
                if p <= table_start {
                    table_start += b.len();
                }
                a.splice(p..p, b);
            }
            // Delete a range.
            6 => {
                let p = inp.u32() as usize % len;
                let n = (inp.u8() as usize % 16).min(len - p);
                if p + n <= table_start {
                    table_start -= n;
                }
                a.drain(p..p + n);
            }
            // Overwrite a table byte with a varint-ish value (large or small).
            7 => {
                let tl = len.saturating_sub(table_start).max(1);
                let p = (table_start + inp.u16() as usize % tl).min(len - 1);
                a[p] = [0x00, 0x01, 0x7F, 0x80, 0xFF][inp.u8() as usize % 5];
            }
            // Copy a range of the archive over another (program or table reuse).
            _ => {
                let src = inp.u32() as usize % len;
                let dst = inp.u32() as usize % len;
                let n = (inp.u8() as usize).min(len - src).min(len - dst);
                a.copy_within(src..src + n, dst);
            }
        }
    }
    let len = a.len();
    if flags & 2 != 0 && len >= PREAMBLE_LEN as usize && table_start <= len {
        a[48..56].copy_from_slice(&(table_start as u64).to_le_bytes());
        a[56..64].copy_from_slice(&((len - table_start) as u64).to_le_bytes());
    }
    if flags & 1 != 0
        && len >= PREAMBLE_LEN as usize
        && let Some((s, e)) = table_range(&a)
    {
        let sum = xxhash_rust::xxh3::xxh3_64(&a[s..e]);
        a[64..72].copy_from_slice(&sum.to_le_bytes());
    }
    if let Ok(out) = decompress(&a) {
        assert!(
            out == *original,
            "a mutated archive decoded without error to {} bytes that are not the original {}",
            out.len(),
            original.len()
        );
    }
    // In place, on two threads: the same verdict.
    if let Ok(archive) = Archive::new(&a[..]) {
        let mut dst = vec![0u8; original.len()];
        if archive.decode_to_slice(&mut dst, &two_threads()).is_ok() {
            assert!(
                dst == *original,
                "a mutated archive decoded in place to other bytes"
            );
        }
    }
    random_access(&a);
}

fn two_threads() -> DecompressOptions {
    DecompressOptions::default().threads(2)
}

/// Build a safetensors file from a description in the input (see
/// [`roundtrip`]).
fn wrap_as_safetensors(inp: &mut Input<'_>) -> Vec<u8> {
    let count = inp.u8() % 6;
    let mut tensors: Vec<TensorSpec> = Vec::new();
    for i in 0..count {
        let dtype = DTYPES[inp.u8() as usize % DTYPES.len()];
        let shape: Vec<u64> = match inp.u8() % 4 {
            0 => vec![],
            1 => vec![inp.u16() as u64 % 3000],
            2 => vec![inp.u8() as u64 % 40, inp.u8() as u64 % 40],
            _ => vec![0, inp.u8() as u64],
        };
        let n = tensor_bytes(dtype, &shape) as usize;
        let fill = inp.u8();
        let data: Vec<u8> = match fill % 5 {
            // Repeat the next input bytes.
            0 => {
                let src = inp.bytes(64);
                if src.is_empty() {
                    vec![0; n]
                } else {
                    src.iter().copied().cycle().take(n).collect()
                }
            }
            // Random.
            1 => {
                let mut r = Rng::new(inp.u32() as u64);
                (0..n).map(|_| r.next_u64() as u8).collect()
            }
            // Constant.
            2 => vec![inp.u8(); n],
            // Small normal floats (byte-wise meaningful for F32/BF16).
            3 => {
                let mut r = Rng::new(inp.u32() as u64);
                let mut v: Vec<u8> = (0..n.div_ceil(4))
                    .flat_map(|_| r.normal(0.02).to_le_bytes())
                    .collect();
                v.truncate(n);
                v
            }
            // A copy of an earlier tensor of the same size, if any.
            _ => tensors
                .iter()
                .find(|t| t.data.len() == n)
                .map(|t| t.data.clone())
                .unwrap_or_else(|| vec![1; n]),
        };
        tensors.push(TensorSpec {
            name: format!("t{i}.{}", fill % 3),
            dtype,
            shape,
            data,
            gap_before: (inp.u8() % 8) as usize * (fill as usize & 1),
        });
    }
    let meta: &[(&str, &str)] = if inp.u8() & 1 == 1 {
        &[("format", "pt")]
    } else {
        &[]
    };
    let n = inp.u8() as usize % 32;
    let trailing = inp.bytes(n).to_vec();
    build_safetensors(&tensors, meta, &trailing)
}

/// `roundtrip`: compress then decompress must give back the input.
///
/// Input: a mode byte (bit 0: the rest describes a safetensors file to build,
/// else the rest is the file itself; bit 1: regions of 1024 words; bits 2-4:
/// the search budget; bit 5: two threads), then the file or its description.
pub fn roundtrip(data: &[u8]) {
    let mut inp = Input::new(data);
    let mode = inp.u8();
    let file = if mode & 1 == 1 {
        wrap_as_safetensors(&mut inp)
    } else {
        inp.rest().to_vec()
    };
    // Two threads pipeline the writing and hashing of a batch with the
    // coding of the next; the level picks the program family (1: floats
    // as rotated bytes; 9: every context coder), the budget is set after.
    let level = [6, 1, 3, 9][(mode >> 6) as usize];
    let mut opts = CompressOptions::default()
        .level(brevis_core::Level::new(level).expect("a level"))
        .threads(1 + ((mode >> 5) & 1) as usize)
        .budget(1 + ((mode >> 2) & 7) as u32);
    if mode & 2 != 0 {
        opts = opts.region_words(1024);
    }
    let archive = compress(&file, &opts).expect("compressing bytes in memory never fails");
    let back = decompress(&archive).expect("a fresh archive decodes");
    assert!(back == file, "round trip changed {} bytes", file.len());
}

/// `program`: arbitrary bytes as a program. A program that parses must
/// serialize back to the same bytes (the format is canonical) in
/// `serialized_size` bytes, and executing it must not panic; if it runs, it
/// yields exactly `len()` words, each within its width.
pub fn program(data: &[u8]) {
    let Ok(node) = wire::read_exact(data) else {
        return;
    };
    let bytes = wire::write(&node);
    assert_eq!(wire::serialized_size(&node), bytes.len(), "serialized_size");
    assert!(
        bytes == data,
        "a program that parses does not serialize back to its bytes"
    );
    if let Ok(words) = execute(&node, &NoRefs) {
        assert_eq!(
            words.len() as u64,
            node.len(),
            "program {node} ran to the wrong number of words"
        );
        let m = mask(node.width());
        assert!(
            words.iter().all(|&w| w <= m),
            "program {node} produced words wider than u{}",
            node.width()
        );
    }
}

/// `serve_request`: the server's request routing and NDJSON commit parsing
/// on hostile input. The first byte picks the method, the bytes up to the
/// first newline are the raw URL path, and every further line is a commit
/// payload line. Every identifier a route or commit line yields must be one
/// that stays inside a store: joined onto a root it has no `..`, root or
/// prefix component and the path still starts with the root.
pub fn serve_request(data: &[u8]) {
    use brevis_hub::server::ndjson::{CommitOp, parse_line};
    use brevis_hub::server::route::Route;
    use std::path::{Component, Path};

    fn inside(parts: &[&str]) {
        let root = Path::new("/store");
        let mut p = root.to_path_buf();
        for s in parts {
            p.push(s);
        }
        assert!(p.starts_with(root), "{p:?} left the store");
        assert!(
            p.components()
                .skip(2)
                .all(|c| matches!(c, Component::Normal(_))),
            "{p:?} has a component that is not a plain name"
        );
    }

    let mut input = Input::new(data);
    let method = ["GET", "HEAD", "POST", "PUT", "DELETE"][input.u8() as usize % 5];
    let rest = input.rest();
    let (path, body) = match rest.iter().position(|&b| b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    if let Ok(Route::Resolve {
        repo, rev, path, ..
    }) = Route::parse(method, &String::from_utf8_lossy(path))
    {
        inside(&[repo.namespace(), repo.name()]);
        inside(&["refs/heads", rev.as_str()]);
        for part in path.as_str().split('/') {
            inside(&[part]);
        }
    }
    for line in body.split(|&b| b == b'\n') {
        match parse_line(line) {
            Ok(Some(CommitOp::LfsFile { oid, path, .. })) => {
                assert!(
                    oid.as_str()
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                );
                inside(&[oid.prefix(), oid.as_str()]);
                inside(&[path.as_str()]);
            }
            Ok(Some(CommitOp::File { content, .. })) => {
                assert!(content.len() as u64 <= brevis_hub::server::limits::MAX_REGULAR_FILE);
            }
            _ => {}
        }
    }
}

/// Fuzz targets `read_<format>`: the reader of `format` on hostile bytes
/// (its `detect` skipped) must refuse them or list tensors that tile the
/// file; then, for small inputs, a whole compress/decompress round trip of
/// those bytes must be exact (a reader that misreads costs ratio, never
/// bytes).
pub fn read_format(format: &str, data: &[u8]) {
    let found = brevis_core::fuzzing::read_as(format, data).expect("a known format");
    if found.is_ok() && data.len() <= 1 << 16 {
        let opts = CompressOptions::default().threads(1).budget(0);
        let archive = compress(data, &opts).expect("any bytes compress");
        assert_eq!(decompress(&archive).expect("decodes"), data);
    }
}
