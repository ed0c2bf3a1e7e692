//! The SSD model for crash tests: page files kept in a region of the (simulated)
//! pool itself, so that every crash image the simulator builds contains the
//! SSD state that matches its PM state.
//!
//! The model (docs/DURABILITY.md): `pwrite` stores into the region without
//! writing back, so until the file's next `fdatasync` the data is *unsynced*:
//! at a crash any subset of its 8-byte words may have reached the device (the
//! simulator treats the lines as dirty: seed 0 keeps none, seed 1 all, other
//! seeds a random choice per word, i.e. torn pages at a finer grain than any
//! real device tears). `fdatasync(file)` writes back every range written to
//! that file since its last sync and fences: after it returns those writes are
//! durable. Reads see the latest writes (the page cache's view).

use std::path::PathBuf;
use std::sync::Mutex;

use ferrite_pm::{Heap, Pool};

use super::SsdBackend;
use crate::error::{BufferError, Result};

/// Type name of the simulated SSD object.
pub const SIM_SSD_TYPE: &str = "ferrite.buffer.sim-ssd";
const SIM_MAGIC: u64 = 0x4645_5252_5353_4401;
const HEADER: u64 = 64;

/// Page files inside a pool region (crash tests).
pub struct SimBackend {
    pool: Pool,
    _heap: Heap,
    base: *mut u8,
    file_bytes: u64,
    files: u32,
    name: String,
    unsynced: Mutex<Vec<(u32, u64, usize)>>,
}

// SAFETY: `base` points into the pool mapping that `pool` keeps alive; writes to
// distinct pages come from threads that hold those pages' latches, and the
// bookkeeping is behind a mutex.
unsafe impl Send for SimBackend {}
// SAFETY: see above.
unsafe impl Sync for SimBackend {}

impl SimBackend {
    /// Opens the simulated page files of object `name`, creating `files` files
    /// of `file_bytes` bytes each when absent.
    pub fn open_or_create(
        pool: &Pool,
        name: &str,
        file_bytes: u64,
        files: u32,
    ) -> Result<SimBackend> {
        let (id, _) = pool.open_or_create_object(name, SIM_SSD_TYPE)?;
        let (heap, _) = pool.open_heap(id, |m| {
            let r = pool.root(id, 0);
            if r != 0 {
                m.mark(r)?;
            }
            Ok(())
        })?;
        let mut region = pool.root(id, 0);
        if region == 0 {
            let total = HEADER + file_bytes * files as u64;
            region = heap.alloc_zeroed(total as usize)?;
            let h = pool.slice(region, 32)?;
            h.write(0, &SIM_MAGIC.to_le_bytes())?;
            h.write(8, &file_bytes.to_le_bytes())?;
            h.write(16, &(files as u64).to_le_bytes())?;
            h.persist()?;
            pool.set_root(id, 0, region)?;
        }
        let h = pool.slice(region, 32)?;
        let (magic, fb, nf) = (h.read_u64(0)?, h.read_u64(8)?, h.read_u64(16)?);
        let size = heap.block_size(region).unwrap_or(0) as u64;
        if magic != SIM_MAGIC || nf > u32::MAX as u64 || HEADER + fb.saturating_mul(nf) > size {
            return Err(BufferError::corrupt(
                name,
                "simulated SSD header is invalid",
            ));
        }
        Ok(SimBackend {
            base: pool.at(region + HEADER, (fb * nf) as usize),
            pool: pool.clone(),
            _heap: heap,
            file_bytes: fb,
            files: nf as u32,
            name: name.to_string(),
            unsynced: Mutex::new(Vec::new()),
        })
    }

    fn range(&self, file: u32, off: u64, len: usize) -> Option<*mut u8> {
        if file >= self.files || off.checked_add(len as u64)? > self.file_bytes {
            return None;
        }
        // SAFETY: file and range are within the region (checked).
        Some(unsafe {
            self.base
                .add((file as u64 * self.file_bytes + off) as usize)
        })
    }
}

impl SsdBackend for SimBackend {
    fn pread(&self, file: u32, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if file >= self.files || off >= self.file_bytes {
            return Ok(0);
        }
        let n = buf.len().min((self.file_bytes - off) as usize);
        let p = self.range(file, off, n).expect("checked");
        // SAFETY: p..p+n is inside the region; the caller holds the page's latch.
        unsafe { std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n) };
        Ok(n)
    }

    fn pwrite(&self, file: u32, off: u64, buf: &[u8]) -> std::io::Result<usize> {
        let Some(p) = self.range(file, off, buf.len()) else {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        };
        // SAFETY: p..p+len is inside the region (checked); plain stores, not
        // written back: unsynced until fdatasync.
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), p, buf.len()) };
        self.unsynced.lock().unwrap().push((file, off, buf.len()));
        Ok(buf.len())
    }

    fn fdatasync(&self, file: u32) -> std::io::Result<()> {
        let mine: Vec<(u32, u64, usize)> = {
            let mut u = self.unsynced.lock().unwrap();
            let (mine, rest) = u.drain(..).partition(|r| r.0 == file);
            *u = rest;
            mine
        };
        if mine.is_empty() {
            return Ok(());
        }
        for (f, off, len) in mine {
            let p = self.range(f, off, len).expect("recorded in range");
            self.pool.flush(p, len);
        }
        self.pool
            .fence()
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    fn path(&self, file: u32) -> PathBuf {
        PathBuf::from(format!("sim:{}/pages.{file:04}", self.name))
    }

    fn describe(&self) -> String {
        format!(
            "simulated page files in pool object {:?} (durable at fdatasync, unsynced writes torn at crashes)",
            self.name
        )
    }
}
