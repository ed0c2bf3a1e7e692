//! The replicated service under faults, end to end: a cluster of three real
//! `ferrite serve` processes per store (list, btree, wal) behind
//! fault-injecting proxies, clients doing `GET`, `SET` and `SET … IFEQ` on a
//! few keys, a seeded schedule of faults (partitions, black holes, `kill -9`
//! of the leader and of a follower with restart from the pool, `SIGSTOP`
//! longer than the election timeout, restart of every replica), then healing
//! and the checks: Porcupine finds the history linearizable, no acknowledged
//! write is lost, every replica holds the same state.
//!
//! The stores run one after the other (three clusters at once would starve
//! each other of the machine's cores and turn pauses into elections).
//! `FERRITE_CHAOS_SEED` and `FERRITE_CHAOS_SECS` override the seed and the
//! length of the fault phase.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use ferrite_chaos::cluster::{ClusterSpec, DirGuard};
use ferrite_chaos::run::{run, RunSpec};
use ferrite_chaos::{build_checker, check, ferrite_binary, Record, Status};

/// One store at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The `ferrite` binary and the checker, built once.
fn tools() -> &'static (PathBuf, PathBuf) {
    static TOOLS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let bin = ferrite_binary().unwrap();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ferrite-chaos-tools");
        std::fs::create_dir_all(&dir).unwrap();
        let checker = build_checker(&dir).unwrap();
        (bin, checker)
    })
}

/// Copies what explains a failure (history, visualisation, replica logs) out
/// of /dev/shm before the guard removes it.
fn keep_evidence(dir: &Path, tag: &str) -> PathBuf {
    let out = std::env::temp_dir().join(format!("ferrite-chaos-failed-{tag}"));
    let _ = std::fs::create_dir_all(&out);
    if let Ok(rd) = std::fs::read_dir(dir) {
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
    out
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A run's specification: 3 replicas of `store` under `dir`.
fn spec(store: &str, dir: &Path, seed: u64, secs: u64, extra: &[&str]) -> RunSpec {
    let (bin, _) = tools();
    let heartbeat_ms = 50;
    let mut args: Vec<String> = [
        "--pool-size",
        "64M",
        "--heartbeat-ms",
        &heartbeat_ms.to_string(),
        "--snapshot-every",
        "500",
        "--threads",
        "1",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    RunSpec {
        cluster: ClusterSpec {
            bin: bin.clone(),
            dir: dir.to_path_buf(),
            replicas: 3,
            store: store.into(),
            extra: args,
        },
        clients: 4,
        keys: 4,
        duration: Duration::from_secs(secs),
        seed,
        // `ferrite serve` times elections out after 6–12 heartbeats.
        election_timeout: Duration::from_millis(heartbeat_ms * 12),
        op_timeout: Duration::from_secs(1),
        password: None,
    }
}

fn faults_on(store: &str, default_seed: u64) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_, checker) = tools();
    let seed = env_u64("FERRITE_CHAOS_SEED", default_seed);
    let secs = env_u64("FERRITE_CHAOS_SECS", 20);
    let dir = PathBuf::from(format!(
        "/dev/shm/ferrite-chaos-{store}-{}-{seed}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let guard = DirGuard(dir.clone());
    let spec = spec(store, &dir, seed, secs, &[]);
    let t = Instant::now();
    let report = match run(&spec, checker) {
        Ok(r) => r,
        Err(e) => {
            let kept = keep_evidence(&dir, &format!("{store}-{seed}"));
            panic!(
                "{store}: the run failed: {e} (logs kept in {})",
                kept.display()
            );
        }
    };
    eprintln!(
        "{store} seed {seed}: {} operations ({} acknowledged, {} indeterminate, {} failed), faults {:?}, {:.1} s",
        report.operations,
        report.acknowledged,
        report.indeterminate,
        report.failed,
        report.faults,
        t.elapsed().as_secs_f64()
    );
    let problems = report.problems();
    if !problems.is_empty() {
        let kept = keep_evidence(&dir, &format!("{store}-{seed}"));
        panic!(
            "{store} seed {seed}: {problems:#?}\n(history, visualisation and replica logs kept in {})",
            kept.display()
        );
    }
    // The faults really happened, and the clients really got answers.
    let f = &report.faults;
    for (kind, n) in [
        ("partitions", f.partitions),
        ("black holes", f.black_holes),
        ("leader kills", f.leader_kills),
        ("follower kills", f.follower_kills),
        ("pauses", f.pauses),
        ("restarts of all", f.restarts_of_all),
    ] {
        assert!(n > 0, "{store}: no {kind} injected: {f:?}");
    }
    assert!(
        report.acknowledged > 100,
        "{store}: only {} acknowledged operations",
        report.acknowledged
    );
    tripwire(&report.history, checker, &dir);
    drop(guard);
}

/// The same history, doctored: one acknowledged read reports a value nobody
/// wrote. The checker must reject it (so a pass above is the checker's
/// verdict on this run's real history, not a checker that accepts anything).
fn tripwire(history: &Path, checker: &Path, dir: &Path) {
    let text = std::fs::read_to_string(history).unwrap();
    let mut records: Vec<Record> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let i = records
        .iter()
        .position(|r| r.op == "get" && r.status == Status::Ok)
        .expect("the run has acknowledged reads");
    records[i].found = true;
    records[i].value = Some("never-written".into());
    let doctored = dir.join("doctored.jsonl");
    let mut w = ferrite_chaos::HistoryWriter::create(&doctored).unwrap();
    for r in &records {
        w.record(r).unwrap();
    }
    w.finish().unwrap();
    let s = check(checker, &[doctored], dir).unwrap();
    assert!(
        !s.linearizable && s.violations.len() == 1,
        "the checker accepted a doctored history: {s:?}"
    );
}

/// The tripwire: replicas that answer reads from their own state without the
/// read-index round (`--tripwire-stale-reads`) must be caught by the same
/// harness and checker.
#[test]
fn stale_reads_are_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_, checker) = tools();
    let seed = 0x5EED_0004;
    let dir = PathBuf::from(format!(
        "/dev/shm/ferrite-chaos-tripwire-{}-{seed}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let _guard = DirGuard(dir.clone());
    let spec = spec("list", &dir, seed, 5, &["--tripwire-stale-reads"]);
    let report = run(&spec, checker).unwrap();
    eprintln!(
        "tripwire: {} operations, linearizable {}, violations {:?}",
        report.operations, report.linearizable, report.violations
    );
    assert!(
        !report.linearizable && report.violations.iter().any(|v| v.starts_with("key ")),
        "stale reads went unnoticed: {:?}",
        report.problems()
    );
}

/// The second tripwire: a leader that acknowledges a `SET` as soon as it has
/// taken it into its own log, before a majority holds it
/// (`--tripwire-early-ack`). The standard schedule cuts the leader off and
/// kills it: writes it acknowledged but never replicated are lost when
/// another replica takes over, and reads that follow an acknowledged write
/// miss it. The checks must report it (a linearizability violation or a
/// lost acknowledged write).
#[test]
fn early_acknowledgements_are_caught() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (_, checker) = tools();
    let seed = 0x5EED_0005;
    let dir = PathBuf::from(format!(
        "/dev/shm/ferrite-chaos-early-ack-{}-{seed}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let _guard = DirGuard(dir.clone());
    let spec = spec("list", &dir, seed, 10, &["--tripwire-early-ack"]);
    let t = Instant::now();
    let report = run(&spec, checker).unwrap();
    eprintln!(
        "early-ack tripwire: {} operations ({} acknowledged), faults {:?}, {:.1} s: linearizable {}, violations {:?}, lost writes {:?}",
        report.operations,
        report.acknowledged,
        report.faults,
        t.elapsed().as_secs_f64(),
        report.linearizable,
        report.violations,
        report.lost_writes
    );
    assert!(
        !report.linearizable || !report.lost_writes.is_empty(),
        "writes acknowledged before commit went unnoticed: {:?}",
        report.problems()
    );
}

#[test]
fn faults_list_store() {
    faults_on("list", 0x5EED_0001);
}

#[test]
fn faults_btree_store() {
    faults_on("btree", 0x5EED_0002);
}

#[test]
fn faults_wal_store() {
    faults_on("wal", 0x5EED_0003);
}
