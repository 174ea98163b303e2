//! onnx: a `ModelProto` protobuf, read by hand.
//!
//! The walker follows only the fields that lead to tensors, each message
//! read in bounded pieces through a small window (a tensor's payload is
//! skipped by its length, never read):
//!
//! - `ModelProto.graph` (7), `.training_info` (20: `initialization` 1 and
//!   `algorithm` 2 graphs), `.functions` (25: `FunctionProto.node` 7 and
//!   `.attribute_proto` 11);
//! - `GraphProto.node` (1), `.initializer` (5), `.sparse_initializer` (15:
//!   `values` 1 and `indices` 2 tensors);
//! - `NodeProto.attribute` (5): `AttributeProto.t` (5), `.tensors` (10),
//!   `.sparse_tensor` (22), `.sparse_tensors` (23), and the subgraphs
//!   `.g` (6) and `.graphs` (11) of `If`/`Loop`/`Scan` nodes, nested at most
//!   [`MAX_GRAPH_DEPTH`] deep (silero-vad keeps its weights in `Constant`
//!   nodes inside `If` branches);
//! - `TensorProto`: `dims` (1, packed or not), `data_type` (2), `name` (8),
//!   `raw_data` (9), the packed `float_data` (4, little-endian f32 words)
//!   and `double_data` (10, f64 words), `data_location` (14).
//!
//! A tensor's span is its `raw_data` (or packed `float_data` /
//! `double_data`) payload at its absolute file offset, typed by
//! `data_type`, shaped by `dims` (flat when `dims` do not account for the
//! bytes). A tensor without a name (a `Constant` node's value) is named
//! after the node's first output. Varint-coded payloads (`int32_data`,
//! `int64_data`, `uint64_data`), strings and sub-byte types (int4, uint4,
//! float4, int2, uint2) stay opaque bytes.
//!
//! A tensor with `data_location = EXTERNAL` keeps its bytes in another
//! file (`external_data` entries `location`, `offset`, `length`): the
//! model file's reader skips it, and [`external`] lists it for the file it
//! lives in (see [`super::sidecar`]; this reader never opens that file).

use super::{MAX_META, MAX_TENSORS, Reader, Span};
use crate::container::ReadAt;
use crate::dtype::Dtype;

/// Deepest nesting of graphs inside node attributes (the model's graph is
/// depth 1); deeper is refused.
pub(crate) const MAX_GRAPH_DEPTH: u32 = 32;
/// Most protobuf fields walked in one file; past it, refused.
pub(crate) const MAX_FIELDS: u64 = 1 << 24;
/// Most dimensions kept as a shape (the archive's limit); a tensor with
/// more is listed flat.
const MAX_RANK: usize = crate::container::MAX_DIMS as usize;
/// Most bytes of a name read (a longer name is cut).
const MAX_NAME: u64 = 4096;

/// The onnx reader.
pub(crate) struct Onnx;

impl Reader for Onnx {
    fn name(&self) -> &'static str {
        "onnx"
    }

    /// `ir_version` (field 1, varint, 1..=20) first, as every protobuf
    /// writer puts the lowest field first, then only `ModelProto` fields
    /// of the right wire types whose lengths fit the file, as far as the
    /// head shows (at least one).
    fn detect(&self, head: &[u8], len: u64) -> bool {
        let [0x08, v, ..] = head else {
            return false;
        };
        if !(1..=20).contains(v) {
            return false;
        }
        let mut pos = 2usize;
        let mut fields = 0;
        loop {
            let Some(rest) = head.get(pos..).filter(|r| !r.is_empty()) else {
                // The file ends here only when the head is all of it.
                return fields > 0 && (pos as u64) <= len;
            };
            let (tag, n) = match varint(rest) {
                Varint::Value(t, n) => (t, n),
                Varint::Short => return fields > 0 && (head.len() as u64) < len,
                Varint::Bad => return false,
            };
            pos += n;
            let wire = (tag & 7) as u8;
            let expected = match tag >> 3 {
                5 => 0,
                2 | 3 | 4 | 6 | 7 | 8 | 14 | 20 | 25 | 26 => 2,
                _ => return false,
            };
            if wire != expected {
                return false;
            }
            let Some(rest) = head.get(pos..).filter(|r| !r.is_empty()) else {
                return fields > 0 && (head.len() as u64) < len;
            };
            match varint(rest) {
                Varint::Value(v, n) => {
                    pos += n;
                    if wire == 2 {
                        if (pos as u64).checked_add(v).is_none_or(|e| e > len) {
                            return false;
                        }
                        match pos.checked_add(v as usize) {
                            Some(p) if p <= head.len() => pos = p,
                            _ => return true,
                        }
                    }
                }
                Varint::Short => return fields > 0 && (head.len() as u64) < len,
                Varint::Bad => return false,
            }
            fields += 1;
        }
    }

    fn tensors(&self, src: &dyn ReadAt, len: u64) -> Result<Vec<Span>, String> {
        Ok(walk(src, len)?.spans)
    }
}

/// Walk a model file: its own tensors, and those kept in other files.
fn walk(src: &dyn ReadAt, len: u64) -> Result<Walk<'_>, String> {
    let mut w = Walk {
        r: Window::new(src, len),
        fields: 0,
        spans: Vec::new(),
        external: Vec::new(),
        names: 0,
    };
    w.model(0, len)?;
    for s in &mut w.spans {
        if s.name.is_empty() {
            s.name = format!("tensor@{}", s.offset);
        }
    }
    Ok(w)
}

/// The tensors a model file keeps in other files: each with its
/// `location` as the model writes it (unchecked: a name, never opened
/// here) and its span in that file (`len` [`TO_END`] when not given).
pub(super) fn external(src: &dyn ReadAt, len: u64) -> Result<Vec<(String, Span)>, String> {
    Ok(walk(src, len)?.external)
}

/// A varint's decoding.
#[derive(Debug, PartialEq, Eq)]
enum Varint {
    /// Its value and its length in bytes.
    Value(u64, usize),
    /// `buf` ends inside it.
    Short,
    /// Longer than 10 bytes, or past 64 bits.
    Bad,
}

/// The varint at the start of `buf`.
fn varint(buf: &[u8]) -> Varint {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        if i == 9 && b > 1 {
            return Varint::Bad;
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Varint::Value(v, i + 1);
        }
    }
    if buf.len() >= 10 {
        Varint::Bad
    } else {
        Varint::Short
    }
}

/// A field's payload.
#[derive(Debug, Clone, Copy)]
enum Wire {
    Varint(u64),
    /// A fixed 32- or 64-bit word (skipped).
    Fixed,
    /// Length-delimited: `len` bytes at `start` of the file.
    Len(u64, u64),
}

/// The protobuf walk: where it reads, how far it went, what it found.
struct Walk<'a> {
    r: Window<'a>,
    fields: u64,
    spans: Vec<Span>,
    /// Tensors kept in other files: (`location`, span in that file; `len`
    /// [`TO_END`] when the entry gives no `length`).
    external: Vec<(String, Span)>,
    /// Bytes of tensor names kept so far (at most [`MAX_META`]).
    names: u64,
}

/// An external tensor's length when its entry gives none: to the end of
/// its file.
pub(super) const TO_END: u64 = u64::MAX;

impl Walk<'_> {
    /// The field at `pos` of a message ending at `end` (`None` at its end),
    /// `pos` moved past it.
    fn field(&mut self, pos: &mut u64, end: u64) -> Result<Option<(u64, Wire)>, String> {
        if *pos >= end {
            return Ok(None);
        }
        self.fields += 1;
        if self.fields > MAX_FIELDS {
            return Err(format!("more than {MAX_FIELDS} protobuf fields"));
        }
        let at = *pos;
        let tag = self.varint(pos, end)?;
        let num = tag >> 3;
        if num == 0 || num > (1 << 29) - 1 {
            return Err(format!("field number {num} at {at}"));
        }
        let wire = match tag & 7 {
            0 => Wire::Varint(self.varint(pos, end)?),
            1 | 5 => {
                let n = if tag & 7 == 1 { 8 } else { 4 };
                *pos = pos
                    .checked_add(n)
                    .filter(|e| *e <= end)
                    .ok_or_else(|| format!("field {num} at {at} runs past its message"))?;
                Wire::Fixed
            }
            2 => {
                let n = self.varint(pos, end)?;
                let start = *pos;
                *pos = start.checked_add(n).filter(|e| *e <= end).ok_or_else(|| {
                    format!("field {num} at {at}: {n} bytes run past its message (ends at {end})")
                })?;
                Wire::Len(start, n)
            }
            3 | 4 => return Err(format!("field {num} at {at} is a protobuf group")),
            w => return Err(format!("field {num} at {at}: wire type {w}")),
        };
        Ok(Some((num, wire)))
    }

    /// The varint at `pos`, inside a message ending at `end`.
    fn varint(&mut self, pos: &mut u64, end: u64) -> Result<u64, String> {
        let n = (end - *pos).min(10) as usize;
        match varint(self.r.get(*pos, n)?) {
            Varint::Value(v, k) => {
                *pos += k as u64;
                Ok(v)
            }
            Varint::Short => Err(format!("varint at {} runs past its message", *pos)),
            Varint::Bad => Err(format!("varint at {} is longer than 10 bytes", *pos)),
        }
    }

    /// At most [`MAX_NAME`] bytes of a string field.
    fn string(&mut self, start: u64, len: u64) -> Result<String, String> {
        let b = self.r.get(start, len.min(MAX_NAME) as usize)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }

    fn model(&mut self, start: u64, end: u64) -> Result<(), String> {
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            let Wire::Len(s, n) = wire else { continue };
            match num {
                7 => self.graph(s, s + n, 1)?,
                20 => self.message_graphs(s, s + n, &[1, 2], 1)?,
                25 => self.function(s, s + n, 1)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// The graphs in fields `nums` of a message (a `TrainingInfoProto`).
    fn message_graphs(
        &mut self,
        start: u64,
        end: u64,
        nums: &[u64],
        depth: u32,
    ) -> Result<(), String> {
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            if let (true, Wire::Len(s, n)) = (nums.contains(&num), wire) {
                self.graph(s, s + n, depth)?;
            }
        }
        Ok(())
    }

    fn function(&mut self, start: u64, end: u64, depth: u32) -> Result<(), String> {
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            match (num, wire) {
                (7, Wire::Len(s, n)) => self.node(s, s + n, depth)?,
                (11, Wire::Len(s, n)) => self.attribute(s, s + n, depth)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn graph(&mut self, start: u64, end: u64, depth: u32) -> Result<(), String> {
        if depth > MAX_GRAPH_DEPTH {
            return Err(format!(
                "graph at {start} nested deeper than {MAX_GRAPH_DEPTH}"
            ));
        }
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            let Wire::Len(s, n) = wire else { continue };
            match num {
                1 => self.node(s, s + n, depth)?,
                5 => self.tensor(s, s + n)?,
                15 => self.sparse(s, s + n)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// A node: the tensors of its attributes, those without a name named
    /// after its first output (or its name).
    fn node(&mut self, start: u64, end: u64, depth: u32) -> Result<(), String> {
        let first = self.spans.len();
        let mut output = None;
        let mut name = None;
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            let Wire::Len(s, n) = wire else { continue };
            match num {
                2 if output.is_none() => output = Some(self.string(s, n)?),
                3 => name = Some(self.string(s, n)?),
                5 => self.attribute(s, s + n, depth)?,
                _ => {}
            }
        }
        let base = output
            .filter(|o| !o.is_empty())
            .or(name.filter(|n| !n.is_empty()));
        if let Some(base) = base {
            let unnamed = self.spans[first..]
                .iter()
                .filter(|s| s.name.is_empty())
                .count();
            let mut k = 0;
            for s in &mut self.spans[first..] {
                if s.name.is_empty() {
                    s.name = if unnamed == 1 {
                        base.clone()
                    } else {
                        format!("{base}.{k}")
                    };
                    k += 1;
                }
            }
        }
        Ok(())
    }

    fn attribute(&mut self, start: u64, end: u64, depth: u32) -> Result<(), String> {
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            let Wire::Len(s, n) = wire else { continue };
            match num {
                5 | 10 => self.tensor(s, s + n)?,
                6 | 11 => self.graph(s, s + n, depth + 1)?,
                22 | 23 => self.sparse(s, s + n)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// A `SparseTensorProto`: its `values` and `indices` tensors.
    fn sparse(&mut self, start: u64, end: u64) -> Result<(), String> {
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            if let (1 | 2, Wire::Len(s, n)) = (num, wire) {
                self.tensor(s, s + n)?;
            }
        }
        Ok(())
    }

    fn tensor(&mut self, start: u64, end: u64) -> Result<(), String> {
        let mut dims = Vec::new();
        let mut flat = false;
        let mut data_type = 0u64;
        let mut name = String::new();
        let mut raw = None;
        let mut floats = None;
        let mut doubles = None;
        let mut external = false;
        let (mut location, mut ext_offset, mut ext_len) = (None, 0u64, TO_END);
        let mut bad_entry = false;
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            match (num, wire) {
                (1, Wire::Varint(d)) => {
                    if dims.len() < MAX_RANK {
                        dims.push(d);
                    } else {
                        flat = true;
                    }
                }
                (1, Wire::Len(s, n)) => {
                    // Packed: at most MAX_RANK varints of 10 bytes.
                    if n > 10 * MAX_RANK as u64 {
                        flat = true;
                        continue;
                    }
                    let mut b = self.r.get(s, n as usize)?;
                    while !b.is_empty() {
                        let Varint::Value(d, k) = varint(b) else {
                            return Err(format!("tensor at {start}: bad packed dims at {s}"));
                        };
                        b = &b[k..];
                        if dims.len() < MAX_RANK {
                            dims.push(d);
                        } else {
                            flat = true;
                        }
                    }
                }
                (2, Wire::Varint(t)) => data_type = t,
                (4, Wire::Len(s, n)) => floats = Some((s, n)),
                (8, Wire::Len(s, n)) => name = self.string(s, n)?,
                (9, Wire::Len(s, n)) => raw = Some((s, n)),
                (10, Wire::Len(s, n)) => doubles = Some((s, n)),
                // An entry that does not parse leaves out this tensor
                // only (its bytes stay in its file's plain bytes).
                (13, Wire::Len(s, n)) => match self.entry(s, s + n)? {
                    (Some(k), Some(v)) if k == "location" => location = Some(v),
                    (Some(k), Some(v)) if k == "offset" => match v.parse() {
                        Ok(o) => ext_offset = o,
                        Err(_) => bad_entry = true,
                    },
                    (Some(k), Some(v)) if k == "length" => match v.parse() {
                        Ok(l) if l != TO_END => ext_len = l,
                        _ => bad_entry = true,
                    },
                    _ => {}
                },
                (14, Wire::Varint(l)) => external = l == 1,
                _ => {}
            }
        }
        if external {
            if let (Some(location), false) = (location, bad_entry) {
                self.push_external(location, name, data_type, &dims, flat, ext_offset, ext_len)?;
            }
            return Ok(());
        }
        let dims = (!flat).then_some(&dims[..]);
        if let Some((offset, len)) = raw {
            let (dtype, pair) = onnx_dtype(data_type);
            self.push(&name, dtype, dims, pair, offset, len)?;
        }
        let pair = matches!(data_type, 14 | 15);
        if let Some((offset, len)) = floats {
            self.push(
                &name,
                Dtype::F32,
                dims.filter(|_| matches!(data_type, 1 | 14)),
                pair,
                offset,
                len,
            )?;
        }
        if let Some((offset, len)) = doubles {
            self.push(
                &name,
                Dtype::F64,
                dims.filter(|_| matches!(data_type, 11 | 15)),
                pair,
                offset,
                len,
            )?;
        }
        Ok(())
    }

    /// A `StringStringEntryProto`: its `key` (1) and `value` (2).
    fn entry(&mut self, start: u64, end: u64) -> Result<(Option<String>, Option<String>), String> {
        let (mut k, mut v) = (None, None);
        let mut pos = start;
        while let Some((num, wire)) = self.field(&mut pos, end)? {
            match (num, wire) {
                (1, Wire::Len(s, n)) => k = Some(self.string(s, n)?),
                (2, Wire::Len(s, n)) => v = Some(self.string(s, n)?),
                _ => {}
            }
        }
        Ok((k, v))
    }

    /// List a tensor kept at `offset` of the file `location` (`len`
    /// bytes, [`TO_END`] when not given).
    #[allow(clippy::too_many_arguments)]
    fn push_external(
        &mut self,
        location: String,
        name: String,
        data_type: u64,
        dims: &[u64],
        flat: bool,
        offset: u64,
        len: u64,
    ) -> Result<(), String> {
        if self.spans.len() + self.external.len() >= MAX_TENSORS {
            return Err(format!("more than {MAX_TENSORS} tensors"));
        }
        self.names += (name.len() + location.len()) as u64;
        if self.names > MAX_META {
            return Err(format!("more than {MAX_META} bytes of tensor names"));
        }
        let (dtype, pair) = onnx_dtype(data_type);
        let dims = (!flat).then_some(dims);
        // The shape when the length is known; one to the file's end is
        // shaped when the file is found (see `super::sidecar`).
        let shape = match (dtype, len) {
            (Dtype::Bytes, _) => vec![],
            // Checked against the length once it is known.
            (_, TO_END) => {
                let mut d = dims.map(|d| d.to_vec()).unwrap_or_default();
                if pair && dims.is_some() {
                    d.push(2);
                }
                d
            }
            _ => shape(dims, pair, dtype.word_bytes() as u64, len),
        };
        self.external.push((
            location,
            Span {
                name,
                dtype,
                shape,
                offset,
                len,
            },
        ));
        Ok(())
    }

    /// List a tensor's payload, shaped by `dims` (and a pair of words per
    /// element when `pair`) when they account for its bytes, flat otherwise.
    fn push(
        &mut self,
        name: &str,
        dtype: Dtype,
        dims: Option<&[u64]>,
        pair: bool,
        offset: u64,
        len: u64,
    ) -> Result<(), String> {
        if len == 0 {
            return Ok(());
        }
        if self.spans.len() >= MAX_TENSORS {
            return Err(format!("more than {MAX_TENSORS} tensors"));
        }
        self.names += name.len() as u64;
        if self.names > MAX_META {
            return Err(format!("more than {MAX_META} bytes of tensor names"));
        }
        let shape = match dtype {
            Dtype::Bytes => vec![],
            _ => shape(dims, pair, dtype.word_bytes() as u64, len),
        };
        self.spans.push(Span {
            name: name.into(),
            dtype,
            shape,
            offset,
            len,
        });
        Ok(())
    }
}

/// `dims` (plus a last dimension of 2 when `pair`) when they multiply to
/// `len` bytes of `word`-byte words, else `[len / word]`.
pub(super) fn shape(dims: Option<&[u64]>, pair: bool, word: u64, len: u64) -> Vec<u64> {
    if let Some(dims) = dims {
        let mut d = dims.to_vec();
        if pair {
            d.push(2);
        }
        let bytes = d.iter().try_fold(word, |acc, &x| acc.checked_mul(x));
        if bytes == Some(len) && d.len() <= MAX_RANK {
            return d;
        }
    }
    vec![len / word.max(1)]
}

/// The element type of an ONNX `TensorProto.DataType`, and whether each
/// element is a pair of words (complex numbers).
fn onnx_dtype(t: u64) -> (Dtype, bool) {
    let d = match t {
        1 | 14 => Dtype::F32,
        2 => Dtype::U8,
        3 => Dtype::I8,
        4 => Dtype::U16,
        5 => Dtype::I16,
        6 => Dtype::I32,
        7 => Dtype::I64,
        9 => Dtype::Bool,
        10 => Dtype::F16,
        11 | 15 => Dtype::F64,
        12 => Dtype::U32,
        13 => Dtype::U64,
        16 => Dtype::BF16,
        // The FNUZ variants have the same fields, another bias.
        17 | 18 => Dtype::F8E4M3,
        19 | 20 => Dtype::F8E5M2,
        24 => Dtype::F8E8M0,
        _ => Dtype::Bytes,
    };
    (d, matches!(t, 14 | 15))
}

/// Bytes of a file read in bounded pieces: a window refilled at the
/// position asked for, so a walk that skips payloads reads little more
/// than the structure around them.
pub(super) struct Window<'a> {
    src: &'a dyn ReadAt,
    len: u64,
    buf: Vec<u8>,
    start: u64,
}

/// Bytes a [`Window`] reads at a time (more when one piece asks for more).
const WINDOW: usize = 4096;
/// Largest piece a [`Window`] hands out.
const MAX_PIECE: usize = 1 << 17;

impl<'a> Window<'a> {
    pub(super) fn new(src: &'a dyn ReadAt, len: u64) -> Self {
        Window {
            src,
            len,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// The `n` bytes at `pos`.
    pub(super) fn get(&mut self, pos: u64, n: usize) -> Result<&[u8], String> {
        let end = pos
            .checked_add(n as u64)
            .filter(|e| *e <= self.len)
            .ok_or_else(|| format!("{n} bytes at {pos} run past the {}-byte file", self.len))?;
        if n > MAX_PIECE {
            return Err(format!(
                "{n} bytes at {pos}: more than {MAX_PIECE} in one piece"
            ));
        }
        let have = pos >= self.start && end <= self.start + self.buf.len() as u64;
        if !have {
            let want = (self.len - pos).min(WINDOW.max(n) as u64) as usize;
            self.buf.resize(want, 0);
            self.start = pos;
            if let Err(e) = self.src.read_exact_at(pos, &mut self.buf) {
                self.buf.clear();
                return Err(format!("reading {want} bytes at {pos}: {e}"));
            }
        }
        let i = (pos - self.start) as usize;
        Ok(&self.buf[i..i + n])
    }

    /// The little-endian u16 at `pos`.
    pub(super) fn u16(&mut self, pos: u64) -> Result<u16, String> {
        let b = self.get(pos, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    /// The little-endian u32 at `pos`.
    pub(super) fn u32(&mut self, pos: u64) -> Result<u32, String> {
        let b = self.get(pos, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

// The tests compress and decompress: they need the `search` feature.
#[cfg(all(test, feature = "search"))]
mod tests {
    use super::super::{read, read_as, safetensors, tile};
    use super::*;
    use crate::container::SegmentKind;

    fn testdata(path: &str) -> Vec<u8> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata")
            .join(path);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn sample() -> Vec<u8> {
        testdata("onnx/silero_vad_half.onnx")
    }

    fn spans(data: &[u8]) -> Result<Vec<Span>, String> {
        Onnx.tensors(&data, data.len() as u64)
    }

    // Protobuf writing, for the hand-built cases.
    fn varint_bytes(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }
    fn vi(num: u64, v: u64) -> Vec<u8> {
        let mut out = varint_bytes(num << 3);
        out.extend(varint_bytes(v));
        out
    }
    fn ld(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = varint_bytes((num << 3) | 2);
        out.extend(varint_bytes(payload.len() as u64));
        out.extend_from_slice(payload);
        out
    }
    fn cat(parts: &[Vec<u8>]) -> Vec<u8> {
        parts.concat()
    }
    /// A model: ir_version 8, a producer, then `graph` as field 7.
    fn model(graph: &[u8]) -> Vec<u8> {
        cat(&[vi(1, 8), ld(2, b"brevis-test"), ld(7, graph)])
    }
    fn tensor(name: &str, data_type: u64, dims: &[u64], raw: &[u8]) -> Vec<u8> {
        let mut t: Vec<Vec<u8>> = dims.iter().map(|&d| vi(1, d)).collect();
        t.push(vi(2, data_type));
        if !name.is_empty() {
            t.push(ld(8, name.as_bytes()));
        }
        t.push(ld(9, raw));
        cat(&t)
    }

    /// A tensor kept in another file: its `external_data` entries.
    fn external(name: &str, data_type: u64, dims: &[u64], entries: &[(&str, &str)]) -> Vec<u8> {
        let mut t: Vec<Vec<u8>> = dims.iter().map(|&d| vi(1, d)).collect();
        t.push(vi(2, data_type));
        t.push(ld(8, name.as_bytes()));
        for (k, v) in entries {
            t.push(ld(13, &cat(&[ld(1, k.as_bytes()), ld(2, v.as_bytes())])));
        }
        t.push(vi(14, 1));
        cat(&t)
    }

    #[test]
    fn external_tensors_are_listed_for_their_file() {
        let m = model(&cat(&[
            ld(
                5,
                &external(
                    "a",
                    1,
                    &[2, 3],
                    &[("location", "w/d.bin"), ("offset", "64"), ("length", "24")],
                ),
            ),
            // No length: to the end of its file; complex64 keeps its pairs.
            ld(5, &external("c", 14, &[3], &[("location", "d.bin")])),
            // A bad offset leaves out that tensor only.
            ld(
                5,
                &external("bad", 1, &[1], &[("location", "d.bin"), ("offset", "x")]),
            ),
            ld(5, &tensor("inline", 1, &[2], &[0; 8])),
        ]));
        let ext = super::external(&&m[..], m.len() as u64).unwrap();
        let got: Vec<_> = ext
            .iter()
            .map(|(l, s)| {
                (
                    l.as_str(),
                    s.name.as_str(),
                    s.dtype,
                    s.shape.clone(),
                    s.offset,
                    s.len,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("w/d.bin", "a", Dtype::F32, vec![2, 3], 64, 24),
                ("d.bin", "c", Dtype::F32, vec![3, 2], 0, TO_END),
            ]
        );
        // The model's own tensors are still read.
        assert_eq!(spans(&m).unwrap().len(), 1);
    }

    #[test]
    fn sample_reads_as_its_tensors() {
        let data = sample();
        assert!(Onnx.detect(&data[..64], data.len() as u64));
        let spans = spans(&data).unwrap();
        // 15 initializers and 157 Constant nodes, 112 inside If subgraphs.
        assert_eq!(spans.len(), 172);
        let total: u64 = spans.iter().map(|s| s.len).sum();
        assert_eq!(total, 1_238_532 + 1260);
        let names: std::collections::HashSet<_> = spans.iter().map(|s| &s.name).collect();
        assert_eq!(names.len(), 172, "names are unique");
        let by = |n: &str| {
            spans
                .iter()
                .find(|s| s.name == n)
                .unwrap_or_else(|| panic!("{n}"))
        };
        let s = by("stft.forward_basis_buffer");
        assert_eq!(
            (s.dtype, &s.shape[..], s.len),
            (Dtype::F32, &[258, 1, 256][..], 264_192)
        );
        // The same bytes as the safetensors twin's stft_conv.weight.
        let st = testdata("silero-vad/silero_vad_16k.safetensors");
        let twin = safetensors::segments(&&st[..], st.len() as u64).unwrap();
        let t = twin.iter().find(|t| t.name == "stft_conv.weight").unwrap();
        let o = s.offset as usize;
        let p = t.offset as usize;
        assert_eq!(data[o..o + 264_192], st[p..p + 264_192]);
        let s = by("decoder.rnn.weight_hh");
        assert_eq!((s.dtype, &s.shape[..]), (Dtype::F32, &[512, 128][..]));
        let s = by("decoder.decoder.2.bias");
        assert_eq!((s.dtype, &s.shape[..], s.len), (Dtype::F32, &[1][..], 4));
        // A Constant node three If branches deep, named after its output.
        let s = by("/decoder/rnn/Constant_50_output_0");
        assert_eq!((s.dtype, &s.shape[..], s.len), (Dtype::I64, &[1][..], 8));
        assert_eq!(spans.iter().filter(|s| s.dtype == Dtype::I64).count(), 154);
        // All of them are kept by tile (none overlaps, none is out of bounds).
        let found = read(&&data[..], None).unwrap();
        assert_eq!(found.format, Some("onnx"));
        let kept = found
            .segments
            .iter()
            .filter(|s| s.kind == SegmentKind::Tensor);
        assert_eq!(kept.count(), 172);
    }

    #[test]
    fn sample_round_trips() {
        crate::formats::assert_round_trip(&sample());
    }

    #[test]
    fn detect_claims_onnx_only() {
        let data = sample();
        let len = data.len() as u64;
        assert!(Onnx.detect(&data[..64], len));
        let no = |head: &[u8]| !Onnx.detect(head, 1 << 20);
        let st = testdata("silero-vad/silero_vad_16k.safetensors");
        assert!(no(&st[..64]));
        let ct2 = testdata("ct2/model.bin");
        assert!(no(&ct2[..64]));
        assert!(no(b"GGUF\x03\0\0\0\0\0\0\0\0\0\0\0"));
        assert!(no(b"PK\x03\x04\x14\0\0\0\x08\0"));
        assert!(no(b"\x80\x02}q\0(X\x06\0\0\0"));
        assert!(no(b"\x93NUMPY\x01\0v\0{'descr': '<f4'"));
        assert!(no(b"# A README\n\nSome text, then more text.\n"));
        assert!(no(b"\x08\x08hello world, this is text"));
        assert!(no(b"\x08\x00\x12\x04spox"), "ir_version 0");
        assert!(no(b"\x08\x15\x12\x04spox"), "ir_version 21");
        assert!(no(b"\x08\x08"), "nothing after ir_version");
        assert!(
            no(b"\x08\x08\x12\xff\xff\xff\x7fspox"),
            "producer past the end"
        );
        assert!(no(b"\x08\x08\x10\x01"), "field 2 as a varint");
        assert!(no(b""));
        // A whole tiny model is claimed; the same bytes cut short are not
        // when the head is the whole file.
        let m = model(&ld(5, &tensor("w", 1, &[2], &[0; 8])));
        assert!(Onnx.detect(&m, m.len() as u64));
        assert!(!Onnx.detect(&m[..2], 2));
        // Random bytes: almost never (a protobuf probe has no magic).
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut claimed = 0;
        for _ in 0..20_000 {
            let mut head = [0u8; 64];
            for b in &mut head {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            claimed += usize::from(Onnx.detect(&head, 1 << 20));
        }
        assert_eq!(claimed, 0);
    }

    #[test]
    fn every_field_kind_that_holds_tensors() {
        let f32s: Vec<u8> = (0..6u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let f64s: Vec<u8> = (0..2u32).flat_map(|i| f64::from(i).to_le_bytes()).collect();
        // A Constant node whose tensor has no name, and packed dims.
        let constant = cat(&[
            ld(1, b"x"),
            ld(2, b"const_out"),
            ld(3, b"const_node"),
            ld(4, b"Constant"),
            ld(
                5,
                &cat(&[
                    ld(1, b"value"),
                    ld(5, &cat(&[ld(1, &[2, 3]), vi(2, 10), ld(9, &[1; 12])])),
                ]),
            ),
        ]);
        // An If node: a subgraph with an initializer and a Constant node
        // holding two tensors (`tensors`), another in `graphs`.
        let inner = cat(&[ld(5, &tensor("deep", 16, &[4], &[2; 8]))]);
        let inner2 = cat(&[ld(
            1,
            &cat(&[
                ld(2, b"pair"),
                ld(
                    5,
                    &cat(&[
                        ld(10, &tensor("", 7, &[1], &[3; 8])),
                        ld(10, &tensor("", 6, &[], &[4; 4])),
                    ]),
                ),
            ]),
        )]);
        let if_node = cat(&[
            ld(5, &cat(&[ld(1, b"then_branch"), ld(6, &inner)])),
            ld(5, &cat(&[ld(1, b"else_branch"), ld(11, &inner2)])),
        ]);
        let graph = cat(&[
            ld(1, &constant),
            ld(1, &if_node),
            ld(5, &tensor("w", 1, &[2, 2], &f32s[..16])),
            // float_data, shaped; double_data of a COMPLEX128 pair.
            ld(
                5,
                &cat(&[vi(1, 6), vi(2, 1), ld(4, &f32s), ld(8, b"floats")]),
            ),
            ld(
                5,
                &cat(&[vi(1, 1), vi(2, 15), ld(10, &f64s), ld(8, b"complex")]),
            ),
            // dims that do not account for the bytes: flat.
            ld(5, &tensor("liar", 1, &[1000, 1000], &f32s)),
            // 70 dims: flat.
            ld(5, &tensor("wide", 1, &[1; 70], &f32s[..4])),
            // external data: skipped.
            ld(
                5,
                &cat(&[
                    vi(1, 4),
                    vi(2, 1),
                    ld(8, b"ext"),
                    ld(13, &cat(&[ld(1, b"location"), ld(2, b"x.bin")])),
                    vi(14, 1),
                ]),
            ),
            // a string tensor stays opaque, named.
            ld(5, &tensor("str", 8, &[1], b"abc")),
            // a sparse initializer: values and indices.
            ld(
                15,
                &cat(&[
                    ld(1, &tensor("sp", 1, &[1], &[5; 4])),
                    ld(2, &tensor("sp_idx", 7, &[1], &[0; 8])),
                    vi(3, 10),
                ]),
            ),
        ]);
        let training = cat(&[
            ld(1, &cat(&[ld(5, &tensor("train_init", 3, &[2], &[6; 2]))])),
            ld(2, &[]),
        ]);
        let function = cat(&[
            ld(1, b"f"),
            ld(
                7,
                &cat(&[
                    ld(2, b"fn_out"),
                    ld(5, &cat(&[ld(5, &tensor("", 2, &[3], &[7; 3]))])),
                ]),
            ),
            // A default attribute value.
            ld(
                11,
                &cat(&[
                    ld(1, b"alpha"),
                    ld(5, &tensor("fn_default", 12, &[1], &[8; 4])),
                ]),
            ),
        ]);
        let data = cat(&[model(&graph), ld(20, &training), ld(25, &function)]);
        assert!(Onnx.detect(&data[..64.min(data.len())], data.len() as u64));
        let spans = spans(&data).unwrap();
        let got: Vec<(&str, Dtype, &[u64], u64)> = spans
            .iter()
            .map(|s| (s.name.as_str(), s.dtype, &s.shape[..], s.len))
            .collect();
        assert_eq!(
            got,
            [
                ("const_out", Dtype::F16, &[2, 3][..], 12),
                ("deep", Dtype::BF16, &[4][..], 8),
                ("pair.0", Dtype::I64, &[1][..], 8),
                ("pair.1", Dtype::I32, &[][..], 4),
                ("w", Dtype::F32, &[2, 2][..], 16),
                ("floats", Dtype::F32, &[6][..], 24),
                ("complex", Dtype::F64, &[1, 2][..], 16),
                ("liar", Dtype::F32, &[6][..], 24),
                ("wide", Dtype::F32, &[1][..], 4),
                ("str", Dtype::Bytes, &[][..], 3),
                ("sp", Dtype::F32, &[1][..], 4),
                ("sp_idx", Dtype::I64, &[1][..], 8),
                ("train_init", Dtype::I8, &[2][..], 2),
                ("fn_out", Dtype::U8, &[3][..], 3),
                ("fn_default", Dtype::U32, &[1][..], 4),
            ]
        );
        for s in &spans {
            let b = &data[s.offset as usize..(s.offset + s.len) as usize];
            match s.name.as_str() {
                "w" => assert_eq!(b, &f32s[..16]),
                "floats" => assert_eq!(b, &f32s[..]),
                "complex" => assert_eq!(b, &f64s[..]),
                "const_out" => assert_eq!(b, &[1; 12]),
                "fn_out" => assert_eq!(b, &[7; 3]),
                _ => {}
            }
        }
        let segs = read_as("onnx", &data).unwrap().unwrap();
        assert_eq!(
            segs.iter()
                .filter(|s| s.kind == SegmentKind::Tensor)
                .count(),
            14
        );
    }

    #[test]
    fn hostile_protobufs_are_refused() {
        let err = |data: &[u8], what: &str| {
            let e = spans(data).expect_err(what);
            assert!(read_as("onnx", data).unwrap().is_err());
            e
        };
        // A length past the end of its message, and of the file.
        let mut m = model(&ld(5, &tensor("w", 1, &[1], &[0; 4])));
        let l = m.len();
        m.truncate(l - 1);
        err(&m, "raw_data past the end");
        let m = cat(&[
            vi(1, 8),
            varint_bytes((7 << 3) | 2),
            varint_bytes(u64::MAX),
            vec![0; 8],
        ]);
        assert!(err(&m, "length 2^64-1").contains("run past"));
        // An inner length past its (shorter) outer message.
        let inner = cat(&[varint_bytes((5 << 3) | 2), varint_bytes(50), vec![0; 60]]);
        let m = cat(&[
            vi(1, 8),
            varint_bytes((7 << 3) | 2),
            varint_bytes(10),
            inner,
        ]);
        err(&m, "initializer past its graph");
        // Varints of 11 bytes, and of 10 bytes past 64 bits.
        let mut m = vi(1, 8);
        m.extend([0x80; 10]);
        m.push(0);
        assert!(err(&m, "11-byte tag").contains("longer than 10"));
        let mut m = cat(&[vi(1, 8), vec![0x10]]);
        m.extend([0xff; 9]);
        m.push(0x02);
        err(&m, "varint past 64 bits");
        // Groups, bad wire types, field 0.
        err(&cat(&[vi(1, 8), vec![0x3b]]), "group");
        err(&cat(&[vi(1, 8), vec![0x3e]]), "wire type 6");
        err(&cat(&[vi(1, 8), vec![0x02, 0x00]]), "field 0");
        // Graphs nested 10000 deep through If nodes' attributes.
        let mut g = ld(5, &tensor("w", 1, &[1], &[0; 4]));
        for _ in 0..10_000 {
            g = ld(1, &ld(5, &ld(6, &g)));
        }
        assert!(err(&model(&g), "deep").contains("deeper"));
        // 32 deep is read.
        let mut g = ld(5, &tensor("w", 1, &[1], &[0; 4]));
        for _ in 1..MAX_GRAPH_DEPTH {
            g = ld(1, &ld(5, &ld(6, &g)));
        }
        assert_eq!(spans(&model(&g)).unwrap().len(), 1);
        // Packed dims claiming 1e9 bytes, and 10^5 unpacked dims.
        let t = cat(&[
            varint_bytes((1 << 3) | 2),
            varint_bytes(1_000_000_000),
            vi(2, 1),
            ld(9, &[0; 4]),
        ]);
        err(&model(&ld(5, &t)), "packed dims of 1e9 bytes");
        let mut t: Vec<u8> = (0..100_000).flat_map(|_| vi(1, 1_000_000_000)).collect();
        t.extend(cat(&[vi(2, 1), ld(9, &[0; 4])]));
        let s = spans(&model(&ld(5, &t))).unwrap();
        assert_eq!(s[0].shape, [1]);
        // Trailing garbage after the model.
        let mut m = model(&ld(5, &tensor("w", 1, &[1], &[0; 4])));
        m.push(0xff);
        err(&m, "trailing byte");
    }

    #[test]
    fn spans_never_overlap() {
        // raw_data is opaque to the walker: bytes inside it that look like
        // a tensor are never read as one, so spans cannot overlap.
        let hidden = tensor("hidden", 1, &[1], &[9; 4]);
        let data = model(&cat(&[ld(
            5,
            &tensor("outer", 2, &[hidden.len() as u64], &hidden),
        )]));
        let s = spans(&data).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "outer");
        // tile drops a span that overlaps another whatever a reader says.
        let mut two = s.clone();
        two.push(Span {
            name: "overlap".into(),
            offset: s[0].offset + 1,
            ..s[0].clone()
        });
        let segs = tile(two, data.len() as u64);
        assert_eq!(
            segs.iter()
                .filter(|s| s.kind == SegmentKind::Tensor)
                .count(),
            1
        );
    }

    #[test]
    fn truncated_and_flipped_samples_never_panic() {
        let data = sample();
        let mut cuts: Vec<usize> = (0..400).collect();
        cuts.extend((400..data.len()).step_by(1297));
        let full = spans(&data).unwrap();
        let mut refused = 0;
        for &n in &cuts {
            // A prefix cut inside a field is refused; one cut between the
            // model's fields is a smaller model holding some of the tensors.
            match read_as("onnx", &data[..n]).unwrap() {
                Err(_) => refused += 1,
                Ok(_) => {
                    for s in spans(&data[..n]).unwrap() {
                        assert!(full.contains(&s), "prefix {n}: {s:?}");
                    }
                }
            }
        }
        assert!(
            refused + 5 > cuts.len(),
            "{refused} of {} refused",
            cuts.len()
        );
        // Bit flips in the structure before the first payload.
        let first = spans(&data)
            .unwrap()
            .iter()
            .map(|s| s.offset)
            .min()
            .unwrap() as usize;
        for i in 0..first.min(2000) {
            let mut d = data.clone();
            d[i] ^= 0x41;
            let _ = read_as("onnx", &d).unwrap();
        }
    }
}
