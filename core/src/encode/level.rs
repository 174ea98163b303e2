//! Compression levels, in zstd's habit: 1 (fastest) to 9 (smallest), the
//! default one of them. A level only steers the encoder (how many programs
//! the search judges, which literal coders it weighs, how hard zstd works
//! on bytes); every level decodes with the same interpreter.

use crate::entropy::Contexts;

/// How hard compression works: [`Level::FASTEST`] (1) to [`Level::BEST`]
/// (9); [`Level::DEFAULT`] (6) is what every command uses unless told.
///
/// | level | float split | programs judged per tensor | literal coders | decoding time weighed | zstd on bytes at most |
/// |---:|---|---:|---|---:|---:|
/// | 1 | bytes | 3 | order 0 | 1x | 3 |
/// | 2 | bytes | 4 | order 0 | 1x | 3 |
/// | 3 | fields | 6 | order 0 | 1x | 6 |
/// | 4 | fields | 8 | as the prior says | 1x | 9 |
/// | 5 | fields | 16 | as the prior says | 1x | 12 |
/// | 6 | fields | 24 | as the prior says | 1x | 19 |
/// | 7 | fields | 48 | as the prior says | 1x | 19 |
/// | 8 | fields | 96 | all | 0.5x | 19 |
/// | 9 | fields | 192 | all | 0 | 19, and 19 on large headers |
///
/// The float split by bytes rotates the word by one bit and cuts it into
/// bytes (an f32's or bf16's exponent in a byte of its own, as ZipNN
/// groups them): decoded as byte streams joined, without the fields
/// split's unpacking of a sign bit and a 7-bit mantissa word by word; the
/// fast levels also leave out running sums and xors.
///
/// Order 0 leaves out the context coders (order-1 rANS and rANS
/// conditioned on a sibling field): their counts are the search's largest
/// cost, and their decoding the slowest. "As the prior says" weighs a
/// context coder only where the prior has seen it win (all of them
/// without a learned prior). "Decoding time weighed" is the price of a
/// symbol an entropy coder steps through, against the bytes it saves: at
/// 0 the smallest coding wins however slow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Level(u8);

impl Level {
    /// Level 1: floats split as bytes, the fewest programs judged, order-0
    /// coders only.
    pub const FASTEST: Level = Level(1);
    /// Level 6.
    pub const DEFAULT: Level = Level(6);
    /// Level 9: the most search, every context coder.
    pub const BEST: Level = Level(9);

    /// The level `n`, if it is one (1 to 9).
    pub fn new(n: u8) -> Option<Level> {
        (Self::FASTEST.0..=Self::BEST.0)
            .contains(&n)
            .then_some(Level(n))
    }

    /// Its number, 1 to 9.
    pub fn get(self) -> u8 {
        self.0
    }

    /// Search budget: complete programs judged per tensor.
    pub fn budget(self) -> u32 {
        [3, 4, 6, 8, 16, 24, 48, 96, 192][self.index()]
    }

    /// The context coders the literal chooser may weigh at all (the prior
    /// narrows them further).
    pub(crate) fn contexts(self) -> Contexts {
        if self.0 <= 3 {
            Contexts::NONE
        } else {
            Contexts::ALL
        }
    }

    /// Whether the prior's leaf model narrows the context coders weighed
    /// (below level 8), or every one is weighed everywhere.
    pub(crate) fn prior_leaves(self) -> bool {
        self.0 < 8
    }

    /// Weight of decoding time against bytes when literal coders are
    /// ranked (see [`LitOptions::time`](crate::entropy::LitOptions)): the
    /// best levels take every byte an entropy coder saves. (A heavier
    /// weight at the fast levels moved nothing measurable: the streams
    /// that are entropy coded save far more than a symbol's time.)
    pub(crate) fn time(self) -> f64 {
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0][self.index()]
    }

    /// Whether the search may propose production `name` (see
    /// `search::productions`): levels 1 and 2 keep to the programs that
    /// decode fastest, byte fields and literals, without running sums and
    /// xors.
    pub(crate) fn production(self, name: &str) -> bool {
        self.0 > 2 || !matches!(name, "scan_diff" | "scan_xor" | "zigzag")
    }

    /// Whether a float is split as bytes of the word rotated by one bit
    /// (the exponent in a byte of its own, as ZipNN groups it) rather
    /// than into sign, exponent and mantissa fields (a sign bit and a
    /// 7-bit mantissa are unpacked word by word): levels 1 and 2.
    pub(crate) fn fast_floats(self) -> bool {
        self.0 <= 2
    }

    /// `wanted`, the zstd level a part of the encoder would use, capped by
    /// this level.
    pub(crate) fn zstd(self, wanted: i32) -> i32 {
        let cap = [3, 3, 6, 9, 12, 19, 19, 19, 19][self.index()];
        wanted.min(cap)
    }

    /// zstd level of a tensor's byte planes (`GenericPlanes`: tables of
    /// repeated rows, such as sinusoidal position encodings): 5 up to the
    /// default, 9 above (capped as [`Level::zstd`]). On whisper's position
    /// encodings (1.15 MB) level 9 is 1.4 KB smaller than 5 and takes
    /// 13 ms against 7.5, 4% of the whole file's compression time.
    pub(crate) fn planes_zstd(self) -> i32 {
        self.zstd(if self.0 <= 6 { 5 } else { 9 })
    }

    /// Whether megabytes of opaque bytes in a tensor file (a GGUF's token
    /// tables) get the header's zstd level rather than a faster one.
    pub(crate) fn slow_big_bytes(self) -> bool {
        self.0 >= 9
    }

    fn index(self) -> usize {
        self.0 as usize - 1
    }
}

impl Default for Level {
    fn default() -> Self {
        Level::DEFAULT
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_one_to_nine_and_grow_in_effort() {
        assert_eq!(Level::new(0), None);
        assert_eq!(Level::new(10), None);
        let all: Vec<Level> = (1..=9).map(|n| Level::new(n).unwrap()).collect();
        assert_eq!(all.first(), Some(&Level::FASTEST));
        assert_eq!(all.last(), Some(&Level::BEST));
        assert_eq!(Level::default().budget(), crate::DEFAULT_BUDGET);
        for w in all.windows(2) {
            assert!(w[0].budget() < w[1].budget());
            assert!(w[0].zstd(22) <= w[1].zstd(22));
            assert!(w[0].time() >= w[1].time());
            assert!(!w[0].contexts().any() || w[1].contexts().any());
        }
        assert_eq!(Level::FASTEST.zstd(1), 1, "a cap, never a raise");
        assert!(!Level::FASTEST.contexts().any());
        assert_eq!(Level::BEST.contexts(), Contexts::ALL);
    }
}
