//! The pool header: creation of a new one, validation of a found one, and the
//! order in which a new pool's header reaches PM (magic last).

use crate::error::{PmError, Result};
use crate::layout::{self, PoolHeader, FORMAT_VERSION, MAGIC};

use super::Pool;

pub(super) fn bad(msg: impl Into<String>) -> PmError {
    PmError::BadPool(msg.into())
}
/// Reads the header from its bytes and checks everything that can be checked
/// without the rest of the pool. `avail` is how many bytes the file or image has.
pub(super) fn validate_header(raw: &[u8], avail: u64) -> Result<PoolHeader> {
    if raw.len() < std::mem::size_of::<PoolHeader>() {
        return Err(bad(format!(
            "truncated: {avail} bytes, smaller than a pool header"
        )));
    }
    if raw.iter().all(|&b| b == 0) {
        return Err(bad(
            "not a Ferrite pool: the header is all zeros (never initialised, or wiped)",
        ));
    }
    // SAFETY: raw holds at least size_of::<PoolHeader>() bytes; read_unaligned
    // copes with any alignment and every bit pattern is a valid PoolHeader.
    let h: PoolHeader = unsafe { std::ptr::read_unaligned(raw.as_ptr() as *const PoolHeader) };
    if h.magic != MAGIC {
        return Err(bad("not a Ferrite pool (bad magic number)"));
    }
    if h.checksum != h.compute_checksum() {
        if h.version > FORMAT_VERSION {
            return Err(PmError::NewerVersion {
                found: h.version,
                supported: FORMAT_VERSION,
            });
        }
        return Err(bad(format!(
            "header checksum mismatch (stored {:#x}, computed {:#x}): the header is corrupt",
            h.checksum,
            h.compute_checksum()
        )));
    }
    if h.version > FORMAT_VERSION {
        return Err(PmError::NewerVersion {
            found: h.version,
            supported: FORMAT_VERSION,
        });
    }
    if h.version < FORMAT_VERSION {
        return Err(PmError::OlderVersion {
            found: h.version,
            supported: FORMAT_VERSION,
        });
    }
    if h.pool_size > avail {
        return Err(bad(format!(
            "truncated: the file has {avail} bytes but the header says {}",
            h.pool_size
        )));
    }
    let cs = h.chunk_size;
    if !cs.is_power_of_two() || !(layout::MIN_CHUNK..=layout::MAX_CHUNK).contains(&cs) {
        return Err(bad(format!("invalid chunk size {cs} in the header")));
    }
    match layout::plan(h.pool_size, cs) {
        Some((d, t, heap, n))
            if d == h.dir_off
                && t == h.chunk_table_off
                && heap == h.heap_off
                && n == h.chunk_count
                && h.dir_entries == layout::DIR_ENTRIES as u64
                && h.header_bytes as u64 == layout::HEADER_BYTES => {}
        _ => return Err(bad("the header's geometry is inconsistent")),
    }
    Ok(h)
}

pub(super) fn new_header(size: u64, chunk_size: u64, flags: u64) -> Result<PoolHeader> {
    if !chunk_size.is_power_of_two()
        || !(layout::MIN_CHUNK..=layout::MAX_CHUNK).contains(&chunk_size)
    {
        return Err(PmError::Invalid(format!(
            "chunk size {chunk_size} must be a power of two between {} and {}",
            layout::MIN_CHUNK,
            layout::MAX_CHUNK
        )));
    }
    if size < layout::MIN_POOL {
        return Err(PmError::Invalid(format!(
            "pool size {size} is below the minimum of {} bytes",
            layout::MIN_POOL
        )));
    }
    let (dir_off, table_off, heap_off, count) =
        layout::plan(size, chunk_size).ok_or_else(|| {
            PmError::Invalid(format!("pool size {size} holds no {chunk_size}-byte chunk"))
        })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut h = PoolHeader {
        magic: MAGIC,
        version: FORMAT_VERSION,
        header_bytes: layout::HEADER_BYTES as u32,
        pool_size: size,
        chunk_size,
        chunk_count: count,
        dir_off,
        dir_entries: layout::DIR_ENTRIES as u64,
        chunk_table_off: table_off,
        heap_off,
        pool_uuid: crate::rng::random_u64(),
        created_unix: now,
        flags,
        checksum: 0,
    };
    h.checksum = h.compute_checksum();
    Ok(h)
}

impl Pool {
    /// Writes the header of a fresh, zeroed backing. The magic goes last so a
    /// torn creation is "not a pool".
    pub(super) fn format(&self) -> Result<()> {
        let h = self.inner.header;
        let hp = self.inner.base as *mut PoolHeader;
        let mut without_magic = h;
        without_magic.magic = [0; 8];
        // SAFETY: the mapping is at least HEADER_BYTES long and page aligned.
        unsafe { hp.write(without_magic) };
        self.persist(hp as *const u8, std::mem::size_of::<PoolHeader>())?;
        // SAFETY: as above; the magic is the first field.
        unsafe { (*hp).magic = MAGIC };
        self.persist(hp as *const u8, 8)
    }
}
