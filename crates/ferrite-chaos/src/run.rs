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
    /// The replicas' longest election timeout (pauses last longer than this).
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
    /// Every replica named one leader and reported the same applied index.
    pub converged: bool,
    /// Every replica's own state machine held the same value for every key.
    pub replicas_identical: bool,
    pub applied_indexes: Vec<String>,
    /// Per replica, its own values of every key (for a report).
    pub replica_states: Vec<String>,
    /// Replicas that exited without being killed (crashed, failed to start).
    pub unexpected_exits: Vec<String>,
    /// Replicas that did not stop within the grace period of SIGTERM.
    pub killed_at_shutdown: Vec<u64>,
}

impl RunReport {
    /// What is wrong with the run (empty: it passed): violations, lost
    /// writes, replicas that did not converge or differ.
    pub fn problems(&self) -> Vec<String> {
        let mut p = self.violations.clone();
        if !self.linearizable && p.is_empty() {
            p.push("not linearizable".into());
        }
        p.extend(self.lost_writes.iter().map(|l| format!("lost write: {l}")));
        p.extend(self.unexpected_exits.iter().cloned());
        if !self.converged {
            p.push(format!(
                "replicas did not converge: applied indexes {:?}",
                self.applied_indexes
            ));
        } else if !self.replicas_identical {
            p.push(format!(
                "replicas hold different states: {:?}",
                self.replica_states
            ));
        }
        p
    }
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

/// Polls `leader` until one is named or `deadline` passes.
pub fn await_leader(c: &Cluster, password: &Option<String>, deadline: Instant) -> Option<u64> {
    loop {
        if let Some(l) = leader(c, password) {
            return Some(l);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

/// Where the replicas stand after healing.
#[derive(Debug, Clone, Default)]
struct Convergence {
    /// Every replica names one leader and reports the same applied index.
    agreed: bool,
    /// ... and every replica's own state machine holds the same values.
    identical: bool,
    applied: Vec<String>,
    /// Per replica, the values of every key (its own state, `READONLY`).
    states: Vec<Option<Vec<Option<String>>>>,
}

/// Waits (up to `deadline`) until every replica names one leader, reports
/// the same applied index and holds the same state (compared key by key in
/// each replica's own state machine).
fn converge(c: &Cluster, keys: usize, password: &Option<String>, deadline: Instant) -> Convergence {
    let mut last = Convergence::default();
    loop {
        let applied: Vec<String> = c
            .ids()
            .into_iter()
            .map(|id| {
                client::info(c.client_addr(id), password.clone())
                    .into_iter()
                    .find(|(k, _)| k == "raft_applied_index")
                    .map_or_else(|| "?".into(), |(_, v)| v)
            })
            .collect();
        let agreed =
            applied.iter().all(|i| i != "?" && i == &applied[0]) && leader(c, password).is_some();
        last.agreed = agreed;
        last.applied = applied;
        if agreed {
            last.states = c
                .ids()
                .into_iter()
                .map(|id| client::read_local(c.client_addr(id), keys, password.clone()))
                .collect();
            last.identical =
                last.states[0].is_some() && last.states.iter().all(|s| s == &last.states[0]);
            if last.identical {
                return last;
            }
        }
        if Instant::now() >= deadline {
            return last;
        }
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

/// The kinds of fault, injected in a seeded order: every kind once per round.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Partition,
    BlackHole,
    KillLeader,
    KillFollower,
    Pause,
    RestartAll,
}

const FAULTS: [Fault; 6] = [
    Fault::Partition,
    Fault::BlackHole,
    Fault::KillLeader,
    Fault::KillFollower,
    Fault::Pause,
    Fault::RestartAll,
];

/// Runs the whole thing; `checker` is the built Go checker.
pub fn run(spec: &RunSpec, checker: &Path) -> Result<RunReport, String> {
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let mut cluster = Cluster::start(spec.cluster.clone()).map_err(|e| io("starting", e))?;
    let ids = cluster.ids();
    let addrs: Vec<_> = ids.iter().map(|&i| cluster.client_addr(i)).collect();
    let t0 = Instant::now();
    // Wait for a first leader before the clients start (bounded).
    if await_leader(
        &cluster,
        &spec.password,
        Instant::now() + Duration::from_secs(30),
    )
    .is_none()
    {
        return Err(format!(
            "no leader within 30 s (logs in {})",
            cluster.dir().display()
        ));
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
    // The fault schedule: rounds of every fault kind in a seeded order,
    // until `duration` has passed and at least one round is complete (and
    // never longer than twice `duration` plus a minute).
    let mut rng = SplitMix(spec.seed ^ 0xFA17);
    let mut faults = FaultCounts::default();
    let end = Instant::now() + spec.duration;
    let hard_end = end + spec.duration + Duration::from_secs(60);
    let mut round: Vec<Fault> = Vec::new();
    let mut injected = 0usize;
    let n = ids.len() as u64;
    while (Instant::now() < end || injected < FAULTS.len()) && Instant::now() < hard_end {
        if round.is_empty() {
            round = FAULTS.to_vec();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        let fault = round.pop().expect("refilled above");
        injected += 1;
        let hold = ms(&mut rng, 600, 1800);
        match fault {
            Fault::Partition | Fault::BlackHole => {
                // One replica of three cut off from the others (both ways):
                // the leader half of the time (when there is one).
                let side = match leader(&cluster, &spec.password) {
                    Some(l) if rng.below(2) == 0 => [l],
                    _ => [ids[rng.below(n) as usize]],
                };
                let how = if matches!(fault, Fault::Partition) {
                    faults.partitions += 1;
                    Link::Drop
                } else {
                    faults.black_holes += 1;
                    Link::Blackhole
                };
                cluster.isolate(&side, how);
                wait_until(Instant::now() + hold);
            }
            Fault::KillLeader | Fault::KillFollower => {
                let l = await_leader(
                    &cluster,
                    &spec.password,
                    Instant::now() + Duration::from_secs(5),
                );
                let victim = match (fault, l) {
                    (Fault::KillLeader, Some(l)) => {
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
            Fault::Pause => {
                faults.pauses += 1;
                // The leader half of the time (when there is one).
                let l = leader(&cluster, &spec.password);
                let victim = match l {
                    Some(l) if rng.below(2) == 0 => l,
                    _ => ids[rng.below(n) as usize],
                };
                cluster.pause(victim, true);
                wait_until(Instant::now() + spec.election_timeout * 2 + hold / 2);
            }
            Fault::RestartAll => {
                faults.restarts_of_all += 1;
                cluster.restart_all().map_err(|e| io("restarting all", e))?;
            }
        }
        cluster.heal().map_err(|e| io("healing", e))?;
        wait_until(Instant::now() + ms(&mut rng, 200, 800));
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
    let conv = converge(
        &cluster,
        spec.keys,
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
    cluster.reap_unexpected();
    let unexpected_exits = cluster.unexpected_exits().to_vec();
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
        converged: conv.agreed,
        replicas_identical: conv.identical,
        applied_indexes: conv.applied,
        replica_states: conv.states.iter().map(|s| format!("{s:?}")).collect(),
        unexpected_exits,
        killed_at_shutdown,
    })
}
