//! Element types of tensors and how their words split into fields.

use std::fmt;

/// A safetensors element type. The wire id is stable across format versions.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[non_exhaustive]
pub enum Dtype {
    /// Booleans, one byte each.
    Bool,
    /// 4-bit float (e2m1), packed two per byte by safetensors.
    F4,
    /// 6-bit floats, packed.
    F6E2M3,
    /// 6-bit floats, packed.
    F6E3M2,
    /// Unsigned 8-bit.
    U8,
    /// Signed 8-bit.
    I8,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits.
    F8E4M3,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits.
    F8E5M2,
    /// 8-bit power-of-two scale.
    F8E8M0,
    /// Signed 16-bit.
    I16,
    /// Unsigned 16-bit.
    U16,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 32-bit.
    I32,
    /// Unsigned 32-bit.
    U32,
    /// IEEE single.
    F32,
    /// Signed 64-bit.
    I64,
    /// Unsigned 64-bit.
    U64,
    /// IEEE double.
    F64,
    /// A byte stream that is no tensor (headers, gaps, other files).
    Bytes,
}

/// Sign / exponent / mantissa widths of a float format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloatLayout {
    /// Exponent bits.
    pub exponent: u8,
    /// Mantissa bits.
    pub mantissa: u8,
}

const ALL: [Dtype; 20] = [
    Dtype::Bool,
    Dtype::F4,
    Dtype::F6E2M3,
    Dtype::F6E3M2,
    Dtype::U8,
    Dtype::I8,
    Dtype::F8E4M3,
    Dtype::F8E5M2,
    Dtype::F8E8M0,
    Dtype::I16,
    Dtype::U16,
    Dtype::F16,
    Dtype::BF16,
    Dtype::I32,
    Dtype::U32,
    Dtype::F32,
    Dtype::I64,
    Dtype::U64,
    Dtype::F64,
    Dtype::Bytes,
];

impl Dtype {
    /// Stable wire id.
    pub fn wire_id(self) -> u8 {
        ALL.iter().position(|d| *d == self).unwrap_or(0) as u8
    }

    /// Inverse of [`Dtype::wire_id`].
    pub fn from_wire_id(id: u8) -> Option<Dtype> {
        ALL.get(id as usize).copied()
    }

    /// Parse the safetensors spelling (`"BF16"`, `"F8_E4M3"`, ...).
    pub fn from_safetensors(s: &str) -> Option<Dtype> {
        Some(match s {
            "BOOL" => Dtype::Bool,
            "F4" => Dtype::F4,
            "F6_E2M3" => Dtype::F6E2M3,
            "F6_E3M2" => Dtype::F6E3M2,
            "U8" => Dtype::U8,
            "I8" => Dtype::I8,
            "F8_E4M3" => Dtype::F8E4M3,
            "F8_E5M2" => Dtype::F8E5M2,
            "F8_E8M0" => Dtype::F8E8M0,
            "I16" => Dtype::I16,
            "U16" => Dtype::U16,
            "F16" => Dtype::F16,
            "BF16" => Dtype::BF16,
            "I32" => Dtype::I32,
            "U32" => Dtype::U32,
            "F32" => Dtype::F32,
            "I64" => Dtype::I64,
            "U64" => Dtype::U64,
            "F64" => Dtype::F64,
            _ => return None,
        })
    }

    /// The safetensors spelling.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6E2M3 => "F6_E2M3",
            Dtype::F6E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E8M0 => "F8_E8M0",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
            Dtype::F64 => "F64",
            Dtype::Bytes => "BYTES",
        }
    }

    /// Width in bits of the physical word a tensor of this dtype is a stream
    /// of. Sub-byte types are coded as their packed bytes.
    pub fn word_bits(self) -> u8 {
        match self {
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 64,
            _ => 8,
        }
    }

    /// Bytes per word.
    pub fn word_bytes(self) -> usize {
        self.word_bits() as usize / 8
    }

    /// IEEE field layout, when the words are floats.
    pub fn float_layout(self) -> Option<FloatLayout> {
        let (exponent, mantissa) = match self {
            Dtype::F64 => (11, 52),
            Dtype::F32 => (8, 23),
            Dtype::F16 => (5, 10),
            Dtype::BF16 => (8, 7),
            Dtype::F8E4M3 => (4, 3),
            Dtype::F8E5M2 => (5, 2),
            _ => return None,
        };
        Some(FloatLayout { exponent, mantissa })
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_ids_round_trip_and_names_parse() {
        for d in ALL {
            assert_eq!(Dtype::from_wire_id(d.wire_id()), Some(d));
            if d != Dtype::Bytes {
                assert_eq!(Dtype::from_safetensors(d.name()), Some(d));
            }
        }
        assert_eq!(Dtype::from_wire_id(200), None);
        assert_eq!(Dtype::BF16.float_layout().unwrap().mantissa, 7);
    }
}
