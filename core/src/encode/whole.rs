//! The whole-file alternative: a small file coded as one byte stream, and
//! the screen that says when that may beat the tensors coded one by one.

use std::collections::HashMap;

use crate::container::xxh3;

/// Files up to this size are also coded whole (one byte stream, zstd -19
/// or rANS), and the smaller archive is kept: small files of many tiny
/// tensors, or with long-range repeats across tensors, can do better so.
/// Not at budget 0.
pub const WHOLE_FILE_MAX: u64 = 8 << 20;

/// Bytes of the sample [`whole_may_win`] codes at both levels, in
/// [`WHOLE_SAMPLE_SLICES`] slices spread over the file: enough to rate
/// the file, and cheap next to coding it.
pub(super) const WHOLE_SAMPLE_BYTES: usize = 128 << 10;

/// Slices of [`WHOLE_SAMPLE_BYTES`]: 16 of 8 KiB. A few large slices miss
/// what sets a file's rate, and files then pass the screen only to be
/// coded whole and found larger.
const WHOLE_SAMPLE_SLICES: usize = 16;

/// Bytes of a tensor hashed as one block by [`cross_tensor_repeats`].
pub(super) const REPEAT_BLOCK: usize = 1024;

/// Whether the file coded whole (zstd -22) may be smaller than `archive`
/// bytes, screened before -22 is paid for (seconds on a few MiB). What
/// whole-file zstd can gain over the tensors coded one by one is matches
/// across tensors (identical tensors are references already). First, from
/// a sample: the header at -1, and the tensor bytes that do not repeat an
/// earlier tensor's block at the rate -1 codes a sample of them, must come
/// within 5% of the archive. Then the file at -1 with long matches over all
/// of it must too, and, scaled by what -22 gains over -1 on the sample,
/// beat it. A file no larger than the sample is tried at -1 whole.
/// (zstd -1 of the whole file alone would be slower and blind to repeats
/// further apart than -1's window.)
pub(super) fn whole_may_win(whole: &[u8], tensors: &[(u64, u64)], archive: u64) -> bool {
    let z =
        |b: &[u8], level| crate::entropy::zstd_compress(b, level).map_or(usize::MAX, |z| z.len());
    let pass = |quick: f64| quick * 0.95 < archive as f64;
    if whole.len() <= WHOLE_SAMPLE_BYTES {
        return pass(z(whole, 1) as f64);
    }
    // The header (JSON, a tenth of its size at -1) whole; the tensor bytes
    // at a sample's rate.
    let start = tensors.iter().map(|t| t.0 as usize).min().unwrap_or(0);
    let (head, body) = whole.split_at(start.min(whole.len()));
    if body.len() <= WHOLE_SAMPLE_BYTES {
        return pass(z(whole, 1) as f64);
    }
    let slice = WHOLE_SAMPLE_BYTES / WHOLE_SAMPLE_SLICES;
    let step = (body.len() - slice) / (WHOLE_SAMPLE_SLICES - 1);
    let mut sample = Vec::with_capacity(slice * WHOLE_SAMPLE_SLICES);
    for i in 0..WHOLE_SAMPLE_SLICES {
        sample.extend_from_slice(&body[i * step..i * step + slice]);
    }
    // (With two threads or more, what each stage needs is worked out side
    // by side: the screen otherwise runs on one thread while the others
    // wait for the next file.)
    let both = crate::pool::current_num_threads() > 1;
    let ((z1, zh), repeats) = crate::pool::join(
        || (z(&sample, 1) as f64, z(head, 1) as f64),
        || cross_tensor_repeats(whole, tensors),
    );
    let fresh = (body.len() as u64).saturating_sub(repeats);
    if !pass(zh + fresh as f64 * z1 / sample.len() as f64) {
        return false;
    }
    // Then the file itself at -1, with a window over all of it and long
    // matches (what -22 will see), scaled by -22's gain on the sample
    // (worked out only when -1 passes, but for side by side).
    let gain_of = || z(&sample, 22) as f64 / z1;
    let (quick, gain) = if both {
        let (q, g) = crate::pool::join(|| zstd_long(whole, 1) as f64, gain_of);
        (q, Some(g))
    } else {
        (zstd_long(whole, 1) as f64, None)
    };
    pass(quick) && quick * gain.unwrap_or_else(gain_of) < archive as f64
}

/// Bytes of `data` in zstd at `level` with a window over [`WHOLE_FILE_MAX`]
/// bytes and long-distance matching (`usize::MAX` if zstd fails).
fn zstd_long(data: &[u8], level: i32) -> usize {
    use zstd::zstd_safe::CParameter;
    let window = WHOLE_FILE_MAX.max(1).ilog2() + 1;
    zstd::bulk::Compressor::new(level)
        .and_then(|mut c| {
            c.set_parameter(CParameter::WindowLog(window))?;
            c.set_parameter(CParameter::EnableLongDistanceMatching(true))?;
            c.compress(data)
        })
        .map_or(usize::MAX, |z| z.len())
}

/// Bytes of the tensors `(offset, len)` of `whole` in blocks (of
/// [`REPEAT_BLOCK`] bytes from each tensor's start) equal to a block of an
/// earlier tensor, blocks of one repeated byte not counted (every coder
/// codes those for next to nothing).
///
/// A block is looked up by a fingerprint of four of its words, and a block
/// with the same fingerprint compared byte for byte; blocks that share a
/// fingerprint but differ (sparse tensors, zero at the four words) are
/// told apart by their xxh3 (hashing every block whole is several times
/// slower).
pub(super) fn cross_tensor_repeats(whole: &[u8], tensors: &[(u64, u64)]) -> u64 {
    use std::collections::hash_map::Entry;
    let blocks = tensors
        .iter()
        .map(|t| t.1 as usize / REPEAT_BLOCK)
        .sum::<usize>();
    // Fingerprint -> the first earlier block with it; the xxh3 of the
    // others with it that differ from that one in `other`.
    let mut seen: HashMap<u64, usize, Fingerprinted> =
        HashMap::with_capacity_and_hasher(blocks, Fingerprinted::default());
    let mut other: std::collections::HashSet<u64, Fingerprinted> = Default::default();
    let block = |at: usize| &whole[at..at + REPEAT_BLOCK];
    let mut repeated = 0u64;
    let mut mine = Vec::new();
    for &(offset, len) in tensors {
        let Some(t) = whole.get(offset as usize..(offset + len) as usize) else {
            continue;
        };
        mine.clear();
        for (i, b) in t.chunks_exact(REPEAT_BLOCK).enumerate() {
            if b.iter().all(|&x| x == b[0]) {
                continue;
            }
            let f = fingerprint(b);
            let hit = match seen.get(&f) {
                None => false,
                Some(&at) if block(at) == b => true,
                Some(_) => other.contains(&xxh3(b)),
            };
            if hit {
                repeated += REPEAT_BLOCK as u64;
            } else {
                mine.push((f, offset as usize + i * REPEAT_BLOCK));
            }
        }
        // Seen only by later tensors.
        for &(f, at) in &mine {
            match seen.entry(f) {
                Entry::Vacant(v) => {
                    v.insert(at);
                }
                Entry::Occupied(o) if block(*o.get()) != block(at) => {
                    other.insert(xxh3(block(at)));
                }
                Entry::Occupied(_) => {}
            }
        }
    }
    repeated
}

/// Four words of a [`REPEAT_BLOCK`], 256 bytes apart, mixed.
pub(super) fn fingerprint(b: &[u8]) -> u64 {
    let mut h = 0u64;
    for w in b.chunks_exact(256) {
        let w = u64::from_le_bytes(w[..8].try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
    h ^ (h >> 32)
}

/// A hasher for keys that are hashes already ([`fingerprint`], xxh3):
/// the key is its own hash.
#[derive(Default)]
struct KeyIsHash(u64);

impl std::hash::Hasher for KeyIsHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

type Fingerprinted = std::hash::BuildHasherDefault<KeyIsHash>;
