//! ctranslate2: a CTranslate2 `model.bin`, as CTranslate2's
//! `ModelSpec._serialize` writes it (all little-endian):
//!
//! ```text
//! u32 binary version (1..=6; releases since 3.0 write 6)
//! [version >= 2] string spec name, u32 spec revision
//! u32 variable count, then per variable:
//!     string name, u8 rank, u32 dims[rank],
//!     [version >= 4] u8 dtype id, u32 byte count
//!     [version <  4] u8 item size, u32 element count
//!     the bytes
//! [version >= 3] u32 alias count, then (string alias, string name) pairs
//! ```
//!
//! A string is a u16 length counting a trailing NUL, then that many bytes.
//! Dtype ids (`DataType` in `include/ctranslate2/types.h`): 0 float32,
//! 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16; before version 4 the
//! item size stood for the type (4 float32, 2 int16, 1 int8), as
//! CTranslate2 still reads it. Each variable's bytes are a tensor; the
//! rest (names, dims, the alias table, config-free since version 6) stays
//! bytes.

use super::onnx::{Window, shape};
use super::{MAX_META, MAX_TENSORS, Reader, Span};
use crate::container::ReadAt;
use crate::dtype::Dtype;

/// Newest binary version known (CTranslate2's `CURRENT_BINARY_VERSION`).
pub(crate) const MAX_VERSION: u32 = 6;

/// The ctranslate2 reader.
pub(crate) struct Ct2;

impl Reader for Ct2 {
    fn name(&self) -> &'static str {
        "ctranslate2"
    }

    /// A version in 1..=6 as a u32, then (version 2 on) a spec name of
    /// identifier characters ending in its NUL, a small revision and a
    /// variable count; (version 1) a variable count and a printable
    /// variable name ending in its NUL.
    fn detect(&self, head: &[u8], len: u64) -> bool {
        let u16_at = |i: usize| Some(u16::from_le_bytes(head.get(i..i + 2)?.try_into().ok()?));
        let u32_at = |i: usize| Some(u32::from_le_bytes(head.get(i..i + 4)?.try_into().ok()?));
        let Some(version) = u32_at(0) else {
            return false;
        };
        if !(1..=MAX_VERSION).contains(&version) {
            return false;
        }
        // A string at `i`: its characters all pass `ok`, its NUL in the head.
        let string = |i: usize, ok: &dyn Fn(u8) -> bool| -> Option<usize> {
            let n = usize::from(u16_at(i)?);
            let s = head.get(i + 2..i + 2 + n)?;
            let (nul, chars) = s.split_last()?;
            (*nul == 0 && !chars.is_empty() && chars.iter().all(|&c| ok(c))).then_some(i + 2 + n)
        };
        let count_at = if version >= 2 {
            let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
            let Some(end) = string(4, &ident) else {
                return false;
            };
            if !head[6].is_ascii_alphabetic() || u32_at(end).is_none_or(|r| r > 1000) {
                return false;
            }
            end + 4
        } else {
            if string(8, &|c: u8| (0x20..0x7f).contains(&c)).is_none() {
                return false;
            }
            4
        };
        // The count, when the head shows it, fits the file (each variable
        // takes at least 8 bytes).
        u32_at(count_at).is_none_or(|c| u64::from(c) <= len / 8)
    }

    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
        let mut r = Window::new(src, len);
        let version = r.u32(0)?;
        if !(1..=MAX_VERSION).contains(&version) {
            return Err(format!("binary version {version}, not 1..={MAX_VERSION}"));
        }
        let mut pos = 4u64;
        if version >= 2 {
            string(&mut r, &mut pos).map_err(|e| format!("spec name: {e}"))?;
            r.u32(pos)?;
            pos += 4;
        }
        let count = r.u32(pos)?;
        pos += 4;
        if count as usize > MAX_TENSORS {
            return Err(format!("{count} variables, more than {MAX_TENSORS}"));
        }
        let mut spans = Vec::new();
        let mut names = 0u64;
        for i in 0..count {
            let name = string(&mut r, &mut pos).map_err(|e| format!("variable {i}: {e}"))?;
            let rank = r.get(pos, 1)?[0];
            pos += 1;
            let mut dims = Vec::with_capacity(usize::from(rank));
            for _ in 0..rank {
                dims.push(u64::from(r.u32(pos)?));
                pos += 4;
            }
            let b = r.get(pos, 5)?;
            let (id, n) = (b[0], u32::from_le_bytes([b[1], b[2], b[3], b[4]]));
            pos += 5;
            let (dtype, bytes) = if version >= 4 {
                (ct2_dtype(id), u64::from(n))
            } else {
                let dtype = match id {
                    4 => Dtype::F32,
                    2 => Dtype::I16,
                    1 => Dtype::I8,
                    _ => return Err(format!("variable {i} ({name}): item size {id}")),
                };
                (dtype, u64::from(n) * u64::from(id))
            };
            let offset = pos;
            pos = pos.checked_add(bytes).filter(|e| *e <= len).ok_or_else(|| {
                format!("variable {i} ({name}): {bytes} bytes at {offset} run past the {len}-byte file")
            })?;
            if bytes == 0 {
                continue;
            }
            names += name.len() as u64;
            if names > MAX_META {
                return Err(format!("more than {MAX_META} bytes of variable names"));
            }
            let shape = match dtype {
                Dtype::Bytes => vec![],
                _ => shape(Some(&dims), false, dtype.word_bytes() as u64, bytes),
            };
            spans.push(Span {
                name,
                dtype,
                shape,
                offset,
                len: bytes,
            });
        }
        if version >= 3 {
            let aliases = r.u32(pos).map_err(|e| format!("alias count: {e}"))?;
            pos += 4;
            if aliases as usize > MAX_TENSORS {
                return Err(format!("{aliases} aliases, more than {MAX_TENSORS}"));
            }
            for i in 0..aliases {
                for _ in 0..2 {
                    string(&mut r, &mut pos).map_err(|e| format!("alias {i}: {e}"))?;
                }
            }
        }
        Ok(spans)
    }
}

/// The string at `pos` (a u16 length counting its NUL, then the bytes),
/// `pos` moved past it.
fn string(r: &mut Window<'_>, pos: &mut u64) -> Result<String, String> {
    let n = r.u16(*pos)?;
    if n == 0 {
        return Err(format!("string at {pos} of length 0"));
    }
    let b = r.get(*pos + 2, usize::from(n))?;
    let s = String::from_utf8_lossy(&b[..b.len() - 1]).into_owned();
    *pos += 2 + u64::from(n);
    Ok(s)
}

/// The element type of a CTranslate2 `DataType` id.
fn ct2_dtype(id: u8) -> Dtype {
    match id {
        0 => Dtype::F32,
        1 => Dtype::I8,
        2 => Dtype::I16,
        3 => Dtype::I32,
        4 => Dtype::F16,
        5 => Dtype::BF16,
        _ => Dtype::Bytes,
    }
}

// The tests compress and decompress: they need the `search` feature.
#[cfg(all(test, feature = "search"))]
mod tests {
    use super::super::{read, read_as, safetensors};
    use super::*;
    use crate::container::SegmentKind;

    fn testdata(path: &str) -> Vec<u8> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata")
            .join(path);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn sample() -> Vec<u8> {
        testdata("ct2/model.bin")
    }

    fn spans(data: &[u8]) -> Result<Vec<Span>, String> {
        Ct2.tensors(&data, data.len() as u64)
    }

    fn string(s: &str) -> Vec<u8> {
        let mut out = ((s.len() + 1) as u16).to_le_bytes().to_vec();
        out.extend_from_slice(s.as_bytes());
        out.push(0);
        out
    }

    /// A version-6 file: spec `TestSpec` revision 3, then `vars`
    /// (name, dims, dtype id, bytes), then `aliases`.
    fn file(vars: &[(&str, &[u32], u8, &[u8])], aliases: &[(&str, &str)]) -> Vec<u8> {
        let mut out = 6u32.to_le_bytes().to_vec();
        out.extend(string("TestSpec"));
        out.extend(3u32.to_le_bytes());
        out.extend((vars.len() as u32).to_le_bytes());
        for (name, dims, id, data) in vars {
            out.extend(string(name));
            out.push(dims.len() as u8);
            for d in *dims {
                out.extend(d.to_le_bytes());
            }
            out.push(*id);
            out.extend((<[u8]>::len(data) as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        out.extend((aliases.len() as u32).to_le_bytes());
        for (a, b) in aliases {
            out.extend(string(a));
            out.extend(string(b));
        }
        out
    }

    #[test]
    fn sample_reads_as_its_variables() {
        let data = sample();
        assert!(Ct2.detect(&data[..64], data.len() as u64));
        let spans = spans(&data).unwrap();
        let got: Vec<(&str, Dtype, &[u64], u64)> = spans
            .iter()
            .map(|s| (s.name.as_str(), s.dtype, &s.shape[..], s.len))
            .collect();
        assert_eq!(
            got,
            [
                ("decoder/activation", Dtype::I8, &[][..], 1),
                ("decoder/alibi", Dtype::I8, &[][..], 1),
                ("decoder/alignment_heads", Dtype::I16, &[][..], 2),
                ("decoder/alignment_layer", Dtype::I16, &[][..], 2),
                (
                    "decoder/embeddings/weight",
                    Dtype::F16,
                    &[256, 384][..],
                    196_608
                ),
                (
                    "decoder/layer_0/attention/layer_norm/beta",
                    Dtype::F16,
                    &[384][..],
                    768
                ),
                (
                    "decoder/layer_0/attention/layer_norm/gamma",
                    Dtype::F16,
                    &[384][..],
                    768
                ),
                (
                    "decoder/layer_0/attention/linear_1/bias",
                    Dtype::F16,
                    &[768][..],
                    1536
                ),
                ("decoder/num_heads", Dtype::I16, &[][..], 2),
                (
                    "decoder/position_encodings/encodings",
                    Dtype::F16,
                    &[448, 384][..],
                    344_064
                ),
                ("decoder/pre_norm", Dtype::I8, &[][..], 1),
                ("encoder/conv1/bias", Dtype::F16, &[384][..], 768),
                (
                    "encoder/conv1/weight",
                    Dtype::F16,
                    &[384, 80, 3][..],
                    184_320
                ),
                ("encoder/num_heads", Dtype::I16, &[][..], 2),
            ]
        );
        // The same bytes as the safetensors twin's tensors of those names.
        let st = testdata("whisper-tiny-f16/model.safetensors");
        let twin = safetensors::segments(&&st[..], st.len() as u64).unwrap();
        let mut compared = 0;
        for t in twin.iter().filter(|t| t.kind == SegmentKind::Tensor) {
            if let Some(s) = spans.iter().find(|s| s.name == t.name) {
                let a = &data[s.offset as usize..(s.offset + s.len) as usize];
                let b = &st[t.offset as usize..(t.offset + t.len) as usize];
                assert_eq!(a, b, "{}", s.name);
                assert_eq!(s.shape, t.shape, "{}", s.name);
                compared += 1;
            }
        }
        assert_eq!(compared, 12);
        let found = read(&&data[..], None).unwrap();
        assert_eq!(found.format, Some("ctranslate2"));
        let kept = found
            .segments
            .iter()
            .filter(|s| s.kind == SegmentKind::Tensor);
        assert_eq!(kept.count(), 14);
    }

    #[test]
    fn sample_round_trips() {
        crate::formats::assert_round_trip(&sample());
    }

    #[test]
    fn detect_claims_ctranslate2_only() {
        let data = sample();
        assert!(Ct2.detect(&data[..64], data.len() as u64));
        let no = |head: &[u8]| !Ct2.detect(head, 1 << 20);
        for f in [
            "onnx/silero_vad_half.onnx",
            "silero-vad/silero_vad_16k.safetensors",
        ] {
            assert!(no(&testdata(f)[..64]), "{f}");
        }
        assert!(no(b"GGUF\x03\0\0\0\0\0\0\0\0\0\0\0"));
        assert!(no(b"PK\x03\x04\x14\0\0\0\x08\0"));
        assert!(no(b"# A README\n\nSome text, then more text.\n"));
        let mut v7 = data[..64].to_vec();
        v7[0] = 7;
        assert!(no(&v7), "version 7");
        let mut v0 = data[..64].to_vec();
        v0[0] = 0;
        assert!(no(&v0), "version 0");
        assert!(no(b"\x06\0\0\0\x0c\0Whisper Spec\0\x03\0\0\0"), "a space");
        assert!(no(b"\x06\0\0\0\x0c\0WhisperSpec\x01\x03\0\0\0"), "no NUL");
        assert!(no(b"\x06\0\0\0\x01\0\0\x03\0\0\0"), "an empty name");
        assert!(
            no(b"\x06\0\0\0\x0c\0WhisperSpec\0\xff\xff\0\0"),
            "revision 65535"
        );
        assert!(
            no(b"\x06\0\0\0\x0c\0WhisperSpec\0\x03\0\0\0\xff\xff\xff\xff"),
            "2^32-1 variables"
        );
        assert!(
            Ct2.detect(b"\x01\0\0\0\x02\0\0\0\x04\0w/b\0", 1000),
            "version 1"
        );
    }

    #[test]
    fn older_versions_read() {
        // Version 3: an item size and an element count instead of a dtype
        // id and a byte count; version 1: no spec, no aliases.
        let mut v3 = 3u32.to_le_bytes().to_vec();
        v3.extend(string("TransformerSpec"));
        v3.extend(1u32.to_le_bytes());
        v3.extend(1u32.to_le_bytes());
        v3.extend(string("w"));
        v3.push(2);
        v3.extend([2u32, 3].iter().flat_map(|d| d.to_le_bytes()));
        v3.push(4);
        v3.extend(6u32.to_le_bytes());
        v3.extend([7u8; 24]);
        v3.extend(0u32.to_le_bytes());
        assert!(Ct2.detect(&v3, v3.len() as u64));
        let s = spans(&v3).unwrap();
        assert_eq!(
            (s[0].dtype, &s[0].shape[..], s[0].len),
            (Dtype::F32, &[2, 3][..], 24)
        );
        let mut v1 = 1u32.to_le_bytes().to_vec();
        v1.extend(1u32.to_le_bytes());
        v1.extend(string("enc/w"));
        v1.push(1);
        v1.extend(4u32.to_le_bytes());
        v1.push(2);
        v1.extend(4u32.to_le_bytes());
        v1.extend([1u8; 8]);
        assert!(Ct2.detect(&v1, v1.len() as u64));
        let s = spans(&v1).unwrap();
        assert_eq!(
            (s[0].name.as_str(), s[0].dtype, &s[0].shape[..]),
            ("enc/w", Dtype::I16, &[4][..])
        );
        // An item size CTranslate2 never wrote.
        let l = v1.len();
        v1[l - 13] = 3;
        assert!(spans(&v1).is_err());
    }

    #[test]
    fn hostile_files_are_refused() {
        let err = |data: &[u8], what: &str| {
            let e = spans(data).expect_err(what);
            assert!(read_as("ctranslate2", data).unwrap().is_err());
            e
        };
        let ok = file(
            &[("a", &[2], 4, &[1, 2, 3, 4]), ("b", &[], 1, &[5])],
            &[("c", "a")],
        );
        assert_eq!(spans(&ok).unwrap().len(), 2);
        // 2^32-1 variables.
        let mut f = ok.clone();
        let at = 4 + 11 + 4;
        f[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(&f, "2^32-1 variables").contains("variables"));
        // MAX_TENSORS variables claimed, two there.
        f[at..at + 4].copy_from_slice(&(MAX_TENSORS as u32).to_le_bytes());
        err(&f, "a count past the variables");
        // A byte count past the end.
        let mut f = ok.clone();
        let at = 4 + 11 + 4 + 4 + 4 + 1 + 4 + 1;
        f[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(err(&f, "bytes past the end").contains("run past"));
        // Rank 255 with dims that are not there.
        let mut f = ok.clone();
        f[4 + 11 + 4 + 4 + 4] = 255;
        err(&f, "rank 255");
        // 2^32-1 aliases.
        let mut f = ok.clone();
        let l = f.len();
        let at = l - 4 - 8;
        f[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        err(&f, "2^32-1 aliases");
        // A string of length 0, and one past the end.
        let mut f = ok.clone();
        f[4..6].copy_from_slice(&0u16.to_le_bytes());
        err(&f, "empty string");
        let mut f = ok.clone();
        f[4..6].copy_from_slice(&u16::MAX.to_le_bytes());
        err(&f, "string past the end");
        // Dims that do not account for the bytes: flat; an unknown dtype
        // id: opaque bytes, named.
        let f = file(
            &[
                ("liar", &[1000, 1000], 0, &[0; 8]),
                ("odd", &[3], 9, &[0; 3]),
            ],
            &[],
        );
        let s = spans(&f).unwrap();
        assert_eq!((s[0].dtype, &s[0].shape[..]), (Dtype::F32, &[2][..]));
        assert_eq!((s[1].name.as_str(), s[1].dtype), ("odd", Dtype::Bytes));
        // Dims that multiply past 64 bits: flat.
        let f = file(&[("big", &[u32::MAX; 4], 0, &[0; 8])], &[]);
        assert_eq!(spans(&f).unwrap()[0].shape, [2]);
    }

    #[test]
    fn truncated_samples_are_refused() {
        let data = sample();
        let mut cuts: Vec<usize> = (0..600).collect();
        cuts.extend((600..data.len()).step_by(1009));
        for n in cuts {
            assert!(
                read_as("ctranslate2", &data[..n]).unwrap().is_err(),
                "prefix {n}"
            );
        }
        // Bit flips in the header and the first variables' descriptions.
        for i in 0..400 {
            let mut d = data.clone();
            d[i] ^= 0x41;
            let _ = read_as("ctranslate2", &d).unwrap();
        }
    }
}
