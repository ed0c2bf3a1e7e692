//! `ferrite bench cache`: how much cache a dependent reader really gets.
//!
//! The latency of one dependent random read over regions of growing size, in
//! DRAM on huge pages (where inner nodes live) and on 4 KiB pages. While the
//! region fits a cache level the read costs that level's latency; past the
//! last level it costs a DRAM access. On a virtual machine the last level the
//! CPU reports (`lscpu`) is shared with other guests, and the part a guest
//! keeps can be a fraction of it: this is the number that decides whether a
//! tree's lowest inner level (about 16-20 MiB at 10 M records) is a cache hit
//! or a DRAM miss on every lookup.
//!
//! The *effective cache* reported is the largest region whose read costs less
//! than half of the largest region's: past it, most reads go to DRAM.

use serde_json::json;

use ferrite_report::{chart, BenchResult};

use super::memory::{dependent, within_memory, Anon};
use crate::index::workload::Distribution;
use crate::{env, BenchError, BenchOutput, Result};

/// What `cache` measures.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Largest region (at least 1 MiB).
    pub max_region: u64,
    /// Reads per region.
    pub ops: u64,
    /// Directory named in the report (nothing is created there).
    pub pool_dir: std::path::PathBuf,
}

/// Region sizes of the sweep: from 64 KiB, doubling with a midpoint per
/// octave, up to `max` bytes.
pub fn sweep_sizes(max: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut s = 64u64 << 10;
    while s <= max {
        out.push(s);
        if s / 2 * 3 <= max {
            out.push(s / 2 * 3);
        }
        s *= 2;
    }
    out
}

/// The largest region whose read costs less than half of the largest
/// region's, given (bytes, ns) by increasing size; `None` for fewer than two
/// points or when even the smallest region is that slow.
pub fn effective_cache(points: &[(u64, f64)]) -> Option<u64> {
    let &(_, slowest) = points.last()?;
    if points.len() < 2 {
        return None;
    }
    points
        .iter()
        .take_while(|&&(_, ns)| ns < slowest / 2.0)
        .last()
        .map(|&(b, _)| b)
}

/// The last-level cache the CPU reports (sysfs), in bytes.
fn reported_llc() -> Option<u64> {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut best: Option<(u32, u64)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).ok();
        let (Some(level), Some(size)) = (read("level"), read("size")) else {
            continue;
        };
        let Ok(level) = level.trim().parse::<u32>() else {
            continue;
        };
        let size = size.trim();
        let bytes = match size.strip_suffix('K') {
            Some(k) => k.parse::<u64>().ok().map(|k| k << 10),
            None => match size.strip_suffix('M') {
                Some(m) => m.parse::<u64>().ok().map(|m| m << 20),
                None => size.parse().ok(),
            },
        };
        if let Some(b) = bytes {
            if best.is_none_or(|(l, _)| level > l) {
                best = Some((level, b));
            }
        }
    }
    best.map(|(_, b)| b)
}

/// Dependent-read latency over region size, in DRAM with and without huge pages.
pub fn cache(a: &CacheConfig) -> Result<BenchOutput> {
    if a.max_region < 1 << 20 {
        return Err(BenchError::Options(
            "--max-region must be at least 1M".into(),
        ));
    }
    if !(1000..=1 << 28).contains(&a.ops) {
        return Err(BenchError::Options(format!(
            "--ops must be between 1000 and {}",
            1u64 << 28
        )));
    }
    within_memory("--max-region", a.max_region)?;
    let sizes = sweep_sizes(a.max_region);
    let mut r = env::report("cache", &a.pool_dir);
    let mut series = Vec::new();
    let mut effective = Vec::new();
    for (name, huge) in [("dram-huge-pages", true), ("dram-4k-pages", false)] {
        let mut points = Vec::new();
        for &len in &sizes {
            let anon = Anon::new(len as usize, huge)?;
            // SAFETY: the mapping is ours and `len` bytes long (`dependent`
            // writes it whole before timing, so its pages are present).
            let ns = unsafe { dependent(anon.ptr, len as usize, a.ops, Distribution::Uniform) };
            points.push((len, ns.1));
            r.results.push(
                BenchResult::new("dependent-read", name, Some(json!(len)), 1, 1e3 / ns.0)
                    .with("region_kib", len >> 10)
                    .with("ns_per_op", ns.0)
                    .with("ns_per_op_cpu", ns.1),
            );
        }
        let eff = effective_cache(&points);
        effective.push((name, eff));
        series.push(chart::Series::new(
            name,
            points
                .iter()
                .map(|&(b, ns)| (b as f64 / (1u64 << 20) as f64, ns))
                .collect(),
        ));
    }
    let llc = reported_llc();
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    if let Some(b) = llc {
        r.environment
            .suite
            .insert("reported_llc_bytes".into(), json!(b));
    }
    for (name, eff) in &effective {
        r.environment.suite.insert(
            format!("effective_cache_bytes_{}", name.replace('-', "_")),
            json!(eff),
        );
    }
    r.notes.push(format!(
        "dependent-read: one random 64-byte read whose address depends on the previous one, over a \
         DRAM region of the size in the param column (bytes), {} reads, the region written whole before them; \
         on-CPU ns in the chart",
        a.ops
    ));
    for (name, eff) in &effective {
        r.notes.push(match eff {
            Some(b) => format!(
                "{name}: effective cache {} (largest region read in under half the time of the \
                 largest, {}); the CPU reports a last-level cache of {}",
                mib(*b),
                mib(*sizes.last().unwrap_or(&0)),
                llc.map_or("unknown size".into(), mib)
            ),
            None => format!("{name}: no region was read in under half the time of the largest"),
        });
    }
    let svg = chart::line_chart(
        "Dependent random read over region size (on-CPU)",
        "region (MiB)",
        "ns per read",
        &series,
        true,
    );
    env::finish(&mut r);
    Ok(BenchOutput {
        report: r,
        svg,
        extra_cols: vec!["ns_per_op", "ns_per_op_cpu"],
    })
}

#[cfg(test)]
mod tests {
    use super::{effective_cache, sweep_sizes};

    #[test]
    fn the_sweep_doubles_with_midpoints_up_to_the_largest_region() {
        let k = 1u64 << 10;
        assert_eq!(
            sweep_sizes(2 << 20),
            [64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048].map(|x| x * k)
        );
        assert_eq!(sweep_sizes(3 << 30).last(), Some(&(3 << 30)));
        assert!(sweep_sizes(32 << 10).is_empty());
    }

    #[test]
    fn effective_cache_is_the_last_region_under_half_the_slowest() {
        let m = 1u64 << 20;
        let pts = [
            (m, 17.0),
            (2 * m, 22.0),
            (4 * m, 24.0),
            (6 * m, 75.0),
            (12 * m, 120.0),
            (64 * m, 130.0),
        ];
        assert_eq!(effective_cache(&pts), Some(4 * m));
        // Every region slow: no cache to speak of.
        assert_eq!(effective_cache(&[(m, 100.0), (2 * m, 120.0)]), None);
        // A single point cannot show a knee.
        assert_eq!(effective_cache(&[(m, 10.0)]), None);
        assert_eq!(effective_cache(&[]), None);
    }
}
