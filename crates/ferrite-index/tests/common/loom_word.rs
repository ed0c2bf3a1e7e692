//! `vlock::Word` on loom's atomics, shared by the loom models of this crate.

use std::sync::atomic::Ordering;

use ferrite_index::vlock::Word;
use loom::sync::atomic::AtomicU64;

pub struct LoomWord(pub AtomicU64);

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

#[allow(dead_code)] // not every model builds its words this way
impl LoomWord {
    pub fn new(v: u64) -> Self {
        LoomWord(AtomicU64::new(v))
    }
}
