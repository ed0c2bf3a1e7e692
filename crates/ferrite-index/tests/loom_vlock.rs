//! Model checking of the version lock (leaves and inner nodes) with loom: every
//! interleaving (and loom's weak-memory behaviours) of a writer and an
//! optimistic reader, of two writers, and of a leaf split against a reader
//! doing lock coupling from the level-0 inner node into the leaf.

use std::sync::atomic::Ordering;

use ferrite_index::vlock::{self, Word};
use loom::sync::atomic::AtomicU64;
use loom::sync::Arc;
use loom::thread;

#[path = "common/loom_word.rs"]
mod loom_word;
use loom_word::LoomWord;

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

/// A level-0 inner node with one separator slot over two leaves, each with a
/// flag saying whether it holds the reader's key.
struct Split {
    node: LoomWord,
    /// 0: the key routes to leaf 0; 1: to leaf 1.
    sep: AtomicU64,
    locks: [LoomWord; 2],
    has: [AtomicU64; 2],
}

/// A split of leaf 0 that moves the key to a new leaf 1, as `tree.rs` does it:
/// the leaf stays locked until the separator is in the (locked) node; the new
/// leaf is locked until then too.
fn split_writer(t: &Split) {
    let v = vlock::lock(&t.locks[0]).unwrap();
    t.has[1].store(1, Ordering::Relaxed);
    t.has[0].store(0, Ordering::Relaxed);
    let vn = vlock::lock(&t.node).unwrap();
    t.sep.store(1, Ordering::Relaxed);
    vlock::unlock(&t.node, vn, true, false);
    t.locks[1].store(vlock::STEP, Ordering::Release);
    vlock::unlock(&t.locks[0], v, true, false);
}

/// A lookup: route through the node, read the leaf, validate the leaf and
/// (when `check_node`) the node again. Gives up after a few restarts (loom
/// explores bounded loops only); a lookup that validates must see the key.
fn lookup(t: &Split, check_node: bool) {
    for _ in 0..3 {
        let Some(vn) = vlock::read_begin(&t.node) else {
            continue;
        };
        let s = t.sep.load(Ordering::Relaxed) as usize;
        if !vlock::validate(&t.node, vn) {
            continue;
        }
        let Some(vl) = vlock::read_begin(&t.locks[s]) else {
            continue;
        };
        let has = t.has[s].load(Ordering::Relaxed);
        if !vlock::validate(&t.locks[s], vl) {
            continue;
        }
        if check_node && !vlock::validate(&t.node, vn) {
            continue;
        }
        assert_eq!(has, 1, "lookup missed a key moved by a split");
        return;
    }
}

fn split_vs_lookup(check_node: bool) {
    loom::model(move || {
        let t = Arc::new(Split {
            node: LoomWord(AtomicU64::new(0)),
            sep: AtomicU64::new(0),
            locks: [
                LoomWord(AtomicU64::new(0)),
                LoomWord(AtomicU64::new(vlock::LOCKED)),
            ],
            has: [AtomicU64::new(1), AtomicU64::new(0)],
        });
        let w = t.clone();
        let writer = thread::spawn(move || split_writer(&w));
        lookup(&t, check_node);
        writer.join().unwrap();
    });
}

/// Validating the level-0 node after taking the leaf's version closes the
/// split race (`inner::Route::still_valid`).
#[test]
fn lookups_validating_the_node_never_miss_a_moved_key() {
    split_vs_lookup(true);
}

/// Without that validation loom finds the lost key: the reader routes to leaf
/// 0, the split runs to completion, the reader reads leaf 0 without the key.
#[test]
#[should_panic(expected = "lookup missed a key moved by a split")]
fn lookups_without_the_node_validation_miss_moved_keys() {
    split_vs_lookup(false);
}
