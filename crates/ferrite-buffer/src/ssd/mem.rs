//! A volatile SSD backend in DRAM (tests, and stores that need no durability).

use std::path::PathBuf;
use std::sync::Mutex;

use super::SsdBackend;

/// Page files as byte vectors in memory; gone with the process.
#[derive(Default)]
pub struct MemBackend {
    files: Mutex<Vec<Vec<u8>>>,
}

impl MemBackend {
    pub fn new() -> MemBackend {
        MemBackend::default()
    }
}

impl SsdBackend for MemBackend {
    fn pread(&self, file: u32, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        let files = self.files.lock().unwrap();
        let Some(f) = files.get(file as usize) else {
            return Ok(0);
        };
        let off = off as usize;
        if off >= f.len() {
            return Ok(0);
        }
        let n = buf.len().min(f.len() - off);
        buf[..n].copy_from_slice(&f[off..off + n]);
        Ok(n)
    }

    fn pwrite(&self, file: u32, off: u64, buf: &[u8]) -> std::io::Result<usize> {
        let mut files = self.files.lock().unwrap();
        if files.len() <= file as usize {
            files.resize(file as usize + 1, Vec::new());
        }
        let f = &mut files[file as usize];
        let end = off as usize + buf.len();
        if f.len() < end {
            f.resize(end, 0);
        }
        f[off as usize..end].copy_from_slice(buf);
        Ok(buf.len())
    }

    fn fdatasync(&self, _file: u32) -> std::io::Result<()> {
        Ok(())
    }

    fn path(&self, file: u32) -> PathBuf {
        PathBuf::from(format!("mem:pages.{file:04}"))
    }

    fn describe(&self) -> String {
        "page files in DRAM (volatile: nothing survives the process)".into()
    }
}
