//! Warming free chunks ahead of a large write ([`Warmer`]).
//!
//! The first store into a page of a file pool is a page fault, and on tmpfs
//! (emulated PM) the kernel also allocates and zeroes the page then. A bulk
//! writer — a replica staging a snapshot of tens of MB — spends as much time
//! in those faults as in its copies. A [`Warmer`] takes them off the writer:
//! a thread reserves the lowest free chunks (the ones the next claims take)
//! and faults them in with `MADV_POPULATE_WRITE`, until `lead` bytes of the
//! chunks it warmed are still free; the writer nudges it
//! ([`Warmer::nudge`]) as it goes, and it warms again as far as claims took
//! warmed chunks. So at most `lead` bytes of warmed chunks are ever unused.
//! It changes no byte of the pool and no allocation state: the chunks stay
//! free, a populated page reads as the zeros it held. Best effort: any
//! failure (no room to reserve, a kernel without `MADV_POPULATE_WRITE`) ends
//! the thread quietly and the writer faults as before.

//!
//! The thread's handshake with the writer ([`Handshake`]) and its loop
//! ([`run`]) are generic over their lock and condition variable
//! ([`WaitKit`]) and over the chunks they warm ([`Chunks`]), so that
//! `tests/loom_warm.rs` model-checks this exact code with loom's primitives;
//! production uses std's and the pool's chunks.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::mapping::Backing;
use super::Pool;

/// What the warming thread is asked to do and has done.
#[derive(Debug, Default)]
pub struct WarmState {
    /// Nudges so far ([`Warmer::nudge`]).
    nudges: u64,
    /// Nudges the thread has answered (it is idle when this equals
    /// `nudges` and it waits).
    answered: u64,
    /// The thread waits for a nudge (its warmed chunks still free reach the
    /// lead).
    idle: bool,
    /// Bytes warmed so far.
    warmed: u64,
    /// The thread is to stop (the warmer was dropped).
    stop: bool,
    /// The thread ended (stopped, failed, or no free chunk is left).
    ended: bool,
}

/// A lock around a [`WarmState`] with a condition variable.
pub trait WaitKit: 'static {
    type Cell: Send + Sync;
    fn new_cell() -> Self::Cell;
    /// Runs `f` on the state under the lock, then wakes every waiter.
    fn update<R>(c: &Self::Cell, f: impl FnOnce(&mut WarmState) -> R) -> R;
    /// Waits (under the lock) until `until` holds, then runs `f`.
    fn wait<R>(
        c: &Self::Cell,
        until: impl FnMut(&WarmState) -> bool,
        f: impl FnOnce(&mut WarmState) -> R,
    ) -> R;
}

/// Defines a [`WaitKit`] named `$name` on the `Mutex` and `Condvar` of the
/// module `$sync`: `std::sync` in production ([`StdWait`]), `loom::sync` in
/// the model checks (`tests/loom_warm.rs`), so that they check this body.
/// A poisoned lock is still used: the state stays valid.
#[macro_export]
macro_rules! wait_kit {
    ($(#[$m:meta])* $vis:vis $name:ident, $($sync:ident)::+) => {
        $(#[$m])*
        $vis struct $name;

        impl $crate::pool::warm::WaitKit for $name {
            type Cell = (
                $($sync)::+::Mutex<$crate::pool::warm::WarmState>,
                $($sync)::+::Condvar,
            );
            fn new_cell() -> Self::Cell {
                (
                    $($sync)::+::Mutex::new(Default::default()),
                    $($sync)::+::Condvar::new(),
                )
            }
            fn update<R>(
                c: &Self::Cell,
                f: impl FnOnce(&mut $crate::pool::warm::WarmState) -> R,
            ) -> R {
                let r = f(&mut c.0.lock().unwrap_or_else(|e| e.into_inner()));
                c.1.notify_all();
                r
            }
            fn wait<R>(
                c: &Self::Cell,
                mut until: impl FnMut(&$crate::pool::warm::WarmState) -> bool,
                f: impl FnOnce(&mut $crate::pool::warm::WarmState) -> R,
            ) -> R {
                let mut st = c.0.lock().unwrap_or_else(|e| e.into_inner());
                while !until(&st) {
                    st = c.1.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                f(&mut st)
            }
        }
    };
}

wait_kit!(
    /// `std::sync`'s `Mutex` and `Condvar`.
    pub StdWait,
    std::sync
);

/// The warming thread's handshake with the writer that nudges it.
pub struct Handshake<K: WaitKit = StdWait> {
    cell: K::Cell,
}

impl<K: WaitKit> Default for Handshake<K> {
    fn default() -> Self {
        Handshake {
            cell: K::new_cell(),
        }
    }
}

impl<K: WaitKit> Handshake<K> {
    /// The writer is claiming chunks: the thread warms again as far as
    /// claims took warmed ones.
    pub fn nudge(&self) {
        K::update(&self.cell, |st| st.nudges += 1);
    }

    /// Waits until the thread has answered every nudge (it is idle, its
    /// free warmed chunks at the lead) or ended; returns the bytes warmed.
    pub fn settle(&self) -> u64 {
        K::wait(
            &self.cell,
            |st| st.ended || st.idle && st.answered == st.nudges,
            |st| st.warmed,
        )
    }

    /// Tells the thread to stop (after the chunk it is on).
    pub fn stop(&self) {
        K::update(&self.cell, |st| st.stop = true);
    }

    /// Bytes warmed so far, and whether the thread ended.
    pub fn progress(&self) -> (u64, bool) {
        K::update(&self.cell, |st| (st.warmed, st.ended))
    }
}

/// The chunks a warming thread works on.
pub trait Chunks {
    /// Bytes of the chunks warmed so far that are still free, and the next
    /// free chunk above the last one warmed (None: no more).
    fn ahead(&mut self) -> (u64, Option<u32>);
    /// Warms chunk `c`; returns its bytes, or None on a failure (the thread
    /// then ends).
    fn warm(&mut self, c: u32) -> Option<u64>;
}

/// The warming thread's loop: warms the next free chunk while fewer than
/// `lead` bytes of the warmed chunks are free, and otherwise waits for a
/// nudge; ends when told to stop, when no free chunk is left or on a
/// failure, and says so.
pub fn run<K: WaitKit>(h: &Handshake<K>, lead: u64, chunks: &mut impl Chunks) {
    loop {
        let (ahead, next) = chunks.ahead();
        if ahead >= lead {
            // Idle: every nudge so far is answered; wait for the next one.
            let seen = K::update(&h.cell, |st| {
                st.answered = st.nudges;
                st.idle = true;
                st.nudges
            });
            let stop = K::wait(
                &h.cell,
                |st| st.stop || st.nudges != seen,
                |st| {
                    st.idle = false;
                    st.stop
                },
            );
            if stop {
                break;
            }
            continue;
        }
        let Some(c) = next else { break };
        if K::update(&h.cell, |st| st.stop) {
            break;
        }
        let Some(bytes) = chunks.warm(c) else { break };
        K::update(&h.cell, |st| st.warmed += bytes);
    }
    K::update(&h.cell, |st| st.ended = true);
}

/// A thread that faults free chunks in ahead of a bulk writer
/// ([`Pool::warmer`]). Dropping it stops the thread (after the chunk it is
/// on) and waits for it.
pub struct Warmer {
    shared: Arc<Handshake>,
    handle: Option<JoinHandle<()>>,
}

impl Pool {
    /// Starts warming the lowest free chunks until `lead` bytes of them are
    /// warm and free. `None` for pools without a file mapping (volatile and
    /// simulated pools: their memory is already there) or when no thread can
    /// be started.
    pub fn warmer(&self, lead: u64) -> Option<Warmer> {
        if !matches!(self.inner.backing, Backing::Mmap { .. }) {
            return None;
        }
        let shared = Arc::new(Handshake::default());
        let sh = shared.clone();
        let mut chunks = PoolChunks {
            pool: self.clone(),
            first: None,
            next: 0,
        };
        let handle = std::thread::Builder::new()
            .name("ferrite-warm".into())
            .spawn(move || run(&sh, lead, &mut chunks))
            .ok()?;
        Some(Warmer {
            shared,
            handle: Some(handle),
        })
    }
}

/// The pool's free chunks, from the lowest up: warmed ones lie in
/// `first..next`, and those of them still free are the lead (a chunk
/// released into that range meanwhile counts too, which only makes the
/// thread less eager).
struct PoolChunks {
    pool: Pool,
    first: Option<u32>,
    next: u32,
}

impl Chunks for PoolChunks {
    fn ahead(&mut self) -> (u64, Option<u32>) {
        let size = self.pool.inner.header.chunk_size;
        let free = self.pool.inner.free_chunks.lock().unwrap();
        let ahead = self
            .first
            .map_or(0, |f| free.range(f..self.next).count() as u64)
            * size;
        (ahead, free.range(self.next..).next().copied())
    }

    fn warm(&mut self, c: u32) -> Option<u64> {
        let size = self.pool.inner.header.chunk_size;
        self.pool.reserve_chunks(c as usize, 1).ok()?;
        let p = self.pool.at(self.pool.chunk_off(c as usize), size as usize);
        // SAFETY: p..p+size is a chunk inside this pool's shared file
        // mapping, which lives as long as `self.pool`; MADV_POPULATE_WRITE
        // only faults its pages in (write-enabled), changing no byte, and
        // reports a failure as an error, never a signal. The chunk's
        // blocks were just reserved.
        let r = unsafe { libc::madvise(p.cast(), size as usize, libc::MADV_POPULATE_WRITE) };
        if r != 0 {
            return None;
        }
        self.first.get_or_insert(c);
        self.next = c + 1;
        Some(size)
    }
}

impl Warmer {
    /// Tells the thread that the writer is claiming chunks: it warms again
    /// as far as claims took warmed ones.
    pub fn nudge(&self) {
        self.shared.nudge();
    }

    /// Waits until the thread has answered every nudge (its free warmed
    /// chunks reach the lead) or ended, and returns the bytes it has warmed.
    pub fn settle(&self) -> u64 {
        self.shared.settle()
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.shared.stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl std::fmt::Debug for Warmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (warmed, ended) = self.shared.progress();
        f.debug_struct("Warmer")
            .field("warmed", &warmed)
            .field("ended", &ended)
            .finish()
    }
}
