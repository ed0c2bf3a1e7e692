//! Interleaved persists (thesis §3.5): many independent operations issue their
//! stores and write-backs, then share one fence.
//!
//! Two forms, for two kinds of callers:
//!
//! * [`PersistBatch`], explicit batching: a caller that already holds a batch of
//!   independent writes (an index's write batch, a log's group append) writes and
//!   flushes each, then calls [`PersistBatch::commit`] once. No runtime at all.
//! * [`Interleaver`], a tiny executor for code written as ordinary sequential
//!   operations: each operation is an `async` block that awaits
//!   [`Interleaver::persist_point`] where it would have fenced, and
//!   [`Interleaver::yield_now`] after a prefetch. The executor polls a group of
//!   operations round-robin; at the end of a round in which some operation
//!   reached a persist point it issues **one** fence for all of them. Each
//!   operation still sees its own writes durable before it continues, exactly as
//!   with its own fence. Futures live in a fixed slab (no allocation per
//!   operation) and need no waker: the executor re-polls everything each round.
//!
//! Single-threaded by design (one executor per worker thread): the point is to
//! overlap one thread's memory stalls, not to add threads.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use ferrite_pm::Pool;

/// Collects write-backs and makes them durable with one fence.
pub struct PersistBatch<'p> {
    pool: &'p Pool,
    flushes: usize,
}

impl<'p> PersistBatch<'p> {
    pub fn new(pool: &'p Pool) -> Self {
        PersistBatch { pool, flushes: 0 }
    }

    /// Writes back `[p, p+len)` (no fence yet).
    pub fn flush(&mut self, p: *const u8, len: usize) {
        self.pool.flush(p, len);
        self.flushes += 1;
    }

    /// Write-backs issued since the last commit.
    pub fn pending(&self) -> usize {
        self.flushes
    }

    /// One fence: every write-back issued so far is durable after it. A batch
    /// with nothing pending costs nothing.
    pub fn commit(&mut self) -> ferrite_pm::Result<()> {
        if self.flushes > 0 {
            self.pool.fence()?;
            self.flushes = 0;
        }
        Ok(())
    }
}

impl Drop for PersistBatch<'_> {
    /// Never drop pending write-backs silently: an un-committed batch is
    /// committed here.
    fn drop(&mut self) {
        let _ = self.commit(); // a failed fence poisons the pool; later fences report it
    }
}

/// The executor state shared with the operations' futures.
pub struct Interleaver<'p> {
    pool: &'p Pool,
    epoch: Cell<u64>,
    waiting: Cell<usize>,
    fences: Cell<u64>,
}

/// Future returned by [`Interleaver::persist_point`].
pub struct PersistPoint<'a, 'p> {
    ex: &'a Interleaver<'p>,
    armed: Option<u64>,
}

impl Future for PersistPoint<'_, '_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        let now = self.ex.epoch.get();
        match self.armed {
            None => {
                self.armed = Some(now);
                self.ex.waiting.set(self.ex.waiting.get() + 1);
                Poll::Pending
            }
            Some(e) if now > e => Poll::Ready(()),
            Some(_) => Poll::Pending,
        }
    }
}

/// Future returned by [`Interleaver::yield_now`].
pub struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            Poll::Pending
        }
    }
}

/// Hints the CPU to start loading the line at `p` (no effect on correctness).
pub use ferrite_pm::prefetch::line as prefetch;

impl<'p> Interleaver<'p> {
    pub fn new(pool: &'p Pool) -> Self {
        Interleaver {
            pool,
            epoch: Cell::new(0),
            waiting: Cell::new(0),
            fences: Cell::new(0),
        }
    }

    /// Awaited where an operation needs its flushed writes durable; resolves
    /// after the executor's next (shared) fence.
    pub fn persist_point(&self) -> PersistPoint<'_, 'p> {
        PersistPoint {
            ex: self,
            armed: None,
        }
    }

    /// Gives the other operations a turn (after a prefetch).
    pub fn yield_now(&self) -> YieldNow {
        YieldNow(false)
    }

    /// Shared fences issued so far.
    pub fn fences(&self) -> u64 {
        self.fences.get()
    }

    /// Runs operations produced by `next` (until it returns `None`) with at most
    /// `group` in flight; `done` receives each result.
    pub fn run<F, T>(
        &self,
        group: usize,
        mut next: impl FnMut() -> Option<F>,
        mut done: impl FnMut(T),
    ) -> ferrite_pm::Result<()>
    where
        F: Future<Output = T>,
    {
        let group = group.max(1);
        let mut slab: Vec<Option<F>> = (0..group).map(|_| None).collect();
        let mut live = 0usize;
        let mut exhausted = false;
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            for slot in slab.iter_mut() {
                // A finished operation's slot takes the next one at once, so it
                // joins this round's fence.
                loop {
                    if slot.is_none() {
                        if exhausted {
                            break;
                        }
                        match next() {
                            Some(f) => {
                                *slot = Some(f);
                                live += 1;
                            }
                            None => {
                                exhausted = true;
                                break;
                            }
                        }
                    }
                    let Some(f) = slot.as_mut() else { break };
                    // SAFETY: the slab is never resized, so the future is not
                    // moved until it is dropped in place by the assignment below.
                    let pinned = unsafe { Pin::new_unchecked(f) };
                    match pinned.poll(&mut cx) {
                        Poll::Ready(t) => {
                            *slot = None;
                            live -= 1;
                            done(t);
                        }
                        Poll::Pending => break,
                    }
                }
            }
            if self.waiting.get() > 0 {
                self.pool.fence()?;
                self.fences.set(self.fences.get() + 1);
                self.epoch.set(self.epoch.get() + 1);
                self.waiting.set(0);
            }
            if live == 0 && exhausted {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pm::{persist, PoolOptions};

    #[test]
    fn one_fence_per_round_not_per_operation() {
        let pool = Pool::create_volatile(1 << 20, &PoolOptions::default()).unwrap();
        let base = pool.at(1 << 16, 64 * 64);
        let ex = Interleaver::new(&pool);
        let mut n = 0usize;
        let mut results = Vec::new();
        let before = persist::thread_stats();
        ex.run(
            16,
            || {
                if n == 64 {
                    return None;
                }
                n += 1;
                let i = n - 1;
                let (ex, pool) = (&ex, &pool);
                Some(async move {
                    // SAFETY: line i of the 64-line test area.
                    let p = unsafe { base.add(64 * i) };
                    // SAFETY: as above.
                    unsafe { std::ptr::write_volatile(p as *mut u64, i as u64) };
                    pool.flush(p, 8);
                    ex.persist_point().await;
                    // SAFETY: as above.
                    unsafe { std::ptr::write_volatile((p as *mut u64).add(1), 1) };
                    pool.flush(p, 16);
                    ex.persist_point().await;
                    i
                })
            },
            |i| results.push(i),
        )
        .unwrap();
        results.sort();
        assert_eq!(results, (0..64).collect::<Vec<_>>());
        // 64 ops x 2 persist points in groups of 16: 8 fences, not 128.
        assert_eq!(ex.fences(), 8);
        assert_eq!(persist::thread_stats().since(before).fences, 8);
        let mut b = PersistBatch::new(&pool);
        b.flush(base, 64);
        b.flush(base, 64);
        assert_eq!(b.pending(), 2);
        b.commit().unwrap();
        b.commit().unwrap();
        assert_eq!(persist::thread_stats().since(before).fences, 9);
    }
}
