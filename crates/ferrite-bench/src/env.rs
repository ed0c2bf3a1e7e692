//! Fills in the one `environment` record ([`Environment`]) every `ferrite bench`
//! subcommand reports: the machine, the build, the pool directory's durability
//! and the latency injection in force.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrite_pm::{persist, TempPool};
use ferrite_report::{Environment, LatencyInjection, Report};

/// The machine and settings now, for benchmarks whose pools go to `pool_dir`.
/// The durability is that of a small probe pool created (and removed) there.
pub fn environment(pool_dir: &Path) -> Environment {
    let (fence, line) = persist::latency_injection();
    // A name of its own per call: tests (and threads) may probe concurrently.
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let tag = format!("env-probe{}", PROBES.fetch_add(1, Ordering::Relaxed));
    // 4 MiB: large enough for the kernel to map its first 2 MiB with one huge
    // page where the device allows it (the header write touches that page).
    let (flush, durability, durability_text, page) = match TempPool::create(pool_dir, &tag, 4 << 20)
    {
        Ok(tp) => {
            let p = tp.pool();
            (
                p.flush_kind().name().to_string(),
                p.durability().name().to_string(),
                p.durability().describe().to_string(),
                p.page_size(),
            )
        }
        Err(e) => (
            persist::default_flush_kind().name().to_string(),
            "unknown".to_string(),
            format!("no pool could be created there: {e}"),
            None,
        ),
    };
    let mut suite = std::collections::BTreeMap::new();
    if let Some(b) = page {
        // The page size mapping pools there (2 MiB on tmpfs mounted huge=always).
        suite.insert("pool_page_bytes".to_string(), serde_json::json!(b));
    }
    Environment {
        cpu_model: cpu_model().unwrap_or_default(),
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get() as u64),
        flush,
        best_flush: persist::best_flush_kind().name().to_string(),
        pool_dir: pool_dir.display().to_string(),
        durability,
        durability_text,
        kernel: kernel().unwrap_or_default(),
        rustc: env!("FERRITE_BUILD_RUSTC").to_string(),
        profile: env!("FERRITE_BUILD_PROFILE").to_string(),
        git_commit: env!("FERRITE_BUILD_COMMIT").to_string(),
        date: utc_now(),
        latency_injection_ns: LatencyInjection {
            fence,
            line,
            repeat_line: persist::repeat_line_injection(),
            pm_read_line: 0,
        },
        loadavg_before: loadavg(),
        loadavg_after: None,
        suite,
    }
}

/// A report of `suite` with its environment filled in for `pool_dir`, and the
/// latency injection noted loudly when it is on.
pub fn report(suite: &str, pool_dir: &Path) -> Report {
    let mut r = Report::new(suite);
    r.environment = environment(pool_dir);
    let inj = r.environment.latency_injection_ns;
    if inj.fence != 0 || inj.line != 0 {
        r.notes.push(format!(
            "LATENCY INJECTION ON: +{} ns per fence, +{} ns per flushed line",
            inj.fence, inj.line
        ));
    }
    if inj.repeat_line != 0 {
        r.notes.push(format!(
            "REPEATED-LINE INJECTION ON: +{} ns when a line is written back again within three barriers (models Optane)",
            inj.repeat_line
        ));
    }
    r
}

/// Records the load average after the run.
pub fn finish(r: &mut Report) {
    r.environment.loadavg_after = loadavg();
}

/// The 1-minute load average: other work on this shared machine skews results.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn cpu_model() -> Option<String> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}

fn kernel() -> Option<String> {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    Some(format!("Linux {}", r.trim()))
}

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(secs)
}

/// Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian calendar).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn the_record_describes_the_pool_directory() {
        let dir = std::env::temp_dir();
        let e = environment(&dir);
        assert!(e.cpus >= 1);
        assert!(!e.flush.is_empty() && !e.best_flush.is_empty());
        assert_ne!(e.durability, "unknown", "{}", e.durability_text);
        assert!(e.rustc.starts_with("rustc"));
        assert!(e.date.ends_with('Z'));
        let e = environment(Path::new("/nonexistent/ferrite"));
        assert_eq!(e.durability, "unknown");
    }
}
