//! Mapping a pool file: `MAP_SYNC` when the device allows it, the file lock that
//! keeps a second writer out, and what kind of memory backs the pool.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{PmError, Result};
use crate::AlignedBuf;

/// `MAP_SYNC` (Linux): the kernel refuses it unless the file is on DAX.
const MAP_SYNC: libc::c_int = 0x80000;
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// What holds the pool's bytes.
pub(super) enum Backing {
    /// A shared mapping of a file, which also holds the file lock.
    Mmap { _file: File, len: usize },
    /// Private memory (volatile pools, crash images, the simulator's CPU view).
    Memory(#[allow(dead_code)] AlignedBuf),
}

pub(super) fn fs_is_tmpfs(file: &File) -> bool {
    // SAFETY: fstatfs writes into the zeroed struct we pass; the fd is open.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(file.as_raw_fd(), &mut st) == 0 && st.f_type as i64 == TMPFS_MAGIC
    }
}

/// How long a conflicting lock is retried before the open reports `InUse`.
pub(super) const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// Takes the pool file's lock: exclusive for a writable open, shared for a
/// read-only one, without blocking. The lock belongs to the open file description,
/// so it lasts as long as the mapping's `File` and dies with the process (a
/// `kill -9` leaves no stale lock). A second writer, or a reader while a writer
/// holds the pool, gets [`PmError::InUse`].
///
/// A conflict is retried for up to [`LOCK_PATIENCE`] before it is reported: a
/// process that forks (any thread of it, e.g. to spawn a program) hands the
/// child a reference to every open file description, lock included, until the
/// child execs or exits. A pool closed and reopened meanwhile would otherwise
/// see its own lock, held for those few milliseconds by someone else's child.
pub(super) fn lock_file(file: &File, path: &Path, exclusive: bool) -> Result<()> {
    let op = if exclusive {
        libc::LOCK_EX
    } else {
        libc::LOCK_SH
    };
    let deadline = std::time::Instant::now() + LOCK_PATIENCE;
    loop {
        // SAFETY: flock on an open fd has no memory effects.
        let r = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Some(libc::EWOULDBLOCK) => {
                return Err(PmError::InUse {
                    path: path.to_path_buf(),
                    wanted: if exclusive { "write" } else { "read" },
                })
            }
            _ => return Err(PmError::io(path, e)),
        }
    }
}

/// Maps `len` bytes of `file`, first trying `MAP_SHARED_VALIDATE | MAP_SYNC`
/// (accepted only on DAX), then plain `MAP_SHARED`. Returns the address and
/// whether `MAP_SYNC` was granted.
pub(super) fn map_file(
    file: &File,
    len: usize,
    read_only: bool,
) -> std::io::Result<(*mut u8, bool)> {
    let prot = if read_only {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    {
        // SAFETY: a fresh mapping of an open fd; the kernel validates the flags and
        // refuses MAP_SYNC (EOPNOTSUPP/EINVAL) unless the file is on DAX.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | MAP_SYNC,
                file.as_raw_fd(),
                0,
            )
        };
        if p != libc::MAP_FAILED {
            return Ok((p as *mut u8, true));
        }
    }
    // SAFETY: as above, without MAP_SYNC.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok((p as *mut u8, false))
}
