//! Typed persistent pointers: offsets from the pool base, never addresses.

use std::marker::PhantomData;

use crate::Pool;

/// An offset into a pool, typed by what it points at. Offset 0 (the pool
/// header) is the null pointer.
#[repr(transparent)]
pub struct PPtr<T> {
    off: u64,
    _t: PhantomData<fn() -> T>,
}

const _: () = assert!(std::mem::size_of::<PPtr<u64>>() == 8);

impl<T> PPtr<T> {
    pub const NULL: PPtr<T> = PPtr {
        off: 0,
        _t: PhantomData,
    };

    pub const fn from_offset(off: u64) -> PPtr<T> {
        PPtr {
            off,
            _t: PhantomData,
        }
    }

    pub const fn offset(self) -> u64 {
        self.off
    }

    pub const fn is_null(self) -> bool {
        self.off == 0
    }

    /// The address in `pool`. Panics when the target lies outside the pool.
    pub fn get(self, pool: &Pool) -> *mut T {
        pool.at(self.off, std::mem::size_of::<T>()) as *mut T
    }
}

impl<T> Clone for PPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for PPtr<T> {}
impl<T> PartialEq for PPtr<T> {
    fn eq(&self, o: &Self) -> bool {
        self.off == o.off
    }
}
impl<T> Eq for PPtr<T> {}
impl<T> std::fmt::Debug for PPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PPtr({:#x})", self.off)
    }
}
