//! DRAM for inner nodes, carved from 2 MiB huge-page-backed chunks.
//!
//! A lookup touches one inner node per level, at random. With 4 KiB pages every
//! cold node also costs a TLB miss (a nested page walk under virtualisation):
//! measured here, a dependent random read in a 16 MiB region takes 160 ns on
//! 4 KiB pages and 97 ns on 2 MiB pages. `malloc` does not give small objects
//! huge pages, so nodes come from chunks that are 2 MiB-aligned and advised
//! `MADV_HUGEPAGE` (a hint: the kernel may still use small pages).
//!
//! Each chunk is a fresh anonymous mapping ([`HugeRegion`]), not a 2 MiB
//! allocation of the global allocator: that one often reuses heap memory a
//! load or a recovery had already touched (and so faulted in as 4 KiB pages),
//! where the advice comes too late. Measured on a reopened 10 M-record tree:
//! 10 of its ~17 MiB of nodes were on huge pages that way.
//!
//! Freed slots are reused, never returned to the OS (the tree's node count only
//! shrinks when leaves are removed, and the chunks are a small fraction of the
//! data). Allocation takes a mutex: nodes are only allocated by structure
//! modifications (one in a dozen inserts), never on a read path.

use std::sync::Mutex;

use ferrite_pm::anon::HugeRegion;

/// Bytes per chunk: one huge page.
pub const CHUNK: usize = 2 << 20;

/// A pool of fixed-size slots.
pub struct Slab {
    slot: usize,
    inner: Mutex<SlabInner>,
}

struct SlabInner {
    /// The chunks, kept mapped for the life of the process.
    chunks: Vec<HugeRegion>,
    free: Vec<usize>,
    next: usize,
    end: usize,
}

impl Slab {
    /// Slots of `size` bytes (rounded up to a cache line).
    pub const fn new(size: usize) -> Slab {
        assert!(size <= CHUNK);
        Slab {
            slot: size.div_ceil(64) * 64,
            inner: Mutex::new(SlabInner {
                chunks: Vec::new(),
                free: Vec::new(),
                next: 0,
                end: 0,
            }),
        }
    }

    /// A 64-byte-aligned slot of at least the slab's size.
    pub fn alloc(&self) -> *mut u8 {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = g.free.pop() {
            return p as *mut u8;
        }
        if g.next + self.slot > g.end {
            let chunk = HugeRegion::new(CHUNK)
                .unwrap_or_else(|e| panic!("out of memory for index nodes: {e}"));
            g.next = chunk.as_ptr() as usize;
            g.end = g.next + CHUNK;
            g.chunks.push(chunk);
        }
        let p = g.next;
        g.next += self.slot;
        p as *mut u8
    }

    /// Returns a slot from [`Slab::alloc`] of this slab.
    pub fn free(&self, p: *mut u8) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.free.push(p as usize);
    }
}
