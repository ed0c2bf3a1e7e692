//! The process's collector under real threads (the protocol itself is
//! model-checked in `tests/loom_ebr.rs`).

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{pin, slots};

const LIVE: u64 = 0x5eed;
const POISON: u64 = 0xdead;

/// Flushes until `done` holds (other tests' threads may hold pins or the
/// collector for a moment). Panics if it never does.
fn flush_until(done: impl Fn() -> bool) {
    for _ in 0..1_000_000 {
        if done() {
            return;
        }
        pin().flush();
        std::thread::yield_now();
    }
    panic!("the epoch never advanced");
}

/// Readers pin, follow a pointer that a writer keeps replacing, and check
/// the object; the writer poisons each replaced object through `defer`
/// (and keeps it allocated, so an early poison is seen, not a use after
/// free). A reader that sees a poisoned object caught reclamation running
/// while it was pinned.
#[test]
fn a_deferred_item_never_runs_while_a_reader_that_saw_it_is_pinned() {
    let cur = Arc::new(AtomicPtr::new(Box::into_raw(Box::new(AtomicU64::new(
        LIVE,
    )))));
    let graveyard: Arc<Mutex<Vec<usize>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (cur, stop, reads) = (cur.clone(), stop.clone(), reads.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _g = pin();
                    let p = cur.load(Ordering::Acquire);
                    // SAFETY: replaced objects are poisoned, never freed,
                    // until the test ends.
                    let v = unsafe { &*p }.load(Ordering::Relaxed);
                    assert_eq!(
                        v, LIVE,
                        "a replaced object was reclaimed under a pinned reader"
                    );
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let swaps = 20_000;
    for i in 0..swaps {
        let g = pin();
        let new = Box::into_raw(Box::new(AtomicU64::new(LIVE)));
        let old = cur.swap(new, Ordering::AcqRel) as usize;
        let gy = graveyard.clone();
        g.defer(move || {
            // SAFETY: `old` came from Box::into_raw and is freed only at the
            // end of the test.
            unsafe { &*(old as *const AtomicU64) }.store(POISON, Ordering::Relaxed);
            gy.lock().unwrap().push(old);
        });
        drop(g);
        // Let the readers in now and then, on one core as on two.
        if i % 64 == 0 {
            while reads.load(Ordering::Relaxed) < i / 64 {
                std::thread::yield_now();
            }
        }
    }
    let n = swaps;
    flush_until(|| graveyard.lock().unwrap().len() == n);
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    for p in graveyard.lock().unwrap().drain(..) {
        // SAFETY: each came from Box::into_raw once.
        drop(unsafe { Box::from_raw(p as *mut AtomicU64) });
    }
    // SAFETY: as above.
    drop(unsafe { Box::from_raw(cur.load(Ordering::Relaxed)) });
    assert!(reads.load(Ordering::Relaxed) >= swaps / 64);
}

/// An item deferred while this thread holds a (nested) pin does not run
/// until the outermost guard is dropped; then it does.
#[test]
fn nested_pins_hold_reclamation_until_the_outer_guard_ends() {
    let ran = Arc::new(AtomicBool::new(false));
    let outer = pin();
    {
        let inner = pin();
        let r = ran.clone();
        inner.defer(move || r.store(true, Ordering::Release));
    }
    // The inner guard's end must not have unpinned the thread.
    for _ in 0..100 {
        outer.flush();
    }
    assert!(
        !ran.load(Ordering::Acquire),
        "ran while the thread was still pinned"
    );
    drop(outer);
    flush_until(|| ran.load(Ordering::Acquire));
}

/// A thread's slot is given back when the thread ends and reused by later
/// threads, so short-lived threads do not grow the registry.
#[test]
fn slots_of_ended_threads_are_reused() {
    let before = slots().count();
    for _ in 0..200 {
        std::thread::spawn(|| drop(pin())).join().unwrap();
    }
    // Other tests of this binary run threads meanwhile; 200 leaked slots
    // would show.
    let grown = slots().count() - before;
    assert!(grown < 50, "{grown} new slots for 200 sequential threads");
}
