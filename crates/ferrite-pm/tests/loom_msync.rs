//! Model checking of the msync write-back queue (`ferrite_pm::msync`) with
//! loom: every interleaving of two threads that each note a range and fence.
//! A fence that returns `Ok` must find its range written back. The pre-fix
//! queue (ranges taken under the lock, written back outside it) is caught.

use std::io;

use ferrite_pm::msync::{Locks, MsyncQueue, WriteBack};
use loom::sync::{Arc, Mutex};
use loom::thread;

struct LoomLocks;

impl Locks for LoomLocks {
    type Mutex<T: Send> = Mutex<T>;
    fn new_mutex<T: Send>(v: T) -> Self::Mutex<T> {
        Mutex::new(v)
    }
    fn with<T: Send, R>(m: &Self::Mutex<T>, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut m.lock().unwrap())
    }
}

/// A write-back that takes two steps (start, then completion), so the model
/// can interleave another thread between them.
#[derive(Default)]
struct Device {
    started: Mutex<Vec<(usize, usize)>>,
    done: Mutex<Vec<(usize, usize)>>,
}

impl WriteBack for Device {
    fn write_back(&self, off: usize, len: usize) -> io::Result<()> {
        self.started.lock().unwrap().push((off, len));
        thread::yield_now();
        self.done.lock().unwrap().push((off, len));
        Ok(())
    }
}

impl Device {
    fn covered(&self, off: usize) -> bool {
        self.done
            .lock()
            .unwrap()
            .iter()
            .any(|&(o, l)| o <= off && off < o + l)
    }
}

fn two_fencers(q: MsyncQueue<LoomLocks>) {
    let q = Arc::new(q);
    let dev = Arc::new(Device::default());
    let ts: Vec<_> = [0usize, 2 << 12]
        .into_iter()
        .map(|off| {
            let (q, dev) = (q.clone(), dev.clone());
            thread::spawn(move || {
                q.note(off, 4096);
                q.fence(&*dev).unwrap();
                assert!(
                    dev.covered(off),
                    "fence returned before the range at {off:#x} was written back"
                );
            })
        })
        .collect();
    for t in ts {
        t.join().unwrap();
    }
}

#[test]
fn a_fence_returns_only_after_its_ranges_are_written_back() {
    loom::model(|| two_fencers(MsyncQueue::new()));
}

#[test]
#[should_panic(expected = "fence returned before the range")]
fn tripwire_the_unordered_queue_is_caught() {
    loom::model(|| two_fencers(MsyncQueue::new_unordered_for_tests()));
}
