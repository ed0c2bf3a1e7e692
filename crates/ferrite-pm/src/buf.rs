//! Page-aligned heap buffers, the backing of volatile and simulated pools.

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// A zero-initialised, 4096-byte aligned byte buffer.
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out `&[u8]`; mutation needs `&mut self`.
unsafe impl Sync for AlignedBuf {}

const ALIGN: usize = 4096;

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (`len` > 0).
    pub fn zeroed(len: usize) -> AlignedBuf {
        assert!(len > 0, "AlignedBuf must not be empty");
        let layout = Layout::from_size_align(len, ALIGN).expect("buffer too large");
        // SAFETY: the layout has non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    /// A buffer holding a copy of `bytes`.
    pub fn from_slice(bytes: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(bytes.len().max(1));
        b.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr is a live allocation of len bytes, borrowed exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::from_slice(self.as_slice())
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, ALIGN)) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}
