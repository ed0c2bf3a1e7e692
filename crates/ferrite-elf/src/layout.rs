//! The on-PM format of an Elf (specified in `docs/fragments/elf-format.md`).
//!
//! An Elf is one array of little-endian 32-bit words. Every flag lives in bit 31
//! of a word, so values, TIDs and word offsets are limited to 31 bits. Which flag
//! a word can carry depends only on where the word is, so one bit suffices:
//!
//! * a DimensionList entry's value word: [`LAST_ENTRY`] marks the list's last entry;
//! * a child word whose child is at a column level: [`MONO_CHILD`] = the child is a
//!   MonoList (else a DimensionList);
//! * a child word at the last column: [`TID_LIST`] = the low bits are the offset
//!   of a TID list `[n, tid_1 .. tid_n]` (else they are the row's TID itself);
//! * a MonoList's TID word: [`DUP_TIDS`] = the low bits are a count n and n TIDs
//!   follow (else the word is the one TID).

/// Flag bit of value words: last entry of a DimensionList.
pub const LAST_ENTRY: u32 = 1 << 31;
/// Flag bit of child words pointing at a column level: the child is a MonoList.
pub const MONO_CHILD: u32 = 1 << 31;
/// Flag bit of child words at the last column: offset of a TID list.
pub const TID_LIST: u32 = 1 << 31;
/// Flag bit of a MonoList's TID word: a count of duplicate TIDs follows.
pub const DUP_TIDS: u32 = 1 << 31;
/// Mask of the payload (value, TID, offset or count) under the flag bit.
pub const PAYLOAD: u32 = !(1 << 31);
/// Largest value a column may hold (the top bit is the flag).
pub const MAX_VALUE: u32 = PAYLOAD;
/// Largest row count (TIDs are 31-bit).
pub const MAX_ROWS: u64 = PAYLOAD as u64;
/// Empty slot of the dense level-0 directory (no row has that value).
pub const EMPTY: u32 = u32::MAX;
/// Words of a DimensionList header: entry count, tuples below.
pub const LIST_HEADER_WORDS: usize = 2;

// The flags must be one bit that the payload mask excludes, and `EMPTY` must not be
// a valid child word: a child offset never reaches `PAYLOAD` (the array is limited
// to `MAX_WORDS`).
const _: () = assert!(LAST_ENTRY.count_ones() == 1 && LAST_ENTRY & PAYLOAD == 0);
const _: () = assert!(MONO_CHILD.count_ones() == 1 && MONO_CHILD & PAYLOAD == 0);
const _: () = assert!(TID_LIST.count_ones() == 1 && TID_LIST & PAYLOAD == 0);
const _: () = assert!(DUP_TIDS.count_ones() == 1 && DUP_TIDS & PAYLOAD == 0);
const _: () = assert!(LAST_ENTRY | PAYLOAD == u32::MAX);
/// Largest word array (offsets stay below `PAYLOAD`, so `EMPTY` is never an offset).
pub const MAX_WORDS: u64 = PAYLOAD as u64 - 1;
const _: () = assert!(MAX_WORDS < EMPTY as u64 & PAYLOAD as u64);

/// How the level-0 node is stored.
pub mod root_kind {
    /// No rows.
    pub const EMPTY: u32 = 0;
    /// A dense directory of `card0` child words indexed by value (`EMPTY` = none).
    pub const DENSE: u32 = 1;
    /// An ordinary DimensionList (sparse first column).
    pub const LIST: u32 = 2;
}

/// Version of the Elf format (header, word array, descriptor, delta, schema).
pub const FORMAT_VERSION: u32 = 1;
/// Type name of Elf objects in the pool's root directory.
pub const OBJECT_TYPE: &str = "ferrite.elf";
/// Magic of an Elf block's header.
pub const ELF_MAGIC: u64 = u64::from_le_bytes(*b"ELFTREE1");
/// Magic of a descriptor block.
pub const DESC_MAGIC: u64 = u64::from_le_bytes(*b"ELFDESC1");
/// Magic of a delta block.
pub const DELTA_MAGIC: u64 = u64::from_le_bytes(*b"ELFDELT1");
/// Magic of a schema block.
pub const SCHEMA_MAGIC: u64 = u64::from_le_bytes(*b"ELFSCHM1");
/// Most columns an Elf supports.
pub const MAX_COLS: usize = 64;

/// Header of an Elf block; the word array follows at byte 64.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElfHeader {
    pub magic: u64,
    pub version: u32,
    pub ncols: u32,
    pub nrows: u64,
    /// Length of the word array.
    pub words: u64,
    /// One of [`root_kind`].
    pub root_kind: u32,
    /// Word offset of the level-0 node.
    pub root_off: u32,
    /// Entries of the dense directory (max value of column 0 + 1).
    pub card0: u32,
    pub _pad: u32,
    /// CRC-32C of the word array (checked at open).
    pub words_crc: u32,
    pub _pad2: u32,
    /// CRC-32 of bytes 0..56 of this header.
    pub header_crc: u64,
}
const _: () = assert!(std::mem::size_of::<ElfHeader>() == 64);
const _: () = assert!(std::mem::align_of::<ElfHeader>() == 8);

/// The current generation of an Elf object: root word 0 points at it, so one
/// 8-byte store publishes a new Elf, its delta and its schema together.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    pub magic: u64,
    pub version: u32,
    pub _pad: u32,
    pub generation: u64,
    /// Offset of the Elf block (header + words).
    pub elf_off: u64,
    /// Offset of the schema block (0 = none).
    pub schema_off: u64,
    /// Offset of the delta block.
    pub delta_off: u64,
    /// Random per-object value mixed into delta checksums, so delta entries of
    /// another object or generation never validate.
    pub nonce: u64,
    /// CRC-32 of bytes 0..56.
    pub crc: u64,
}
const _: () = assert!(std::mem::size_of::<Descriptor>() == 64);
const _: () = assert!(std::mem::align_of::<Descriptor>() == 8);

/// Header of a delta block: fixed-size entries of `ncols + 1` words follow at byte
/// 64, each `values.., crc` where the CRC covers (nonce, generation, index, values).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaHeader {
    pub magic: u64,
    pub version: u32,
    pub ncols: u32,
    pub generation: u64,
    /// Entries the block can hold.
    pub capacity: u64,
    /// TID of entry 0 (the rows of the Elf come first).
    pub base_rows: u64,
    pub nonce: u64,
    pub _pad: u64,
    /// CRC-32 of bytes 0..56.
    pub crc: u64,
}
const _: () = assert!(std::mem::size_of::<DeltaHeader>() == 64);
const _: () = assert!(std::mem::align_of::<DeltaHeader>() == 8);

/// Header of a schema block; `len` bytes of serialized [`crate::Schema`] follow.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaHeader {
    pub magic: u64,
    pub len: u64,
    pub crc: u64,
    pub _pad: [u64; 5],
}
const _: () = assert!(std::mem::size_of::<SchemaHeader>() == 64);

/// Bytes of the headers above.
pub const HEADER_BYTES: usize = 64;

/// CRC-32 of a byte slice.
pub fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The on-PM header structs: `repr(C)`, 64 bytes of integer fields with explicit
/// padding fields, so every byte is initialized and every bit pattern is valid.
pub trait Header: Copy + private::Sealed {}
impl Header for ElfHeader {}
impl Header for Descriptor {}
impl Header for DeltaHeader {}
impl Header for SchemaHeader {}
mod private {
    pub trait Sealed {}
    impl Sealed for super::ElfHeader {}
    impl Sealed for super::Descriptor {}
    impl Sealed for super::DeltaHeader {}
    impl Sealed for super::SchemaHeader {}
}

/// Views a header struct as its bytes.
pub fn bytes_of<T: Header>(v: &T) -> &[u8] {
    // SAFETY: T is one of the sealed plain-data headers (no implicit padding, all
    // bytes initialized); the slice borrows `v`.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
}

impl ElfHeader {
    pub fn seal(mut self) -> Self {
        self.header_crc = crc(&bytes_of(&self)[..56]) as u64;
        self
    }
    pub fn valid(&self) -> bool {
        self.magic == ELF_MAGIC && self.header_crc == crc(&bytes_of(self)[..56]) as u64
    }
}

impl Descriptor {
    pub fn seal(mut self) -> Self {
        self.crc = crc(&bytes_of(&self)[..56]) as u64;
        self
    }
    pub fn valid(&self) -> bool {
        self.magic == DESC_MAGIC && self.crc == crc(&bytes_of(self)[..56]) as u64
    }
}

impl DeltaHeader {
    pub fn seal(mut self) -> Self {
        self.crc = crc(&bytes_of(&self)[..56]) as u64;
        self
    }
    pub fn valid(&self) -> bool {
        self.magic == DELTA_MAGIC && self.crc == crc(&bytes_of(self)[..56]) as u64
    }
}

/// Checksum word of delta entry `index`.
pub fn delta_entry_crc(nonce: u64, generation: u64, index: u64, values: &[u32]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&nonce.to_le_bytes());
    h.update(&generation.to_le_bytes());
    h.update(&index.to_le_bytes());
    for v in values {
        h.update(&v.to_le_bytes());
    }
    // Never zero, so a zeroed entry is never valid.
    h.finalize().max(1)
}

/// CRC of a word array.
pub fn words_crc(words: &[u32]) -> u32 {
    // SAFETY: u32 has no padding; the byte view covers exactly the slice.
    let bytes = unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 4) };
    crc(bytes)
}
