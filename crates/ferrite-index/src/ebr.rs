//! Epoch-based reclamation whose pin costs no locked instruction.
//!
//! What it protects: leaves and out-of-line blocks unlinked from the tree
//! (handed back to the PM heap only when no reader can still hold them) and
//! replaced long-separator buffers of inner nodes. Every read of the tree
//! happens under a [`Guard`] from [`pin`]; whatever is unlinked is passed to
//! [`Guard::defer`] and runs once every thread pinned at that moment has
//! unpinned.
//!
//! Why not `crossbeam-epoch` (used until 2026-11-30): its pin orders the
//! thread's announcement before its reads with a locked read-modify-write,
//! and a lookup pins once. A throwaway copy whose lookups skipped the pin
//! measured lookups 1.06-1.16x faster (`docs/results/vldb22-2026-11-29/
//! epoch-pin-bound/`). Here the pin is two plain stores around a compiler
//! fence, and the collector pays instead, with the asymmetric barriers of
//! [`ferrite_pm::barrier`] (`membarrier`; fences where it is unavailable).
//!
//! # The protocol
//!
//! A global epoch counter `E`; each thread has a slot holding `e << 1 | 1`
//! while pinned at epoch `e` and 0 otherwise.
//!
//! - **pin** ([`pin_slot`]): `e = E` (relaxed), `slot = e << 1 | 1`
//!   (release), *light* barrier. Then the reads.
//! - **unpin** ([`unpin_slot`]): `slot = 0` (release).
//! - **retire**: the unlinking store, then the item joins the *unsealed*
//!   list (under a mutex).
//! - **collect** ([`advance`], by one thread at a time): take the unsealed
//!   list; `e0 = E`; *heavy* barrier; `t = E`, the tag of the taken items;
//!   if `t == e0` and every pinned slot holds `e0`, `E = e0 + 1` (CAS).
//!   Items tagged `t` run once `E >= t + 2` ([`expired`]).
//!
//! Why it is safe, with the two barriers ordering like `fence(SeqCst)` (C++20
//! [atomics.order]: coherence-ordered accesses on either side of two SC
//! fences fix their order): let a reader pinned as above load a pointer to
//! an item before the unlink became visible to it. (1) Its light barrier
//! precedes the collector's heavy one that follows the unlink (otherwise the
//! load would see the unlink), so the epoch it pinned at is at most the tag
//! `t`. (2) To free the item, some collector advanced `E` from `t + 1` to
//! `t + 2`; it loaded `t + 1` *before* its heavy barrier, which therefore
//! follows the reader's light barrier too (by (1) and the tag's load), so its
//! scan sees the reader's pin (at an epoch `<= t`, and does not advance) or
//! a later store of that slot, which the release/acquire pair orders after
//! the reader's reads. The order of those loads around the heavy barrier is
//! what the argument needs; `tests/loom_ebr.rs` model-checks the protocol
//! functions below (with both barriers `fence(SeqCst)`) and catches a pin
//! without its barrier and a free one epoch early.
//!
//! # Costs and policy
//!
//! A pin: a thread-local access, a relaxed load, a store, a compiler fence;
//! an unpin: a store. A collect: one `membarrier` (0.15-0.4 µs on the test
//! machine) and a walk of the slots. Collects run every 64th retirement, on
//! [`Guard::flush`], and on every 256th pin of a thread while anything is
//! waiting (so garbage of a load drains during the reads that follow, as
//! with crossbeam's collector). Slots are leaked and reused by later
//! threads; a thread that forgets a guard (`mem::forget`) keeps its slot
//! pinned and stops reclamation, as with any epoch scheme.

use std::cell::Cell;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::vlock::Word;

// ----- the protocol, generic over its atomics (loom checks this code) -------

/// The protocol's two barriers: [`ferrite_pm::barrier`] in production,
/// `fence(SeqCst)` in the loom models.
pub trait Barriers {
    /// The pinning thread's barrier between its announcement and its reads.
    fn light(&self);
    /// The collector's barrier.
    fn heavy(&self);
}

/// A slot's value while its thread is not pinned.
pub const UNPINNED: u64 = 0;

/// Announces that the slot's thread reads from now on.
#[inline(always)]
pub fn pin_slot<W: Word, B: Barriers>(epoch: &W, slot: &W, b: &B) {
    let e = epoch.load(Ordering::Relaxed);
    slot.store(e << 1 | 1, Ordering::Release);
    b.light();
}

/// The slot's thread reads no more (its reads are ordered before this).
#[inline(always)]
pub fn unpin_slot<W: Word>(slot: &W) {
    slot.store(UNPINNED, Ordering::Release);
}

/// What one collection step found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The tag of items retired (unlinked) before the step began.
    pub tag: u64,
    /// The epoch after the step (advanced by at most one).
    pub now: u64,
}

/// One collection step: tags what was retired before it and advances the
/// epoch by one if every pinned slot is at the current epoch.
pub fn advance<'s, W: Word + 's, B: Barriers>(
    epoch: &W,
    slots: impl IntoIterator<Item = &'s W>,
    b: &B,
) -> Step {
    // Loaded before the heavy barrier: the safety argument needs it there.
    let e0 = epoch.load(Ordering::Relaxed);
    b.heavy();
    // Loaded after it: the tag of every item unlinked before the step.
    let tag = epoch.load(Ordering::Acquire);
    if tag != e0 {
        return Step { tag, now: tag };
    }
    for s in slots {
        let v = s.load(Ordering::Acquire);
        if v & 1 == 1 && v >> 1 != e0 {
            return Step { tag, now: e0 };
        }
    }
    let now = match epoch.compare_exchange(e0, e0 + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => e0 + 1,
        Err(x) => x,
    };
    Step { tag, now }
}

/// Whether items tagged `tag` may run at epoch `now`.
#[inline]
pub fn expired(tag: u64, now: u64) -> bool {
    now >= tag.saturating_add(2)
}

// ----- the process's collector ---------------------------------------------------

struct Sys;

impl Barriers for Sys {
    #[inline(always)]
    fn light(&self) {
        ferrite_pm::barrier::light();
    }
    fn heavy(&self) {
        ferrite_pm::barrier::heavy();
    }
}

type Deferred = Box<dyn FnOnce() + Send>;

/// One thread's announcement, alone on its cache line. Leaked: a slot
/// outlives its thread and is reused by a later one.
#[repr(align(64))]
struct Slot {
    state: AtomicU64,
    owned: AtomicBool,
    /// The next slot of the registry (set before the slot is published).
    next: AtomicPtr<Slot>,
}

struct Global {
    epoch: AtomicU64,
    /// Every slot ever registered, newest first.
    slots: AtomicPtr<Slot>,
    unsealed: Mutex<Vec<Deferred>>,
    sealed: Mutex<VecDeque<(u64, Vec<Deferred>)>>,
    /// Items retired and not yet run.
    pending: AtomicUsize,
    retired: AtomicUsize,
    /// One collector at a time (the others skip).
    collecting: Mutex<()>,
}

static GLOBAL: Global = Global {
    epoch: AtomicU64::new(0),
    slots: AtomicPtr::new(std::ptr::null_mut()),
    unsealed: Mutex::new(Vec::new()),
    sealed: Mutex::new(VecDeque::new()),
    pending: AtomicUsize::new(0),
    retired: AtomicUsize::new(0),
    collecting: Mutex::new(()),
};

/// A collect every this many retirements.
const COLLECT_EVERY_RETIRED: usize = 64;
/// While items wait, a collect every this many pins of a thread.
const COLLECT_EVERY_PINS: u32 = 256;

struct Local {
    slot: Cell<*const Slot>,
    depth: Cell<u32>,
    pins: Cell<u32>,
}

thread_local! {
    static LOCAL: Local = const {
        Local { slot: Cell::new(std::ptr::null()), depth: Cell::new(0), pins: Cell::new(0) }
    };
    /// Gives the thread's slot back when the thread ends.
    static OWNER: Owner = const { Owner };
}

struct Owner;

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| {
            // A forgotten guard keeps the slot pinned (and leaked).
            if l.depth.get() != 0 {
                return;
            }
            let s = l.slot.replace(std::ptr::null());
            if !s.is_null() {
                // SAFETY: slots are leaked, never freed.
                let s = unsafe { &*s };
                s.state.store(UNPINNED, Ordering::Release);
                s.owned.store(false, Ordering::Release);
            }
        });
    }
}

fn slots() -> impl Iterator<Item = &'static AtomicU64> {
    let mut p = GLOBAL.slots.load(Ordering::Acquire);
    std::iter::from_fn(move || {
        // SAFETY: slots are leaked and published fully initialised (release
        // CAS on the list head, acquire loads here).
        let s = unsafe { p.as_ref()? };
        p = s.next.load(Ordering::Acquire);
        Some(&s.state)
    })
}

/// A slot for this thread: a released one, or a new one.
#[cold]
fn register() -> *const Slot {
    // Fixed before this thread's first light barrier.
    ferrite_pm::barrier::init();
    let mut p = GLOBAL.slots.load(Ordering::Acquire);
    // SAFETY: as in `slots`.
    while let Some(s) = unsafe { p.as_ref() } {
        if !s.owned.load(Ordering::Relaxed)
            && s.owned
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return s;
        }
        p = s.next.load(Ordering::Acquire);
    }
    let s: &'static Slot = Box::leak(Box::new(Slot {
        state: AtomicU64::new(UNPINNED),
        owned: AtomicBool::new(true),
        next: AtomicPtr::new(std::ptr::null_mut()),
    }));
    let mut head = GLOBAL.slots.load(Ordering::Acquire);
    loop {
        s.next.store(head, Ordering::Relaxed);
        match GLOBAL.slots.compare_exchange_weak(
            head,
            s as *const Slot as *mut Slot,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return s,
            Err(h) => head = h,
        }
    }
}

/// A pinned region of this thread: what was reachable when it began stays
/// allocated until it ends. Not `Send`: it belongs to the thread's slot.
pub struct Guard {
    _thread: PhantomData<*mut ()>,
}

/// Pins the current thread (nested pins are counted).
#[inline]
pub fn pin() -> Guard {
    let collect_now = LOCAL.with(|l| {
        let d = l.depth.get();
        l.depth.set(d + 1);
        if d != 0 {
            return false;
        }
        let mut s = l.slot.get();
        if s.is_null() {
            s = register();
            l.slot.set(s);
            // Registers the destructor that gives the slot back.
            let _ = OWNER.try_with(|_| ());
        }
        // SAFETY: slots are leaked, never freed.
        pin_slot(&GLOBAL.epoch, unsafe { &(*s).state }, &Sys);
        let n = l.pins.get().wrapping_add(1);
        l.pins.set(n);
        n % COLLECT_EVERY_PINS == 0 && GLOBAL.pending.load(Ordering::Relaxed) != 0
    });
    if collect_now {
        collect();
    }
    Guard {
        _thread: PhantomData,
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        LOCAL.with(|l| {
            let d = l.depth.get() - 1;
            l.depth.set(d);
            if d == 0 {
                // SAFETY: a guard exists only after its thread registered a
                // slot; slots are leaked, never freed.
                unpin_slot(unsafe { &(*l.slot.get()).state });
            }
        });
    }
}

impl Guard {
    /// Runs `f` once every thread pinned now has unpinned. The caller has
    /// already made what `f` frees unreachable.
    pub fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
        retire(Box::new(f));
    }

    /// [`Guard::defer`] for a closure that is not `Send` (it holds a raw
    /// pointer), run on whichever thread collects.
    ///
    /// # Safety
    ///
    /// Running `f` on another thread must be sound (what it frees is owned
    /// by nothing thread-bound).
    pub unsafe fn defer_unchecked<F: FnOnce() + 'static>(&self, f: F) {
        struct AssertSend(Box<dyn FnOnce()>);
        // SAFETY: the caller guarantees `f` may run on any thread.
        unsafe impl Send for AssertSend {}
        let f = AssertSend(Box::new(f));
        retire(Box::new(move || {
            // Moves the whole wrapper in (a closure naming only `f.0` would
            // capture the field, which is not `Send`).
            let f = f;
            (f.0)()
        }));
    }

    /// Tries to advance the epoch and runs what expired.
    pub fn flush(&self) {
        collect();
    }
}

fn retire(f: Deferred) {
    GLOBAL
        .unsealed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(f);
    GLOBAL.pending.fetch_add(1, Ordering::Relaxed);
    if GLOBAL.retired.fetch_add(1, Ordering::Relaxed) % COLLECT_EVERY_RETIRED
        == COLLECT_EVERY_RETIRED - 1
    {
        collect();
    }
}

/// One collection step; runs the expired items outside every lock.
fn collect() {
    let Ok(_one) = GLOBAL.collecting.try_lock() else {
        return;
    };
    // Taken before the heavy barrier: their unlinks precede it.
    let batch = std::mem::take(&mut *GLOBAL.unsealed.lock().unwrap_or_else(|e| e.into_inner()));
    let step = advance(&GLOBAL.epoch, slots(), &Sys);
    let mut ready = Vec::new();
    {
        let mut q = GLOBAL.sealed.lock().unwrap_or_else(|e| e.into_inner());
        if !batch.is_empty() {
            q.push_back((step.tag, batch));
        }
        while q.front().is_some_and(|(t, _)| expired(*t, step.now)) {
            if let Some((_, b)) = q.pop_front() {
                ready.extend(b);
            }
        }
    }
    drop(_one);
    GLOBAL.pending.fetch_sub(ready.len(), Ordering::Relaxed);
    for f in ready {
        f();
    }
}

#[cfg(test)]
mod tests;
