//! One fault-injection run: a cluster, clients recording a history, faults on
//! a seeded schedule, healing, convergence, then the checks (Porcupine's
//! linearizability check and the lost-write check).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_pm::rng::SplitMix;
use serde::Serialize;

use crate::client::{self, ClientSpec};
use crate::cluster::{Cluster, ClusterSpec};
use crate::history::{lost_writes, LostWrite};
use crate::proxy::Link;
use crate::{check, HistoryWriter, Record, Status, Summary};

/// What to run.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub cluster: ClusterSpec,
    pub clients: usize,
    pub keys: usize,
    /// How long faults are injected (clients run throughout).
    pub duration: Duration,
    pub seed: u64,
    /// The replicas' election timeout (pauses last longer than this).
    pub election_timeout: Duration,
    /// Per-operation client timeout (indeterminate beyond it).
    pub op_timeout: Duration,
    pub password: Option<String>,
}

/// Faults injected, by kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FaultCounts {
    pub partitions: u64,
    pub black_holes: u64,
    pub leader_kills: u64,
    pub follower_kills: u64,
    pub pauses: u64,
    pub restarts_of_all: u64,
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub store: String,
    pub seed: u64,
    pub operations: u64,
    pub acknowledged: u64,
    pub indeterminate: u64,
    pub failed: u64,
    pub faults: FaultCounts,
    pub history: PathBuf,
    pub linearizable: bool,
    pub violations: Vec<String>,
    pub lost_writes: Vec<String>,
    pub converged: bool,
    pub applied_indexes: Vec<String>,
    /// Replicas that did not stop within the grace period of SIGTERM.
    pub killed_at_shutdown: Vec<u64>,
}

/// Waits until `deadline` (the schedule is in time: a partition lasts so
/// long). Parks the thread; nothing else is waited for here.
fn wait_until(deadline: Instant) {
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        std::thread::park_timeout(left);
    }
}

fn ms(rng: &mut SplitMix, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(lo + rng.below(hi - lo + 1))
}

/// The replica every answering replica names as leader, if they agree.
fn leader(c: &Cluster, password: &Option<String>) -> Option<u64> {
    let mut seen = None;
    for id in c.ids() {
        if !c.is_running(id) {
            continue;
        }
        let info = client::info(c.client_addr(id), password.clone());
        let l = info
            .iter()
            .find(|(k, _)| k == "raft_leader_id")
            .and_then(|(_, v)| v.parse::<u64>().ok());
        if let Some(l) = l {
            if seen.is_some_and(|s| s != l) {
                return None;
            }
            seen = Some(l);
        }
    }
    seen
}

/// Waits (up to `deadline`) until every replica names one leader and reports
/// the same applied index; returns whether it did and the indexes seen.
fn converge(c: &Cluster, password: &Option<String>, deadline: Instant) -> (bool, Vec<String>) {
    let mut last = Vec::new();
    while Instant::now() < deadline {
        let idx: Vec<String> = c
            .ids()
            .into_iter()
            .map(|id| {
                client::info(c.client_addr(id), password.clone())
                    .into_iter()
                    .find(|(k, _)| k == "raft_applied_index")
                    .map_or_else(|| "?".into(), |(_, v)| v)
            })
            .collect();
        let agreed = idx.iter().all(|i| i != "?" && i == &idx[0]);
        last = idx;
        if agreed && leader(c, password).is_some() {
            return (true, last);
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
    (false, last)
}

/// Runs the whole thing; `checker` is the built Go checker.
pub fn run(spec: &RunSpec, checker: &Path) -> Result<RunReport, String> {
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let mut cluster = Cluster::start(spec.cluster.clone()).map_err(|e| io("starting", e))?;
    let ids = cluster.ids();
    let addrs: Vec<_> = ids.iter().map(|&i| cluster.client_addr(i)).collect();
    let t0 = Instant::now();
    // Wait for a first leader before the clients start (bounded).
    let ready = Instant::now() + Duration::from_secs(30);
    while leader(&cluster, &spec.password).is_none() {
        if Instant::now() > ready {
            return Err(format!(
                "no leader within 30 s (logs in {})",
                cluster.dir().display()
            ));
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..spec.clients)
        .map(|i| {
            let s = ClientSpec {
                id: i as u32,
                replicas: addrs.clone(),
                keys: spec.keys,
                timeout: spec.op_timeout,
                seed: spec.seed,
                max_ops: 1_000_000,
                password: spec.password.clone(),
                stop: stop.clone(),
                t0,
            };
            std::thread::spawn(move || client::run(s))
        })
        .collect();
    // The fault schedule.
    let mut rng = SplitMix(spec.seed ^ 0xFA17);
    let mut faults = FaultCounts::default();
    let end = Instant::now() + spec.duration;
    while Instant::now() < end {
        let hold = ms(&mut rng, 800, 2500);
        let n = ids.len() as u64;
        match rng.below(6) {
            0 | 1 => {
                // A minority on one side (one replica of three).
                let side = [ids[rng.below(n) as usize]];
                let how = if rng.below(2) == 0 {
                    faults.partitions += 1;
                    Link::Drop
                } else {
                    faults.black_holes += 1;
                    Link::Blackhole
                };
                cluster.isolate(&side, how);
                wait_until(Instant::now() + hold);
            }
            2 => {
                let l = leader(&cluster, &spec.password);
                let victim = match l {
                    Some(l) if rng.below(2) == 0 => {
                        faults.leader_kills += 1;
                        l
                    }
                    _ => {
                        faults.follower_kills += 1;
                        let others: Vec<u64> =
                            ids.iter().copied().filter(|&i| Some(i) != l).collect();
                        others[rng.below(others.len() as u64) as usize]
                    }
                };
                cluster.kill(victim);
                wait_until(Instant::now() + hold);
            }
            3 | 4 => {
                faults.pauses += 1;
                let victim = ids[rng.below(n) as usize];
                cluster.pause(victim, true);
                wait_until(Instant::now() + spec.election_timeout * 2 + hold / 2);
            }
            _ => {
                faults.restarts_of_all += 1;
                cluster.restart_all().map_err(|e| io("restarting all", e))?;
            }
        }
        cluster.heal().map_err(|e| io("healing", e))?;
        wait_until(Instant::now() + ms(&mut rng, 300, 1200));
    }
    cluster.heal().map_err(|e| io("healing", e))?;
    stop.store(true, Ordering::Relaxed);
    let mut records: Vec<Record> = Vec::new();
    for h in handles {
        records.extend(
            h.join()
                .map_err(|_| "a client thread panicked".to_string())?,
        );
    }
    let (converged, applied) = converge(
        &cluster,
        &spec.password,
        Instant::now() + Duration::from_secs(60),
    );
    let finals = client::read_all(
        &addrs,
        spec.keys,
        spec.password.clone(),
        Instant::now() + Duration::from_secs(30),
    );
    // The final reads are part of the history too (linearizable reads).
    let now = t0.elapsed().as_nanos() as u64;
    let mut final_values = BTreeMap::new();
    for (k, v) in &finals {
        if let Some(v) = v {
            records.push(Record {
                client: spec.clients as u32,
                op: "get".into(),
                key: k.clone(),
                value: v.clone(),
                expected: None,
                call: now,
                ret: now + 1,
                status: Status::Ok,
                found: v.is_some(),
                applied: false,
            });
            final_values.insert(k.clone(), v.clone());
        }
    }
    let history = spec.cluster.dir.join(format!(
        "history-{}-seed{}.jsonl",
        spec.cluster.store, spec.seed
    ));
    let mut w = HistoryWriter::create(&history).map_err(|e| io("history", e))?;
    for r in &records {
        w.record(r).map_err(|e| io("history", e))?;
    }
    w.finish().map_err(|e| io("history", e))?;
    let summary: Summary = check(checker, std::slice::from_ref(&history), &spec.cluster.dir)?;
    let lost: Vec<LostWrite> = lost_writes(&records, &final_values);
    let unread = finals.iter().filter(|(_, v)| v.is_none()).count();
    let killed_at_shutdown = cluster.stop(Duration::from_secs(10));
    let count = |s: Status| records.iter().filter(|r| r.status == s).count() as u64;
    let mut violations: Vec<String> = summary
        .violations
        .iter()
        .map(|v| format!("key {} (see {})", v.key, v.html.clone().unwrap_or_default()))
        .collect();
    if !summary.timed_out.is_empty() {
        violations.push("the linearizability check did not finish in time".into());
    }
    if unread > 0 {
        violations.push(format!("{unread} keys could not be read after healing"));
    }
    Ok(RunReport {
        store: spec.cluster.store.clone(),
        seed: spec.seed,
        operations: records.len() as u64,
        acknowledged: count(Status::Ok),
        indeterminate: count(Status::Unknown),
        failed: count(Status::Fail),
        faults,
        history,
        linearizable: summary.linearizable && summary.timed_out.is_empty(),
        violations,
        lost_writes: lost
            .iter()
            .map(|l| {
                format!(
                    "{}: acknowledged {:?}, found {:?}",
                    l.key, l.acknowledged, l.found
                )
            })
            .collect(),
        converged,
        applied_indexes: applied,
        killed_at_shutdown,
    })
}
