//! Zip archives (PyTorch checkpoints, `.npz`): the entries and where their
//! stored bytes are.
//!
//! Read from the end: the end-of-central-directory record (and its ZIP64
//! locator and record, which `torch.save` always writes), the central
//! directory, then each entry's local header to find where its data starts.
//! Only STORED entries (method 0) have usable raw bytes; compressed ones are
//! opaque. An entry whose local header disagrees with the central directory,
//! or whose data lies outside the file, is left out (its bytes stay opaque):
//! a lying entry never loses the others.

use super::{Cursor, MAX_META, MAX_TENSORS, read_meta};
use crate::container::ReadAt;

/// Signature of a local file header.
pub(crate) const LOCAL_MAGIC: &[u8; 4] = b"PK\x03\x04";
const CENTRAL_SIG: u32 = 0x0201_4b50;
const LOCAL_SIG: u32 = 0x0403_4b50;
const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD64_LOCATOR_SIG: u32 = 0x0706_4b50;
const EOCD64_SIG: u32 = 0x0606_4b50;
const DESCRIPTOR_SIG: u32 = 0x0807_4b50;
/// Most bytes of a data descriptor (signature, crc, two 64-bit sizes).
const DESCRIPTOR_MAX: u64 = 24;
/// Fixed bytes of an end-of-central-directory record.
const EOCD_LEN: u64 = 22;
/// Fixed bytes of a ZIP64 end-of-central-directory locator.
const EOCD64_LOCATOR_LEN: u64 = 20;
/// Fixed bytes of a ZIP64 end-of-central-directory record.
const EOCD64_LEN: u64 = 56;
/// Fixed bytes of a central directory entry.
const CENTRAL_LEN: usize = 46;
/// Fixed bytes of a local file header.
const LOCAL_LEN: usize = 30;
/// Longest archive comment (the EOCD is searched this far from the end).
const MAX_COMMENT: u64 = 0xffff;
/// Most entries read from a central directory.
pub(crate) const MAX_ENTRIES: usize = MAX_TENSORS;
/// Longest entry name kept (a longer one makes its entry opaque).
pub(crate) const MAX_NAME: usize = 4096;

/// One entry of the central directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Its name (lossy UTF-8).
    pub name: String,
    /// Compression method (0: stored).
    pub method: u16,
    /// Bytes of its data in the file.
    pub compressed: u64,
    /// Bytes of its content.
    pub size: u64,
    /// Offset of its local header.
    pub local: u64,
    /// Offset of its data, when the local header agrees with the central
    /// directory and the data lies inside the file before the directory.
    pub data: Option<u64>,
}

impl Entry {
    /// Where its raw content lies (`offset`, `len`): only for a stored entry
    /// whose local header checked out.
    pub fn stored(&self) -> Option<(u64, u64)> {
        if self.method != 0 || self.compressed != self.size {
            return None;
        }
        self.data.map(|d| (d, self.size))
    }
}

/// Whether a file starts like a zip archive.
pub(crate) fn is_zip(head: &[u8]) -> bool {
    head.starts_with(LOCAL_MAGIC)
}

/// The name of the first local header as far as `head` holds it, and
/// whether that is all of it.
pub(crate) fn first_name(head: &[u8]) -> Option<(&[u8], bool)> {
    if !is_zip(head) {
        return None;
    }
    let n = u16::from_le_bytes(head.get(26..28)?.try_into().ok()?) as usize;
    let end = LOCAL_LEN.checked_add(n)?;
    let seen = head.get(LOCAL_LEN..end.min(head.len()))?;
    Some((seen, end <= head.len()))
}

/// The entries of a zip file of `len` bytes, in central-directory order.
/// `Err` when no end-of-central-directory record or no central directory
/// can be read; a malformed entry ends the list (the ones before it kept),
/// a lying one has no `data`.
pub(crate) fn entries(src: &dyn ReadAt, len: u64) -> Result<Vec<Entry>, String> {
    let (count, cd_off, cd_len) = directory(src, len)?;
    if cd_len > MAX_META {
        return Err(format!(
            "zip central directory of {cd_len} bytes, more than the {MAX_META} read"
        ));
    }
    let cd =
        read_meta(src, len, cd_off, cd_len).map_err(|e| format!("zip central directory: {e}"))?;
    let mut c = Cursor::new(&cd);
    let cap = count
        .min((cd.len() / CENTRAL_LEN) as u64)
        .min(MAX_ENTRIES as u64);
    let mut out = Vec::with_capacity(cap as usize);
    while (out.len() as u64) < count && out.len() < MAX_ENTRIES {
        let Some(mut e) = central_entry(&mut c) else {
            break;
        };
        e.data = local_data(src, len, cd_off, &e);
        out.push(e);
    }
    Ok(out)
}

/// (entry count, central directory offset, its length) from the end of the
/// file, ZIP64 values where the classic record says so.
fn directory(src: &dyn ReadAt, len: u64) -> Result<(u64, u64, u64), String> {
    if len < EOCD_LEN {
        return Err("zip: shorter than an end-of-central-directory record".into());
    }
    let tail_len = (EOCD_LEN + MAX_COMMENT).min(len);
    let tail_off = len - tail_len;
    let tail = read_meta(src, len, tail_off, tail_len)?;
    // The last record signature whose comment length reaches the end.
    let mut at = None;
    for i in (0..=tail.len() - EOCD_LEN as usize).rev() {
        if tail[i..i + 4] == EOCD_SIG.to_le_bytes() {
            let comment = u16::from_le_bytes([tail[i + 20], tail[i + 21]]) as usize;
            if i + EOCD_LEN as usize + comment == tail.len() {
                at = Some(i);
                break;
            }
        }
    }
    let Some(i) = at else {
        return Err("zip: no end-of-central-directory record".into());
    };
    let eocd_off = tail_off + i as u64;
    let mut c = Cursor::new(&tail[i + 4..]);
    let bad = || "zip: truncated end-of-central-directory record".to_string();
    let _disk = c.u16().ok_or_else(bad)?;
    let _cd_disk = c.u16().ok_or_else(bad)?;
    let _disk_count = c.u16().ok_or_else(bad)?;
    let mut count = c.u16().ok_or_else(bad)? as u64;
    let mut cd_len = c.u32().ok_or_else(bad)? as u64;
    let mut cd_off = c.u32().ok_or_else(bad)? as u64;
    if count == 0xffff || cd_len == 0xffff_ffff || cd_off == 0xffff_ffff {
        let (n, l, o) = zip64_directory(src, len, eocd_off)?;
        (count, cd_len, cd_off) = (n, l, o);
    }
    if cd_off.checked_add(cd_len).is_none_or(|e| e > eocd_off) {
        return Err(format!(
            "zip: central directory ({cd_len} bytes at {cd_off}) runs past its end record at {eocd_off}"
        ));
    }
    Ok((count, cd_off, cd_len))
}

/// The ZIP64 record's (count, cd length, cd offset), found through the
/// locator just before the classic record at `eocd_off`.
fn zip64_directory(src: &dyn ReadAt, len: u64, eocd_off: u64) -> Result<(u64, u64, u64), String> {
    let loc_off = eocd_off
        .checked_sub(EOCD64_LOCATOR_LEN)
        .ok_or("zip: no room for a ZIP64 locator")?;
    let loc = read_meta(src, len, loc_off, EOCD64_LOCATOR_LEN)?;
    let mut c = Cursor::new(&loc);
    let bad = || "zip: bad ZIP64 locator".to_string();
    if c.u32() != Some(EOCD64_LOCATOR_SIG) {
        return Err("zip: ZIP64 sizes without a ZIP64 locator".into());
    }
    let _disk = c.u32().ok_or_else(bad)?;
    let rec_off = c.u64().ok_or_else(bad)?;
    if rec_off.checked_add(EOCD64_LEN).is_none_or(|e| e > loc_off) {
        return Err(format!(
            "zip: ZIP64 record at {rec_off} past its locator at {loc_off}"
        ));
    }
    let rec = read_meta(src, len, rec_off, EOCD64_LEN)?;
    let mut c = Cursor::new(&rec);
    let bad = || "zip: bad ZIP64 end-of-central-directory record".to_string();
    if c.u32() != Some(EOCD64_SIG) {
        return Err(format!("zip: no ZIP64 record at {rec_off}"));
    }
    c.skip(8 + 2 + 2 + 4 + 4 + 8).ok_or_else(bad)?;
    let count = c.u64().ok_or_else(bad)?;
    let cd_len = c.u64().ok_or_else(bad)?;
    let cd_off = c.u64().ok_or_else(bad)?;
    Ok((count, cd_len, cd_off))
}

/// One central directory entry (`data` not yet known), `None` when the
/// directory ends or lies about its own layout.
fn central_entry(c: &mut Cursor) -> Option<Entry> {
    if c.u32()? != CENTRAL_SIG {
        return None;
    }
    c.skip(2 + 2 + 2)?; // made by, needed, flags
    let method = c.u16()?;
    c.skip(2 + 2 + 4)?; // time, date, crc
    let mut compressed = c.u32()? as u64;
    let mut size = c.u32()? as u64;
    let name_len = c.u16()? as usize;
    let extra_len = c.u16()? as usize;
    let comment_len = c.u16()? as usize;
    c.skip(2 + 2 + 4)?; // disk, internal attrs, external attrs
    let mut local = c.u32()? as u64;
    let name = c.take(name_len)?;
    let extra = c.take(extra_len)?;
    c.skip(comment_len as u64)?;
    // A missing ZIP64 value leaves 0xFFFFFFFF, which no local header matches.
    let _ = zip64_extra(extra, &mut size, &mut compressed, Some(&mut local));
    let name = if name_len <= MAX_NAME {
        String::from_utf8_lossy(name).into_owned()
    } else {
        // Kept in the list (the count stays honest) but matches nothing.
        String::new()
    };
    Some(Entry {
        name,
        method,
        compressed,
        size,
        local,
        data: None,
    })
}

/// Replace the 32-bit fields that are 0xFFFFFFFF by the ZIP64 extra
/// field's values (in the order the spec gives). `None` when the extra
/// field is malformed or lacks a value it must hold.
fn zip64_extra(
    extra: &[u8],
    size: &mut u64,
    compressed: &mut u64,
    local: Option<&mut u64>,
) -> Option<()> {
    const FULL: u64 = 0xffff_ffff;
    let need = *size == FULL || *compressed == FULL || local.as_ref().is_some_and(|l| **l == FULL);
    if !need {
        return Some(());
    }
    let mut c = Cursor::new(extra);
    while c.remaining() >= 4 {
        let id = c.u16()?;
        let n = c.u16()? as usize;
        let body = c.take(n)?;
        if id != 1 {
            continue;
        }
        let mut b = Cursor::new(body);
        if *size == FULL {
            *size = b.u64()?;
        }
        if *compressed == FULL {
            *compressed = b.u64()?;
        }
        if let Some(l) = local.filter(|l| **l == FULL) {
            *l = b.u64()?;
        }
        return Some(());
    }
    None
}

/// Where entry `e`'s data starts, when its local header (at a place inside
/// the file, with the same name and method, and sizes equal to the central
/// directory's or left zero for a data descriptor) agrees and its data ends
/// before the central directory at `cd_off`.
fn local_data(src: &dyn ReadAt, len: u64, cd_off: u64, e: &Entry) -> Option<u64> {
    let fixed = read_meta(src, len, e.local, LOCAL_LEN as u64).ok()?;
    let mut c = Cursor::new(&fixed);
    if c.u32()? != LOCAL_SIG {
        return None;
    }
    c.skip(2)?; // needed
    let flags = c.u16()?;
    let method = c.u16()?;
    c.skip(2 + 2 + 4)?; // time, date, crc
    let mut compressed = c.u32()? as u64;
    let mut size = c.u32()? as u64;
    let name_len = c.u16()? as u64;
    let extra_len = c.u16()? as u64;
    let var = read_meta(src, len, e.local + LOCAL_LEN as u64, name_len + extra_len).ok()?;
    let (name, extra) = var.split_at(name_len as usize);
    if method != e.method || String::from_utf8_lossy(name) != e.name.as_str() || e.name.is_empty() {
        return None;
    }
    zip64_extra(extra, &mut size, &mut compressed, None)?;
    let deferred = flags & 8 != 0 && size == 0 && compressed == 0;
    if !deferred && (size != e.size || compressed != e.compressed) {
        return None;
    }
    let data = e
        .local
        .checked_add(LOCAL_LEN as u64)?
        .checked_add(name_len + extra_len)?;
    let end = data.checked_add(e.compressed)?;
    if end > cd_off || end > len {
        return None;
    }
    if deferred && !descriptor_agrees(src, cd_off, end, e) {
        return None;
    }
    Some(data)
}

/// Whether the data descriptor at `at` (optional signature, crc, then
/// 32- or 64-bit sizes) states entry `e`'s sizes.
fn descriptor_agrees(src: &dyn ReadAt, cd_off: u64, at: u64, e: &Entry) -> bool {
    let n = cd_off.saturating_sub(at).min(DESCRIPTOR_MAX);
    let Ok(d) = read_meta(src, cd_off, at, n) else {
        return false;
    };
    let body = match d.strip_prefix(&DESCRIPTOR_SIG.to_le_bytes()) {
        Some(b) => b,
        None => &d[..],
    };
    let mut c = Cursor::new(body);
    let _crc = c.u32();
    let mut c64 = c.clone();
    let small = (c.u32(), c.u32()) == (Some(e.compressed as u32), Some(e.size as u32))
        && e.compressed < 0xffff_ffff
        && e.size < 0xffff_ffff;
    small || (c64.u64(), c64.u64()) == (Some(e.compressed), Some(e.size))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A zip of stored entries, laid out as `zipfile` would (no ZIP64
    /// unless `zip64`), each data start padded to `align` with an extra
    /// field as torch does.
    pub(crate) fn build(entries: &[(&str, &[u8])], align: usize, zip64: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut cd = Vec::new();
        for &(name, data) in entries {
            let local = out.len() as u32;
            let base = out.len() + LOCAL_LEN + name.len();
            let mut pad = if align > 1 {
                (align - (base + 4) % align) % align
            } else {
                0
            };
            let extra_len = if align > 1 { pad + 4 } else { 0 };
            out.extend_from_slice(&LOCAL_SIG.to_le_bytes());
            out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(name.len() as u16).to_le_bytes());
            out.extend_from_slice(&(extra_len as u16).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            if align > 1 {
                out.extend_from_slice(b"FB");
                out.extend_from_slice(&(pad as u16).to_le_bytes());
                while pad > 0 {
                    out.push(b'Z');
                    pad -= 1;
                }
            }
            out.extend_from_slice(data);
            cd.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
            cd.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            cd.extend_from_slice(&(data.len() as u32).to_le_bytes());
            cd.extend_from_slice(&(data.len() as u32).to_le_bytes());
            cd.extend_from_slice(&(name.len() as u16).to_le_bytes());
            cd.extend_from_slice(&[0; 4 + 2 + 2 + 4]);
            cd.extend_from_slice(&local.to_le_bytes());
            cd.extend_from_slice(name.as_bytes());
        }
        let cd_off = out.len() as u64;
        out.extend_from_slice(&cd);
        let n = entries.len() as u64;
        if zip64 {
            let rec = out.len() as u64;
            out.extend_from_slice(&EOCD64_SIG.to_le_bytes());
            out.extend_from_slice(&44u64.to_le_bytes());
            out.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&(cd.len() as u64).to_le_bytes());
            out.extend_from_slice(&cd_off.to_le_bytes());
            out.extend_from_slice(&EOCD64_LOCATOR_SIG.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&rec.to_le_bytes());
            out.extend_from_slice(&1u32.to_le_bytes());
        }
        out.extend_from_slice(&EOCD_SIG.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        let (n16, len32, off32) = if zip64 {
            (0xffff, 0xffff_ffff, 0xffff_ffff)
        } else {
            (n as u16, cd.len() as u32, cd_off as u32)
        };
        out.extend_from_slice(&n16.to_le_bytes());
        out.extend_from_slice(&n16.to_le_bytes());
        out.extend_from_slice(&len32.to_le_bytes());
        out.extend_from_slice(&off32.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out
    }

    #[test]
    fn reads_stored_entries_classic_and_zip64() {
        for zip64 in [false, true] {
            let f = build(
                &[("a/data.pkl", b"xyz"), ("a/data/0", &[7u8; 16])],
                64,
                zip64,
            );
            let e = entries(&&f[..], f.len() as u64).unwrap();
            assert_eq!(e.len(), 2);
            assert_eq!(e[1].name, "a/data/0");
            let (off, n) = e[1].stored().unwrap();
            assert_eq!(off % 64, 0);
            assert_eq!(&f[off as usize..(off + n) as usize], &[7u8; 16]);
            assert_eq!(first_name(&f), Some((&b"a/data.pkl"[..], true)));
        }
    }

    #[test]
    fn lying_entries_are_opaque_not_errors() {
        let f = build(&[("x.npy", &[1u8; 32]), ("y.npy", &[2u8; 32])], 1, false);
        let cd = f.len() - 22 - 2 * (CENTRAL_LEN + 5);
        // Central size of the first entry says 40, the local header 32.
        let mut g = f.clone();
        g[cd + 20..cd + 24].copy_from_slice(&40u32.to_le_bytes());
        g[cd + 24..cd + 28].copy_from_slice(&40u32.to_le_bytes());
        let e = entries(&&g[..], g.len() as u64).unwrap();
        assert_eq!(e[0].stored(), None);
        assert!(e[1].stored().is_some());
        // Both local headers claim a data length past the directory.
        let mut g = f.clone();
        for at in [18, 22, 30 + 5 + 32 + 18, 30 + 5 + 32 + 22] {
            g[at..at + 4].copy_from_slice(&0xfff0u32.to_le_bytes());
        }
        let e = entries(&&g[..], g.len() as u64).unwrap();
        assert!(e.iter().all(|e| e.stored().is_none()));
        // A local offset past the end.
        let mut g = f.clone();
        g[cd + 42..cd + 46].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = entries(&&g[..], g.len() as u64).unwrap();
        assert_eq!(e[0].stored(), None);
        // A huge count: the entries that exist, no huge allocation.
        let mut g = f.clone();
        let eocd = g.len() - 22;
        g[eocd + 8..eocd + 12].copy_from_slice(&[0xfe, 0xff, 0xfe, 0xff]);
        assert_eq!(entries(&&g[..], g.len() as u64).unwrap().len(), 2);
        // A directory that runs past its end record.
        let mut g = f;
        g[eocd + 12..eocd + 16].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
        assert!(entries(&&g[..], g.len() as u64).is_err());
    }

    #[test]
    fn truncation_never_panics() {
        let f = build(
            &[("a/data.pkl", b"xyz"), ("a/data/0", &[7u8; 100])],
            64,
            true,
        );
        for n in 0..f.len() {
            let g = &f[..n];
            if let Ok(e) = entries(&g, n as u64) {
                for e in e {
                    if let Some((o, l)) = e.stored() {
                        assert!(o + l <= n as u64);
                    }
                }
            }
        }
    }
}
