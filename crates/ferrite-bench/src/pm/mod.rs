//! The PM layer's own costs: `ferrite bench persist` (a persist barrier per
//! write-back method and pattern), `alloc` (the crash-consistent heap against
//! the system allocator) and `memory` (the read-latency floor of the pool's
//! mapping and of DRAM, and the route-then-leaf chain of a tree lookup) and
//! `cache` (how much cache a dependent reader really gets).

pub mod alloc;
pub mod cache;
pub mod memory;
pub mod persist;

pub use alloc::{alloc, AllocConfig};
pub use cache::{cache, CacheConfig};
pub use memory::{memory, MemoryConfig};
pub use persist::{persist, PersistConfig};
