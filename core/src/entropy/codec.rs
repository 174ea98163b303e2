//! The literal codecs and their stable wire ids.

use super::*;

/// A literal's wire codec. Wire ids are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Codec {
    /// Each word in `ceil(width / 8)` little-endian bytes.
    Raw,
    /// Each word in `k` bits (LSB first), `k` = bits of the largest word.
    BitPack,
    /// Canonical Huffman, order 0.
    Huffman,
    /// rANS, order 0.
    Rans0,
    /// rANS, order 1: the table is chosen by the previous word (of the
    /// same quarter of the stream).
    Rans1,
    /// rANS conditioned on an earlier sibling of the enclosing `Merge`:
    /// the table is chosen by the sibling's word at the same index.
    RansCond {
        /// Index of the sibling (must be smaller than this child's index).
        sibling: u8,
    },
    /// zstd frame of the raw little-endian bytes (for generic data).
    Zstd,
    /// Words of at most 4 bits packed LSB first into bytes (as
    /// [`Codec::BitPack`] with `k = width`, without its `k` byte), then the
    /// bytes in order-0 rANS: one symbol per byte instead of per word, and
    /// the byte histogram sees patterns of neighbouring words (signs).
    PackedRans0,
    /// [`Codec::Rans0`] with 32 states (symbol `i` uses state `i % 32`):
    /// for long streams, which decode 16 symbols per vector step.
    Rans0x32,
    /// [`Codec::RansCond`] with 32 states.
    RansCondx32 {
        /// Index of the sibling (must be smaller than this child's index).
        sibling: u8,
    },
    /// [`Codec::PackedRans0`] with the bytes in [`Codec::Rans0x32`].
    PackedRans0x32,
    /// [`Codec::Rans1`] with 32 states, over 32 segments of the stream.
    Rans1x32,
    /// Format v1's order-0 rANS (byte renormalization). Decode only.
    Rans0V1,
    /// Format v1's order-1 rANS (one serial chain). Decode only.
    Rans1V1,
    /// Format v1's conditional rANS. Decode only.
    RansCondV1 {
        /// Index of the sibling (must be smaller than this child's index).
        sibling: u8,
    },
}

impl Codec {
    /// Stable wire id.
    pub fn wire_id(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::BitPack => 1,
            Codec::Huffman => 2,
            Codec::Rans0V1 => 3,
            Codec::Rans1V1 => 4,
            Codec::RansCondV1 { .. } => 5,
            Codec::Zstd => 6,
            Codec::Rans0 => 7,
            Codec::Rans1 => 8,
            Codec::RansCond { .. } => 9,
            Codec::PackedRans0 => 10,
            Codec::Rans0x32 => 11,
            Codec::RansCondx32 { .. } => 12,
            Codec::PackedRans0x32 => 13,
            Codec::Rans1x32 => 14,
        }
    }

    /// This codec with the number of states right for a stream of
    /// `symbols` symbols: the 32-state variant of the v2 rANS codecs from
    /// [`WIDE_SYMBOLS`] on (where its 112 extra bytes of final states cost
    /// under 0.1% of a stream at 2 bits a symbol), the 4-state one below.
    /// Other codecs are returned as they are.
    pub fn fit(self, symbols: usize) -> Codec {
        let wide = symbols >= WIDE_SYMBOLS;
        match self {
            Codec::Rans0 | Codec::Rans0x32 if wide => Codec::Rans0x32,
            Codec::Rans0 | Codec::Rans0x32 => Codec::Rans0,
            Codec::Rans1 | Codec::Rans1x32 if wide => Codec::Rans1x32,
            Codec::Rans1 | Codec::Rans1x32 => Codec::Rans1,
            Codec::RansCond { sibling } | Codec::RansCondx32 { sibling } if wide => {
                Codec::RansCondx32 { sibling }
            }
            Codec::RansCond { sibling } | Codec::RansCondx32 { sibling } => {
                Codec::RansCond { sibling }
            }
            Codec::PackedRans0 | Codec::PackedRans0x32 if wide => Codec::PackedRans0x32,
            Codec::PackedRans0 | Codec::PackedRans0x32 => Codec::PackedRans0,
            c => c,
        }
    }

    /// Whether two codecs are the same coder up to the number of states.
    pub fn same_kind(self, other: Codec) -> bool {
        self.fit(0) == other.fit(0)
    }

    /// Whether the codec codes each symbol under a context (order 1 or a
    /// sibling's word).
    pub fn contextual(self) -> bool {
        matches!(
            self,
            Codec::Rans1
                | Codec::Rans1x32
                | Codec::Rans1V1
                | Codec::RansCond { .. }
                | Codec::RansCondx32 { .. }
                | Codec::RansCondV1 { .. }
        )
    }

    /// The conditioning sibling's index, for the conditional coders.
    pub fn sibling(self) -> Option<u8> {
        match self {
            Codec::RansCond { sibling }
            | Codec::RansCondx32 { sibling }
            | Codec::RansCondV1 { sibling } => Some(sibling),
            _ => None,
        }
    }

    /// Short name used in program text.
    pub fn name(self) -> String {
        match self {
            Codec::Raw => "raw".into(),
            Codec::BitPack => "bits".into(),
            Codec::Huffman => "huff".into(),
            Codec::Rans0 => "rans0".into(),
            Codec::Rans1 => "rans1".into(),
            Codec::RansCond { sibling } => format!("rans|{sibling}"),
            Codec::Zstd => "zstd".into(),
            Codec::PackedRans0 => "pack+rans0".into(),
            Codec::Rans0x32 => "rans0x32".into(),
            Codec::RansCondx32 { sibling } => format!("rans|{sibling}x32"),
            Codec::PackedRans0x32 => "pack+rans0x32".into(),
            Codec::Rans1x32 => "rans1x32".into(),
            Codec::Rans0V1 => "rans0.v1".into(),
            Codec::Rans1V1 => "rans1.v1".into(),
            Codec::RansCondV1 { sibling } => format!("rans|{sibling}.v1"),
        }
    }
}
