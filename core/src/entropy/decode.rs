//! Decoding a literal's payload with its codec.

use super::*;

/// [`rans::decode_n`] with `codec`'s number of states (vector decoding on).
pub(super) fn rans_decode<W: Word>(
    codec: Codec,
    payload: &[u8],
    n: usize,
    previous: bool,
    sibling: Option<&[W]>,
    out: &mut Vec<W>,
) -> Result<(), DecodeError> {
    if lanes(codec) == rans::WIDE {
        rans::decode_n::<W, { rans::WIDE }>(payload, n, previous, sibling, out, rans::Simd::Best)
    } else {
        rans::decode_n::<W, { rans::LANES }>(payload, n, previous, sibling, out, rans::Simd::Off)
    }
}

/// Decode `n` words of `width` bits written with `codec`, appending to `out`.
/// `sibling` is the conditioning stream for [`Codec::RansCond`]. With
/// `W = u8`, `width` must be at most 8.
pub fn decode<W: Word>(
    codec: Codec,
    payload: &[u8],
    width: u8,
    n: usize,
    sibling: Option<&[W]>,
    out: &mut Vec<W>,
) -> Result<(), DecodeError> {
    debug_assert!(std::mem::size_of::<W>() == 8 || width <= 8);
    let start = out.len();
    // Entropy-coded symbols are < 256; unpacked words are < 2^width already.
    let mut symbols = false;
    let mut fits = false;
    match codec {
        Codec::Raw => {
            let bpw = bytes_per_word(width);
            if payload.len() != n * bpw {
                return Err(DecodeError::corrupt("raw literal: wrong length"));
            }
            push_le_words(payload, bpw, out);
        }
        Codec::BitPack | Codec::PackedRans0 | Codec::PackedRans0x32 => {
            let (k, data) = decode_packed(codec, payload, width, n).expect("a packed codec")?;
            unpack_words(&data, k, n, out);
            fits = true;
        }
        Codec::Huffman => {
            huffman::decode(payload, n, out)?;
            symbols = true;
        }
        Codec::Rans0
        | Codec::Rans1
        | Codec::RansCond { .. }
        | Codec::Rans0x32
        | Codec::Rans1x32
        | Codec::RansCondx32 { .. }
        | Codec::Rans0V1
        | Codec::Rans1V1
        | Codec::RansCondV1 { .. } => {
            let previous = matches!(codec, Codec::Rans1 | Codec::Rans1x32 | Codec::Rans1V1);
            let sib = match codec.sibling() {
                Some(_) => Some(
                    sibling
                        .ok_or_else(|| DecodeError::corrupt("conditional coder without sibling"))?,
                ),
                None => None,
            };
            if matches!(
                codec,
                Codec::Rans0V1 | Codec::Rans1V1 | Codec::RansCondV1 { .. }
            ) {
                rans_v1::decode(payload, n, previous, sib, out)?;
            } else {
                rans_decode(codec, payload, n, previous, sib, out)?;
            }
            symbols = true;
        }
        Codec::Zstd => {
            let bpw = bytes_per_word(width);
            let want = n * bpw;
            let raw = super::zstd_decompress_exact(payload, want)?;
            push_le_words(&raw, bpw, out);
        }
    }
    // Words must fit the width (symbols are < 256 by construction; whole
    // bytes fit a width that is a multiple of 8).
    let needs_check = if fits {
        false
    } else if symbols {
        width < 8
    } else {
        width < 64 && !width.is_multiple_of(8)
    };
    if needs_check {
        let lim = 1u64 << width;
        if out[start..].iter().any(|&w| w.to_u64() >= lim) {
            return Err(DecodeError::corrupt("literal word wider than its type"));
        }
    }
    Ok(())
}

/// Words of `k` bits packed LSB first: `(k, bytes)`.
pub type PackedWords<'a> = (u32, std::borrow::Cow<'a, [u8]>);

/// The words of a literal that `codec` keeps packed (bit-packed, packed
/// rANS), left packed: their width `k` and `ceil(n * k / 8)` bytes holding
/// them LSB first, checked as [`decode`] checks them (a bit-packed payload
/// is lent as it is); `None` for a codec that does not pack.
pub fn decode_packed(
    codec: Codec,
    payload: &[u8],
    width: u8,
    n: usize,
) -> Option<Result<PackedWords<'_>, DecodeError>> {
    Some(match codec {
        Codec::BitPack => (|| {
            let k = *payload
                .first()
                .ok_or_else(|| DecodeError::corrupt("bitpack: empty"))? as u32;
            if k > width as u32 {
                return Err(DecodeError::corrupt("bitpack: width too large"));
            }
            let data = &payload[1..];
            if data.len() != (n * k as usize).div_ceil(8) {
                return Err(DecodeError::corrupt("bitpack: wrong length"));
            }
            Ok((k, std::borrow::Cow::Borrowed(data)))
        })(),
        Codec::PackedRans0 | Codec::PackedRans0x32 => (|| {
            if width > 4 {
                return Err(DecodeError::corrupt("packed rANS: width above 4 bits"));
            }
            let k = width as usize;
            let mut bytes: Vec<u8> = Vec::new();
            rans_decode(codec, payload, (n * k).div_ceil(8), false, None, &mut bytes)?;
            if !(n * k).is_multiple_of(8) && bytes.last().is_some_and(|&b| b >> ((n * k) % 8) != 0)
            {
                return Err(DecodeError::corrupt("packed rANS: padding bits set"));
            }
            Ok((k as u32, std::borrow::Cow::Owned(bytes)))
        })(),
        _ => return None,
    })
}
