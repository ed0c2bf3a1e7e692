//! Page files on a real filesystem, read and written with `O_DIRECT` so that
//! the OS page cache does not hide the device. Where the filesystem refuses
//! `O_DIRECT` (tmpfs, some network filesystems) or the page size is below
//! 4 KiB, the files are opened for buffered I/O and [`SsdBackend::describe`]
//! says so.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use super::SsdBackend;

/// Page files `pages.0000`, `pages.0001`, … in a directory.
pub struct DirectFiles {
    dir: PathBuf,
    files: RwLock<Vec<Option<Arc<File>>>>,
    direct: bool,
    note: String,
}

fn file_name(i: u32) -> String {
    format!("pages.{i:04}")
}

impl DirectFiles {
    /// Opens (creating) the directory and decides between `O_DIRECT` and
    /// buffered I/O by opening a probe file with `O_DIRECT`.
    pub fn open(dir: impl AsRef<Path>, page_size: usize) -> std::io::Result<DirectFiles> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let (direct, note) = if page_size < 4096 {
            (
                false,
                format!("buffered I/O: pages of {page_size} B are below the 4 KiB O_DIRECT unit (the OS page cache may serve reads)"),
            )
        } else {
            let probe = dir.join(".odirect-probe");
            let r = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .custom_flags(libc::O_DIRECT)
                .open(&probe);
            let _ = std::fs::remove_file(&probe);
            match r {
                Ok(_) => (true, "O_DIRECT (the OS page cache is bypassed)".to_string()),
                Err(e) => (
                    false,
                    format!("buffered I/O: the filesystem refused O_DIRECT ({e}); the OS page cache may serve reads"),
                ),
            }
        };
        Ok(DirectFiles {
            dir,
            files: RwLock::new(Vec::new()),
            direct,
            note,
        })
    }

    /// Opens the directory for buffered I/O (no `O_DIRECT`), e.g. to test how a
    /// failed `fdatasync` of the page cache is handled.
    pub fn buffered(dir: impl AsRef<Path>) -> std::io::Result<DirectFiles> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)?;
        Ok(DirectFiles {
            dir,
            files: RwLock::new(Vec::new()),
            direct: false,
            note: "buffered I/O (asked for): the OS page cache may serve reads".into(),
        })
    }

    /// Whether `O_DIRECT` is in use.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The directory of the page files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn file(&self, i: u32, create: bool) -> std::io::Result<Option<Arc<File>>> {
        if let Some(Some(f)) = self.files.read().unwrap().get(i as usize) {
            return Ok(Some(f.clone()));
        }
        let mut files = self.files.write().unwrap();
        if let Some(Some(f)) = files.get(i as usize) {
            return Ok(Some(f.clone()));
        }
        let path = self.dir.join(file_name(i));
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(create).truncate(false);
        if self.direct {
            o.custom_flags(libc::O_DIRECT);
        }
        let f = match o.open(&path) {
            Ok(f) => Arc::new(f),
            Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if files.len() <= i as usize {
            files.resize(i as usize + 1, None);
        }
        files[i as usize] = Some(f.clone());
        Ok(Some(f))
    }
}

impl SsdBackend for DirectFiles {
    fn pread(&self, file: u32, off: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        match self.file(file, false)? {
            Some(f) => f.read_at(buf, off),
            None => Ok(0),
        }
    }

    fn pwrite(&self, file: u32, off: u64, buf: &[u8]) -> std::io::Result<usize> {
        let f = self.file(file, true)?.expect("created");
        f.write_at(buf, off)
    }

    fn fdatasync(&self, file: u32) -> std::io::Result<()> {
        match self.file(file, false)? {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    fn path(&self, file: u32) -> PathBuf {
        self.dir.join(file_name(file))
    }

    fn describe(&self) -> String {
        format!("page files in {}: {}", self.dir.display(), self.note)
    }
}
