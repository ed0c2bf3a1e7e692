//! Volatile memory in huge pages: a private anonymous mapping at a 2 MiB
//! boundary, advised to use transparent huge pages, backed by the OS on first
//! touch and unmapped on drop. For large DRAM structures that are accessed at
//! random (a buffer manager's frames): with 4 KiB pages nearly every access
//! would also miss the TLB, a nested page walk in a VM.

use crate::pool::mapping::map_anon_huge;

/// A zeroed anonymous mapping of `len` bytes (see the module docs).
#[derive(Debug)]
pub struct HugeRegion {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain memory; who may touch which byte is the owner's business, as
// for any other allocation.
unsafe impl Send for HugeRegion {}
// SAFETY: as above.
unsafe impl Sync for HugeRegion {}

impl HugeRegion {
    /// Maps `len` bytes (`len == 0` maps nothing).
    pub fn new(len: usize) -> std::io::Result<HugeRegion> {
        if len == 0 {
            return Ok(HugeRegion {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
            });
        }
        Ok(HugeRegion {
            ptr: map_anon_huge(len)?,
            len,
        })
    }

    /// Start of the region.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for HugeRegion {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `new`, which the region owns; its
            // owner is being dropped, so no reference into it remains.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

/// A vector with room for `n` elements whose untouched memory is advised to
/// use huge pages (the 2 MiB-aligned part of it; small vectors are left
/// alone): for large arrays of descriptors that are read at random. Push the
/// elements after this call, so the first touch faults in huge pages.
pub fn huge_vec<T>(n: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(n);
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    let start = v.as_ptr() as usize;
    let a = start.next_multiple_of(HUGE);
    let b = (start + bytes) / HUGE * HUGE;
    if b > a {
        // SAFETY: a..b lies inside the vector's allocation, which is
        // untouched; madvise is a hint that changes no contents.
        unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
    }
    v
}

const HUGE: usize = 2 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_is_zeroed_writable_and_aligned() {
        let r = HugeRegion::new(3 << 20).unwrap();
        assert_eq!(r.len(), 3 << 20);
        assert_eq!(r.as_ptr() as usize % (2 << 20), 0);
        // SAFETY: inside the region, which this test owns.
        unsafe {
            assert_eq!(*r.as_ptr().add(12345), 0);
            *r.as_ptr().add(12345) = 7;
            assert_eq!(*r.as_ptr().add(12345), 7);
        }
        assert!(HugeRegion::new(0).unwrap().is_empty());
    }

    #[test]
    fn a_huge_vec_has_the_room_asked_for() {
        let mut v = huge_vec::<u64>(1 << 20);
        assert!(v.capacity() >= 1 << 20);
        v.extend(0..1u64 << 20);
        assert_eq!(v[12345], 12345);
        assert!(huge_vec::<u8>(0).is_empty());
    }
}
