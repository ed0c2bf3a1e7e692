//! `ferrite crash-test TARGET`: runs a crash-simulator target and reports.

use anyhow::{bail, Result};
use clap::Args;
use ferrite_pm::{CrashConfig, CrashPoints, CrashTarget};
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
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

/// Every crash-test target Ferrite has, with its default configuration.
pub fn targets() -> Vec<(&'static str, CrashTarget, CrashConfig)> {
    let mut out = Vec::new();
    for (n, f) in ferrite_pm::targets::crash_targets() {
        out.push((n, f, ferrite_pm::targets::allocator_default_config()));
    }
    for (n, f) in ferrite_pmio::crash_targets()
        .into_iter()
        .chain(ferrite_index::crash_targets())
        .chain(ferrite_elf::crash_targets())
        .chain(ferrite::crash_targets())
    {
        out.push((n, f, CrashConfig::default()));
    }
    out
}

pub fn run(a: CrashArgs) -> Result<i32> {
    let all = targets();
    if a.target == "list" {
        for (n, _, _) in &all {
            println!("{n}");
        }
        return Ok(0);
    }
    let Some((name, f, mut cfg)) = all.into_iter().find(|t| t.0 == a.target) else {
        let names: Vec<_> = targets().iter().map(|t| t.0).collect();
        bail!(
            "unknown crash-test target {:?} (targets: {})",
            a.target,
            names.join(", ")
        );
    };
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
    let r = f(&cfg)?;
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
        for v in &r.examples {
            println!("  fence {} seed {}: {}", v.fence, v.seed, v.message);
        }
    }
    Ok(if r.violations > 0 { EXIT_VIOLATIONS } else { 0 })
}
