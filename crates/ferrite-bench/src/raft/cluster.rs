//! The thesis's cluster experiments (§4.1) on a 3-replica cluster of `ferrite
//! serve` processes on this machine, one store kind after the other:
//!
//! * write latency of `SET` and of `SET … IFEQ` (compare-and-set), p50, p90,
//!   p99, with 1 client and with 20 concurrent clients (each waits for its
//!   reply before the next request), after preloading the thesis's database
//!   (50,000 keys, 10-byte keys and values); the 20-client runs give the
//!   throughput;
//! * recovery of a lagging replica: one follower is stopped, 15,000 writes of
//!   a few KB go to the leader (which snapshots and purges its log, so the
//!   follower needs a snapshot), the follower is started again; the time from
//!   its start until it has applied everything the leader had; repeated
//!   (`recovery_trials`, 5 by default) and the median trial reported, with
//!   every trial's time beside it;
//! * process start with the full store: a caught-up follower is stopped and
//!   started again; the time until it answers, and until its state machine is
//!   back at the leader's applied index.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use ferrite_pm::rng::SplitMix;
use ferrite_report::chart;
use ferrite_report::{BenchResult, Report};

use super::client::{info_field, Client, Reply};
use super::procs::Procs;
use crate::{env, BenchError, BenchOutput, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct ClusterOpts {
    /// The `ferrite` binary.
    pub exe: PathBuf,
    /// Store kinds, in order.
    pub stores: Vec<String>,
    /// Directory for the PM stores' pools (emulated PM: /dev/shm).
    pub pm_dir: PathBuf,
    /// Directory for the WAL store (a real disk).
    pub wal_dir: PathBuf,
    /// Client port of replica 1.
    pub port: u16,
    /// Keys preloaded (the thesis: 50,000).
    pub keys: u64,
    /// Writes of the 1-client runs (per kind of write).
    pub single_ops: u64,
    /// Writes of the multi-client runs (per kind of write, all clients).
    pub multi_ops: u64,
    /// Concurrent clients of the second run (the thesis: 20).
    pub clients: usize,
    /// Writes while a replica is down (the thesis: 15,000) and their size.
    pub recovery_writes: u64,
    pub recovery_value: usize,
    /// Recoveries measured in a row (the median is the result).
    pub recovery_trials: usize,
    /// Extra `ferrite serve` arguments (e.g. `--commit-every 1`).
    pub serve_args: Vec<String>,
    /// Also run `redis-benchmark -t set,get -n N -c 20` against each cluster.
    pub redis_benchmark: Option<u64>,
}

/// One recovery of a lagging replica.
struct Trial {
    ms: f64,
    follower_cpu: f64,
    leader_cpu: f64,
    behind: u64,
    purged: u64,
    snap: String,
    errors: u64,
}

/// Latencies of one run.
pub(super) struct Run {
    lat_ns: Vec<u64>,
    secs: f64,
    errors: u64,
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64
}

fn key(i: u64) -> Vec<u8> {
    format!("key{i:07}").into_bytes()
}

fn small_value(i: u64) -> Vec<u8> {
    format!("v{:09}", i % 1_000_000_000).into_bytes()
}

fn io(e: std::io::Error) -> BenchError {
    BenchError::Check(format!("client: {e}"))
}

/// Runs `clients` threads against `addr`, each doing `per` operations built
/// by `op(client, i, &mut rng)`; each operation's reply is checked by `ok`.
#[allow(clippy::type_complexity)]
fn drive(
    addr: SocketAddr,
    clients: usize,
    per: u64,
    setup: Arc<dyn Fn(usize, &mut Client) -> Result<Vec<Vec<u8>>> + Send + Sync>,
    op: Arc<
        dyn Fn(usize, u64, &mut SplitMix, &mut Vec<Vec<u8>>) -> (Vec<Vec<u8>>, usize) + Send + Sync,
    >,
    ok: Arc<dyn Fn(&Reply) -> bool + Send + Sync>,
    done: Arc<dyn Fn(usize, &mut Vec<Vec<u8>>, usize, &Reply) + Send + Sync>,
) -> Result<Run> {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut handles = Vec::new();
    for c in 0..clients {
        let (setup, op, ok, done, barrier) = (
            setup.clone(),
            op.clone(),
            ok.clone(),
            done.clone(),
            barrier.clone(),
        );
        handles.push(std::thread::spawn(move || -> Result<(Vec<u64>, u64)> {
            let mut cl = Client::connect(addr, Duration::from_secs(5)).map_err(io);
            let mut state = match cl.as_mut() {
                Ok(cl) => setup(c, cl),
                Err(_) => Ok(Vec::new()),
            };
            barrier.wait();
            let mut cl = cl?;
            let st = state
                .as_mut()
                .map_err(|e| BenchError::Check(e.to_string()))?;
            let mut rng = SplitMix(0x5eed ^ (c as u64) << 20);
            let mut lat = Vec::with_capacity(per as usize);
            let mut errors = 0;
            for i in 0..per {
                let (args, slot) = op(c, i, &mut rng, st);
                let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let t = Instant::now();
                let r = cl.call(&refs).map_err(io)?;
                lat.push(t.elapsed().as_nanos() as u64);
                if !ok(&r) {
                    errors += 1;
                }
                done(c, st, slot, &r);
            }
            Ok((lat, errors))
        }));
    }
    barrier.wait();
    let t = Instant::now();
    let mut run = Run {
        lat_ns: Vec::new(),
        secs: 0.0,
        errors: 0,
    };
    for h in handles {
        let (lat, errors) = h
            .join()
            .map_err(|_| BenchError::Check("a client thread panicked".into()))??;
        run.lat_ns.extend(lat);
        run.errors += errors;
    }
    run.secs = t.elapsed().as_secs_f64();
    run.lat_ns.sort_unstable();
    Ok(run)
}

fn set_ok(r: &Reply) -> bool {
    matches!(r, Reply::Simple(s) if s == "OK")
}

/// `SET` of random preloaded keys.
pub(super) fn run_set(addr: SocketAddr, clients: usize, per: u64, keys: u64) -> Result<Run> {
    drive(
        addr,
        clients,
        per,
        Arc::new(|_, _| Ok(Vec::new())),
        Arc::new(move |c, i, rng, _| {
            let k = rng.below(keys);
            (
                vec![b"SET".to_vec(), key(k), small_value(i * 97 + c as u64)],
                0,
            )
        }),
        Arc::new(set_ok),
        Arc::new(|_, _, _, _| {}),
    )
}

/// `SET k new IFEQ old` on keys only this client writes (it knows the
/// current values, so every comparison should hold).
fn run_cas(addr: SocketAddr, clients: usize, per: u64, keys: u64) -> Result<Run> {
    let mine = move |c: usize, j: u64| (j * clients as u64 + c as u64) % keys;
    const OWN: u64 = 64;
    drive(
        addr,
        clients,
        per,
        Arc::new(move |c, cl: &mut Client| {
            let mut cur = Vec::new();
            for j in 0..OWN {
                match cl.call(&[b"GET", &key(mine(c, j))]).map_err(io)? {
                    Reply::Bulk(Some(v)) => cur.push(v),
                    other => {
                        return Err(BenchError::Check(format!(
                            "preloaded key missing: {other:?}"
                        )))
                    }
                }
            }
            // The last slot holds the value in flight.
            cur.push(Vec::new());
            Ok(cur)
        }),
        Arc::new(move |c, i, _, cur| {
            let j = i % OWN;
            let new = small_value(1_000_000 + i * 131 + c as u64);
            cur[OWN as usize] = new.clone();
            (
                vec![
                    b"SET".to_vec(),
                    key(mine(c, j)),
                    new,
                    b"IFEQ".to_vec(),
                    cur[j as usize].clone(),
                ],
                j as usize,
            )
        }),
        Arc::new(set_ok),
        Arc::new(|_, cur, slot, r| {
            if set_ok(r) {
                cur[slot] = cur[OWN as usize].clone();
            }
        }),
    )
}

pub(super) fn preload(addr: SocketAddr, keys: u64, clients: usize) -> Result<f64> {
    let per = keys.div_ceil(clients as u64);
    let run = drive(
        addr,
        clients,
        per,
        Arc::new(|_, _| Ok(Vec::new())),
        Arc::new(move |c, i, _, _| {
            let k = (c as u64 * per + i).min(keys - 1);
            (vec![b"SET".to_vec(), key(k), small_value(k)], 0)
        }),
        Arc::new(set_ok),
        Arc::new(|_, _, _, _| {}),
    )?;
    if run.errors > 0 {
        return Err(BenchError::Check(format!(
            "{} preload writes failed",
            run.errors
        )));
    }
    Ok(run.secs)
}

pub(super) fn result(bench: &str, store: &str, clients: usize, run: &Run) -> BenchResult {
    let n = run.lat_ns.len() as f64;
    let mean = run.lat_ns.iter().sum::<u64>() as f64 / n.max(1.0);
    let mut r = BenchResult::new(
        bench,
        store,
        Some(clients.into()),
        clients as u32,
        n / run.secs / 1e6,
    )
    .with("p90_ns", pct(&run.lat_ns, 0.9))
    .with("mean_ns", mean)
    .with("ops", n)
    .with("errors", run.errors);
    r.p50_ns = Some(pct(&run.lat_ns, 0.5));
    r.p99_ns = Some(pct(&run.lat_ns, 0.99));
    r
}

fn leader_applied(p: &Procs, leader: usize) -> Result<u64> {
    p.applied(leader)
        .ok_or_else(|| BenchError::Check("the leader does not report its applied index".into()))
}

/// One recovery: a follower is stopped, `recovery_writes` writes go to the
/// leader (which snapshots and purges its log past the follower), the
/// follower is started again; the time until it has applied everything the
/// leader had and indexed it.
fn recovery_trial(
    o: &ClusterOpts,
    store: &str,
    p: &mut Procs,
    leader: usize,
    (trial, of): (usize, usize),
) -> Result<Trial> {
    let addr = p.addr(leader);
    let f = (leader + 1) % 3;
    p.stop(f)?;
    let before = leader_applied(p, leader)?;
    eprintln!(
        "raft bench: {store}: replica {} stopped (trial {trial} of {of}); {} writes of {} bytes",
        f + 1,
        o.recovery_writes,
        o.recovery_value
    );
    let value = vec![b'x'; o.recovery_value];
    let keys = o.keys;
    let vlen = o.recovery_value;
    let run = drive(
        addr,
        o.clients.max(1),
        o.recovery_writes.div_ceil(o.clients.max(1) as u64),
        Arc::new(|_, _| Ok(Vec::new())),
        Arc::new(move |c, i, rng, _| {
            let mut v = value.clone();
            v[..8.min(vlen)].copy_from_slice(&(i * 31 + c as u64).to_le_bytes()[..8.min(vlen)]);
            (vec![b"SET".to_vec(), key(rng.below(keys)), v], 0)
        }),
        Arc::new(set_ok),
        Arc::new(|_, _, _, _| {}),
    )?;
    let target = leader_applied(p, leader)?;
    let purged: Option<u64> = p
        .info(leader)
        .and_then(|i| info_field(&i, "raft_purged_index"))
        .and_then(|v| v.parse().ok());
    let leader_cpu0 = p.cpu_ms(leader).unwrap_or(0.0);
    let t0 = p.spawn(f)?;
    eprintln!(
        "raft bench: {store}: replica {} restarted (pid {}; leader pid {})",
        f + 1,
        p.pid(f).unwrap_or(0),
        p.pid(leader).unwrap_or(0)
    );
    p.wait_applied(f, target, Duration::from_secs(300))?;
    let t1 = p.wait_index_ready(f, Duration::from_secs(300))?;
    let ms = (t1 - t0).as_secs_f64() * 1e3;
    eprintln!("raft bench: {store}: recovery trial {trial}: {ms:.0} ms");
    Ok(Trial {
        ms,
        follower_cpu: p.cpu_ms(f).unwrap_or(f64::NAN),
        leader_cpu: p.cpu_ms(leader).unwrap_or(f64::NAN) - leader_cpu0,
        behind: target - before,
        purged: purged.unwrap_or(0),
        snap: p
            .info(f)
            .and_then(|i| info_field(&i, "raft_snapshot_index"))
            .unwrap_or_default(),
        errors: run.errors,
    })
}

/// One store's experiments; appends to both reports.
fn one_store(o: &ClusterOpts, store: &str, lat: &mut Report, rec: &mut Report) -> Result<()> {
    let dir = if store == "wal" {
        &o.wal_dir
    } else {
        &o.pm_dir
    }
    .join(format!("ferrite-bench-raft-{store}-{}", std::process::id()));
    eprintln!("raft bench: {store}: starting 3 replicas");
    let mut p = Procs::start(&o.exe, store, 3, &dir, o.port, &o.serve_args)?;
    let leader = p.wait_leader(Duration::from_secs(30))?;
    let addr = p.addr(leader);
    eprintln!("raft bench: {store}: preloading {} keys", o.keys);
    let secs = preload(addr, o.keys, o.clients.max(1))?;
    lat.notes
        .push(format!("{store}: preloaded {} keys in {secs:.1} s", o.keys));
    for clients in [1, o.clients] {
        let per = if clients == 1 {
            o.single_ops
        } else {
            o.multi_ops.div_ceil(clients as u64)
        };
        eprintln!("raft bench: {store}: {clients} client(s), {per} SET and {per} SET IFEQ each");
        let run = run_set(addr, clients, per, o.keys)?;
        lat.results.push(result("set", store, clients, &run));
        let run = run_cas(addr, clients, per, o.keys)?;
        lat.results.push(result("cas", store, clients, &run));
    }
    if let Some(n) = o.redis_benchmark {
        let port = p.replicas[leader].port.to_string();
        let out = std::process::Command::new("redis-benchmark")
            .args([
                "-p",
                &port,
                "-t",
                "set,get",
                "-n",
                &n.to_string(),
                "-c",
                "20",
                "-q",
            ])
            .output();
        match out {
            Ok(out) => {
                let text = String::from_utf8_lossy(&out.stdout);
                for l in text
                    .split(['\r', '\n'])
                    .filter(|l| l.contains("requests per second"))
                {
                    lat.notes.push(format!(
                        "redis-benchmark -t set,get -n {n} -c 20 against the {store} cluster: {}",
                        l.trim()
                    ));
                }
            }
            Err(e) => lat
                .notes
                .push(format!("redis-benchmark could not run: {e}")),
        }
    }
    // A lagging replica, `recovery_trials` times: the first trial on this
    // cluster, each further one on a fresh cluster with the same preload
    // (so every trial starts from the thesis's database). The median trial
    // is the result: one recovery is ~0.1 s and varies by tens of ms between
    // trials on this machine; every trial's time is reported beside it.
    let n = o.recovery_trials.max(1);
    let mut trials = vec![recovery_trial(o, store, &mut p, leader, (1, n))?];
    let mut leader = leader;
    for t in 2..=n {
        drop(p);
        eprintln!("raft bench: {store}: a fresh cluster for recovery trial {t} of {n}");
        p = Procs::start(&o.exe, store, 3, &dir, o.port, &o.serve_args)?;
        leader = p.wait_leader(Duration::from_secs(30))?;
        preload(p.addr(leader), o.keys, o.clients.max(1))?;
        trials.push(recovery_trial(o, store, &mut p, leader, (t, n))?);
    }
    let f = (leader + 1) % 3;
    let all = trials
        .iter()
        .map(|t| format!("{:.0}", t.ms))
        .collect::<Vec<_>>()
        .join(" / ");
    trials.sort_by(|a, b| a.ms.total_cmp(&b.ms));
    let med = &trials[(trials.len() - 1) / 2];
    let recovery_ms = med.ms;
    rec.results.push(
        BenchResult::new("recovery", store, Some(o.recovery_writes.into()), 1, 0.0)
            .with("ms", recovery_ms)
            .with("trials_ms", all)
            .with("follower_cpu_ms", med.follower_cpu)
            .with("leader_cpu_ms", med.leader_cpu)
            .with("entries_behind", med.behind)
            .with("leader_purged_to", med.purged)
            .with("snapshot_index", med.snap.clone())
            .with("write_errors", trials.iter().map(|t| t.errors).sum::<u64>()),
    );
    // Start with the full store.
    p.stop(f)?;
    let target = leader_applied(&p, leader)?;
    let bytes = p.store_bytes(f);
    let t0 = p.spawn(f)?;
    let serving = loop {
        if p.info(f).is_some() {
            break Instant::now();
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let serving_cpu = p.cpu_ms(f).unwrap_or(f64::NAN);
    p.wait_applied(f, target, Duration::from_secs(300))?;
    // Caught up and every key indexed (a list's background build done).
    let t2 = p.wait_index_ready(f, Duration::from_secs(300))?;
    let start_cpu = p.cpu_ms(f).unwrap_or(f64::NAN);
    rec.results.push(
        BenchResult::new("start", store, Some(o.recovery_writes.into()), 1, 0.0)
            .with("ms", (t2 - t0).as_secs_f64() * 1e3)
            .with("serving_ms", (serving - t0).as_secs_f64() * 1e3)
            .with("follower_cpu_ms", start_cpu)
            .with("serving_cpu_ms", serving_cpu)
            .with("store_mib", bytes as f64 / (1 << 20) as f64),
    );
    eprintln!(
        "raft bench: {store}: recovery {recovery_ms:.0} ms, start {:.0} ms",
        (t2 - t0).as_secs_f64() * 1e3
    );
    drop(p);
    Ok(())
}

/// The throughput chart of a latency report: thousands of writes per
/// second per store, for each run (1 client and `clients` clients, SET and
/// CAS).
pub fn throughput_chart(lat: &Report) -> String {
    let mut stores: Vec<String> = Vec::new();
    for r in &lat.results {
        if !stores.contains(&r.variant) {
            stores.push(r.variant.clone());
        }
    }
    let clients = lat
        .results
        .iter()
        .filter_map(|r| r.param_f64())
        .fold(1.0f64, f64::max) as usize;
    let runs = [("set", 1), ("cas", 1), ("set", clients), ("cas", clients)];
    let cats: Vec<String> = runs
        .iter()
        .map(|(b, c)| {
            format!(
                "{}, {c} client{}",
                if *b == "set" { "SET" } else { "CAS" },
                if *c == 1 { "" } else { "s" }
            )
        })
        .collect();
    let series: Vec<(String, Vec<f64>)> = stores
        .iter()
        .map(|s| {
            (
                s.clone(),
                runs.iter()
                    .map(|(b, c)| find(lat, b, s, Some(*c)).map_or(0.0, |r| r.mops * 1e3))
                    .collect(),
            )
        })
        .collect();
    chart::bar_chart(
        "Write throughput, 3 replicas on this machine",
        "thousand writes/s",
        &cats,
        &series,
    )
}

fn find<'a>(
    r: &'a Report,
    bench: &str,
    store: &str,
    clients: Option<usize>,
) -> Option<&'a BenchResult> {
    r.results.iter().find(|x| {
        x.bench == bench
            && x.variant == store
            && clients.is_none_or(|c| x.param_f64() == Some(c as f64))
    })
}

fn extra(r: &BenchResult, k: &str) -> Option<f64> {
    r.extra.get(k).and_then(serde_json::Value::as_f64)
}

/// Runs everything for every store; returns the latency report (with its
/// chart) and the recovery report (with its chart).
pub fn cluster(o: &ClusterOpts) -> Result<(BenchOutput, BenchOutput)> {
    if o.clients == 0 || o.keys < 64 * o.clients as u64 {
        return Err(BenchError::Options(format!(
            "need at least 1 client and 64 keys per client ({} keys, {} clients)",
            o.keys, o.clients
        )));
    }
    let mut lat = env::report("raft-latency", &o.pm_dir);
    let mut rec = env::report("raft-recovery", &o.pm_dir);
    for s in &o.stores {
        one_store(o, s, &mut lat, &mut rec)?;
    }
    // The bars, as ratios within this run.
    if let (Some(l), Some(w)) = (
        find(&lat, "set", "list", Some(o.clients)),
        find(&lat, "set", "wal", Some(o.clients)),
    ) {
        let ratio = l.p50_ns.unwrap_or(0.0) / w.p50_ns.unwrap_or(1.0);
        lat.notes.push(format!(
            "bar: list SET p50 with {} clients / WAL's = {ratio:.2} (bar <= 0.75; thesis 412/560 = 0.74)",
            o.clients
        ));
    }
    for (bench, bar, thesis) in [
        ("recovery", 3.0, "600/100 = 6"),
        ("start", 3.0, "200/40 = 5 for the list, 10 for B-trees"),
    ] {
        if let (Some(l), Some(w)) = (
            find(&rec, bench, "list", None),
            find(&rec, bench, "wal", None),
        ) {
            let (l, w) = (
                extra(l, "ms").unwrap_or(f64::NAN),
                extra(w, "ms").unwrap_or(f64::NAN),
            );
            let of = if bench == "recovery" {
                format!("medians of {} trials; ", o.recovery_trials.max(1))
            } else {
                String::new()
            };
            rec.notes.push(format!(
                "bar: {bench}: WAL {w:.0} ms / list {l:.0} ms = {:.1}x ({of}bar >= {bar}x; thesis {thesis})",
                w / l
            ));
            let (lr, wr) = (
                find(&rec, bench, "list", None),
                find(&rec, bench, "wal", None),
            );
            if let (Some(lr), Some(wr)) = (lr, wr) {
                let cpu = |r: &BenchResult| {
                    extra(r, "follower_cpu_ms").unwrap_or(f64::NAN)
                        + extra(r, "leader_cpu_ms").unwrap_or(0.0)
                };
                rec.notes.push(format!(
                    "{bench}, on-CPU time of the replicas involved (load-independent): WAL {:.0} ms / list {:.0} ms = {:.1}x",
                    cpu(wr),
                    cpu(lr),
                    cpu(wr) / cpu(lr)
                ));
            }
        }
    }
    env::finish(&mut lat);
    env::finish(&mut rec);
    let cats: Vec<String> = ["set, 1 client", "CAS, 1 client"]
        .iter()
        .map(|s| s.to_string())
        .chain([
            format!("set, {} clients", o.clients),
            format!("CAS, {} clients", o.clients),
        ])
        .collect();
    let mut series = Vec::new();
    for s in &o.stores {
        for (q, key) in [("p50", None), ("p90", Some("p90_ns"))] {
            let vals: Vec<f64> = [
                ("set", 1),
                ("cas", 1),
                ("set", o.clients),
                ("cas", o.clients),
            ]
            .iter()
            .map(|(b, c)| {
                find(&lat, b, s, Some(*c))
                    .map(|r| match key {
                        None => r.p50_ns.unwrap_or(0.0),
                        Some(k) => extra(r, k).unwrap_or(0.0),
                    })
                    .unwrap_or(0.0)
                    / 1e3
            })
            .collect();
            series.push((format!("{s} {q}"), vals));
        }
    }
    let svg = chart::bar_chart(
        "Write latency, 3 replicas on this machine",
        "µs",
        &cats,
        &series,
    );
    let cats: Vec<String> = vec![
        "lagging replica catches up".into(),
        "start to serving, full store".into(),
    ];
    let series: Vec<(String, Vec<f64>)> = o
        .stores
        .iter()
        .map(|s| {
            (
                s.clone(),
                ["recovery", "start"]
                    .iter()
                    .map(|b| {
                        find(&rec, b, s, None)
                            .and_then(|r| extra(r, "ms"))
                            .unwrap_or(0.0)
                    })
                    .collect(),
            )
        })
        .collect();
    let svg2 = chart::bar_chart(
        &format!(
            "Recovery after {} writes of {} bytes",
            o.recovery_writes, o.recovery_value
        ),
        "ms",
        &cats,
        &series,
    );
    Ok((
        BenchOutput {
            report: lat,
            svg,
            extra_cols: vec!["p90_ns", "mean_ns", "ops", "errors"],
        },
        BenchOutput {
            report: rec,
            svg: svg2,
            extra_cols: vec![
                "ms",
                "trials_ms",
                "serving_ms",
                "follower_cpu_ms",
                "leader_cpu_ms",
                "serving_cpu_ms",
                "entries_behind",
                "leader_purged_to",
                "snapshot_index",
                "store_mib",
            ],
        },
    ))
}
