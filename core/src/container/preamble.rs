//! The fixed preamble: magic, version, the original's length and SHA-256,
//! and where the segment table is.

use super::{MAGIC, MAX_TABLE_LEN, PREAMBLE_LEN};
use crate::entropy::ByteReader;
use crate::error::DecodeError;

/// The fixed preamble.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Preamble {
    pub version: u16,
    pub original_len: u64,
    pub sha256: [u8; 32],
    pub table_offset: u64,
    pub table_len: u64,
    pub table_checksum: u64,
}

impl Preamble {
    #[cfg(feature = "search")]
    pub fn write(&self) -> [u8; PREAMBLE_LEN as usize] {
        let mut b = [0u8; PREAMBLE_LEN as usize];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&self.version.to_le_bytes());
        // 6..8: flags, zero.
        b[8..16].copy_from_slice(&self.original_len.to_le_bytes());
        b[16..48].copy_from_slice(&self.sha256);
        b[48..56].copy_from_slice(&self.table_offset.to_le_bytes());
        b[56..64].copy_from_slice(&self.table_len.to_le_bytes());
        b[64..72].copy_from_slice(&self.table_checksum.to_le_bytes());
        b
    }

    pub fn read(bytes: &[u8], archive_len: u64) -> Result<Preamble, DecodeError> {
        let mut r = ByteReader::new(bytes);
        if r.bytes(4).map_err(|_| DecodeError::BadMagic)? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let version = r.u16()?;
        if !(crate::OLDEST_FORMAT_VERSION..=crate::FORMAT_VERSION).contains(&version) {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        if r.u16()? != 0 {
            return Err(DecodeError::damaged("unknown flags"));
        }
        let original_len = r.u64()?;
        let sha256: [u8; 32] = r.bytes(32)?.try_into().expect("32 bytes");
        let table_offset = r.u64()?;
        let table_len = r.u64()?;
        let table_checksum = r.u64()?;
        if table_len > MAX_TABLE_LEN {
            return Err(DecodeError::Limit {
                what: "segment table length",
                value: table_len,
                limit: MAX_TABLE_LEN,
            });
        }
        if table_offset < PREAMBLE_LEN || table_offset.checked_add(table_len) != Some(archive_len) {
            return Err(DecodeError::damaged(format!(
                "segment table [{table_offset}, +{table_len}) does not end the {archive_len}-byte archive"
            )));
        }
        Ok(Preamble {
            version,
            original_len,
            sha256,
            table_offset,
            table_len,
            table_checksum,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file cut short says so first, then where its table should be.
    #[test]
    fn a_cut_archive_is_reported_as_truncated_or_damaged() {
        let pre = Preamble {
            version: crate::FORMAT_VERSION,
            original_len: 10,
            sha256: [0; 32],
            table_offset: 565_842,
            table_len: 743,
            table_checksum: 0,
        };
        let mut b = [0u8; PREAMBLE_LEN as usize];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&pre.version.to_le_bytes());
        b[48..56].copy_from_slice(&pre.table_offset.to_le_bytes());
        b[56..64].copy_from_slice(&pre.table_len.to_le_bytes());
        let e = Preamble::read(&b, 300_000).unwrap_err();
        assert!(matches!(e, DecodeError::Damaged(_)));
        assert_eq!(
            e.to_string(),
            "archive is truncated or damaged: segment table [565842, +743) \
             does not end the 300000-byte archive"
        );
    }
}
