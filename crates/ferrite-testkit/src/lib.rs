//! Test support shared by Ferrite's test suites (a dev-dependency only; no
//! library crate depends on it).
//!
//! * [`FailingDisk`]: a real block device that fails writes: an ext4
//!   filesystem on a loop device whose backing file lives on a tiny tmpfs, so
//!   once more data is written back than the tmpfs holds, the loop device's
//!   writes fail and `msync` / `fsync` / `fdatasync` / `O_DIRECT` writes on the
//!   filesystem return real errors (ENOSPC or EIO) from the kernel.
//! * [`FullFs`]: a tiny tmpfs mount, for "disk full" on ordinary writes.
//!
//! * [`SlotTable`]: a small persistent structure (slots of published blocks)
//!   that exercises the allocator in crash targets, kill -9 tests and benchmarks.
//!
//! The devices need root (mount, losetup), which the project's machines and CI have.
//! When they cannot be set up, tests fail with the reason, unless
//! `FERRITE_SKIP_PRIVILEGED=1` is set, in which case [`FailingDisk::new`]
//! returns `None` and the caller prints that it skipped.

mod slot_table;

pub use slot_table::{SlotTable, SlotValue, SLOT_TABLE_TYPE};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn unique_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("ferrite-{tag}-{}-{n}", std::process::id()))
}

/// `None` when skipping privileged tests is allowed; otherwise fails the test.
fn skip_allowed<T>(why: &str) -> Option<T> {
    if std::env::var("FERRITE_SKIP_PRIVILEGED").as_deref() == Ok("1") {
        eprintln!("skipped (FERRITE_SKIP_PRIVILEGED=1): {why}");
        None
    } else {
        panic!(
            "cannot set up a real failing device: {why}. These tests need root, \
             losetup, mkfs.ext4 and mount (set FERRITE_SKIP_PRIVILEGED=1 to skip them)"
        );
    }
}

/// A tmpfs of a few MiB mounted on a fresh directory; unmounted on drop.
pub struct FullFs {
    dir: PathBuf,
}

impl FullFs {
    /// A tmpfs of `bytes` bytes (rounded up to pages by the kernel).
    pub fn new(bytes: u64) -> Option<FullFs> {
        let dir = unique_dir("fullfs");
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return skip_allowed(&format!("mkdir {}: {e}", dir.display()));
        }
        let opt = format!("size={bytes}");
        match run(
            "mount",
            &["-t", "tmpfs", "-o", &opt, "tmpfs", dir.to_str().unwrap()],
        ) {
            Ok(_) => Some(FullFs { dir }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                skip_allowed(&e)
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for FullFs {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", self.dir.to_str().unwrap()]);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// An ext4 filesystem on a loop device whose backing store holds only
/// `backing` bytes: writing back more than that fails in the block layer.
pub struct FailingDisk {
    backing: Option<FullFs>,
    loopdev: String,
    mnt: PathBuf,
}

impl FailingDisk {
    /// A filesystem of `fs_bytes` (what `df` shows, so page faults and delayed
    /// allocation succeed) on a backing store of `backing_bytes` (what really
    /// fits; the excess fails at write-back). `backing_bytes` must hold the
    /// filesystem's metadata: 8 MiB for a 64 MiB filesystem is enough.
    pub fn new(fs_bytes: u64, backing_bytes: u64) -> Option<FailingDisk> {
        let backing = FullFs::new(backing_bytes)?;
        let img = backing.path().join("disk.img");
        let setup = (|| -> Result<(String, PathBuf), String> {
            let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
            f.set_len(fs_bytes).map_err(|e| e.to_string())?;
            let dev = run("losetup", &["-f", "--show", img.to_str().unwrap()])?;
            let mnt = unique_dir("failing-disk");
            let r = (|| {
                run(
                    "mkfs.ext4",
                    &[
                        "-q",
                        "-F",
                        "-E",
                        "lazy_itable_init=1,lazy_journal_init=1",
                        &dev,
                    ],
                )?;
                std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
                run("mount", &[&dev, mnt.to_str().unwrap()])?;
                Ok(())
            })();
            if let Err(e) = r {
                let _ = run("losetup", &["-d", &dev]);
                let _ = std::fs::remove_dir(&mnt);
                return Err(e);
            }
            Ok((dev, mnt))
        })();
        match setup {
            Ok((loopdev, mnt)) => Some(FailingDisk {
                backing: Some(backing),
                loopdev,
                mnt,
            }),
            Err(e) => skip_allowed(&e),
        }
    }

    /// The mounted filesystem's root.
    pub fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for FailingDisk {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", self.mnt.to_str().unwrap()]);
        let _ = run("losetup", &["-d", &self.loopdev]);
        let _ = std::fs::remove_dir(&self.mnt);
        self.backing.take();
    }
}
