//! The SSD tier: page files behind an [`SsdBackend`], the system-call layer
//! (`pread`, `pwrite`, `fdatasync` on a numbered file), so that tests can fail
//! or tear any call ([`FaultyBackend`]) and the crash simulator can see the
//! files ([`SimBackend`]).
//!
//! Page `p` lives at offset `(p % pages_per_file) * page_size` of file
//! `p / pages_per_file`. A page image on SSD carries its page id, the LSN of
//! the write and a CRC-32 of the page (bytes 0..32 belong to the buffer
//! manager, see docs/FORMAT.md); reads outside restart's redo verify both.
//! Bytes beyond a file's end read as zeros (a page never written).

mod direct;
mod faulty;
mod mem;
mod sim;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use direct::DirectFiles;
pub use faulty::{Fault, FaultControl, FaultyBackend};
pub use mem::MemBackend;
pub use sim::SimBackend;

use crate::error::{BufferError, Result};
use crate::page;

/// The system-call layer of the SSD tier. Implementations are thread-safe;
/// offsets and lengths are multiples of the page size and buffers are 4 KiB
/// aligned (what `O_DIRECT` needs).
pub trait SsdBackend: Send + Sync {
    /// Reads into `buf` at `off` of file `file`; returns the bytes read (fewer
    /// at the end of the file, 0 beyond it or for a file that does not exist).
    fn pread(&self, file: u32, off: u64, buf: &mut [u8]) -> std::io::Result<usize>;
    /// Writes `buf` at `off` of file `file` (creating the file); returns the
    /// bytes written.
    fn pwrite(&self, file: u32, off: u64, buf: &[u8]) -> std::io::Result<usize>;
    /// Makes the data written to `file` durable.
    fn fdatasync(&self, file: u32) -> std::io::Result<()>;
    /// The path of file `file` (for messages).
    fn path(&self, file: u32) -> PathBuf;
    /// What the backend is and how durable its writes are, in words
    /// (e.g. whether `O_DIRECT` is in use).
    fn describe(&self) -> String;
}

impl<B: SsdBackend + ?Sized> SsdBackend for std::sync::Arc<B> {
    fn pread(&self, file: u32, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        (**self).pread(file, off, buf)
    }
    fn pwrite(&self, file: u32, off: u64, buf: &[u8]) -> std::io::Result<usize> {
        (**self).pwrite(file, off, buf)
    }
    fn fdatasync(&self, file: u32) -> std::io::Result<()> {
        (**self).fdatasync(file)
    }
    fn path(&self, file: u32) -> PathBuf {
        (**self).path(file)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// Counters of the SSD tier.
#[derive(Debug, Default)]
pub(crate) struct SsdCounters {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub syncs: AtomicU64,
}

/// The SSD tier over a backend.
pub(crate) struct SsdTier {
    backend: Arc<dyn SsdBackend>,
    page_size: usize,
    pages_per_file: u64,
    capacity: u64,
    dirty_files: Mutex<BTreeSet<u32>>,
    failed: Mutex<Option<String>>,
    pub counters: SsdCounters,
}

impl SsdTier {
    pub fn new(
        backend: Arc<dyn SsdBackend>,
        page_size: usize,
        pages_per_file: u64,
        capacity: u64,
    ) -> SsdTier {
        SsdTier {
            backend,
            page_size,
            pages_per_file,
            capacity,
            dirty_files: Mutex::new(BTreeSet::new()),
            failed: Mutex::new(None),
            counters: SsdCounters::default(),
        }
    }

    pub fn backend(&self) -> &Arc<dyn SsdBackend> {
        &self.backend
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    fn place(&self, pid: u64) -> (u32, u64) {
        (
            (pid / self.pages_per_file) as u32,
            (pid % self.pages_per_file) * self.page_size as u64,
        )
    }

    fn io_err(&self, op: &'static str, file: u32, e: std::io::Error) -> BufferError {
        BufferError::Io {
            op,
            path: self.backend.path(file),
            source: e,
        }
    }

    /// The error that stopped SSD writes, if any.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().unwrap().clone()
    }

    fn fail(&self, e: &BufferError) {
        let mut f = self.failed.lock().unwrap();
        if f.is_none() {
            *f = Some(e.to_string());
        }
    }

    fn check_healthy(&self) -> Result<()> {
        match self.failure() {
            Some(m) => Err(BufferError::SsdFailed(m)),
            None => Ok(()),
        }
    }

    /// Reads page `pid` into `buf` (a page). With `verify`, a page that is not
    /// all zeros must carry its own page id and a matching checksum.
    pub fn read_page(&self, pid: u64, buf: &mut [u8], verify: bool) -> Result<()> {
        debug_assert_eq!(buf.len(), self.page_size);
        if pid >= self.capacity {
            return Err(BufferError::corrupt(
                "SSD page files",
                format!(
                    "page {pid} is beyond the capacity of {} pages",
                    self.capacity
                ),
            ));
        }
        let (file, off) = self.place(pid);
        let mut done = 0;
        while done < buf.len() {
            let n = self
                .backend
                .pread(file, off + done as u64, &mut buf[done..])
                .map_err(|e| self.io_err("read", file, e))?;
            if n == 0 {
                break;
            }
            done += n;
        }
        buf[done..].fill(0);
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        if verify && buf.iter().any(|&b| b != 0) {
            let got = page::read_pid(buf);
            if got != pid {
                return Err(BufferError::corrupt(
                    self.backend.path(file).display().to_string(),
                    format!("the slot of page {pid} holds page {got}"),
                ));
            }
            let (stored, computed) = (page::read_crc(buf), page::crc(buf));
            if stored != computed {
                return Err(BufferError::corrupt(
                    self.backend.path(file).display().to_string(),
                    format!("page {pid}: checksum {stored:#x}, computed {computed:#x} (a torn or damaged page)"),
                ));
            }
        }
        Ok(())
    }

    /// Writes `img` (a page image, unswizzled) as page `pid`, stamping its page
    /// id, `lsn` and checksum. Not durable until [`SsdTier::sync`].
    pub fn write_page(&self, pid: u64, img: &mut [u8], lsn: u64) -> Result<()> {
        self.check_healthy()?;
        if pid >= self.capacity {
            return Err(BufferError::CapacityExceeded(format!(
                "page {pid} is beyond the SSD capacity of {} pages",
                self.capacity
            )));
        }
        page::stamp(img, pid, lsn);
        let (file, off) = self.place(pid);
        let mut done = 0;
        while done < img.len() {
            match self.backend.pwrite(file, off + done as u64, &img[done..]) {
                Ok(0) => {
                    let e = self.io_err("write", file, std::io::Error::other("wrote 0 bytes"));
                    self.fail(&e);
                    return Err(e);
                }
                Ok(n) => done += n,
                Err(e) => {
                    let e = self.io_err("write", file, e);
                    self.fail(&e);
                    return Err(e);
                }
            }
        }
        self.dirty_files.lock().unwrap().insert(file);
        self.counters.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// `fdatasync`s every file written since the last sync. A failure is
    /// sticky: the tier refuses writes until the store is reopened.
    pub fn sync(&self) -> Result<()> {
        self.check_healthy()?;
        let files: Vec<u32> = std::mem::take(&mut *self.dirty_files.lock().unwrap())
            .into_iter()
            .collect();
        for (i, &f) in files.iter().enumerate() {
            if let Err(e) = self.backend.fdatasync(f) {
                let e = self.io_err("fdatasync", f, e);
                self.fail(&e);
                // The files not synced stay dirty (the failure is sticky anyway).
                self.dirty_files.lock().unwrap().extend(&files[i..]);
                return Err(e);
            }
            self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
