//! Asymmetric memory barriers: a cheap *light* barrier for the frequent side
//! of a protocol and an expensive *heavy* one for the rare side, which
//! together order like two `fence(SeqCst)` (the asymmetric fences of
//! userspace RCU and folly).
//!
//! On Linux the light barrier is only a compiler fence and the heavy one is
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which makes every running
//! thread of the process execute a full fence (about 0.15 µs alone, 0.4 µs
//! with a second thread running, measured on the 2-core test machine). Where
//! `membarrier` is unavailable, or `FERRITE_FENCES=1` is set
//! (`FERRITE_GATE_FENCES=1` is the older spelling), both are
//! `fence(SeqCst)`.
//!
//! Users: the facade's writer gate (announcements) and the index's epoch pin
//! (`ferrite_index::ebr`). The mode is decided once per process, before the
//! first light barrier of any thread ([`init`]), and never changes: a light
//! barrier that is only a compiler fence must always meet a heavy barrier
//! that is a real `membarrier`.

use std::sync::atomic::{AtomicU8, Ordering};

const MODE_UNSET: u8 = 0;
const MODE_MEMBARRIER: u8 = 1;
const MODE_FENCE: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(MODE_UNSET);

/// Chooses the barriers: `membarrier` when the kernel grants this process
/// private expedited barriers, fences otherwise. Idempotent; every user calls
/// it before its first light barrier (per thread or per structure) and in
/// [`heavy`].
pub fn init() {
    if MODE.load(Ordering::Acquire) != MODE_UNSET {
        return;
    }
    let m = if sys::register() {
        MODE_MEMBARRIER
    } else {
        MODE_FENCE
    };
    // A racing initialiser computed the same answer.
    let _ = MODE.compare_exchange(MODE_UNSET, m, Ordering::AcqRel, Ordering::Acquire);
}

/// True when the light barrier is only a compiler fence (`membarrier`).
/// False before [`init`] ran (the light barrier is then a full fence).
#[inline(always)]
pub fn uses_membarrier() -> bool {
    MODE.load(Ordering::Relaxed) == MODE_MEMBARRIER
}

/// The frequent side's barrier. Orders like `fence(SeqCst)` against every
/// [`heavy`] barrier of the process.
#[inline(always)]
pub fn light() {
    if uses_membarrier() {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// The rare side's barrier: a full fence on every running thread of the
/// process (and on this one).
pub fn heavy() {
    init();
    if uses_membarrier() {
        // The system call is a full barrier on this thread too (the kernel
        // issues one) and, being opaque, a compiler barrier.
        sys::barrier();
    } else {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// The barriers chosen for this process: `"membarrier"` or `"fences"`.
pub fn mode() -> &'static str {
    init();
    if uses_membarrier() {
        "membarrier"
    } else {
        "fences"
    }
}

#[cfg(target_os = "linux")]
mod sys {
    // From <linux/membarrier.h>.
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(cmd: libc::c_long) -> bool {
        // SAFETY: membarrier(2) takes two integers (cmd, flags) and a cpu id
        // and touches no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            ) == 0
        }
    }

    /// Registers the process for private expedited barriers.
    pub(super) fn register() -> bool {
        if super::fences_forced(|v| std::env::var_os(v).is_some()) {
            return false;
        }
        call(CMD_REGISTER_PRIVATE_EXPEDITED)
    }

    /// A full memory barrier on every running thread of this process.
    pub(super) fn barrier() {
        if call(CMD_PRIVATE_EXPEDITED) {
            return;
        }
        // A child forked from a registered process is not registered (the
        // registration belongs to the address space): register, then retry.
        if call(CMD_REGISTER_PRIVATE_EXPEDITED) && call(CMD_PRIVATE_EXPEDITED) {
            return;
        }
        // The kernel granted the registration once and refuses the barrier
        // now: light barriers rely on it, so going on would break the
        // writer gate's exclusion and the epoch's reclamation.
        let e = std::io::Error::last_os_error();
        eprintln!(
            "ferrite: membarrier failed after registration ({e}); aborting to keep data consistent"
        );
        std::process::abort();
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    pub(super) fn register() -> bool {
        false
    }
    pub(super) fn barrier() {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// Whether the environment (`set`: is this variable set?) asks for fences:
/// `FERRITE_FENCES`, or its older spelling `FERRITE_GATE_FENCES`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn fences_forced(set: impl Fn(&str) -> bool) -> bool {
    set("FERRITE_FENCES") || set("FERRITE_GATE_FENCES")
}

#[cfg(test)]
mod tests {
    #[test]
    fn both_spellings_force_fences() {
        let only = |name: &'static str| move |v: &str| v == name;
        assert!(super::fences_forced(only("FERRITE_FENCES")));
        assert!(super::fences_forced(only("FERRITE_GATE_FENCES")));
        assert!(!super::fences_forced(only("FERRITE_FENCE")));
        assert!(!super::fences_forced(|_| false));
    }

    #[test]
    fn the_mode_is_decided_once_and_both_barriers_run() {
        let m = super::mode();
        assert!(m == "membarrier" || m == "fences");
        super::light();
        super::heavy();
        assert_eq!(super::mode(), m);
    }
}
