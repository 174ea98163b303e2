//! Tensors identical to an earlier one, found by a hash of their edges and
//! confirmed byte for byte: they become references.

use std::collections::HashMap;

use super::io;
use super::segments::read_cow;
use crate::container::SegmentKind;
use crate::container::{ReadAt, SegmentDesc};
use crate::error::EncodeError;

/// Duplicates smaller than this are coded with their neighbours, not as
/// references (a reference costs a segment of its own).
pub(super) const MIN_REF_BYTES: u64 = 256;

/// Distinct tensors of one duplicate key (dtype, length, edge hash) that
/// later tensors of that key are compared with, byte for byte.
pub(super) const MAX_DUP_CANDIDATES: usize = 4;

/// Bytes hashed at each edge (and the middle) of a tensor by [`edge_hash`].
const EDGE_BYTES: u64 = 4096;

/// A hash of a tensor's first, middle and last [`EDGE_BYTES`] (all of it if
/// shorter): equal tensors have equal ones, and tensors that differ nearly
/// always differ there.
pub(super) fn edge_hash(src: &dyn ReadAt, d: &SegmentDesc) -> std::io::Result<u128> {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    if d.len <= 3 * EDGE_BYTES {
        h.update(&read_cow(src, d.offset, d.len as usize)?);
    } else {
        for at in [0, (d.len - EDGE_BYTES) / 2, d.len - EDGE_BYTES] {
            h.update(&read_cow(src, d.offset + at, EDGE_BYTES as usize)?);
        }
    }
    Ok(h.digest128())
}

/// Whether segments `a` and `b` (of one length) hold the same bytes.
pub(super) fn same_bytes(
    src: &dyn ReadAt,
    a: &SegmentDesc,
    b: &SegmentDesc,
) -> std::io::Result<bool> {
    if let (Some(x), Some(y)) = (
        src.slice_at(a.offset, a.len as usize),
        src.slice_at(b.offset, b.len as usize),
    ) {
        return Ok(x == y);
    }
    // Buffers no larger than the tensors (most are far below 1 MiB).
    let k = a.len.min(1 << 20) as usize;
    let mut x = vec![0u8; k];
    let mut y = vec![0u8; k];
    let mut pos = 0u64;
    while pos < a.len {
        let k = ((a.len - pos) as usize).min(x.len());
        src.read_exact_at(a.offset + pos, &mut x[..k])?;
        src.read_exact_at(b.offset + pos, &mut y[..k])?;
        if x[..k] != y[..k] {
            return Ok(false);
        }
        pos += k as u64;
    }
    Ok(true)
}

/// For each segment, the earlier segment it is identical to, if any.
pub(super) fn duplicates(
    src: &dyn ReadAt,
    descs: &[SegmentDesc],
    label: &str,
) -> Result<Vec<Option<usize>>, EncodeError> {
    // Pass 1: duplicate candidates, by dtype, length and a hash of the
    // tensor's edges (first, middle and last 4 KiB). Only candidates
    // are read whole, to be compared byte for byte with up to
    // MAX_DUP_CANDIDATES distinct tensors of their key: in a checkpoint
    // without duplicates the file is read once, not twice. (Copies of a
    // fifth distinct tensor sharing one key are coded on their own.)
    let mut seg_key = vec![None; descs.len()];
    for (i, d) in descs.iter().enumerate() {
        if d.kind == SegmentKind::Tensor && d.len >= MIN_REF_BYTES {
            let h = edge_hash(src, d).map_err(|e| io(label, e))?;
            seg_key[i] = Some((d.dtype.wire_id(), d.len, h));
        }
    }

    // Tensors identical to an earlier one become references (even into a
    // group); the other small tensors are coded in groups.
    // Each key keeps a few distinct tensors to compare later ones with.
    let mut firsts: HashMap<(u8, u64, u128), Vec<usize>> = HashMap::new();
    let mut dup_of: Vec<Option<usize>> = vec![None; descs.len()];
    for (i, key) in seg_key.iter().enumerate() {
        let Some(key) = key else { continue };
        let seen = firsts.entry(*key).or_default();
        for &j in seen.iter() {
            if same_bytes(src, &descs[j], &descs[i]).map_err(|e| io(label, e))? {
                dup_of[i] = Some(j);
                break;
            }
        }
        if dup_of[i].is_none() && seen.len() < MAX_DUP_CANDIDATES {
            seen.push(i);
        }
    }
    Ok(dup_of)
}
