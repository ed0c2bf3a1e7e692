//! Persistence primitives: cache-line write-back, fences, non-temporal copies,
//! per-thread cost counters and optional latency injection.
//!
//! These are the raw, pool-independent operations. Structures normally call the
//! [`Pool`](crate::Pool) methods of the same names, which also route through the
//! crash simulator or `msync` when the pool is in one of those modes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Size of a CPU cache line, the unit of write-back.
pub const CACHE_LINE: usize = 64;

/// How dirty cache lines are written back to the persistence domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlushKind {
    /// `clwb`: writes back and keeps the line cached (best).
    Clwb,
    /// `clflushopt`: writes back and invalidates; unordered among themselves.
    ClflushOpt,
    /// `clflush`: writes back, invalidates and is ordered (slowest).
    Clflush,
    /// eADR / battery-backed caches: the cache is in the persistence domain, so
    /// only the fence is needed for ordering.
    Eadr,
}

impl FlushKind {
    /// Lower-case name used on the command line and in `--json` output.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::Eadr => "eadr",
        }
    }

    /// Parses a name as printed by [`FlushKind::name`].
    pub fn parse(s: &str) -> Option<FlushKind> {
        Some(match s {
            "clwb" => FlushKind::Clwb,
            "clflushopt" => FlushKind::ClflushOpt,
            "clflush" => FlushKind::Clflush,
            "eadr" | "none" => FlushKind::Eadr,
            _ => return None,
        })
    }

    /// Whether this CPU can execute the instruction.
    pub fn supported(self) -> bool {
        let f = cpu_features();
        match self {
            FlushKind::Clwb => f.clwb,
            FlushKind::ClflushOpt => f.clflushopt,
            FlushKind::Clflush => f.clflush,
            FlushKind::Eadr => true,
        }
    }
}

/// Cache-management features found by CPUID.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuFeatures {
    pub clflush: bool,
    pub clflushopt: bool,
    pub clwb: bool,
    pub sse2: bool,
}

/// Detects write-back instructions with CPUID (`is_x86_feature_detected!` does not
/// know `clwb`).
pub fn cpu_features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::x86_64::__cpuid_count;
    // CPUID exists on every x86_64 CPU; leaf 0 reports the highest leaf.
    let max_leaf = __cpuid_count(0, 0).eax;
    let leaf1 = __cpuid_count(1, 0);
    let leaf7 = if max_leaf >= 7 {
        __cpuid_count(7, 0).ebx
    } else {
        0
    };
    CpuFeatures {
        clflush: leaf1.edx & (1 << 19) != 0,
        sse2: leaf1.edx & (1 << 26) != 0,
        clflushopt: leaf7 & (1 << 23) != 0,
        clwb: leaf7 & (1 << 24) != 0,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

/// The best write-back instruction this CPU has, unless `FERRITE_FLUSH`
/// (`clwb`, `clflushopt`, `clflush`, `eadr`) overrides it.
pub fn default_flush_kind() -> FlushKind {
    if let Ok(v) = std::env::var("FERRITE_FLUSH") {
        if let Some(k) = FlushKind::parse(&v) {
            if k.supported() {
                return k;
            }
        }
    }
    best_flush_kind()
}

/// The best write-back instruction this CPU has: clwb > clflushopt > clflush.
pub fn best_flush_kind() -> FlushKind {
    let f = cpu_features();
    if f.clwb {
        FlushKind::Clwb
    } else if f.clflushopt {
        FlushKind::ClflushOpt
    } else if f.clflush {
        FlushKind::Clflush
    } else {
        FlushKind::Eadr
    }
}

/// Hardware-independent persistence costs counted on the current thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PersistStats {
    /// Persist barriers: fences that order preceding write-backs.
    pub fences: u64,
    /// Cache lines written back.
    pub flushed_lines: u64,
    /// Bytes written with non-temporal stores.
    pub nt_bytes: u64,
    /// Write-backs of a line this thread already wrote back within the last three
    /// persist barriers: the pattern that is very slow on Optane (persisting one
    /// line twice in a row) and that padding and dancing fields avoid.
    pub repeated_lines: u64,
}

impl PersistStats {
    /// Counter-wise `self - earlier`, for measuring an interval.
    pub fn since(self, earlier: PersistStats) -> PersistStats {
        PersistStats {
            fences: self.fences - earlier.fences,
            flushed_lines: self.flushed_lines - earlier.flushed_lines,
            nt_bytes: self.nt_bytes - earlier.nt_bytes,
            repeated_lines: self.repeated_lines - earlier.repeated_lines,
        }
    }
}

/// Counter-wise sum, for adding up threads.
impl std::ops::Add for PersistStats {
    type Output = PersistStats;
    fn add(self, o: PersistStats) -> PersistStats {
        PersistStats {
            fences: self.fences + o.fences,
            flushed_lines: self.flushed_lines + o.flushed_lines,
            nt_bytes: self.nt_bytes + o.nt_bytes,
            repeated_lines: self.repeated_lines + o.repeated_lines,
        }
    }
}

thread_local! {
    static FENCES: Cell<u64> = const { Cell::new(0) };
    static LINES: Cell<u64> = const { Cell::new(0) };
    static NT_BYTES: Cell<u64> = const { Cell::new(0) };
    static REPEATS: Cell<u64> = const { Cell::new(0) };
}

/// This thread's counters since it started (thread-local, so counting costs no
/// shared cache-line traffic; benchmark threads report their own).
pub fn thread_stats() -> PersistStats {
    PersistStats {
        fences: FENCES.with(Cell::get),
        flushed_lines: LINES.with(Cell::get),
        nt_bytes: NT_BYTES.with(Cell::get),
        repeated_lines: REPEATS.with(Cell::get),
    }
}

/// Number of fences this thread has issued; the allocator uses it to know when a
/// freed block's unlinking store is durable.
#[inline]
pub fn thread_fence_count() -> u64 {
    FENCES.with(Cell::get)
}

static INJECT_FENCE_NS: AtomicU64 = AtomicU64::new(0);
static INJECT_LINE_NS: AtomicU64 = AtomicU64::new(0);
static INJECT_REPEAT_NS: AtomicU64 = AtomicU64::new(0);

/// Lines written back recently by this thread, with the fence count at the time:
/// a ring big enough for the write-backs of a few log appends.
const RECENT: usize = 16;
/// A write-back counts as "still in flight" until this many barriers followed
/// it: enough that a log re-persisting its size field every second barrier
/// (Header) is caught, as on Optane, and a rotating ("dancing") one is not.
const REPEAT_WINDOW: u64 = 3;

thread_local! {
    static RECENT_LINES: Cell<([(usize, u64); RECENT], usize)> =
        const { Cell::new(([(usize::MAX, 0); RECENT], 0)) };
}

/// Adds a busy-wait of `fence_ns` per fence and `line_ns` per flushed line, to
/// model PM slower than the DRAM it is emulated on. Off (0, 0) by default; tools
/// must print the setting whenever it is on.
pub fn set_latency_injection(fence_ns: u64, line_ns: u64) {
    INJECT_FENCE_NS.store(fence_ns, Ordering::Relaxed);
    INJECT_LINE_NS.store(line_ns, Ordering::Relaxed);
}

/// Models Optane's penalty for persisting a cache line again while its previous
/// write-back is still in flight (thesis ch. 3, "PMem characteristics"), which
/// DRAM-backed emulation does not have: a write-back of a line this thread wrote
/// back within the last three persist barriers waits `ns` more. Off (0) by
/// default; tools print it whenever it is on.
pub fn set_repeat_line_injection(ns: u64) {
    INJECT_REPEAT_NS.store(ns, Ordering::Relaxed);
}

/// Current repeated-line injection in ns (0 = off).
pub fn repeat_line_injection() -> u64 {
    INJECT_REPEAT_NS.load(Ordering::Relaxed)
}

/// Current latency injection `(ns per fence, ns per flushed line)`.
pub fn latency_injection() -> (u64, u64) {
    (
        INJECT_FENCE_NS.load(Ordering::Relaxed),
        INJECT_LINE_NS.load(Ordering::Relaxed),
    )
}

#[cold]
fn spin_ns(ns: u64) {
    let start = Instant::now();
    while (start.elapsed().as_nanos() as u64) < ns {
        std::hint::spin_loop();
    }
}

/// Writes back every cache line overlapping `[ptr, ptr+len)`.
///
/// # Safety
/// `ptr..ptr+len` must lie in mapped memory of this process.
#[inline]
pub unsafe fn flush_range(kind: FlushKind, ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = (ptr as usize) & !(CACHE_LINE - 1);
    let end = ptr as usize + len;
    let lines = (end - start).div_ceil(CACHE_LINE) as u64;
    LINES.with(|c| c.set(c.get() + lines));
    let mut p = start;
    while p < end {
        // SAFETY: the caller guarantees the range is mapped; write-back
        // instructions do not modify memory contents.
        unsafe { flush_line(kind, p as *const u8) };
        p += CACHE_LINE;
    }
    let line_ns = INJECT_LINE_NS.load(Ordering::Relaxed);
    if line_ns != 0 {
        spin_ns(line_ns * lines);
    }
    note_line_run(start / CACHE_LINE, (end - 1) / CACHE_LINE);
}

/// Counts (and, when modelled, delays) a write-back of lines `first..=last`
/// when one of its end lines was written back within the last three fences.
#[inline]
fn note_line_run(first: usize, last: usize) {
    let now = FENCES.with(Cell::get);
    let hit = RECENT_LINES.with(|r| {
        let (mut ring, mut next) = r.get();
        let hit = ring
            .iter()
            .any(|&(l, f)| (l == first || l == last) && f + REPEAT_WINDOW > now);
        for l in [first, last] {
            ring[next] = (l, now);
            next = (next + 1) % RECENT;
            if first == last {
                break;
            }
        }
        r.set((ring, next));
        hit
    });
    if hit {
        REPEATS.with(|c| c.set(c.get() + 1));
        let ns = INJECT_REPEAT_NS.load(Ordering::Relaxed);
        if ns != 0 {
            spin_ns(ns);
        }
    }
}

#[inline(always)]
#[cfg(target_arch = "x86_64")]
unsafe fn flush_line(kind: FlushKind, p: *const u8) {
    // SAFETY: the caller guarantees `p` is a mapped address; the instruction was
    // chosen from CPUID (or explicitly requested and checked by `supported`).
    unsafe {
        match kind {
            FlushKind::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::ClflushOpt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => std::arch::x86_64::_mm_clflush(p),
            FlushKind::Eadr => {}
        }
    }
}

#[inline(always)]
#[cfg(not(target_arch = "x86_64"))]
unsafe fn flush_line(_kind: FlushKind, _p: *const u8) {}

/// Store fence: orders (and, with write-back, waits for) all earlier flushes
/// and non-temporal stores of this thread. One call is one persist barrier.
#[inline]
pub fn fence() {
    FENCES.with(|c| c.set(c.get() + 1));
    sfence_raw();
    let ns = INJECT_FENCE_NS.load(Ordering::Relaxed);
    if ns != 0 {
        spin_ns(ns);
    }
}

#[inline(always)]
fn sfence_raw() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no memory-safety preconditions.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Copies `len` bytes with non-temporal stores where both sides allow it,
/// bypassing the cache (PM's preferred path for large writes). Unaligned head and
/// tail bytes are copied normally and written back. A [`fence`] is still needed
/// afterwards to make the copy durable.
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes; they must not overlap.
pub unsafe fn nt_copy(kind: FlushKind, dst: *mut u8, src: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let d = dst as usize;
        let head = (16 - (d & 15)) & 15;
        if len < head + 16 {
            // SAFETY: the caller guarantees both ranges are valid and disjoint.
            unsafe {
                std::ptr::copy_nonoverlapping(src, dst, len);
                flush_range(kind, dst, len);
            }
            return;
        }
        // SAFETY: all offsets below stay within `len`; `dst + head` is 16-byte
        // aligned as `_mm_stream_si128` requires; loads are unaligned-safe.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            flush_range(kind, dst, head);
            let body = (len - head) & !15;
            let mut i = head;
            while i < head + body {
                let v = _mm_loadu_si128(src.add(i) as *const __m128i);
                _mm_stream_si128(dst.add(i) as *mut __m128i, v);
                i += 16;
            }
            let tail = len - head - body;
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), tail);
            flush_range(kind, dst.add(i), tail);
            NT_BYTES.with(|c| c.set(c.get() + body as u64));
            // Non-temporal lines reach PM like written-back ones: charge the
            // per-line injection for them too, so CoW and logs compare fairly.
            let line_ns = INJECT_LINE_NS.load(Ordering::Relaxed);
            if line_ns != 0 {
                spin_ns(line_ns * (body as u64).div_ceil(CACHE_LINE as u64));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: forwarded caller guarantee.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len);
    }
}

/// Counts one non-temporal copy of `bytes` without performing it (used by the
/// crash simulator, which emulates the copy).
pub(crate) fn count_nt(bytes: usize) {
    NT_BYTES.with(|c| c.set(c.get() + bytes as u64));
}

/// Counts flushed lines without executing write-backs (simulated pools).
pub(crate) fn count_lines(ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = (ptr as usize) & !(CACHE_LINE - 1);
    let lines = (ptr as usize + len - start).div_ceil(CACHE_LINE) as u64;
    LINES.with(|c| c.set(c.get() + lines));
    note_line_run(start / CACHE_LINE, (ptr as usize + len - 1) / CACHE_LINE);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_and_fence_are_counted_per_line() {
        let buf = vec![0u8; 512];
        let before = thread_stats();
        // 10 bytes straddling a line boundary touch two lines.
        let p = buf.as_ptr() as usize;
        let off = ((p + 63) & !63) - p + 60;
        // SAFETY: the range is inside `buf`.
        unsafe { flush_range(best_flush_kind(), buf.as_ptr().add(off), 10) };
        fence();
        let d = thread_stats().since(before);
        assert_eq!(d.fences, 1);
        assert_eq!(d.flushed_lines, 2);
    }

    #[test]
    fn persisting_the_same_line_twice_in_a_row_is_counted() {
        let buf = vec![0u8; 512];
        let p = buf.as_ptr() as usize;
        let base = ((p + 63) & !63) - p;
        let at = |o: usize| buf[base + o..].as_ptr();
        let flush = |o: usize, n: usize| {
            // SAFETY: every range used below lies inside `buf`.
            unsafe { flush_range(FlushKind::Eadr, at(o), n) }
        };
        let repeats = |f: &dyn Fn()| {
            let before = thread_stats();
            f();
            thread_stats().since(before).repeated_lines
        };
        fence();
        fence();
        fence();
        assert_eq!(repeats(&|| flush(0, 8)), 0, "first write-back of line 0");
        assert_eq!(repeats(&|| flush(8, 8)), 1, "line 0 again, same epoch");
        fence();
        assert_eq!(
            repeats(&|| flush(60, 10)),
            1,
            "lines 0..1, one barrier later"
        );
        fence();
        assert_eq!(
            repeats(&|| flush(64, 8)),
            1,
            "line 1, flushed before the last barrier"
        );
        assert_eq!(repeats(&|| flush(192, 8)), 0, "line 3 is new");
        fence();
        assert_eq!(
            repeats(&|| flush(192, 8)),
            1,
            "two barriers later it is still in flight"
        );
        fence();
        fence();
        fence();
        assert_eq!(
            repeats(&|| flush(192, 8)),
            0,
            "three barriers later it is settled"
        );
    }

    #[test]
    fn nt_copy_copies_every_byte_at_every_alignment() {
        let src: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in 0..17 {
            for len in [0, 1, 15, 16, 17, 33, 100, 250] {
                let mut dst = vec![0u8; 300];
                // SAFETY: off + len <= 267 < 300 for both buffers; no overlap.
                unsafe {
                    nt_copy(
                        best_flush_kind(),
                        dst.as_mut_ptr().add(off),
                        src.as_ptr(),
                        len,
                    )
                };
                fence();
                assert_eq!(&dst[off..off + len], &src[..len], "off {off} len {len}");
                assert!(dst[..off].iter().all(|&b| b == 0));
                assert!(dst[off + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn flush_kinds_parse_round_trip() {
        for k in [
            FlushKind::Clwb,
            FlushKind::ClflushOpt,
            FlushKind::Clflush,
            FlushKind::Eadr,
        ] {
            assert_eq!(FlushKind::parse(k.name()), Some(k));
        }
        assert_eq!(FlushKind::parse("bogus"), None);
        assert!(best_flush_kind().supported());
    }

    #[test]
    fn latency_injection_is_off_by_default() {
        assert_eq!(latency_injection(), (0, 0));
        assert_eq!(repeat_line_injection(), 0);
    }
}
