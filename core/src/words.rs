//! Word and byte helpers shared by every layer: a tensor is a stream of
//! fixed-width words, stored as their little-endian bytes.

/// All-ones mask of `width` bits.
#[inline]
pub fn mask(width: u8) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Bytes per word of `width` bits as [`words_to_bytes`] writes them: 1,
/// 2 or 4 for widths 8, 16 and 32, else all eight.
#[inline]
pub fn le_bytes_per_word(width: u8) -> usize {
    match width as usize / 8 {
        b @ (1 | 2 | 4) => b,
        _ => 8,
    }
}

/// Words to their little-endian bytes (`width` in 8, 16, 32, 64).
pub fn words_to_bytes(words: &[u64], width: u8, out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(at + words.len() * le_bytes_per_word(width), 0);
    words_to_slice(words, width, &mut out[at..]);
}

/// Words to their little-endian bytes in `dst`, which holds exactly
/// `words.len()` words of [`le_bytes_per_word`] bytes.
pub fn words_to_slice(words: &[u64], width: u8, dst: &mut [u8]) {
    let bpw = le_bytes_per_word(width);
    debug_assert_eq!(dst.len(), words.len() * bpw);
    // Indexed loops over a preallocated output, one per word size: these
    // vectorize (a word's bytes pushed one by one do not).
    match bpw {
        1 => dst.iter_mut().zip(words).for_each(|(o, &w)| *o = w as u8),
        2 => dst
            .chunks_exact_mut(2)
            .zip(words)
            .for_each(|(o, &w)| o.copy_from_slice(&(w as u16).to_le_bytes())),
        4 => dst
            .chunks_exact_mut(4)
            .zip(words)
            .for_each(|(o, &w)| o.copy_from_slice(&(w as u32).to_le_bytes())),
        _ => dst
            .chunks_exact_mut(8)
            .zip(words)
            .for_each(|(o, &w)| o.copy_from_slice(&w.to_le_bytes())),
    }
}

/// Little-endian bytes to words (`width` in 8, 16, 32, 64).
pub fn bytes_to_words(bytes: &[u8], width: u8) -> Vec<u64> {
    match width {
        8 => bytes.iter().map(|&b| b as u64).collect(),
        16 => bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u64)
            .collect(),
        32 => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4")) as u64)
            .collect(),
        _ => bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
            .collect(),
    }
}
