//! Software prefetch: hints that start loading cache lines a walk will read
//! soon (a leaf, the searched part of an inner node, the next pages of a
//! chain). The one place the intrinsic is called.

/// Asks the CPU to start loading every cache line `addr..addr + bytes`
/// touches (an unaligned range included: from the line of `addr` to the line
/// of its last byte). `addr` need not be valid (it may come from a torn
/// optimistic read): a prefetch has no architectural effect.
#[inline(always)]
pub fn lines(addr: usize, bytes: usize) {
    if bytes == 0 {
        return;
    }
    let (addr, bytes) = (addr & !63, bytes.saturating_add(addr & 63));
    #[cfg(target_arch = "x86_64")]
    for off in (0..bytes).step_by(64) {
        // SAFETY: a prefetch is a hint with no architectural effect, valid for
        // any address.
        unsafe {
            std::arch::x86_64::_mm_prefetch(
                addr.wrapping_add(off) as *const i8,
                std::arch::x86_64::_MM_HINT_T0,
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (addr, bytes);
}

/// Asks the CPU to start loading the line at `p`.
#[inline(always)]
pub fn line(p: *const u8) {
    lines(p as usize, 1);
}
