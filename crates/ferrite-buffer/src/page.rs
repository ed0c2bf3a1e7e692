//! The buffer manager's part of every page (bytes 0..32) and the meta page
//! (page 0). Byte layouts are in docs/FORMAT.md.
//!
//! | bytes | field |
//! | --- | --- |
//! | 0..8 | page id |
//! | 8..16 | LSN of the write (SSD images only) |
//! | 16..20 | CRC-32 of the page without this field (SSD images only) |
//! | 20 | kind: 0 unformatted, 1 meta, 2 free, 16.. data structures |
//! | 21 | page format version |
//! | 24..32 | next free page (free pages) |
//!
//! Data structures own bytes 32.. of their pages.

/// First byte a data structure may use.
pub const DS_HEADER: usize = 32;
/// Page format version.
pub const PAGE_FORMAT: u8 = 1;

/// Page kinds (byte 20).
pub mod kind {
    pub const UNFORMATTED: u8 = 0;
    pub const META: u8 = 1;
    pub const FREE: u8 = 2;
    /// First kind a data structure may register.
    pub const FIRST_DS: u8 = 16;
}

pub(crate) const OFF_PID: usize = 0;
pub(crate) const OFF_LSN: usize = 8;
pub(crate) const OFF_CRC: usize = 16;
/// Offset of the kind byte.
pub const OFF_KIND: usize = 20;
pub(crate) const OFF_VERSION: usize = 21;
pub(crate) const OFF_NEXT_FREE: usize = 24;

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

pub(crate) fn read_pid(page: &[u8]) -> u64 {
    u64_at(page, OFF_PID)
}

pub(crate) fn read_crc(page: &[u8]) -> u32 {
    u32::from_le_bytes(page[OFF_CRC..OFF_CRC + 4].try_into().expect("4 bytes"))
}

/// CRC-32 of the page, the CRC field excluded.
pub(crate) fn crc(page: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&page[..OFF_CRC]);
    h.update(&page[OFF_CRC + 4..]);
    h.finalize()
}

/// Stamps an outgoing SSD image with its page id, LSN and checksum.
pub(crate) fn stamp(img: &mut [u8], pid: u64, lsn: u64) {
    img[OFF_PID..OFF_PID + 8].copy_from_slice(&pid.to_le_bytes());
    img[OFF_LSN..OFF_LSN + 8].copy_from_slice(&lsn.to_le_bytes());
    let c = crc(img);
    img[OFF_CRC..OFF_CRC + 4].copy_from_slice(&c.to_le_bytes());
}

/// The meta page (page 0): allocation state and the catalog of named
/// structures (each with a root page).
pub mod meta {
    /// Magic of a formatted meta page.
    pub const MAGIC: u64 = 0x4645_5252_4D45_5441;
    pub const OFF_MAGIC: usize = 32;
    pub const OFF_STORE_ID: usize = 40;
    pub const OFF_NEXT_PID: usize = 48;
    pub const OFF_FREE_HEAD: usize = 56;
    pub const OFF_NTREES: usize = 64;
    pub const OFF_NEXT_TREE_ID: usize = 68;
    /// First catalog entry.
    pub const CATALOG: usize = 128;
    /// Bytes per catalog entry.
    pub const ENTRY: usize = 64;
    /// Longest structure name.
    pub const MAX_NAME: usize = 39;
    /// Entry fields: name length (1 byte) + name (39 bytes), structure id, kind, root page.
    pub const E_NAME_LEN: usize = 0;
    pub const E_NAME: usize = 1;
    pub const E_ID: usize = 40;
    pub const E_KIND: usize = 44;
    pub const E_ROOT: usize = 48;

    /// Catalog entries a meta page of `page_size` bytes holds.
    pub fn capacity(page_size: usize) -> usize {
        (page_size - CATALOG) / ENTRY
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamped_images_verify_and_any_flip_breaks_them() {
        let mut p = vec![0u8; 1024];
        p[100] = 7;
        stamp(&mut p, 42, 9);
        assert_eq!(read_pid(&p), 42);
        assert_eq!(read_crc(&p), crc(&p));
        p[500] ^= 1;
        assert_ne!(read_crc(&p), crc(&p));
    }
}
