//! The `environment` record of every report: the machine and the settings a
//! result was measured on. One struct, so every `ferrite bench …` subcommand
//! serialises the same fields with the same spelling; what only one suite has
//! (the index workload, the Elf table shape, …) goes to [`Environment::suite`].
//! `ferrite-bench` fills it in (`ferrite_bench::env::environment`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Latency added on purpose to model slower PM (all 0 = off, the default).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct LatencyInjection {
    /// Busy-wait per persist barrier (`--inject FENCE_NS LINE_NS`).
    #[serde(default)]
    pub fence: u64,
    /// Busy-wait per flushed cache line.
    #[serde(default)]
    pub line: u64,
    /// Busy-wait per line written back again within three barriers
    /// (`--inject-repeat`, the Optane same-line model).
    #[serde(default)]
    pub repeat_line: u64,
    /// Busy-wait per cache line a PM Elf variant reads (`ferrite bench elf --read-ns`).
    #[serde(default)]
    pub pm_read_line: u64,
}

impl LatencyInjection {
    pub fn is_off(&self) -> bool {
        *self == LatencyInjection::default()
    }
}

/// Machine and settings. Every field is always serialised (unknown values are
/// empty strings or null), so reports of different subcommands line up.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct Environment {
    /// `model name` of `/proc/cpuinfo`.
    #[serde(default)]
    pub cpu_model: String,
    /// Cores available to the process.
    #[serde(default)]
    pub cpus: u64,
    /// The write-back instruction the benchmark's pools use (`clwb`, …; `none` in eADR mode).
    #[serde(default)]
    pub flush: String,
    /// The best write-back instruction the CPU supports.
    #[serde(default)]
    pub best_flush: String,
    /// Where the benchmark's pools (and database files) go.
    #[serde(default)]
    pub pool_dir: String,
    /// Durability of a pool in `pool_dir` (`pm`, `emulated-pm-tmpfs`, …).
    #[serde(default)]
    pub durability: String,
    /// The same in words: what survives what.
    #[serde(default)]
    pub durability_text: String,
    /// Kernel release (`uname -r`).
    #[serde(default)]
    pub kernel: String,
    /// `rustc -V` of the build.
    #[serde(default)]
    pub rustc: String,
    /// Cargo profile and optimisation level of the build (`release, opt-level 3`).
    #[serde(default)]
    pub profile: String,
    /// Commit the binary was built from (at build time).
    #[serde(default)]
    pub git_commit: String,
    /// When the run started, UTC (`2026-11-24T21:00:41Z`).
    #[serde(default)]
    pub date: String,
    #[serde(default)]
    pub latency_injection_ns: LatencyInjection,
    /// 1-minute load average before and after the run (the machine is shared).
    #[serde(default)]
    pub loadavg_before: Option<f64>,
    #[serde(default)]
    pub loadavg_after: Option<f64>,
    /// Settings of this suite only (`workload` of the index benchmark, …).
    #[serde(flatten)]
    pub suite: BTreeMap<String, Value>,
}

impl Environment {
    /// One line for the terminal: CPU, cores, flush, pool durability, build.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{}, {} cores, flush {}; pools in {} ({})",
            if self.cpu_model.is_empty() {
                "unknown CPU"
            } else {
                &self.cpu_model
            },
            self.cpus,
            self.flush,
            self.pool_dir,
            self.durability
        );
        if let Some(b) = self.suite.get("pool_page_bytes").and_then(|v| v.as_u64()) {
            s.push_str(&format!(", {} KiB pages", b / 1024));
        }
        if let Some(l) = self.loadavg_before {
            s.push_str(&format!("; load average {l:.2}"));
        }
        let inj = self.latency_injection_ns;
        if !inj.is_off() {
            s.push_str(&format!(
                "; LATENCY INJECTION fence {} / line {} / repeated line {} / PM read line {} ns",
                inj.fence, inj.line, inj.repeat_line, inj.pm_read_line
            ));
        }
        s
    }

    /// Build and date on one line: `rustc 1.x, release, commit abc, 2026-…`.
    pub fn build_line(&self) -> String {
        format!(
            "{}, {}, commit {}, kernel {}, {}",
            self.rustc, self.profile, self.git_commit, self.kernel, self.date
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_serialised_and_suite_keys_sit_beside_them() {
        let mut e = Environment {
            cpus: 2,
            flush: "clwb".into(),
            ..Environment::default()
        };
        e.suite
            .insert("workload".into(), serde_json::json!({"records": 10}));
        let v = serde_json::to_value(&e).unwrap();
        for k in [
            "cpu_model",
            "cpus",
            "flush",
            "best_flush",
            "pool_dir",
            "durability",
            "durability_text",
            "kernel",
            "rustc",
            "profile",
            "git_commit",
            "date",
            "latency_injection_ns",
            "loadavg_before",
            "loadavg_after",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["workload"]["records"], 10);
        assert_eq!(v["latency_injection_ns"]["fence"], 0);
        let back: Environment = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn an_old_record_still_reads() {
        let v = serde_json::json!({"workload": {"records": 5}, "best_flush": "clwb"});
        let e: Environment = serde_json::from_value(v).unwrap();
        assert_eq!(e.best_flush, "clwb");
        assert_eq!(e.suite["workload"]["records"], 5);
    }
}
