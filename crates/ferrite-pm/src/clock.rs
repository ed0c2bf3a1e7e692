//! Thread CPU time, for code that measures its own cost (the page store's
//! cost-model calibration, benchmarks). On a machine shared with other jobs it
//! leaves out the time the thread was not running, which wall-clock time would
//! charge to whatever it was measuring.

/// CPU time of the calling thread in nanoseconds (0 if the clock fails).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer; the
    // clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread in seconds.
pub fn thread_cpu_secs() -> f64 {
    thread_cpu_ns() as f64 * 1e-9
}

/// Measures this thread's CPU time from `start`.
pub struct CpuTimer(u64);

impl CpuTimer {
    pub fn start() -> CpuTimer {
        CpuTimer(thread_cpu_ns())
    }

    /// Seconds of CPU time since `start` (at least 1 ns, so rates stay finite).
    pub fn secs(&self) -> f64 {
        (thread_cpu_ns().saturating_sub(self.0) as f64 * 1e-9).max(1e-9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let t = CpuTimer::start();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(t.secs() > 1e-9);
        assert!(thread_cpu_secs() > 0.0);
    }
}
