//! Normalized frequency tables shared by the rANS coders.

use super::{ByteReader, put_varint};
use crate::error::DecodeError;

/// Probability precision in bits.
pub(crate) const PROB_BITS: u32 = 12;
/// Sum of the frequencies of a table.
pub(crate) const PROB_SCALE: u32 = 1 << PROB_BITS;

/// Frequencies summing to [`PROB_SCALE`] over a 256-symbol alphabet.
#[derive(Clone)]
pub(crate) struct FreqTable {
    pub freq: [u16; 256],
    pub cum: [u16; 257],
}

impl FreqTable {
    /// An empty table (no symbol can be coded with it).
    pub fn empty() -> FreqTable {
        FreqTable {
            freq: [0; 256],
            cum: [0; 257],
        }
    }

    fn from_freqs(freq: [u16; 256]) -> FreqTable {
        let mut cum = [0u16; 257];
        let mut acc = 0u32;
        for s in 0..256 {
            cum[s] = acc as u16;
            acc += freq[s] as u32;
        }
        cum[256] = acc.min(u16::MAX as u32) as u16;
        FreqTable { freq, cum }
    }

    /// Normalize counts so every present symbol keeps a frequency >= 1.
    pub fn from_counts(counts: &[u32; 256]) -> FreqTable {
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        if total == 0 {
            return FreqTable::empty();
        }
        let mut freq = [0u16; 256];
        let mut sum: i64 = 0;
        for s in 0..256 {
            if counts[s] > 0 {
                let f = ((counts[s] as u64 * PROB_SCALE as u64 + total / 2) / total).max(1);
                freq[s] = f as u16;
                sum += f as i64;
            }
        }
        let mut diff = PROB_SCALE as i64 - sum;
        while diff != 0 {
            // Adjust the most frequent symbols first: it costs the least.
            let (best, _) = freq
                .iter()
                .enumerate()
                .filter(|(_, f)| diff > 0 || **f > 1)
                .max_by_key(|(_, f)| **f)
                .expect("a present symbol exists");
            if diff > 0 {
                freq[best] += diff as u16;
                diff = 0;
            } else {
                let take = (-diff).min(freq[best] as i64 - 1);
                freq[best] -= take as u16;
                diff += take;
            }
        }
        FreqTable::from_freqs(freq)
    }

    /// Serialize: present symbols (list or bitmap), then frequencies.
    pub fn write(&self, out: &mut Vec<u8>) {
        let present: Vec<usize> = (0..256).filter(|&s| self.freq[s] > 0).collect();
        put_varint(out, present.len() as u64);
        if present.is_empty() {
            return;
        }
        write_symbol_set(out, &present);
        if present.len() > 1 {
            for &s in &present[..present.len() - 1] {
                put_varint(out, self.freq[s] as u64 - 1);
            }
        }
    }

    /// Parse and validate a table written by [`FreqTable::write`].
    pub fn read(r: &mut ByteReader<'_>) -> Result<FreqTable, DecodeError> {
        let n = r.varint()? as usize;
        if n == 0 {
            return Ok(FreqTable::empty());
        }
        if n > 256 {
            return Err(DecodeError::corrupt("table: more than 256 symbols"));
        }
        let present = read_symbol_set(r, n)?;
        let mut freq = [0u16; 256];
        if n == 1 {
            freq[present[0]] = PROB_SCALE as u16;
        } else {
            let mut sum = 0u64;
            for &s in &present[..n - 1] {
                let f = r.varint()? + 1;
                sum += f;
                if sum >= PROB_SCALE as u64 {
                    return Err(DecodeError::corrupt("table: frequencies too large"));
                }
                freq[s] = f as u16;
            }
            freq[present[n - 1]] = (PROB_SCALE as u64 - sum) as u16;
        }
        Ok(FreqTable::from_freqs(freq))
    }
}

/// Write a sorted set of symbols: as delta bytes when few, as a bitmap when many.
pub(crate) fn write_symbol_set(out: &mut Vec<u8>, present: &[usize]) {
    if present.len() <= 32 {
        let mut prev = 0usize;
        for (i, &s) in present.iter().enumerate() {
            out.push(if i == 0 { s } else { s - prev - 1 } as u8);
            prev = s;
        }
    } else {
        let mut bm = [0u8; 32];
        for &s in present {
            bm[s / 8] |= 1 << (s % 8);
        }
        out.extend_from_slice(&bm);
    }
}

/// Read a set written by [`write_symbol_set`] of `n` symbols.
pub(crate) fn read_symbol_set(r: &mut ByteReader<'_>, n: usize) -> Result<Vec<usize>, DecodeError> {
    let mut present = Vec::with_capacity(n);
    if n <= 32 {
        let mut prev = 0usize;
        for i in 0..n {
            let d = r.u8()? as usize;
            let s = if i == 0 { d } else { prev + 1 + d };
            if s > 255 {
                return Err(DecodeError::corrupt("table: symbol out of range"));
            }
            present.push(s);
            prev = s;
        }
    } else {
        let bm = r.bytes(32)?;
        for s in 0..256 {
            if bm[s / 8] & (1 << (s % 8)) != 0 {
                present.push(s);
            }
        }
        if present.len() != n {
            return Err(DecodeError::corrupt("table: bitmap count differs"));
        }
    }
    Ok(present)
}

/// Rough size of a written table for these counts.
pub(crate) fn estimate_table_bytes(counts: &[u32]) -> f64 {
    let n = counts.iter().filter(|&&c| c > 0).count();
    if n == 0 {
        return 1.0;
    }
    let set = if n <= 32 { n } else { 32 };
    1.0 + set as f64 + 1.5 * (n as f64 - 1.0)
}
