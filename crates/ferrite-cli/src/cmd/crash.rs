//! `ferrite crash-test TARGET`: runs a crash-simulator target and reports.

use anyhow::{bail, Result};
use clap::Args;
use ferrite_pm::tripwire::{self, Tripwire};
use ferrite_pm::CrashPoints;
use serde_json::json;

use crate::util::EXIT_VIOLATIONS;

#[derive(Args)]
pub struct CrashArgs {
    /// What to test (`ferrite crash-test list` shows all targets)
    pub target: String,
    /// Crash points: `all` fences or a sampled number
    #[arg(long, default_value = "all")]
    pub points: String,
    /// Crash images per point (seed 0: durable only, 1: all dirty lines, others random)
    #[arg(long)]
    pub seeds: Option<u32>,
    /// Workload size (operations; targets scale their own default)
    #[arg(long)]
    pub ops: Option<usize>,
    /// Seed of the workload and of the sampling
    #[arg(long)]
    pub seed: Option<u64>,
    /// Break the target on purpose with this tripwire (`ferrite crash-test
    /// list` shows each target's); the checker must then report violations
    #[arg(long)]
    pub tripwire: Option<String>,
    /// Do not also crash during recovery (faster; fewer states)
    #[arg(long)]
    pub no_recovery_crashes: bool,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CrashArgs) -> Result<i32> {
    if a.target == "list" {
        for t in ferrite_registry::crash_tests() {
            println!("{:<18} tripwire {}", t.name, t.tripwire.name());
        }
        return Ok(0);
    }
    let Some(t) = ferrite_registry::crash_test(&a.target) else {
        let names: Vec<_> = ferrite_registry::crash_tests().map(|t| t.name).collect();
        bail!(
            "unknown crash-test target {:?} (targets: {})",
            a.target,
            names.join(", ")
        );
    };
    let (name, f, mut cfg) = (t.name, t.run, (t.config)());
    let wire = match &a.tripwire {
        None => None,
        Some(w) => Some(Tripwire::parse(w).ok_or_else(|| {
            let all: Vec<_> = Tripwire::ALL.iter().map(|t| t.name()).collect();
            anyhow::anyhow!("unknown tripwire {w:?} (tripwires: {})", all.join(", "))
        })?),
    };
    cfg.recovery_crashes = !a.no_recovery_crashes;
    cfg.points = match a.points.as_str() {
        "all" => CrashPoints::All,
        n => CrashPoints::Sample(
            n.parse()
                .map_err(|_| anyhow::anyhow!("--points takes `all` or a number, not {n:?}"))?,
        ),
    };
    if let Some(s) = a.seeds {
        cfg.seeds = s.max(1);
    }
    if let Some(o) = a.ops {
        cfg.ops = o;
    }
    if let Some(s) = a.seed {
        cfg.seed = s;
    }
    let spinner = indicatif::ProgressBar::new_spinner();
    spinner.set_message(format!(
        "crash-testing {name}: cutting power at every selected fence"
    ));
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let started = std::time::Instant::now();
    if let Some(w) = wire {
        tripwire::arm(w, true);
    }
    let r = f(&cfg)?;
    if let Some(w) = wire {
        tripwire::arm(w, false);
    }
    spinner.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "target": r.target,
                "states": r.states,
                "violations": r.violations,
                "points": r.points,
                "fences": r.fences,
                "acked_ops": r.acked_ops,
                "recovery_points": r.recovery_points,
                "recovery_states": r.recovery_states,
                "recovery_crashes": cfg.recovery_crashes,
                "model": ferrite_pm::crash::MODEL,
                "tripwire": wire.map(|w| w.name()),
                "seeds": cfg.seeds,
                "seed": cfg.seed,
                "seconds": secs,
                "examples": r.examples.iter().map(|v| json!({"fence": v.fence, "seed": v.seed, "message": v.message})).collect::<Vec<_>>(),
            }))?
        );
    } else {
        println!(
            "{}: {} crash states at {} points ({} fences, {} acknowledged operations), {} of them crashes during recovery at {} recovery fences, in {:.1} s: {} violations",
            r.target, r.states, r.points, r.fences, r.acked_ops, r.recovery_states, r.recovery_points, secs, r.violations
        );
        println!("model: {}", ferrite_pm::crash::MODEL);
        if let Some(w) = wire {
            println!(
                "tripwire {} was armed: the target was broken on purpose{}",
                w.name(),
                if r.violations > 0 {
                    ", and the checker caught it"
                } else {
                    " and the checker did NOT catch it"
                }
            );
        }
        for v in &r.examples {
            println!("  fence {} seed {}: {}", v.fence, v.seed, v.message);
        }
    }
    Ok(if r.violations > 0 { EXIT_VIOLATIONS } else { 0 })
}
