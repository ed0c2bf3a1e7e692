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

/// Buffers dropped on this thread, kept for reuse: crash tests build thousands of
/// same-sized images, and a fresh large allocation costs an mmap plus a page
/// fault per page.
const RECYCLE_MAX: usize = 8;

thread_local! {
    static RECYCLED: std::cell::RefCell<Vec<AlignedBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

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
        let len = bytes.len().max(1);
        let recycled = RECYCLED
            .try_with(|r| {
                let mut r = r.borrow_mut();
                let i = r.iter().position(|b| b.len == len)?;
                Some(r.swap_remove(i))
            })
            .ok()
            .flatten();
        let mut b = recycled.unwrap_or_else(|| AlignedBuf::zeroed(len));
        b.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
        b.as_mut_slice()[bytes.len()..].fill(0);
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

impl AlignedBuf {
    fn release(&mut self) {
        // SAFETY: allocated in `zeroed` with exactly this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align_unchecked(self.len, ALIGN)) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::from_slice(self.as_slice())
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len >= 64 * 1024 {
            let (ptr, len) = (self.ptr, self.len);
            // The closure only copies the raw parts, so if the thread-local is
            // already gone (thread exit) nothing is dropped twice.
            let kept = RECYCLED.try_with(|r| match r.try_borrow_mut() {
                Ok(mut r) if r.len() < RECYCLE_MAX => {
                    r.push(AlignedBuf { ptr, len });
                    true
                }
                _ => false,
            });
            if kept == Ok(true) {
                return;
            }
        }
        self.release();
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_buffers_come_back_clean_and_threads_exit_safely() {
        std::thread::spawn(|| {
            let src = vec![7u8; 100_000];
            for _ in 0..3 * RECYCLE_MAX {
                let a = AlignedBuf::from_slice(&src);
                assert!(a.as_slice().iter().all(|&b| b == 7));
                drop(a);
                let z = AlignedBuf::from_slice(&src[..50_000]);
                assert!(z.as_slice()[..50_000].iter().all(|&b| b == 7));
                assert_eq!(z.len(), 50_000);
            }
            // Leave buffers in the recycle list for thread-exit destruction.
            let keep: Vec<_> = (0..RECYCLE_MAX + 2)
                .map(|_| AlignedBuf::zeroed(1 << 17))
                .collect();
            drop(keep);
        })
        .join()
        .expect("thread exits cleanly with recycled buffers");
        let b = AlignedBuf::from_slice(&[1, 2, 3]);
        assert_eq!(b.as_slice(), &[1, 2, 3]);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
    }
}
