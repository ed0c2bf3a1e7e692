//! The on-PM pool format, version [`FORMAT_VERSION`]. `docs/FORMAT.md` describes
//! the same bytes for readers who do not read Rust.
//!
//! ```text
//! 0              4 KiB                     dir_off + 128*DIR_ENTRIES     heap_off
//! | PoolHeader   | root directory (DirEntry x DIR_ENTRIES) | chunk table (u64 x chunks) | chunks ...
//! ```

use std::mem::{align_of, size_of};

/// First 8 bytes of every pool file.
pub const MAGIC: [u8; 8] = *b"FERRITE\x01";
/// Format version written by this build; opens accept exactly this version.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes reserved for the header (one page).
pub const HEADER_BYTES: u64 = 4096;
/// Number of named objects a pool can hold.
pub const DIR_ENTRIES: usize = 128;
/// Smallest and largest chunk size accepted at creation.
pub const MIN_CHUNK: u64 = 16 * 1024;
pub const MAX_CHUNK: u64 = 64 * 1024 * 1024;
/// Default chunk size: large enough for the biggest size class, small enough that
/// a structure with few blocks does not pin much memory.
pub const DEFAULT_CHUNK: u64 = 256 * 1024;
/// Smallest pool accepted at creation.
pub const MIN_POOL: u64 = 256 * 1024;

/// The pool header. Immutable after creation, protected by `checksum`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PoolHeader {
    pub magic: [u8; 8],
    pub version: u32,
    pub header_bytes: u32,
    pub pool_size: u64,
    pub chunk_size: u64,
    pub chunk_count: u64,
    pub dir_off: u64,
    pub dir_entries: u64,
    pub chunk_table_off: u64,
    pub heap_off: u64,
    pub pool_uuid: u64,
    pub created_unix: u64,
    pub flags: u64,
    /// CRC-32C-style checksum (crc32fast, IEEE polynomial) of all bytes above it.
    pub checksum: u64,
}

const _: () = assert!(size_of::<PoolHeader>() == 104);
const _: () = assert!(align_of::<PoolHeader>() == 8);

impl PoolHeader {
    /// Bytes covered by the checksum.
    pub const CHECKED_BYTES: usize = 96;

    pub fn compute_checksum(&self) -> u64 {
        // SAFETY: PoolHeader is repr(C), has no padding (asserted by the size), and
        // the first CHECKED_BYTES bytes are plain integers.
        let bytes = unsafe {
            std::slice::from_raw_parts(self as *const Self as *const u8, Self::CHECKED_BYTES)
        };
        crc32fast::hash(bytes) as u64
    }
}

/// One named object of the root directory: 128 bytes, two cache lines.
///
/// `state` is written last (and persisted separately) when an object is created,
/// so a torn creation leaves a free entry. `roots` are the structure's own
/// mutable words (typically offsets of its root blocks), updated with 8-byte
/// atomic stores; they are not covered by `crc`.
#[repr(C, align(128))]
#[derive(Clone, Copy, Debug)]
pub struct DirEntry {
    pub state: u64,
    pub roots: [u64; ROOT_WORDS],
    pub type_len: u8,
    pub name_len: u8,
    pub _pad: [u8; 2],
    /// crc32 of `type_len`, `name_len`, `type_name` and `name`.
    pub crc: u32,
    pub type_name: [u8; MAX_TYPE_NAME],
    pub name: [u8; MAX_NAME],
}

/// Mutable root words per object.
pub const ROOT_WORDS: usize = 6;
/// Longest object type name, in bytes.
pub const MAX_TYPE_NAME: usize = 24;
/// Longest object name, in bytes.
pub const MAX_NAME: usize = 40;
/// `DirEntry::state` of a live entry.
pub const ENTRY_VALID: u64 = 0x5641_4c49_4400_0001; // "VALID" tag + 1

const _: () = assert!(size_of::<DirEntry>() == 128);
const _: () = assert!(align_of::<DirEntry>() == 128);

impl DirEntry {
    pub fn compute_crc(&self) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&[self.type_len, self.name_len]);
        h.update(&self.type_name);
        h.update(&self.name);
        h.finalize()
    }

    pub fn type_str(&self) -> String {
        let n = (self.type_len as usize).min(MAX_TYPE_NAME);
        String::from_utf8_lossy(&self.type_name[..n]).into_owned()
    }

    pub fn name_str(&self) -> String {
        let n = (self.name_len as usize).min(MAX_NAME);
        String::from_utf8_lossy(&self.name[..n]).into_owned()
    }
}

/// Kind of a chunk-table entry (low 8 bits).
pub mod chunk_kind {
    pub const FREE: u64 = 0;
    /// A chunk cut into blocks of one size class.
    pub const SMALL: u64 = 1;
    /// First chunk of a large block spanning `run` chunks.
    pub const LARGE_HEAD: u64 = 2;
    /// A following chunk of a large block.
    pub const LARGE_TAIL: u64 = 3;
}

/// A decoded chunk-table entry. Encoding (little-endian u64):
/// bits 0..8 kind, 8..16 size class, 16..32 owner (directory index + 1),
/// 32..64 run length in chunks (large heads only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkEntry {
    pub kind: u64,
    pub class: u8,
    pub owner: u16,
    pub run: u32,
}

impl ChunkEntry {
    pub const FREE: ChunkEntry = ChunkEntry {
        kind: chunk_kind::FREE,
        class: 0,
        owner: 0,
        run: 0,
    };

    pub fn encode(self) -> u64 {
        self.kind | (self.class as u64) << 8 | (self.owner as u64) << 16 | (self.run as u64) << 32
    }

    pub fn decode(w: u64) -> ChunkEntry {
        ChunkEntry {
            kind: w & 0xff,
            class: (w >> 8) as u8,
            owner: (w >> 16) as u16,
            run: (w >> 32) as u32,
        }
    }
}

/// Block sizes of small allocations. Below 256 B they are multiples of 64 (one
/// cache line); from 256 B on, multiples of 256 (PM's internal block), so every
/// block of 256 B or more is 256-byte aligned.
pub const SIZE_CLASSES: [u32; 19] = [
    64, 128, 192, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576,
    32768, 49152, 65536,
];

const _: () = {
    let mut i = 0;
    while i < SIZE_CLASSES.len() {
        let c = SIZE_CLASSES[i];
        assert!(c.is_multiple_of(64));
        assert!(c < 256 || c.is_multiple_of(256));
        i += 1;
    }
};

/// Index of the smallest class that holds `size` bytes and fits `chunk_size / 4`,
/// or `None` for a large (whole-chunk) allocation.
pub fn class_for(size: usize, chunk_size: u64) -> Option<usize> {
    let limit = chunk_size / 4;
    SIZE_CLASSES
        .iter()
        .position(|&c| c as usize >= size && c as u64 <= limit)
}

/// Header flags.
pub mod flags {
    /// The pool was created for the crash simulator.
    pub const SIMULATED: u64 = 1;
}

/// Computes the layout of a new pool of `pool_size` bytes.
pub fn plan(pool_size: u64, chunk_size: u64) -> Option<(u64, u64, u64, u64)> {
    let dir_off = HEADER_BYTES;
    let table_off = dir_off + (DIR_ENTRIES as u64) * 128;
    // chunk_count * (chunk_size + 8) + table_off <= pool_size, heap page-aligned.
    let mut count = pool_size.saturating_sub(table_off) / (chunk_size + 8);
    loop {
        if count == 0 {
            return None;
        }
        let heap_off = (table_off + count * 8).next_multiple_of(4096);
        if heap_off + count * chunk_size <= pool_size {
            return Some((dir_off, table_off, heap_off, count));
        }
        count -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_entries_round_trip() {
        let e = ChunkEntry {
            kind: chunk_kind::LARGE_HEAD,
            class: 7,
            owner: 65535,
            run: 123_456,
        };
        assert_eq!(ChunkEntry::decode(e.encode()), e);
        assert_eq!(ChunkEntry::decode(0), ChunkEntry::FREE);
    }

    #[test]
    fn classes_respect_the_chunk_limit() {
        assert_eq!(class_for(1, DEFAULT_CHUNK), Some(0));
        assert_eq!(class_for(65, DEFAULT_CHUNK), Some(1));
        assert_eq!(class_for(257, DEFAULT_CHUNK), Some(4));
        assert_eq!(class_for(65536, DEFAULT_CHUNK), Some(18));
        assert_eq!(class_for(65537, DEFAULT_CHUNK), None);
        assert_eq!(class_for(8192, MIN_CHUNK), None);
        assert_eq!(class_for(4096, MIN_CHUNK), Some(10));
    }

    #[test]
    fn plan_fits_the_pool() {
        for size in [MIN_POOL, 1 << 20, 3 << 20, 1 << 30] {
            let (_, table, heap, count) = plan(size, MIN_CHUNK).unwrap();
            assert!(heap >= table + count * 8);
            assert!(heap + count * MIN_CHUNK <= size);
            assert_eq!(heap % 4096, 0);
        }
        assert!(plan(4096, MIN_CHUNK).is_none());
    }
}
