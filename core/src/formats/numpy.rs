//! NumPy `.npy` and `.npz`.
//!
//! A `.npy` file is `\x93NUMPY`, a version (1: a 2-byte header length; 2
//! and 3: 4 bytes), a Python dict literal (`{'descr': '<f4',
//! 'fortran_order': False, 'shape': (2, 384), }`) padded with spaces, then
//! the array's bytes: one tensor. A Fortran-order array's bytes are the
//! row-major array of the reversed shape, so that is its shape. Big-endian,
//! object, string, complex and structured arrays stay opaque.
//!
//! A `.npz` is a zip of `.npy` entries: each STORED entry (`np.savez`) is a
//! tensor named after the entry without `.npy`; deflated entries
//! (`np.savez_compressed`) stay opaque.

use super::zip;
use super::{Reader, Span, read_meta};
use crate::container::ReadAt;
use crate::dtype::Dtype;

/// The `.npy` reader.
pub(crate) struct Npy;
/// The `.npz` reader (a zip of `.npy` files).
pub(crate) struct Npz;

/// The magic a `.npy` file starts with.
const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// Longest `.npy` header read.
pub(crate) const MAX_HEADER: u64 = 1 << 20;
/// Most dimensions of an array.
pub(crate) const MAX_DIMS: usize = 64;

impl Reader for Npy {
    fn name(&self) -> &'static str {
        "npy"
    }

    fn detect(&self, head: &[u8], _len: u64) -> bool {
        head.starts_with(MAGIC)
    }

    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
        let a = array_at(src, len, 0, len)?;
        Ok(vec![Span {
            name: "array".into(),
            dtype: a.dtype,
            shape: a.shape,
            offset: a.offset,
            len: a.len,
        }])
    }
}

impl Reader for Npz {
    fn name(&self) -> &'static str {
        "npz"
    }

    fn detect(&self, head: &[u8], _len: u64) -> bool {
        match zip::first_name(head) {
            Some((name, true)) => name.ends_with(b".npy"),
            Some((_, false)) => true,
            None => false,
        }
    }

    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
        let entries = zip::entries(src, len)?;
        if !entries.iter().any(|e| e.name.ends_with(".npy")) {
            return Err("no .npy entry".into());
        }
        let mut spans = Vec::new();
        for e in &entries {
            let Some(name) = e.name.strip_suffix(".npy") else {
                continue;
            };
            let Some((off, n)) = e.stored() else {
                continue;
            };
            // A malformed or opaque entry stays bytes; the others are read.
            if let Ok(a) = array_at(src, len, off, n) {
                spans.push(Span {
                    name: name.into(),
                    dtype: a.dtype,
                    shape: a.shape,
                    offset: a.offset,
                    len: a.len,
                });
            }
        }
        Ok(spans)
    }
}

/// An array a `.npy` header describes.
#[derive(Debug, PartialEq, Eq)]
struct Array {
    dtype: Dtype,
    shape: Vec<u64>,
    offset: u64,
    len: u64,
}

/// The array of the `.npy` that occupies `avail` bytes at `start`.
fn array_at(src: &dyn ReadAt, len: u64, start: u64, avail: u64) -> Result<Array, String> {
    let fixed = read_meta(src, len, start, 12.min(avail))?;
    if !fixed.starts_with(MAGIC) || fixed.len() < 10 {
        return Err("npy: no \\x93NUMPY magic".into());
    }
    let (hlen, pre) = match fixed[6] {
        1 => (u16::from_le_bytes([fixed[8], fixed[9]]) as u64, 10u64),
        2 | 3 if fixed.len() >= 12 => (
            u32::from_le_bytes(fixed[8..12].try_into().expect("4")) as u64,
            12,
        ),
        v => return Err(format!("npy: version {v} not read")),
    };
    if hlen > MAX_HEADER {
        return Err(format!("npy: {hlen}-byte header, more than {MAX_HEADER}"));
    }
    let data = pre + hlen;
    if data > avail {
        return Err(format!("npy: {hlen}-byte header past the {avail} bytes"));
    }
    let header = read_meta(src, len, start + pre, hlen)?;
    let h =
        parse_header(&header).ok_or("npy: header is not a dict of descr, fortran_order, shape")?;
    let dtype =
        descr_dtype(&h.descr).ok_or_else(|| format!("npy: descr '{}' not read", h.descr))?;
    let numel = h
        .shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or("npy: shape overflows")?;
    let bytes = numel
        .checked_mul(dtype.word_bytes() as u64)
        .filter(|&b| b <= avail - data)
        .ok_or_else(|| format!("npy: {numel} elements past the {} data bytes", avail - data))?;
    let mut shape = h.shape;
    if h.fortran {
        shape.reverse();
    }
    Ok(Array {
        dtype,
        shape,
        offset: start + data,
        len: bytes,
    })
}

/// The element type of a little-endian (or byte-order free) numeric descr.
fn descr_dtype(descr: &str) -> Option<Dtype> {
    let (order, ty) = descr.split_at_checked(1)?;
    let single = matches!(ty, "b1" | "i1" | "u1");
    if !(order == "<" || (order == "|" && single)) {
        return None;
    }
    Some(match ty {
        "b1" => Dtype::Bool,
        "i1" => Dtype::I8,
        "u1" => Dtype::U8,
        "i2" => Dtype::I16,
        "u2" => Dtype::U16,
        "f2" => Dtype::F16,
        "i4" => Dtype::I32,
        "u4" => Dtype::U32,
        "f4" => Dtype::F32,
        "i8" => Dtype::I64,
        "u8" => Dtype::U64,
        "f8" => Dtype::F64,
        _ => return None,
    })
}

#[derive(Debug, PartialEq, Eq)]
struct Header {
    descr: String,
    fortran: bool,
    shape: Vec<u64>,
}

/// The dict literal of a `.npy` header: string keys; a string, `True` /
/// `False`, or a tuple of integers as values (anything else: `None`).
fn parse_header(h: &[u8]) -> Option<Header> {
    let mut p = Lit { s: h, i: 0 };
    p.eat(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.ws();
        if p.peek()? == b'}' {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.eat(b':')?;
        p.ws();
        match key {
            b"descr" => descr = Some(String::from_utf8(p.string()?.to_vec()).ok()?),
            b"fortran_order" => fortran = Some(p.boolean()?),
            b"shape" => shape = Some(p.tuple()?),
            _ => return None,
        }
        p.ws();
        if p.peek()? == b',' {
            p.i += 1;
        }
    }
    Some(Header {
        descr: descr?,
        fortran: fortran?,
        shape: shape?,
    })
}

struct Lit<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Lit<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }
    fn string(&mut self) -> Option<&'a [u8]> {
        let q = self.peek().filter(|&q| q == b'\'' || q == b'"')?;
        let rest = self.s.get(self.i + 1..)?;
        let n = rest.iter().position(|&c| c == q)?;
        self.i += n + 2;
        Some(&rest[..n])
    }
    fn boolean(&mut self) -> Option<bool> {
        let rest = self.s.get(self.i..)?;
        for (word, v) in [(&b"True"[..], true), (b"False", false)] {
            if rest.starts_with(word) {
                self.i += word.len();
                return Some(v);
            }
        }
        None
    }
    fn tuple(&mut self) -> Option<Vec<u64>> {
        self.eat(b'(')?;
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.peek()? == b')' {
                self.i += 1;
                return Some(out);
            }
            let start = self.i;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).ok()?;
            if out.len() >= MAX_DIMS {
                return None;
            }
            out.push(digits.parse().ok()?);
            if self.peek() == Some(b'L') {
                self.i += 1;
            }
            self.ws();
            if self.peek()? == b',' {
                self.i += 1;
            }
        }
    }
}

// The tests compress and decompress: they need the `search` feature.
#[cfg(all(test, feature = "search"))]
mod tests {
    use super::*;

    fn npy(header: &str, data: &[u8]) -> Vec<u8> {
        let mut f = MAGIC.to_vec();
        f.extend_from_slice(&[1, 0]);
        f.extend_from_slice(&(header.len() as u16).to_le_bytes());
        f.extend_from_slice(header.as_bytes());
        f.extend_from_slice(data);
        f
    }

    #[test]
    fn headers() {
        let h =
            parse_header(b"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 384), }    \n")
                .unwrap();
        assert_eq!(
            (h.descr.as_str(), h.fortran, h.shape),
            ("<f4", false, vec![2, 384])
        );
        let h = parse_header(b"{'descr': '|b1', 'fortran_order': True, 'shape': (), }").unwrap();
        assert_eq!((h.fortran, h.shape.len()), (true, 0));
        assert_eq!(
            parse_header(b"{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }")
                .unwrap()
                .shape,
            [5]
        );
        assert!(
            parse_header(b"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (5,), }")
                .is_none()
        );
        assert!(parse_header(b"{'descr': '<f4', 'shape': (5,), }").is_none());
        assert!(
            parse_header(
                b"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }"
            )
            .is_none()
        );
        assert_eq!(descr_dtype(">f4"), None);
        assert_eq!(descr_dtype("|O"), None);
        assert_eq!(descr_dtype("<c8"), None);
        assert_eq!(descr_dtype("|u1"), Some(Dtype::U8));
        assert_eq!(descr_dtype("<f2"), Some(Dtype::F16));
        assert_eq!(descr_dtype("|f4"), None);
    }

    #[test]
    fn hostile_npy() {
        let ok = npy(
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n",
            &[0; 24],
        );
        let a = array_at(&&ok[..], ok.len() as u64, 0, ok.len() as u64).unwrap();
        assert_eq!((a.shape, a.len), (vec![3, 2], 24));
        // Shape larger than the data, overflowing, a header longer than the file.
        for f in [
            npy(
                "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }\n",
                &[0; 24],
            ),
            npy(
                "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                &[],
            ),
            npy(
                "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
                &[0; 4],
            ),
        ] {
            assert!(Npy.tensors(&&f[..], f.len() as u64).is_err());
        }
        let mut f = ok.clone();
        f[8..10].copy_from_slice(&[0xff, 0xff]);
        assert!(Npy.tensors(&&f[..], f.len() as u64).is_err());
        for n in 0..ok.len() {
            let g = &ok[..n];
            if let Ok(t) = Npy.tensors(&g, n as u64) {
                assert!(t[0].offset + t[0].len <= n as u64);
            }
        }
    }

    #[test]
    fn npz_of_stored_entries() {
        let a = npy(
            "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }\n",
            &[1; 8],
        );
        let b = npy(
            "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }\n",
            &[1; 8],
        );
        let f = zip::tests::build(
            &[("w.npy", &a), ("obj.npy", &b), ("README", b"hi")],
            1,
            true,
        );
        assert!(Npz.detect(&f[..64], f.len() as u64));
        let t = Npz.tensors(&&f[..], f.len() as u64).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].name.as_str(), t[0].dtype, t[0].len),
            ("w", Dtype::F16, 8)
        );
        assert_eq!(&f[t[0].offset as usize..][..8], &[1; 8]);
    }

    const NPY: &[u8] = include_bytes!("../../../testdata/numpy/token_type_embeddings.npy");
    const NPZ: &[u8] = include_bytes!("../../../testdata/numpy/minilm.npz");
    const NPZ_DEFLATED: &[u8] = include_bytes!("../../../testdata/numpy/minilm_compressed.npz");
    const TWIN: &[u8] = include_bytes!("../../../testdata/minilm-f32/model.safetensors");

    fn twin(name: &str) -> &'static [u8] {
        let segs = crate::formats::safetensors::segments(&TWIN, TWIN.len() as u64).unwrap();
        let s = segs.iter().find(|s| s.name == name).unwrap();
        &TWIN[s.offset as usize..(s.offset + s.len) as usize]
    }

    type Read<'a> = (
        Option<&'static str>,
        Vec<(String, Dtype, Vec<u64>, &'a [u8])>,
    );

    fn tensors(f: &[u8]) -> Read<'_> {
        let found = crate::formats::read(&f, None).unwrap();
        let t = found
            .segments
            .into_iter()
            .filter(|s| s.kind == crate::container::SegmentKind::Tensor)
            .map(|s| {
                let bytes = &f[s.offset as usize..(s.offset + s.len) as usize];
                (s.name, s.dtype, s.shape, bytes)
            })
            .collect();
        (found.format, t)
    }

    #[test]
    fn real_samples_read_as_their_tensors() {
        let tt = twin("embeddings.token_type_embeddings.weight");
        let (format, t) = tensors(NPY);
        assert_eq!(format, Some("npy"));
        assert_eq!(t, [("array".to_string(), Dtype::F32, vec![2, 384], tt)]);
        let (format, mut t) = tensors(NPZ);
        assert_eq!(format, Some("npz"));
        t.sort_by(|a, b| a.0.cmp(&b.0));
        let want = [
            (
                "embeddings.LayerNorm.weight",
                Dtype::F32,
                vec![384],
                twin("embeddings.LayerNorm.weight"),
            ),
            (
                "embeddings.position_ids",
                Dtype::I64,
                vec![1, 512],
                twin("embeddings.position_ids"),
            ),
            (
                "encoder.layer.0.intermediate.dense.bias",
                Dtype::F32,
                vec![1536],
                twin("encoder.layer.0.intermediate.dense.bias"),
            ),
            // Saved as its transpose: Fortran order, the original bytes.
            ("token_type_embeddings_T", Dtype::F32, vec![2, 384], tt),
        ];
        assert_eq!(t.len(), want.len());
        for (got, want) in t.iter().zip(want) {
            assert_eq!(
                (got.0.as_str(), got.1, &got.2, got.3),
                (want.0, want.1, &want.2, want.3)
            );
        }
        // Deflated entries are opaque: no tensors, the file is plain bytes.
        let (format, t) = tensors(NPZ_DEFLATED);
        assert_eq!((format, t.len()), (None, 0));
    }

    #[test]
    fn hostile_samples_never_panic_and_round_trip() {
        for (format, f) in [("npy", NPY), ("npz", NPZ), ("npz", NPZ_DEFLATED)] {
            for cut in 0..f.len() {
                let _ = crate::formats::read_as(format, &f[..cut]);
            }
            let mut state = 0x2545_f491_4f6c_dd1du64;
            for _ in 0..2000 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let mut g = f.to_vec();
                let r = state as usize;
                // The header, or the zip directory at the end.
                let at = if r.is_multiple_of(2) {
                    r / 2 % 128
                } else {
                    f.len() - 1 - r / 2 % 400.min(f.len())
                };
                g[at] ^= 1 << (r % 8);
                let _ = crate::formats::read_as(format, &g);
            }
        }
        let mut lying = NPY.to_vec();
        lying[8] = 0xff; // header length past the file
        for f in [
            NPY.to_vec(),
            NPZ.to_vec(),
            NPZ_DEFLATED.to_vec(),
            lying,
            NPZ[..9000].to_vec(),
        ] {
            crate::formats::assert_round_trip(&f);
        }
    }
}
