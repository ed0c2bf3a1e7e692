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

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::mapping::Backing;
use super::Pool;

/// What the warming thread is asked to do and has done.
#[derive(Default)]
struct State {
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

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled on every change of `state`.
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A thread that faults free chunks in ahead of a bulk writer
/// ([`Pool::warmer`]). Dropping it stops the thread (after the chunk it is
/// on) and waits for it.
pub struct Warmer {
    shared: Arc<Shared>,
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
        let shared = Arc::new(Shared::default());
        let (pool, sh) = (self.clone(), shared.clone());
        let handle = std::thread::Builder::new()
            .name("ferrite-warm".into())
            .spawn(move || {
                pool.warm(&sh, lead);
                sh.lock().ended = true;
                sh.changed.notify_all();
            })
            .ok()?;
        Some(Warmer {
            shared,
            handle: Some(handle),
        })
    }

    /// The warming thread's loop: the next free chunk above the last one
    /// warmed, while fewer than `lead` bytes of the warmed chunks are free.
    fn warm(&self, sh: &Shared, lead: u64) {
        let size = self.inner.header.chunk_size;
        // Warmed chunks lie in first..next; those of them still free are
        // the lead (a chunk released into that range meanwhile counts too,
        // which only makes the thread less eager).
        let (mut first, mut next) = (None::<u32>, 0u32);
        loop {
            let (ahead, c) = {
                let free = self.inner.free_chunks.lock().unwrap();
                let ahead = first.map_or(0, |f| free.range(f..next).count() as u64) * size;
                (ahead, free.range(next..).next().copied())
            };
            if ahead >= lead {
                let mut st = sh.lock();
                let seen = st.nudges;
                st.answered = seen;
                st.idle = true;
                sh.changed.notify_all();
                while !st.stop && st.nudges == seen {
                    st = sh.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                st.idle = false;
                if st.stop {
                    return;
                }
                continue;
            }
            let Some(c) = c else {
                return;
            };
            if sh.lock().stop || self.reserve_chunks(c as usize, 1).is_err() {
                return;
            }
            let p = self.at(self.chunk_off(c as usize), size as usize);
            // SAFETY: p..p+size is a chunk inside this pool's shared file
            // mapping, which lives as long as `self`; MADV_POPULATE_WRITE
            // only faults its pages in (write-enabled), changing no byte, and
            // reports a failure as an error, never a signal. The chunk's
            // blocks were just reserved.
            let r = unsafe { libc::madvise(p.cast(), size as usize, libc::MADV_POPULATE_WRITE) };
            if r != 0 {
                return;
            }
            first.get_or_insert(c);
            next = c + 1;
            sh.lock().warmed += size;
        }
    }
}

impl Warmer {
    /// Tells the thread that the writer is claiming chunks: it warms again
    /// as far as claims took warmed ones.
    pub fn nudge(&self) {
        self.shared.lock().nudges += 1;
        self.shared.changed.notify_all();
    }

    /// Waits until the thread has answered every nudge (its free warmed
    /// chunks reach the lead) or ended, and returns the bytes it has warmed.
    pub fn settle(&self) -> u64 {
        let mut st = self.shared.lock();
        while !(st.ended || st.idle && st.answered == st.nudges) {
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
        st.warmed
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl std::fmt::Debug for Warmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Warmer")
            .field("warmed", &st.warmed)
            .field("ended", &st.ended)
            .finish()
    }
}
