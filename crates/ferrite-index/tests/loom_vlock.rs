//! Model checking of the leaf version lock with loom: every interleaving (and
//! loom's weak-memory behaviours) of a writer and an optimistic reader, and of
//! two writers.

use std::sync::atomic::Ordering;

use ferrite_index::vlock::{self, Word};
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

struct LoomWord(AtomicU64);

impl Word for LoomWord {
    fn load(&self, o: Ordering) -> u64 {
        self.0.load(o)
    }
    fn store(&self, v: u64, o: Ordering) {
        self.0.store(v, o)
    }
    fn compare_exchange_weak(&self, c: u64, n: u64, ok: Ordering, f: Ordering) -> Result<u64, u64> {
        self.0.compare_exchange_weak(c, n, ok, f)
    }
    fn compare_exchange(&self, c: u64, n: u64, ok: Ordering, f: Ordering) -> Result<u64, u64> {
        self.0.compare_exchange(c, n, ok, f)
    }
    fn fence_acquire(&self) {
        loom::sync::atomic::fence(Ordering::Acquire)
    }
    fn fence_release(&self) {
        loom::sync::atomic::fence(Ordering::Release)
    }
    fn spin(&self) {
        loom::thread::yield_now();
    }
}

struct Leaf {
    lock: LoomWord,
    a: AtomicU64,
    b: AtomicU64,
}

fn leaf() -> Arc<Leaf> {
    Arc::new(Leaf {
        lock: LoomWord(AtomicU64::new(0)),
        a: AtomicU64::new(0),
        b: AtomicU64::new(0),
    })
}

/// A reader that validates never sees half of a writer's update.
#[test]
fn optimistic_readers_never_see_torn_updates() {
    loom::model(|| {
        let l = leaf();
        let w = l.clone();
        let writer = thread::spawn(move || {
            let v = vlock::lock(&w.lock).unwrap();
            w.a.store(1, Ordering::Relaxed);
            w.b.store(1, Ordering::Relaxed);
            vlock::unlock(&w.lock, v, true, false);
        });
        if let Some(v) = vlock::try_read(&l.lock) {
            let a = l.a.load(Ordering::Relaxed);
            let b = l.b.load(Ordering::Relaxed);
            if vlock::validate(&l.lock, v) {
                assert_eq!(a, b, "validated a torn read");
            }
        }
        writer.join().unwrap();
        assert_eq!(l.lock.load(Ordering::Relaxed), vlock::STEP);
    });
}

/// Two writers exclude each other: increments are never lost.
#[test]
fn writers_exclude_each_other() {
    loom::model(|| {
        let l = leaf();
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let w = l.clone();
                thread::spawn(move || {
                    let v = vlock::lock(&w.lock).unwrap();
                    let x = w.a.load(Ordering::Relaxed);
                    w.a.store(x + 1, Ordering::Relaxed);
                    vlock::unlock(&w.lock, v, true, false);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(l.a.load(Ordering::Relaxed), 2);
        assert_eq!(l.lock.load(Ordering::Relaxed), 2 * vlock::STEP);
    });
}

/// An unlinked (obsolete) leaf refuses readers and writers.
#[test]
fn obsolete_leaves_refuse_everyone() {
    loom::model(|| {
        let l = leaf();
        let w = l.clone();
        let t = thread::spawn(move || {
            let v = vlock::lock(&w.lock).unwrap();
            vlock::unlock(&w.lock, v, true, true);
        });
        t.join().unwrap();
        assert!(vlock::try_read(&l.lock).is_none());
        assert!(vlock::lock(&l.lock).is_none());
        assert!(vlock::try_lock(&l.lock).is_none());
    });
}
