//! Model checking of the epoch protocol (`ferrite_index::ebr`'s
//! `pin_slot`, `unpin_slot`, `advance`, `expired`) with loom: a reader pins,
//! follows a pointer and reads the object while a writer unlinks the object,
//! retires it and collects until it may free it. Both barriers are
//! `fence(SeqCst)` here (what `membarrier` makes of the light/heavy pair).
//! loom's cell reports a free that is not ordered after the reader's read.
//!
//! Tripwires: a pin without its barrier, and a free one epoch early, are
//! both caught.

use std::sync::atomic::Ordering;

use ferrite_index::ebr::{self, Barriers};
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicUsize;
use loom::sync::Arc;
use loom::thread;

#[path = "common/loom_word.rs"]
mod loom_word;
use loom_word::LoomWord;

struct Fences {
    pin_barrier: bool,
}

impl Barriers for Fences {
    fn light(&self) {
        if self.pin_barrier {
            loom::sync::atomic::fence(Ordering::SeqCst);
        }
    }
    fn heavy(&self) {
        loom::sync::atomic::fence(Ordering::SeqCst);
    }
}

struct World {
    epoch: LoomWord,
    /// The reader's slot and the writer's (never pinned here).
    slots: [LoomWord; 2],
    /// Which object is linked.
    cur: AtomicUsize,
    objs: [UnsafeCell<u64>; 2],
}

/// One reader and one writer; `early` frees at `tag + 1` instead of
/// [`ebr::expired`].
fn model(pin_barrier: bool, early: bool) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        let w = Arc::new(World {
            epoch: LoomWord::new(0),
            slots: [LoomWord::new(0), LoomWord::new(0)],
            cur: AtomicUsize::new(0),
            objs: [UnsafeCell::new(7), UnsafeCell::new(8)],
        });
        let r = w.clone();
        let reader = thread::spawn(move || {
            let f = Fences { pin_barrier };
            ebr::pin_slot(&r.epoch, &r.slots[0], &f);
            let i = r.cur.load(Ordering::Acquire);
            // SAFETY: loom's cell checks this read against the free.
            let v = r.objs[i].with(|p| unsafe { *p });
            assert!(v == 7 || v == 8);
            ebr::unpin_slot(&r.slots[0]);
        });
        let f = Fences { pin_barrier };
        // Unlink object 0, then collect: the first step tags it.
        w.cur.store(1, Ordering::Release);
        let mut tag = None;
        for _ in 0..3 {
            let st = ebr::advance(&w.epoch, w.slots.iter(), &f);
            let t = *tag.get_or_insert(st.tag);
            let free = if early {
                st.now > t
            } else {
                ebr::expired(t, st.now)
            };
            if free {
                // SAFETY: loom's cell checks this write against the read.
                w.objs[0].with_mut(|p| unsafe { *p = 0xdead });
                break;
            }
        }
        reader.join().unwrap();
    });
}

#[test]
fn a_retired_object_is_freed_only_after_every_reader_that_saw_it() {
    model(true, false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn tripwire_a_pin_without_its_barrier_lets_the_free_race_the_read() {
    model(false, false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn tripwire_freeing_one_epoch_early_races_the_read() {
    model(true, true);
}
