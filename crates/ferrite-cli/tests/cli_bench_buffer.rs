//! `ferrite bench buffer` as a user runs it: the five designs side by side
//! and the LMDB / SQLite anchors in their memory cgroups (the anchors' child
//! process is this binary's hidden `bench buffer-anchor`), at a tiny scale.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const TINY: &[&str] = &[
    "--dram",
    "4M",
    "--pm",
    "16M",
    "--ssd",
    "128M",
    "--page-size",
    "8K",
    "--wal-segment",
    "1M",
    "--tpcc-scale",
    "tiny",
    "--mix-mib",
    "1",
    "--anchor-mib",
    "1,6",
    "--seconds",
    "0.1",
    "--warmup-seconds",
    "0",
];

fn run(out: &PathBuf, extra: &[&str]) -> (String, String, i32) {
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["bench", "buffer", "--out"])
        .arg(out)
        .args(TINY)
        .args(extra)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

#[test]
fn the_five_designs_and_the_anchors_print_side_by_side_with_json_and_charts() {
    let out = std::env::temp_dir().join(format!("ferrite-bench-buffer-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let (text, err, code) = run(
        &out,
        &["--experiment", "mix,anchors", "--anchor-rounds", "2"],
    );
    assert_eq!(code, 0, "{err}");
    for d in [
        "main-memory",
        "pm-direct",
        "basic-pm",
        "ssd-bm",
        "three-tier",
        "lmdb",
        "sqlite",
    ] {
        assert!(text.contains(d), "{d} missing:\n{text}");
    }
    // Tables and their workload lines fit 120 columns.
    for l in text.lines() {
        if !(l.starts_with("machine:") || l.starts_with("charts:") || l.starts_with("note:")) {
            assert!(l.chars().count() <= 120, "too wide: {l}");
        }
    }
    assert!(out.join("buffer-mix.svg").exists() && out.join("buffer-anchors.svg").exists());
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("buffer.json")).unwrap()).unwrap();
    assert_eq!(v["suite"], "buffer");
    for k in ["cpu_model", "durability", "loadavg_before", "tiers"] {
        assert!(v["environment"].get(k).is_some(), "environment lacks {k}");
    }
    let results = v["results"].as_array().unwrap();
    for r in results {
        for f in ["bench", "variant", "param", "threads", "mops", "experiment"] {
            assert!(r.get(f).is_some(), "missing {f} in {r}");
        }
    }
    // The anchors ran in a cgroup held to the DRAM budget, with their
    // durability setting next to the result.
    let anchors: Vec<&Value> = results
        .iter()
        .filter(|r| r["variant"] == "lmdb" || r["variant"] == "sqlite")
        .collect();
    assert_eq!(anchors.len(), 2 * 2 * 2);
    for a in anchors {
        assert_eq!(a["cgroup_limit_mib"], 4.0);
        assert!(a["cgroup_peak_mib"].as_f64().unwrap() <= 4.0, "{a}");
        assert!(a["durability"].as_str().unwrap().contains("fsync"));
        assert!(a["mops"].as_f64().unwrap() > 0.0);
    }
    // Two rounds: each anchors cell (ours and theirs) is the median round,
    // with both rounds beside it.
    let cells: Vec<&Value> = results
        .iter()
        .filter(|r| r["experiment"] == "anchors")
        .collect();
    assert_eq!(cells.len(), 2 * 2 * 2 + 2 * 2 + 2, "{cells:?}");
    for c in cells {
        assert_eq!(c["rounds"], 2, "{c}");
        let rounds: Vec<f64> = c["mops_rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(rounds.len(), 2);
        let m = c["mops"].as_f64().unwrap();
        assert!(
            rounds.iter().any(|r| (r - m).abs() <= 1e-4 * m.max(1.0)),
            "{m} is not one of the rounds {rounds:?}"
        );
    }
    assert!(text.contains("median of 2 rounds"), "{text}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn bad_arguments_are_usage_or_option_errors() {
    let out = std::env::temp_dir().join(format!("ferrite-bench-buffer-bad-{}", std::process::id()));
    let (_, err, code) = run(&out, &["--experiment", "nope"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("unknown experiment"), "{err}");
    let (_, err, code) = run(&out, &["--designs", "fast"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown design"), "{err}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Zero rounds would measure nothing: refused as a usage error (exit 64),
/// naming the flag, before anything is loaded.
#[test]
fn zero_anchor_rounds_are_refused() {
    let out = std::env::temp_dir().join(format!("ferrite-cli-rounds0-{}", std::process::id()));
    let (_, err, code) = run(&out, &["--experiment", "anchors", "--anchor-rounds", "0"]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--anchor-rounds"), "{err}");
    assert!(!out.exists(), "wrote results for zero rounds");
}
