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
    /// A private anonymous mapping aligned to [`HUGE_PAGE`] and advised to use
    /// huge pages (large volatile pools), unmapped on drop.
    Anon { len: usize },
}

/// Bytes of an x86-64 huge page (PMD mapping).
pub(super) const HUGE_PAGE: usize = 2 << 20;

/// A free address range of `len` bytes starting at a [`HUGE_PAGE`] boundary
/// (found by reserving `len + HUGE_PAGE` and giving back what is not needed), or
/// null. A mapping placed there with `MAP_FIXED` can use 2 MiB pages wherever the
/// backing allows them (tmpfs mounted `huge=always`, DAX with aligned extents):
/// a page-table entry of a huge page needs virtual and file offsets aligned alike.
fn aligned_range(len: usize) -> *mut libc::c_void {
    if len < HUGE_PAGE {
        return std::ptr::null_mut();
    }
    // SAFETY: a fresh reservation (no access, no backing) that affects no
    // existing memory.
    let r = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + HUGE_PAGE,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let start = r as usize;
    let aligned = (start + HUGE_PAGE - 1) & !(HUGE_PAGE - 1);
    // SAFETY: both ranges lie inside the reservation just made, which nobody
    // else uses; what stays reserved is exactly aligned..aligned+len, and the
    // caller maps over it with MAP_FIXED.
    unsafe {
        if aligned > start {
            libc::munmap(r, aligned - start);
        }
        let end = start + len + HUGE_PAGE;
        if end > aligned + len {
            libc::munmap((aligned + len) as *mut libc::c_void, end - aligned - len);
        }
    }
    aligned as *mut libc::c_void
}

/// Asks for huge pages on `p..p+len` (a hint: the kernel decides; needed on
/// tmpfs mounted `huge=advise`, harmless elsewhere).
fn advise_huge(p: *mut libc::c_void, len: usize) {
    // SAFETY: p..p+len is a mapping the caller just made; madvise is a hint.
    unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
}

/// A zeroed private anonymous mapping of `len` bytes at a huge-page boundary,
/// advised to use huge pages: the memory of large volatile pools (a random
/// leaf access then costs no 4 KiB TLB miss, a nested page walk in a VM).
pub(crate) fn map_anon_huge(len: usize) -> std::io::Result<*mut u8> {
    let at = aligned_range(len);
    let fixed = if at.is_null() { 0 } else { libc::MAP_FIXED };
    // SAFETY: either a fresh mapping anywhere, or over the reservation that
    // `aligned_range` made for exactly this call.
    let p = unsafe {
        libc::mmap(
            at,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = std::io::Error::last_os_error();
        if !at.is_null() {
            // SAFETY: the reservation is ours and unused.
            unsafe { libc::munmap(at, len) };
        }
        return Err(e);
    }
    advise_huge(p, len);
    Ok(p as *mut u8)
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

/// Gives bytes `off..off + len` of the pool file their blocks now
/// (`posix_fallocate`). A pool file is sparse — an oversized pool costs no
/// space until it is used — and each range gets its blocks before it is
/// first handed out (the metadata at creation, a chunk when it is claimed),
/// so a full filesystem is an error of that call. Left to the first store,
/// it would be a `SIGBUS`.
pub(super) fn reserve(file: &File, path: &Path, off: u64, len: u64) -> Result<()> {
    let too_large = || PmError::Invalid(format!("pool range {off}+{len} is too large"));
    let o = libc::off_t::try_from(off).map_err(|_| too_large())?;
    let l = libc::off_t::try_from(len).map_err(|_| too_large())?;
    loop {
        // SAFETY: posix_fallocate on an open fd has no memory effects; it
        // returns the error number instead of setting errno.
        let r = unsafe { libc::posix_fallocate(file.as_raw_fd(), o, l) };
        match r {
            0 => return Ok(()),
            libc::EINTR => continue,
            e => {
                let os = std::io::Error::from_raw_os_error(e);
                return Err(PmError::io(
                    path,
                    std::io::Error::new(
                        os.kind(),
                        format!(
                            "the filesystem holding the pool has no room for {len} more bytes \
                             of it (pool bytes {off:#x}.., which take their space when first \
                             used): {os}"
                        ),
                    ),
                ));
            }
        }
    }
}

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
/// whether `MAP_SYNC` was granted. The mapping starts at a 2 MiB boundary and is
/// advised to use huge pages, so a device that allows them (tmpfs mounted
/// `huge=always` or `huge=advise`, DAX with aligned extents) maps the pool with
/// 2 MiB pages ([`super::Pool::page_size`] reports what the kernel chose).
pub(super) fn map_file(
    file: &File,
    len: usize,
    read_only: bool,
) -> std::io::Result<(*mut u8, bool)> {
    let at = aligned_range(len);
    let r = map_file_at(file, len, read_only, at);
    match r {
        Ok((p, _)) => advise_huge(p.cast(), len),
        Err(_) if !at.is_null() => {
            // SAFETY: the reservation is ours and unused.
            unsafe { libc::munmap(at, len) };
        }
        Err(_) => {}
    }
    r
}

fn map_file_at(
    file: &File,
    len: usize,
    read_only: bool,
    at: *mut libc::c_void,
) -> std::io::Result<(*mut u8, bool)> {
    let fixed = if at.is_null() { 0 } else { libc::MAP_FIXED };
    let prot = if read_only {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    };
    {
        // SAFETY: a fresh mapping of an open fd (anywhere, or over the reservation
        // `map_file` made for it); the kernel validates the flags and refuses
        // MAP_SYNC (EOPNOTSUPP/EINVAL) unless the file is on DAX. A refused
        // MAP_FIXED call leaves the reservation in place.
        let p = unsafe {
            libc::mmap(
                at,
                len,
                prot,
                libc::MAP_SHARED_VALIDATE | MAP_SYNC | fixed,
                file.as_raw_fd(),
                0,
            )
        };
        if p != libc::MAP_FAILED {
            return Ok((p as *mut u8, true));
        }
    }
    // SAFETY: as above, without MAP_SYNC.
    let p = unsafe { libc::mmap(at, len, prot, libc::MAP_SHARED | fixed, file.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok((p as *mut u8, false))
}
