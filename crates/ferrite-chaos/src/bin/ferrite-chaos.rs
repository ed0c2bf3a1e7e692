//! `ferrite-chaos`: the long fault-injection run (scripts/chaos/long-run.sh).
//!
//! Runs one seeded fault run after another (a fresh 3-replica cluster each,
//! cycling through the stores) until the time budget is spent, and prints a
//! summary: runs (histories checked), operations, faults by kind,
//! linearizability violations, lost acknowledged writes, replicas that did
//! not converge. Exit status 0 when all is well, 3 when any run found a
//! problem, 1 when a run could not be carried out, 64 for bad arguments.
//!
//! Usage: ferrite-chaos --ferrite PATH [--minutes M] [--secs-per-run S]
//!        [--stores list,btree,wal] [--seed N] [--dir DIR] [--keep DIR] [--json]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use ferrite_chaos::cluster::ClusterSpec;
use ferrite_chaos::run::{run, FaultCounts, RunSpec};
use serde::Serialize;

struct Args {
    ferrite: PathBuf,
    minutes: f64,
    secs_per_run: u64,
    stores: Vec<String>,
    seed: u64,
    dir: PathBuf,
    keep: PathBuf,
    json: bool,
}

fn usage(msg: &str) -> ! {
    eprintln!("ferrite-chaos: {msg}");
    eprintln!(
        "usage: ferrite-chaos --ferrite PATH [--minutes M] [--secs-per-run S] \
         [--stores list,btree,wal] [--seed N] [--dir DIR] [--keep DIR] [--json]"
    );
    std::process::exit(64);
}

fn parse() -> Args {
    let mut a = Args {
        ferrite: PathBuf::new(),
        minutes: 5.0,
        secs_per_run: 20,
        stores: vec!["list".into(), "btree".into(), "wal".into()],
        seed: 1,
        dir: PathBuf::from("/dev/shm"),
        keep: std::env::temp_dir().join("ferrite-chaos-failures"),
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "--json" {
            a.json = true;
            continue;
        }
        let v = it
            .next()
            .unwrap_or_else(|| usage(&format!("{k} needs a value")));
        let num = |v: &str| -> f64 {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{k} takes a number, not {v:?}")))
        };
        match k.as_str() {
            "--ferrite" => a.ferrite = v.into(),
            "--minutes" => a.minutes = num(&v),
            "--secs-per-run" => a.secs_per_run = num(&v) as u64,
            "--stores" => a.stores = v.split(',').map(str::to_string).collect(),
            "--seed" => a.seed = num(&v) as u64,
            "--dir" => a.dir = v.into(),
            "--keep" => a.keep = v.into(),
            _ => usage(&format!("unknown argument {k}")),
        }
    }
    if a.ferrite.as_os_str().is_empty() {
        usage("--ferrite PATH (the ferrite binary) is required");
    }
    for s in &a.stores {
        if !matches!(s.as_str(), "list" | "btree" | "wal") {
            usage(&format!("--stores takes list, btree, wal; not {s:?}"));
        }
    }
    a
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    command: String,
    minutes: f64,
    runs: u64,
    runs_by_store: std::collections::BTreeMap<String, u64>,
    histories_checked: u64,
    operations: u64,
    acknowledged: u64,
    indeterminate: u64,
    failed: u64,
    faults: FaultCounts,
    violations: u64,
    lost_writes: u64,
    not_converged: u64,
    replicas_differ: u64,
    failures: Vec<String>,
}

fn main() {
    let a = parse();
    let checker_dir = a
        .dir
        .join(format!("ferrite-chaos-checker-{}", std::process::id()));
    std::fs::create_dir_all(&checker_dir).unwrap_or_else(|e| {
        eprintln!("ferrite-chaos: {}: {e}", checker_dir.display());
        std::process::exit(1)
    });
    let checker = match ferrite_chaos::build_checker(&checker_dir) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ferrite-chaos: {e}");
            std::process::exit(1)
        }
    };
    let mut s = Summary {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        ..Summary::default()
    };
    let t0 = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let mut seed = a.seed;
    let mut code = 0;
    // Runs start until the budget is spent: the total is at least the
    // budget (and at most one run more).
    while s.runs == 0 || t0.elapsed() < budget {
        let store = &a.stores[(s.runs as usize) % a.stores.len()];
        let dir = a.dir.join(format!(
            "ferrite-chaos-long-{}-{store}-{seed}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let hb = 50u64;
        let spec = RunSpec {
            cluster: ClusterSpec {
                bin: a.ferrite.clone(),
                dir: dir.clone(),
                replicas: 3,
                store: store.clone(),
                extra: [
                    "--pool-size",
                    "64M",
                    "--heartbeat-ms",
                    &hb.to_string(),
                    "--snapshot-every",
                    "500",
                    "--threads",
                    "1",
                ]
                .map(String::from)
                .to_vec(),
            },
            clients: 4,
            keys: 4,
            duration: Duration::from_secs(a.secs_per_run),
            seed,
            election_timeout: Duration::from_millis(hb * 12),
            op_timeout: Duration::from_secs(1),
            password: None,
        };
        let t = Instant::now();
        let r = run(&spec, &checker);
        s.runs += 1;
        *s.runs_by_store.entry(store.clone()).or_default() += 1;
        let mut keep = false;
        match r {
            Ok(r) => {
                s.histories_checked += 1;
                s.operations += r.operations;
                s.acknowledged += r.acknowledged;
                s.indeterminate += r.indeterminate;
                s.failed += r.failed;
                let f = &r.faults;
                s.faults.partitions += f.partitions;
                s.faults.black_holes += f.black_holes;
                s.faults.leader_kills += f.leader_kills;
                s.faults.follower_kills += f.follower_kills;
                s.faults.pauses += f.pauses;
                s.faults.restarts_of_all += f.restarts_of_all;
                s.violations += r.violations.len() as u64;
                s.lost_writes += r.lost_writes.len() as u64;
                s.not_converged += u64::from(!r.converged);
                s.replicas_differ += u64::from(r.converged && !r.replicas_identical);
                let problems = r.problems();
                eprintln!(
                    "run {:>3}: {store:<5} seed {seed:<6} {:>6} ops ({} indeterminate) in {:>5.1} s: {}",
                    s.runs,
                    r.operations,
                    r.indeterminate,
                    t.elapsed().as_secs_f64(),
                    if problems.is_empty() {
                        "ok".to_string()
                    } else {
                        format!("{problems:?}")
                    }
                );
                if !problems.is_empty() {
                    code = 3;
                    keep = true;
                    s.failures
                        .push(format!("{store} seed {seed}: {}", problems.join("; ")));
                }
            }
            Err(e) => {
                eprintln!("run {:>3}: {store} seed {seed}: could not run: {e}", s.runs);
                if code == 0 {
                    code = 1;
                }
                keep = true;
                s.failures
                    .push(format!("{store} seed {seed}: could not run: {e}"));
            }
        }
        if keep {
            let out = a.keep.join(format!("{store}-{seed}"));
            let _ = std::fs::create_dir_all(&out);
            if let Ok(rd) = std::fs::read_dir(&dir) {
                for e in rd.flatten() {
                    let p = e.path();
                    if matches!(
                        p.extension().and_then(|x| x.to_str()),
                        Some("jsonl" | "html" | "log")
                    ) {
                        let _ = std::fs::copy(&p, out.join(e.file_name()));
                    }
                }
            }
            eprintln!("         evidence kept in {}", out.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
        seed += 1;
    }
    let _ = std::fs::remove_dir_all(&checker_dir);
    s.minutes = (t0.elapsed().as_secs_f64() / 60.0 * 10.0).round() / 10.0;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&s).expect("serialisable")
        );
    } else {
        let f = &s.faults;
        println!("ferrite-chaos summary ({:.1} min)", s.minutes);
        println!(
            "  runs (histories checked): {} {:?}",
            s.histories_checked, s.runs_by_store
        );
        println!(
            "  operations: {} ({} acknowledged, {} indeterminate, {} failed without effect)",
            s.operations, s.acknowledged, s.indeterminate, s.failed
        );
        println!(
            "  faults: {} partitions, {} black holes, {} leader kills, {} follower kills, {} pauses, {} restarts of all",
            f.partitions, f.black_holes, f.leader_kills, f.follower_kills, f.pauses, f.restarts_of_all
        );
        println!(
            "  linearizability violations: {}; lost acknowledged writes: {}; not converged: {}; replicas differing: {}",
            s.violations, s.lost_writes, s.not_converged, s.replicas_differ
        );
        for x in &s.failures {
            println!("  FAILED {x}");
        }
    }
    std::process::exit(code);
}
