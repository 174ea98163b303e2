//! Canonical serialization of programs.
//!
//! Each node is a tag byte and its fields (LEB128 varints, single bytes),
//! children in order. `serialized_size(p) == write(p).len()` always, and
//! reading validates every type rule and limit before allocating.

use super::{
    MAX_BYTE_REGION_WORDS, MAX_DEPTH, MAX_NODE_WORDS, MAX_NODES, MAX_PROGRAM_WORK, MapOp, Node,
    ScanOp, Split, mask,
};
use crate::dtype::Dtype;
use crate::entropy::{ByteReader, Codec, put_varint, varint_len};
use crate::error::DecodeError;

const T_LIT: u8 = 1;
const T_CONST: u8 = 2;
const T_CONCAT: u8 = 3;
const T_REPEAT: u8 = 4;
const T_REF: u8 = 5;
const T_MAP: u8 = 6;
const T_SCAN: u8 = 7;
const T_MERGE: u8 = 8;
const T_INTERLEAVE: u8 = 9;

/// Longest period of an `Interleave`.
pub const MAX_PERIOD: u64 = 1 << 16;

/// Serialize a program.
#[cfg(any(test, feature = "fuzzing"))]
pub fn write(node: &Node) -> Vec<u8> {
    let mut out = Vec::with_capacity(serialized_size(node));
    write_node(node, &mut out);
    out
}

/// Write a program's serialization to `w`, each literal's payload straight
/// from the node (no copy of the whole program first):
/// [`serialized_size`] bytes, those `write` gives.
pub fn write_to<W: std::io::Write + ?Sized>(node: &Node, w: &mut W) -> std::io::Result<()> {
    let mut s = Streamed {
        w,
        fields: Vec::with_capacity(64),
        failed: None,
    };
    write_node(node, &mut s);
    s.flush();
    s.failed.map_or(Ok(()), Err)
}

/// Where [`write_node`] puts a program: the tags and fields, then each
/// literal's payload after the fields before it.
trait WireOut {
    /// The buffer tags and fields are appended to.
    fn fields(&mut self) -> &mut Vec<u8>;
    /// A literal's payload.
    fn payload(&mut self, p: &[u8]);
}

impl WireOut for Vec<u8> {
    fn fields(&mut self) -> &mut Vec<u8> {
        self
    }

    fn payload(&mut self, p: &[u8]) {
        self.extend_from_slice(p);
    }
}

/// A writer fed the fields gathered between payloads, and the payloads;
/// after the first error, nothing more.
struct Streamed<'w, W: ?Sized> {
    w: &'w mut W,
    fields: Vec<u8>,
    failed: Option<std::io::Error>,
}

impl<W: std::io::Write + ?Sized> Streamed<'_, W> {
    /// Write the fields gathered so far.
    fn flush(&mut self) {
        put(self.w, &mut self.failed, &self.fields);
        self.fields.clear();
    }
}

/// `b` written to `w`, unless an earlier write failed; the first failure kept.
fn put<W: std::io::Write + ?Sized>(w: &mut W, failed: &mut Option<std::io::Error>, b: &[u8]) {
    if failed.is_none()
        && let Err(e) = w.write_all(b)
    {
        *failed = Some(e);
    }
}

impl<W: std::io::Write + ?Sized> WireOut for Streamed<'_, W> {
    fn fields(&mut self) -> &mut Vec<u8> {
        &mut self.fields
    }

    fn payload(&mut self, p: &[u8]) {
        self.flush();
        put(self.w, &mut self.failed, p);
    }
}

fn write_node(node: &Node, out: &mut impl WireOut) {
    match node {
        Node::Lit {
            width,
            n,
            codec,
            payload,
        } => {
            out.fields().push(T_LIT);
            out.fields().push(*width);
            put_varint(out.fields(), *n);
            out.fields().push(codec.wire_id());
            if let Some(sibling) = codec.sibling() {
                out.fields().push(sibling);
            }
            put_varint(out.fields(), payload.len() as u64);
            out.payload(payload);
        }
        Node::Const { width, n, word } => {
            out.fields().push(T_CONST);
            out.fields().push(*width);
            put_varint(out.fields(), *n);
            put_varint(out.fields(), *word);
        }
        Node::Concat { width, parts } => {
            out.fields().push(T_CONCAT);
            out.fields().push(*width);
            put_varint(out.fields(), parts.len() as u64);
            for p in parts {
                write_node(p, out);
            }
        }
        Node::Repeat { k, child } => {
            out.fields().push(T_REPEAT);
            put_varint(out.fields(), *k);
            write_node(child, out);
        }
        Node::Ref {
            width,
            n,
            segment,
            offset,
        } => {
            out.fields().push(T_REF);
            out.fields().push(*width);
            put_varint(out.fields(), *n);
            put_varint(out.fields(), *segment as u64);
            put_varint(out.fields(), *offset);
        }
        Node::Map { op, child } => {
            out.fields().push(T_MAP);
            write_map_op(op, out.fields());
            write_node(child, out);
        }
        Node::Scan { op, child } => {
            out.fields().push(T_SCAN);
            out.fields().push(match op {
                ScanOp::XorDelta => 0,
                ScanOp::Diff => 1,
            });
            write_node(child, out);
        }
        Node::Merge { split, children } => {
            out.fields().push(T_MERGE);
            write_split(split, out.fields());
            for c in children {
                write_node(c, out);
            }
        }
        Node::Interleave { classes, children } => {
            out.fields().push(T_INTERLEAVE);
            put_varint(out.fields(), classes.len() as u64);
            out.fields().extend_from_slice(classes);
            for c in children {
                write_node(c, out);
            }
        }
    }
}

fn write_map_op(op: &MapOp, out: &mut Vec<u8>) {
    match op {
        MapOp::Xor(c) => {
            out.push(0);
            put_varint(out, *c);
        }
        MapOp::Add(c) => {
            out.push(1);
            put_varint(out, *c);
        }
        MapOp::Zigzag => out.push(2),
        MapOp::Gray => out.push(3),
        MapOp::Rotl(r) => {
            out.push(4);
            out.push(*r);
        }
        MapOp::BitReverse => out.push(5),
    }
}

fn write_split(split: &Split, out: &mut Vec<u8>) {
    match split {
        Split::Float(d) => {
            out.push(0);
            out.push(d.wire_id());
        }
        Split::Fields(f) => {
            out.push(1);
            out.push(f.len() as u8);
            out.extend_from_slice(f);
        }
        Split::BytePlanes(w) => {
            out.push(2);
            out.push(*w);
        }
        Split::BitPlanes(w) => {
            out.push(3);
            out.push(*w);
        }
    }
}

/// Exact number of bytes [`write()`] produces, computed without writing.
pub fn serialized_size(node: &Node) -> usize {
    1 + match node {
        Node::Lit {
            n, codec, payload, ..
        } => {
            1 + varint_len(*n)
                + 1
                + codec.sibling().is_some() as usize
                + varint_len(payload.len() as u64)
                + payload.len()
        }
        Node::Const { n, word, .. } => 1 + varint_len(*n) + varint_len(*word),
        Node::Concat { parts, .. } => {
            1 + varint_len(parts.len() as u64) + parts.iter().map(serialized_size).sum::<usize>()
        }
        Node::Repeat { k, child } => varint_len(*k) + serialized_size(child),
        Node::Ref {
            n, segment, offset, ..
        } => 1 + varint_len(*n) + varint_len(*segment as u64) + varint_len(*offset),
        Node::Map { op, child } => {
            1 + match op {
                MapOp::Xor(c) | MapOp::Add(c) => varint_len(*c),
                MapOp::Rotl(_) => 1,
                _ => 0,
            } + serialized_size(child)
        }
        Node::Scan { child, .. } => 1 + serialized_size(child),
        Node::Merge { split, children } => {
            1 + match split {
                Split::Float(_) | Split::BytePlanes(_) | Split::BitPlanes(_) => 1,
                Split::Fields(f) => 1 + f.len(),
            } + children.iter().map(serialized_size).sum::<usize>()
        }
        Node::Interleave { classes, children } => {
            varint_len(classes.len() as u64)
                + classes.len()
                + children.iter().map(serialized_size).sum::<usize>()
        }
    }
}

struct Reader<'a, 'b> {
    r: &'b mut ByteReader<'a>,
    nodes: usize,
    work: u64,
}

/// Parse one program from `r`, validating types and limits.
pub fn read(r: &mut ByteReader<'_>) -> Result<Node, DecodeError> {
    let mut rd = Reader {
        r,
        nodes: 0,
        work: 0,
    };
    rd.node(0, None)
}

/// Parse a program that must fill `bytes` exactly.
pub fn read_exact(bytes: &[u8]) -> Result<Node, DecodeError> {
    let mut r = ByteReader::new(bytes);
    let node = read(&mut r)?;
    if r.remaining() != 0 {
        return Err(DecodeError::corrupt("trailing bytes after program"));
    }
    Ok(node)
}

fn width_ok(w: u8) -> Result<u8, DecodeError> {
    if (1..=64).contains(&w) {
        Ok(w)
    } else {
        Err(DecodeError::corrupt(format!("word width {w} out of range")))
    }
}

fn count_ok(n: u64) -> Result<u64, DecodeError> {
    count_within(n, MAX_NODE_WORDS)
}

fn count_within(n: u64, limit: u64) -> Result<u64, DecodeError> {
    if n > limit {
        Err(DecodeError::Limit {
            what: "words in one node",
            value: n,
            limit,
        })
    } else {
        Ok(n)
    }
}

impl Reader<'_, '_> {
    fn account(&mut self, n: u64) -> Result<(), DecodeError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(DecodeError::Limit {
                what: "nodes in one program",
                value: self.nodes as u64,
                limit: MAX_NODES as u64,
            });
        }
        self.work = self.work.saturating_add(n);
        if self.work > MAX_PROGRAM_WORK {
            return Err(DecodeError::Limit {
                what: "words produced by one program",
                value: self.work,
                limit: MAX_PROGRAM_WORK,
            });
        }
        Ok(())
    }

    /// `merge_index`: this node's index among a Merge's children, if it is one.
    fn node(&mut self, depth: usize, merge_index: Option<usize>) -> Result<Node, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::Limit {
                what: "program depth",
                value: depth as u64,
                limit: MAX_DEPTH as u64,
            });
        }
        let tag = self.r.u8()?;
        let node = match tag {
            // A whole region that is one byte literal may be larger; it
            // decodes to one byte a word (the work counts 8 bytes a word).
            T_LIT if depth == 0 => {
                let lit = self.lit(merge_index, MAX_BYTE_REGION_WORDS)?;
                if let Node::Lit {
                    width, n, codec, ..
                } = &lit
                    && *n > MAX_NODE_WORDS
                {
                    if *width != 8 || !matches!(codec, Codec::Raw | Codec::Zstd) {
                        return Err(DecodeError::Limit {
                            what: "words in one node",
                            value: *n,
                            limit: MAX_NODE_WORDS,
                        });
                    }
                    self.account(n.div_ceil(8))?;
                    return Ok(lit);
                }
                lit
            }
            T_LIT => self.lit(merge_index, MAX_NODE_WORDS)?,
            T_CONST => self.constant()?,
            T_CONCAT => self.concat(depth)?,
            T_REPEAT => self.repeat(depth)?,
            T_REF => self.reference()?,
            T_MAP => self.map(depth)?,
            T_SCAN => self.scan(depth)?,
            T_MERGE => self.merge(depth)?,
            T_INTERLEAVE => self.interleave(depth)?,
            t => return Err(DecodeError::corrupt(format!("unknown node tag {t}"))),
        };
        self.account(node.len())?;
        Ok(node)
    }

    fn lit(&mut self, merge_index: Option<usize>, limit: u64) -> Result<Node, DecodeError> {
        let width = width_ok(self.r.u8()?)?;
        let n = count_within(self.r.varint()?, limit)?;
        let codec = self.codec(merge_index)?;
        let len = self.r.varint()?;
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= self.r.remaining())
            .ok_or_else(|| DecodeError::corrupt("literal payload longer than program"))?;
        let payload = self.r.bytes(len)?.to_vec();
        Ok(Node::Lit {
            width,
            n,
            codec,
            payload,
        })
    }

    /// A literal's codec id, and for a conditional codec the sibling it reads.
    fn codec(&mut self, merge_index: Option<usize>) -> Result<Codec, DecodeError> {
        Ok(match self.r.u8()? {
            0 => Codec::Raw,
            1 => Codec::BitPack,
            2 => Codec::Huffman,
            3 => Codec::Rans0V1,
            4 => Codec::Rans1V1,
            id @ (5 | 9 | 12) => {
                let sibling = self.r.u8()?;
                if merge_index.is_none_or(|i| sibling as usize >= i) {
                    return Err(DecodeError::corrupt(
                        "conditional literal must follow its sibling in a Merge",
                    ));
                }
                match id {
                    5 => Codec::RansCondV1 { sibling },
                    9 => Codec::RansCond { sibling },
                    _ => Codec::RansCondx32 { sibling },
                }
            }
            6 => Codec::Zstd,
            7 => Codec::Rans0,
            8 => Codec::Rans1,
            10 => Codec::PackedRans0,
            11 => Codec::Rans0x32,
            13 => Codec::PackedRans0x32,
            14 => Codec::Rans1x32,
            c => return Err(DecodeError::corrupt(format!("unknown codec {c}"))),
        })
    }

    fn constant(&mut self) -> Result<Node, DecodeError> {
        let width = width_ok(self.r.u8()?)?;
        let n = count_ok(self.r.varint()?)?;
        let word = self.r.varint()?;
        if word > mask(width) {
            return Err(DecodeError::corrupt("constant wider than its type"));
        }
        Ok(Node::Const { width, n, word })
    }

    fn concat(&mut self, depth: usize) -> Result<Node, DecodeError> {
        let width = width_ok(self.r.u8()?)?;
        let count = self.r.varint()?;
        if count > MAX_NODES as u64 {
            return Err(DecodeError::corrupt("too many parts"));
        }
        let mut parts = Vec::new();
        let mut total = 0u64;
        for _ in 0..count {
            let p = self.node(depth + 1, None)?;
            if p.width() != width {
                return Err(DecodeError::corrupt("concat part of another width"));
            }
            total = count_ok(total + p.len())?;
            parts.push(p);
        }
        Ok(Node::Concat { width, parts })
    }

    fn repeat(&mut self, depth: usize) -> Result<Node, DecodeError> {
        let k = self.r.varint()?;
        let child = self.node(depth + 1, None)?;
        let total = k
            .checked_mul(child.len())
            .filter(|&t| t > 0)
            .ok_or_else(|| DecodeError::corrupt("repeat overflows or repeats nothing"))?;
        count_ok(total)?;
        Ok(Node::Repeat {
            k,
            child: Box::new(child),
        })
    }

    fn reference(&mut self) -> Result<Node, DecodeError> {
        let width = width_ok(self.r.u8()?)?;
        let n = count_ok(self.r.varint()?)?;
        let segment = u32::try_from(self.r.varint()?)
            .map_err(|_| DecodeError::corrupt("ref segment out of range"))?;
        let offset = self.r.varint()?;
        Ok(Node::Ref {
            width,
            n,
            segment,
            offset,
        })
    }

    fn map(&mut self, depth: usize) -> Result<Node, DecodeError> {
        let op = match self.r.u8()? {
            0 => MapOp::Xor(self.r.varint()?),
            1 => MapOp::Add(self.r.varint()?),
            2 => MapOp::Zigzag,
            3 => MapOp::Gray,
            4 => MapOp::Rotl(self.r.u8()?),
            5 => MapOp::BitReverse,
            o => return Err(DecodeError::corrupt(format!("unknown map {o}"))),
        };
        let child = self.node(depth + 1, None)?;
        let w = child.width();
        match op {
            MapOp::Xor(c) | MapOp::Add(c) if c > mask(w) => {
                return Err(DecodeError::corrupt("map constant wider than its type"));
            }
            MapOp::Rotl(r) if r == 0 || r >= w => {
                return Err(DecodeError::corrupt("rotation out of range"));
            }
            _ => {}
        }
        Ok(Node::Map {
            op,
            child: Box::new(child),
        })
    }

    fn scan(&mut self, depth: usize) -> Result<Node, DecodeError> {
        let op = match self.r.u8()? {
            0 => ScanOp::XorDelta,
            1 => ScanOp::Diff,
            o => return Err(DecodeError::corrupt(format!("unknown scan {o}"))),
        };
        let child = self.node(depth + 1, None)?;
        Ok(Node::Scan {
            op,
            child: Box::new(child),
        })
    }

    fn merge(&mut self, depth: usize) -> Result<Node, DecodeError> {
        let split = self.split()?;
        let fields = split.fields();
        if fields.iter().map(|&f| f as u32).sum::<u32>() > 64 {
            return Err(DecodeError::corrupt("merge: fields wider than 64 bits"));
        }
        let mut children = Vec::with_capacity(fields.len());
        for (i, &f) in fields.iter().enumerate() {
            let c = self.node(depth + 1, Some(i))?;
            if c.width() != f {
                return Err(DecodeError::corrupt("merge child of wrong width"));
            }
            if let Some(first) = children.first()
                && Node::len(first) != c.len()
            {
                return Err(DecodeError::corrupt("merge children of different lengths"));
            }
            if let Node::Lit { codec, .. } = &c
                && let Some(sibling) = codec.sibling()
                && fields[sibling as usize] > 8
            {
                return Err(DecodeError::corrupt(
                    "conditioning sibling wider than 8 bits",
                ));
            }
            children.push(c);
        }
        Ok(Node::Merge { split, children })
    }

    fn split(&mut self) -> Result<Split, DecodeError> {
        Ok(match self.r.u8()? {
            0 => {
                let d = Dtype::from_wire_id(self.r.u8()?)
                    .filter(|d| d.float_layout().is_some())
                    .ok_or_else(|| DecodeError::corrupt("merge: not a float dtype"))?;
                Split::Float(d)
            }
            1 => {
                let c = self.r.u8()? as usize;
                let f = self.r.bytes(c)?.to_vec();
                if c < 2 || f.contains(&0) {
                    return Err(DecodeError::corrupt("merge: bad bit fields"));
                }
                Split::Fields(f)
            }
            2 => {
                let w = width_ok(self.r.u8()?)?;
                if w % 8 != 0 || w < 16 {
                    return Err(DecodeError::corrupt("merge: byte planes of bad width"));
                }
                Split::BytePlanes(w)
            }
            3 => {
                let w = width_ok(self.r.u8()?)?;
                if w < 2 {
                    return Err(DecodeError::corrupt("merge: bit planes of bad width"));
                }
                Split::BitPlanes(w)
            }
            k => return Err(DecodeError::corrupt(format!("unknown split {k}"))),
        })
    }

    fn interleave(&mut self, depth: usize) -> Result<Node, DecodeError> {
        let period = self.r.varint()?;
        if period == 0 || period > MAX_PERIOD {
            return Err(DecodeError::corrupt("interleave period out of range"));
        }
        let classes = self.r.bytes(period as usize)?.to_vec();
        let k = class_count(&classes)?;
        let mut children = Vec::with_capacity(k);
        for _ in 0..k {
            let c = self.node(depth + 1, None)?;
            if let Some(first) = children.first()
                && Node::width(first) != c.width()
            {
                return Err(DecodeError::corrupt(
                    "interleave children of different widths",
                ));
            }
            children.push(c);
        }
        let n = count_ok(children.iter().map(Node::len).sum())?;
        let want = super::deal_counts(n, &classes, k);
        if children.iter().zip(&want).any(|(c, &w)| c.len() != w) {
            return Err(DecodeError::corrupt("interleave children of wrong lengths"));
        }
        Ok(Node::Interleave { classes, children })
    }
}

/// The number of distinct classes, checking they are numbered in order of
/// first appearance: 0, 1, ...
fn class_count(classes: &[u8]) -> Result<usize, DecodeError> {
    let mut k = 0usize;
    for &c in classes {
        if c as usize > k {
            return Err(DecodeError::corrupt("interleave classes out of order"));
        }
        if c as usize == k {
            k += 1;
        }
    }
    Ok(k)
}
