//! The writer gate of one map: what makes compare-and-swap, `update_with` and
//! transactions atomic with respect to the map's other writers. Readers never
//! pass through it (they rely on the index's own isolation).
//!
//! 64 stripes, chosen by a hash of the key, each with a reader-writer lock
//! and a bit in the gate's exclusion mask:
//!
//! | operation | takes |
//! | --- | --- |
//! | insert / update / upsert / remove | nothing shared: it *announces* itself (below) |
//! | write batch | the stripes of its keys' locks, shared, in ascending order |
//! | compare-and-swap, `update_with` | its key's stripe lock exclusively, then excludes announced writers of that stripe |
//! | transaction | every stripe lock exclusively, in ascending order, then excludes every announced writer of the map, until it ends |
//!
//! **Announcements (the single-key fast path).** A locked read-modify-write
//! costs about 25 ns on the machines Ferrite is measured on, and a plain write
//! through a reader-writer lock needs two of them, which was 6-7 % of a
//! durable insert. So a single-key writer takes no lock: each thread owns a
//! slot (one cache line, registered once per thread), and a writer stores
//! "map M, stripe s" into its own slot, passes a *light* barrier, and checks
//! the map's exclusion mask; if bit s is clear it writes, then clears its
//! slot. An exclusive holder sets the bits it needs, passes a *heavy*
//! barrier and waits until no slot announces one of its stripes. This is
//! Dekker's protocol: with both barriers full fences, either the writer sees
//! the bit (and backs off to the stripe lock, which blocks until the
//! exclusive holder is done) or the holder sees the announcement (and waits
//! for it to end). On Linux the light barrier is only a compiler fence and
//! the heavy one is `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, which
//! makes every running thread of the process execute a full fence (the
//! asymmetric fences of userspace RCU and folly): writers pay two plain
//! stores and a load, exclusive holders a system call (0.15-0.4 µs). Where
//! `membarrier` is unavailable both barriers are `fence(SeqCst)` (the
//! barriers live in `ferrite_pm::barrier`, shared with the index's epoch pin). The protocol
//! is model-checked with loom below (`loom_*` tests, with the fence
//! barriers), including a variant without the barrier that loom catches.
//!
//! Stripes are always taken in ascending order and a holder of an exclusive
//! stripe waits for no other stripe, only for announced writes to end (which
//! wait for nothing of the gate), so the gate cannot deadlock by itself.
//!
//! A thread that holds a transaction (or runs `update_with`'s closure) and
//! then writes through the map would wait for itself forever: the gate
//! notices (the transaction's owner token, a thread-local marker for
//! `update_with`) and the write fails with `TransactionActive` instead.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ferrite_pm::barrier;

use parking_lot::lock_api::RawRwLock as _;
use parking_lot::RawRwLock;

/// Number of stripes (a bit per stripe in a `u64` mask).
pub(crate) const STRIPES: usize = 64;

/// The part of a slot value that names the gate (gates are 64-byte aligned,
/// so the low six bits hold the stripe).
const GATE_BITS: u64 = !(STRIPES as u64 - 1);

// ----- the protocol, generic over its atomics (loom checks this code) -------

/// The atomic word and barriers the announcement protocol runs on: std's in
/// production, loom's in the model checks.
pub(crate) trait Word: Sync {
    fn load(&self, o: Ordering) -> u64;
    fn store(&self, v: u64, o: Ordering);
    fn fetch_or(&self, v: u64, o: Ordering) -> u64;
    fn fetch_and(&self, v: u64, o: Ordering) -> u64;
}

/// The two sides' barriers and the wait of an exclusive holder.
pub(crate) trait Barriers {
    /// The writer's barrier between its announcement and its check.
    fn light(&self);
    /// The exclusive holder's barrier between setting its bits and reading
    /// the slots.
    fn heavy(&self);
    /// One step of waiting for an announced write to end.
    fn spin(&self);
}

/// Writer side: announces `tag` in `slot` and checks `bit` of `excl`. True:
/// the caller may write and must [`leave`] afterwards. False: an exclusive
/// holder has the stripe; the announcement is withdrawn.
#[inline]
pub(crate) fn try_announce<W: Word, B: Barriers>(
    slot: &W,
    excl: &W,
    tag: u64,
    bit: u64,
    b: &B,
) -> bool {
    slot.store(tag, Ordering::Relaxed);
    b.light();
    if excl.load(Ordering::Acquire) & bit == 0 {
        return true;
    }
    slot.store(0, Ordering::Release);
    false
}

/// Writer side: the announced write is over.
#[inline]
pub(crate) fn leave<W: Word>(slot: &W) {
    slot.store(0, Ordering::Release);
}

/// Exclusive side (the caller already excludes other exclusive holders of
/// these stripes): sets `mask` in `excl`, then waits until no slot holds a
/// value `announces` says is one of them.
pub(crate) fn exclude<'s, W: Word + 's, B: Barriers>(
    excl: &W,
    mask: u64,
    slots: impl Iterator<Item = &'s W>,
    announces: impl Fn(u64) -> bool,
    b: &B,
) {
    excl.fetch_or(mask, Ordering::Relaxed);
    b.heavy();
    for s in slots {
        while announces(s.load(Ordering::Acquire)) {
            b.spin();
        }
    }
}

/// Exclusive side: writers of `mask` may announce again.
pub(crate) fn readmit<W: Word>(excl: &W, mask: u64) {
    excl.fetch_and(!mask, Ordering::Release);
}

// ----- production atomics and barriers ---------------------------------------

impl Word for AtomicU64 {
    #[inline]
    fn load(&self, o: Ordering) -> u64 {
        AtomicU64::load(self, o)
    }
    #[inline]
    fn store(&self, v: u64, o: Ordering) {
        AtomicU64::store(self, v, o)
    }
    #[inline]
    fn fetch_or(&self, v: u64, o: Ordering) -> u64 {
        AtomicU64::fetch_or(self, v, o)
    }
    #[inline]
    fn fetch_and(&self, v: u64, o: Ordering) -> u64 {
        AtomicU64::fetch_and(self, v, o)
    }
}

/// The process's barriers: `ferrite_pm::barrier` (`membarrier` or fences,
/// decided once per process).
struct SysBarriers;

impl SysBarriers {
    /// Fixes the barrier mode before any writer of a gate runs (every
    /// `Gate::new` calls it).
    fn init() {
        barrier::init();
    }
}

impl Barriers for SysBarriers {
    #[inline(always)]
    fn light(&self) {
        barrier::light();
    }
    fn heavy(&self) {
        barrier::heavy();
    }
    fn spin(&self) {
        std::thread::yield_now();
    }
}

/// The barriers chosen for this process (`"membarrier"` or `"fences"`).
pub(crate) fn barriers() -> &'static str {
    barrier::mode()
}

// ----- per-thread slots -------------------------------------------------------

/// One thread's announcement word, alone on its cache line.
#[repr(align(64))]
pub(crate) struct Slot(AtomicU64);

/// Every slot ever handed out (leaked: a slot outlives its thread and is
/// reused by a later one), and the free ones.
struct Registry {
    all: Vec<&'static Slot>,
    free: Vec<&'static Slot>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    all: Vec::new(),
    free: Vec::new(),
});

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Gives the thread's slot back when the thread ends.
struct SlotOwner(&'static Slot);

impl Drop for SlotOwner {
    fn drop(&mut self) {
        // Later writes of this thread (from other thread-local destructors)
        // take the stripe lock instead.
        MY_SLOT.with(|s| s.set(SlotState::Gone));
        registry().free.push(self.0);
    }
}

#[derive(Clone, Copy)]
enum SlotState {
    None,
    Mine(&'static Slot),
    Gone,
}

thread_local! {
    static MY_SLOT: Cell<SlotState> = const { Cell::new(SlotState::None) };
    static OWNER: Cell<Option<SlotOwner>> = const { Cell::new(None) };
}

/// This thread's slot (registered on first use), or None while the thread
/// is being torn down.
#[inline]
fn my_slot() -> Option<&'static Slot> {
    match MY_SLOT.try_with(|s| s.get()).unwrap_or(SlotState::Gone) {
        SlotState::Mine(s) => Some(s),
        SlotState::Gone => None,
        SlotState::None => register_slot(),
    }
}

#[cold]
fn register_slot() -> Option<&'static Slot> {
    let s = {
        let mut r = registry();
        match r.free.pop() {
            Some(s) => s,
            None => {
                let s: &'static Slot = Box::leak(Box::new(Slot(AtomicU64::new(0))));
                r.all.push(s);
                s
            }
        }
    };
    if OWNER.try_with(|o| o.set(Some(SlotOwner(s)))).is_err() {
        registry().free.push(s);
        return None;
    }
    MY_SLOT.with(|c| c.set(SlotState::Mine(s)));
    Some(s)
}

// ----- the gate -------------------------------------------------------------------

#[repr(align(64))]
struct Stripe(RawRwLock);

/// See the module documentation.
#[repr(align(64))]
pub(crate) struct Gate {
    stripes: Box<[Stripe]>,
    /// Stripes whose announced writers are excluded (a bit per stripe).
    excl: AtomicU64,
    /// Token of the thread that began the transaction holding every stripe
    /// (0: none).
    owner: AtomicU64,
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static TOKEN: u64 = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    /// Address of the gate whose `update_with` closure this thread runs (0: none).
    static IN_UPDATE: Cell<usize> = const { Cell::new(0) };
}

fn token() -> u64 {
    TOKEN.with(|t| *t)
}

/// The stripe of `key`: a multiplicative hash of its 8-byte words and length.
#[inline]
pub(crate) fn stripe_of(key: &[u8]) -> usize {
    let mut h = (key.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
        h = (h ^ w).wrapping_mul(0x100_0000_01B3).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x100_0000_01B3);
    }
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize
}

/// One single-key write in progress; ends on drop.
pub(crate) enum Write<'a> {
    /// Announced in this thread's slot.
    Announced(&'static Slot),
    /// The stripe lock held shared (no slot: the thread is ending).
    Locked(&'a Gate, usize),
}

impl Drop for Write<'_> {
    #[inline]
    fn drop(&mut self) {
        match self {
            Write::Announced(s) => leave(&s.0),
            // SAFETY: `Gate::write` took this stripe shared for this guard.
            Write::Locked(g, i) => unsafe { g.stripes[*i].0.unlock_shared() },
        }
    }
}

/// Several stripes held shared (a bit per stripe); released on drop.
pub(crate) struct SharedSet<'a> {
    gate: &'a Gate,
    mask: u64,
}

impl Drop for SharedSet<'_> {
    fn drop(&mut self) {
        let mut m = self.mask;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            // SAFETY: this guard took stripe i shared and releases it once.
            unsafe { self.gate.stripes[i].0.unlock_shared() };
        }
    }
}

/// One stripe held exclusively; released on drop.
pub(crate) struct Exclusive<'a> {
    gate: &'a Gate,
    i: usize,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        readmit(&self.gate.excl, 1 << self.i);
        // SAFETY: this guard took the stripe exclusively and releases it once.
        unsafe { self.gate.stripes[self.i].0.unlock_exclusive() };
    }
}

/// Marks this thread as running an `update_with` closure of a gate, until
/// dropped (also on unwinding); restores an outer marker.
pub(crate) struct UpdateMark {
    prev: usize,
}

impl Drop for UpdateMark {
    fn drop(&mut self) {
        IN_UPDATE.with(|c| c.set(self.prev));
    }
}

impl Gate {
    pub(crate) fn new() -> Gate {
        SysBarriers::init();
        Gate {
            stripes: (0..STRIPES).map(|_| Stripe(RawRwLock::INIT)).collect(),
            excl: AtomicU64::new(0),
            owner: AtomicU64::new(0),
        }
    }

    fn addr(&self) -> u64 {
        self as *const Gate as u64
    }

    /// True when a write through the map by this thread would wait for this
    /// thread: it holds the map's transaction, or runs its `update_with`.
    #[inline]
    pub(crate) fn held_by_me(&self) -> bool {
        // The common case (no transaction, no update_with on this thread)
        // costs one load and one const thread-local read.
        let owner = self.owner.load(Ordering::Relaxed);
        let upd = IN_UPDATE.with(|c| c.get());
        (owner != 0 && owner == token()) || (upd != 0 && upd == self.addr() as usize)
    }

    /// Begins a single-key write of `key` when no exclusive holder of any
    /// stripe is about (the common case: two plain stores and a load in all).
    /// None: some stripe is excluded (perhaps by this very thread, inside a
    /// transaction or `update_with`): check [`Gate::held_by_me`], then
    /// [`Gate::write_waiting`].
    #[inline(always)]
    pub(crate) fn write(&self, key: &[u8]) -> Option<Write<'_>> {
        let slot = my_slot()?;
        if try_announce(
            &slot.0,
            &self.excl,
            self.addr() | stripe_of(key) as u64,
            !0,
            &SysBarriers,
        ) {
            Some(Write::Announced(slot))
        } else {
            None
        }
    }

    /// Begins a single-key write of `key`, waiting while an exclusive holder
    /// has its stripe. The caller made sure that holder is not this thread.
    #[cold]
    pub(crate) fn write_waiting(&self, key: &[u8]) -> Write<'_> {
        let i = stripe_of(key);
        if let Some(slot) = my_slot() {
            loop {
                if try_announce(
                    &slot.0,
                    &self.excl,
                    self.addr() | i as u64,
                    1 << i,
                    &SysBarriers,
                ) {
                    return Write::Announced(slot);
                }
                // Wait for the exclusive holder (it holds the stripe lock
                // until it has readmitted the stripe), then try again.
                self.stripes[i].0.lock_shared();
                // SAFETY: taken just above.
                unsafe { self.stripes[i].0.unlock_shared() };
            }
        }
        // No slot (the thread is ending). Exclusive holders take the stripe
        // lock too, so holding it shared excludes them.
        self.stripes[i].0.lock_shared();
        Write::Locked(self, i)
    }

    /// The stripes of `keys`, shared, taken in ascending order.
    pub(crate) fn shared_set<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> SharedSet<'_> {
        let mask = keys.fold(0u64, |m, k| m | 1 << stripe_of(k));
        let mut m = mask;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            self.stripes[i].0.lock_shared();
        }
        SharedSet { gate: self, mask }
    }

    /// Waits until no thread announces a write of this gate that `mask`
    /// covers, after setting `mask` (the caller holds those stripes' locks
    /// exclusively).
    fn exclude_announced(&self, mask: u64) {
        let me = self.addr();
        let r = registry();
        exclude(
            &self.excl,
            mask,
            r.all.iter().map(|s| &s.0),
            |v| v & GATE_BITS == me && mask & (1 << (v & !GATE_BITS)) != 0,
            &SysBarriers,
        );
    }

    /// The stripe of `key`, exclusively.
    pub(crate) fn exclusive(&self, key: &[u8]) -> Exclusive<'_> {
        let i = stripe_of(key);
        self.stripes[i].0.lock_exclusive();
        self.exclude_announced(1 << i);
        Exclusive { gate: self, i }
    }

    /// Marks this thread as inside an `update_with` closure of this gate.
    pub(crate) fn mark_update(&self) -> UpdateMark {
        let me = self.addr() as usize;
        UpdateMark {
            prev: IN_UPDATE.with(|c| c.replace(me)),
        }
    }

    /// Every stripe, exclusively, in ascending order (a transaction); this
    /// thread becomes the owner. Released with [`Gate::unlock_all`].
    pub(crate) fn lock_all(&self) {
        for s in self.stripes.iter() {
            s.0.lock_exclusive();
        }
        self.owner.store(token(), Ordering::Relaxed);
        self.exclude_announced(!0);
    }

    /// Releases what [`Gate::lock_all`] took.
    ///
    /// # Safety
    /// The caller holds every stripe through `lock_all` and releases it once.
    pub(crate) unsafe fn unlock_all(&self) {
        self.owner.store(0, Ordering::Relaxed);
        readmit(&self.excl, !0);
        for s in self.stripes.iter().rev() {
            // SAFETY: the caller holds every stripe exclusively (contract).
            unsafe { s.0.unlock_exclusive() };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripes_spread_keys() {
        let mut seen = [0u32; STRIPES];
        for k in 0..64_000u64 {
            seen[stripe_of(&k.to_be_bytes())] += 1;
            seen[stripe_of(format!("user:{k}").as_bytes())] += 1;
        }
        // Every stripe gets between half and twice its share.
        for (i, &n) in seen.iter().enumerate() {
            assert!((1000..4000).contains(&n), "stripe {i}: {n}");
        }
        assert_ne!(stripe_of(b"a"), stripe_of(b"a\0\0\0\0\0\0\0\0"));
    }

    #[test]
    fn gates_are_aligned_so_a_slot_names_gate_and_stripe() {
        let g = Box::new(Gate::new());
        assert_eq!(g.addr() & !GATE_BITS, 0);
    }

    #[test]
    fn a_transaction_holder_is_recognised_and_blocks_others() {
        let g = Gate::new();
        assert!(!g.held_by_me());
        g.lock_all();
        assert!(g.held_by_me());
        assert_eq!(g.excl.load(Ordering::Relaxed), !0);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!g.held_by_me());
                // Every stripe is taken and every announcement refused.
                for i in 0..STRIPES {
                    assert!(!g.stripes[i].0.try_lock_shared());
                }
                let slot = my_slot().expect("a live thread has a slot");
                assert!(!try_announce(&slot.0, &g.excl, g.addr(), 1, &SysBarriers));
                assert_eq!(
                    slot.0.load(Ordering::Relaxed),
                    0,
                    "a refused announcement is withdrawn"
                );
            });
        });
        // SAFETY: taken by lock_all above.
        unsafe { g.unlock_all() };
        assert!(!g.held_by_me());
        assert_eq!(g.excl.load(Ordering::Relaxed), 0);
        let w = g.write(b"k");
        assert!(matches!(w, Some(Write::Announced(_))));
        drop(w);
        let s = g.shared_set([&b"k"[..]].into_iter());
        assert!(!g.stripes[stripe_of(b"k")].0.try_lock_exclusive());
        drop(s);
        let _m = g.mark_update();
        assert!(g.held_by_me());
    }

    /// An exclusive holder waits for an announced write of its stripe, and
    /// a writer that finds the stripe excluded waits for the holder.
    #[test]
    fn exclusive_holders_and_announced_writers_exclude_each_other() {
        use std::sync::atomic::AtomicBool;
        let g = Gate::new();
        let key = b"some key";
        let bit = 1u64 << stripe_of(key);
        let write_over = AtomicBool::new(false);
        std::thread::scope(|s| {
            // A writer announces and stays inside until the holder has
            // excluded the stripe and is waiting.
            let w = g.write(key).expect("no exclusive holder yet");
            s.spawn(|| {
                let _x = g.exclusive(key);
                assert!(
                    write_over.load(Ordering::SeqCst),
                    "exclusive while a write was announced"
                );
            });
            while g.excl.load(Ordering::SeqCst) & bit == 0 {
                std::hint::spin_loop();
            }
            write_over.store(true, Ordering::SeqCst);
            drop(w);
        });
        // Under an exclusive holder the fast path refuses a writer of the
        // stripe and `write_waiting` waits until the holder is gone.
        let x = g.exclusive(key);
        let refused = AtomicBool::new(false);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                assert!(
                    g.write(key).is_none(),
                    "the fast path let a write in while its stripe was exclusive"
                );
                refused.store(true, Ordering::SeqCst);
                let _w = g.write_waiting(key);
                assert!(
                    done.load(Ordering::SeqCst),
                    "a write ran while its stripe was exclusive"
                );
                assert_eq!(g.excl.load(Ordering::SeqCst) & bit, 0);
            });
            while !refused.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            // Give the writer the chance to reach the stripe lock (whether it
            // has or not, it may enter only after `x` is dropped below).
            for _ in 0..1000 {
                std::thread::yield_now();
            }
            done.store(true, Ordering::SeqCst);
            drop(x);
            h.join().unwrap();
        });
    }

    /// Many threads writing through announcements while others run
    /// compare-and-swap-like exclusive sections: no exclusive section ever
    /// overlaps an announced write of its stripe.
    #[test]
    fn stress_announcements_against_exclusive_sections() {
        use std::sync::atomic::AtomicI64;
        let g = Gate::new();
        // Per stripe: writers inside (positive) or an exclusive holder (-1000).
        let state: Vec<AtomicI64> = (0..STRIPES).map(|_| AtomicI64::new(0)).collect();
        let keys: Vec<[u8; 8]> = (0..16u64).map(|k| k.to_be_bytes()).collect();
        std::thread::scope(|s| {
            for t in 0..3 {
                let (g, state, keys) = (&g, &state, &keys);
                s.spawn(move || {
                    for r in 0..20_000usize {
                        let k = &keys[(r * 7 + t) % keys.len()];
                        let i = stripe_of(k);
                        let _w = g.write(k).unwrap_or_else(|| g.write_waiting(k));
                        let v = state[i].fetch_add(1, Ordering::SeqCst);
                        assert!(v >= 0, "a write overlapped an exclusive section");
                        state[i].fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
            let (g, state, keys) = (&g, &state, &keys);
            s.spawn(move || {
                for r in 0..3_000usize {
                    let k = &keys[r % keys.len()];
                    let i = stripe_of(k);
                    let _x = g.exclusive(k);
                    let v = state[i].swap(-1000, Ordering::SeqCst);
                    assert_eq!(v, 0, "an exclusive section overlapped a write");
                    state[i].store(0, Ordering::SeqCst);
                }
            });
        });
    }

    // ----- loom: the announcement protocol itself -------------------------------

    mod loom_models {
        use super::super::{exclude, leave, readmit, try_announce, Barriers, Word};
        use loom::cell::UnsafeCell;
        use loom::sync::atomic::AtomicU64;
        use loom::sync::Arc;
        use loom::thread;
        use std::sync::atomic::Ordering;

        struct L(AtomicU64);
        impl Word for L {
            fn load(&self, o: Ordering) -> u64 {
                self.0.load(o)
            }
            fn store(&self, v: u64, o: Ordering) {
                self.0.store(v, o)
            }
            fn fetch_or(&self, v: u64, o: Ordering) -> u64 {
                self.0.fetch_or(v, o)
            }
            fn fetch_and(&self, v: u64, o: Ordering) -> u64 {
                self.0.fetch_and(v, o)
            }
        }

        /// The fallback barriers (full fences on both sides), or none at all
        /// (the broken variant the model must catch).
        struct Fences(bool);
        impl Barriers for Fences {
            fn light(&self) {
                if self.0 {
                    loom::sync::atomic::fence(Ordering::SeqCst);
                }
            }
            fn heavy(&self) {
                if self.0 {
                    loom::sync::atomic::fence(Ordering::SeqCst);
                }
            }
            fn spin(&self) {
                thread::yield_now();
            }
        }

        struct Shared {
            slot: L,
            excl: L,
            data: UnsafeCell<u64>,
        }

        /// A writer (announce, write the data, leave; on refusal it gives up)
        /// against an exclusive holder (exclude, write the data, readmit):
        /// loom's cell reports any unsynchronised overlap of the two writes.
        fn writer_vs_holder(fenced: bool) {
            loom::model(move || {
                let s = Arc::new(Shared {
                    slot: L(AtomicU64::new(0)),
                    excl: L(AtomicU64::new(0)),
                    data: UnsafeCell::new(0),
                });
                let w = s.clone();
                let writer = thread::spawn(move || {
                    if try_announce(&w.slot, &w.excl, 0x40 | 3, 1 << 3, &Fences(fenced)) {
                        // SAFETY: loom's cell checks this access is not
                        // concurrent with the holder's (the point of the model).
                        w.data.with_mut(|d| unsafe { *d += 1 });
                        leave(&w.slot);
                    }
                });
                exclude(
                    &s.excl,
                    1 << 3,
                    std::iter::once(&s.slot),
                    |v| v == (0x40 | 3),
                    &Fences(fenced),
                );
                // SAFETY: as the writer's access above: loom checks it.
                s.data.with_mut(|d| unsafe { *d += 10 });
                readmit(&s.excl, 1 << 3);
                writer.join().unwrap();
            });
        }

        #[test]
        fn loom_announced_writes_and_exclusive_holders_never_overlap() {
            writer_vs_holder(true);
        }

        /// Tripwire: without the barriers the store-buffering reordering lets
        /// both sides in; loom must find it.
        #[test]
        #[should_panic(expected = "Causality violation")]
        fn loom_tripwire_without_barriers_both_get_in() {
            writer_vs_holder(false);
        }
    }
}
