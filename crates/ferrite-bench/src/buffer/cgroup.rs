//! Memory budgets for child processes through the cgroup v1 memory
//! controller: [`MemCgroup::create`] makes a cgroup with `memory.limit_in_bytes`
//! set, [`MemCgroup::spawn`] starts a command inside it (the child joins the
//! cgroup between fork and exec, so every page it touches, the OS page cache
//! of the files it reads included, is charged to it from the start), and
//! dropping the handle empties and removes the cgroup.
//!
//! The cgroup is created inside the memory cgroup of the calling process
//! (`/sys/fs/cgroup/memory/<own cgroup>/<name>`), so the child is still
//! accounted to whatever limits the caller runs under. Needs root and the
//! v1 memory controller mounted at `/sys/fs/cgroup/memory`.

use std::fs::{self, File};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// Where the v1 memory controller is mounted.
pub const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// A memory cgroup with a limit, removed on drop.
#[derive(Debug)]
pub struct MemCgroup {
    path: PathBuf,
    limit: u64,
}

/// The cgroup's memory accounting (`memory.*` files).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemUsage {
    /// `memory.max_usage_in_bytes`: the peak charge (anonymous + page cache).
    pub max_usage: u64,
    /// `memory.usage_in_bytes` now.
    pub usage: u64,
    /// `cache` of `memory.stat`: page cache charged now.
    pub cache: u64,
    /// `memory.failcnt`: how often the limit was hit (and reclaim ran).
    pub failcnt: u64,
}

/// The path of this process's memory cgroup under [`MEMORY_ROOT`].
fn own_memory_cgroup() -> io::Result<PathBuf> {
    let s = fs::read_to_string("/proc/self/cgroup")?;
    for line in s.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrl, path) = (parts.next(), parts.next(), parts.next());
        if let (Some(ctrl), Some(path)) = (ctrl, path) {
            if ctrl.split(',').any(|c| c == "memory") {
                return Ok(Path::new(MEMORY_ROOT).join(path.trim_start_matches('/')));
            }
        }
    }
    Ok(PathBuf::from(MEMORY_ROOT))
}

fn read_u64(p: &Path) -> io::Result<u64> {
    fs::read_to_string(p)?
        .trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", p.display())))
}

/// Whether the v1 memory controller is mounted and this process may create
/// cgroups in it (root).
pub fn available() -> bool {
    Path::new(MEMORY_ROOT).join("memory.limit_in_bytes").exists()
        // SAFETY: geteuid has no preconditions.
        && unsafe { libc::geteuid() } == 0
}

impl MemCgroup {
    /// Creates cgroup `name` (made unique with the process id) limited to
    /// `limit` bytes.
    pub fn create(name: &str, limit: u64) -> io::Result<MemCgroup> {
        if !Path::new(MEMORY_ROOT)
            .join("memory.limit_in_bytes")
            .exists()
        {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("the cgroup v1 memory controller is not mounted at {MEMORY_ROOT}"),
            ));
        }
        let parent = own_memory_cgroup()?;
        let path = parent.join(format!("{name}-{}", std::process::id()));
        if path.exists() {
            let _ = fs::remove_dir(&path);
        }
        fs::create_dir(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", path.display())))?;
        let cg = MemCgroup { path, limit };
        fs::write(cg.path.join("memory.limit_in_bytes"), limit.to_string())?;
        let set = read_u64(&cg.path.join("memory.limit_in_bytes"))?;
        if set > limit {
            return Err(io::Error::other(format!(
                "{}: the limit reads back as {set}, not {limit}",
                cg.path.display()
            )));
        }
        Ok(cg)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Starts `cmd` inside the cgroup: the child writes itself into
    /// `cgroup.procs` before it executes the program.
    pub fn spawn(&self, cmd: &mut Command) -> io::Result<Child> {
        let procs = File::options()
            .write(true)
            .open(self.path.join("cgroup.procs"))?;
        let fd = procs.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and only
        // calls write(2) on a descriptor the parent keeps open until spawn
        // returns; write is async-signal-safe and nothing is allocated.
        unsafe {
            cmd.pre_exec(move || {
                // "0": the writing process itself.
                let r = libc::write(fd, b"0\n".as_ptr().cast(), 2);
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn();
        drop(procs);
        child
    }

    /// The cgroup's accounting now.
    pub fn usage(&self) -> io::Result<MemUsage> {
        let stat = fs::read_to_string(self.path.join("memory.stat"))?;
        let cache = stat
            .lines()
            .find_map(|l| l.strip_prefix("cache "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Ok(MemUsage {
            max_usage: read_u64(&self.path.join("memory.max_usage_in_bytes"))?,
            usage: read_u64(&self.path.join("memory.usage_in_bytes"))?,
            cache,
            failcnt: read_u64(&self.path.join("memory.failcnt"))?,
        })
    }

    /// Resets the peak (`memory.max_usage_in_bytes`) to the current usage.
    pub fn reset_peak(&self) -> io::Result<()> {
        fs::write(self.path.join("memory.max_usage_in_bytes"), "0")
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Uncharge the page cache (to the parent), then remove the directory;
        // it fails only while a process is still inside.
        let _ = fs::write(self.path.join("memory.force_empty"), "0");
        let _ = fs::remove_dir(&self.path);
    }
}

/// Writes back and drops `path`'s pages from the OS page cache (so the next
/// reader, e.g. a child in a memory cgroup, faults them in and is charged).
pub fn evict_file(path: &Path) -> io::Result<()> {
    let f = File::open(path)?;
    f.sync_all()?;
    // SAFETY: a valid descriptor; posix_fadvise only advises the kernel.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// [`evict_file`] for every file under `dir` (recursively).
pub fn evict_dir(dir: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        let ft = e.file_type()?;
        if ft.is_dir() {
            evict_dir(&e.path())?;
        } else if ft.is_file() {
            evict_file(&e.path())?;
        }
    }
    Ok(())
}

/// Writes `bytes` of data to `path` (for tests and calibration).
pub fn write_file(path: &Path, bytes: u64) -> io::Result<()> {
    let mut f = File::create(path)?;
    let chunk = vec![0xa5u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Reads `file` with `cat` in a cgroup limited to `limit`; returns its
    /// accounting after the child exits.
    fn read_in_cgroup(file: &Path, limit: u64) -> MemUsage {
        evict_file(file).unwrap();
        let cg = MemCgroup::create("ferrite-test-cg", limit).unwrap();
        assert!(cg.path().starts_with(MEMORY_ROOT));
        let mut cmd = Command::new("cat");
        cmd.arg(file).stdout(std::process::Stdio::null());
        let st = cg.spawn(&mut cmd).unwrap().wait().unwrap();
        assert!(st.success());
        let u = cg.usage().unwrap();
        let p = cg.path().to_path_buf();
        drop(cg);
        assert!(!p.exists(), "the cgroup is removed on drop");
        u
    }

    #[test]
    fn a_child_is_held_to_its_memory_budget_page_cache_included() {
        assert!(
            available(),
            "needs root and the cgroup v1 memory controller at {MEMORY_ROOT}"
        );
        let dir = std::env::temp_dir().join(format!("ferrite-cg-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("data");
        write_file(&file, 96 * MIB).unwrap();
        // Without a tight limit, reading the file charges its page cache:
        // the accounting sees the whole file.
        let loose = read_in_cgroup(&file, 1024 * MIB);
        assert!(loose.max_usage >= 80 * MIB, "{loose:?}");
        assert!(loose.cache >= 80 * MIB, "{loose:?}");
        // With a 16 MiB budget the same read stays under it: the kernel
        // reclaims the child's page cache instead.
        let tight = read_in_cgroup(&file, 16 * MIB);
        assert!(tight.max_usage <= 16 * MIB, "{tight:?}");
        assert!(tight.cache <= 16 * MIB, "{tight:?}");
        assert!(tight.failcnt > 0, "the limit was hit: {tight:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
