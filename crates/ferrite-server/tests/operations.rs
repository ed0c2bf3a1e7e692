//! Operations a user expects of the service: membership changes while it
//! serves, `INFO replication`, space kept bounded by compaction, a full pool
//! answered with `-OOM` while reads go on.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Cluster;
use ferrite_raft::StoreKind;
use redis::{Commands, InfoDict};

/// Writes `w0`, `w1`, … (each key once, value `v<i>`) through one replica
/// until stopped; remembers which were acknowledged and which failed in a
/// way that leaves the outcome unknown.
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<BTreeMap<u64, String>>>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl Writer {
    fn start(url: String) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(BTreeMap::new()));
        let (s, a) = (stop.clone(), acked.clone());
        let handle = std::thread::spawn(move || {
            let client = redis::Client::open(url).unwrap();
            let mut con = None;
            let mut errors = 0u64;
            let mut i = 0u64;
            while !s.load(Ordering::Relaxed) && i < 1_000_000 {
                if con.is_none() {
                    con = client
                        .get_connection_with_timeout(Duration::from_secs(5))
                        .ok();
                }
                let Some(c) = con.as_mut() else {
                    errors += 1;
                    std::thread::park_timeout(Duration::from_millis(10));
                    continue;
                };
                let v = format!("v{i}");
                match c.set::<_, _, ()>(format!("w{i}"), &v) {
                    Ok(()) => {
                        a.lock().unwrap().insert(i, v);
                    }
                    Err(_) => {
                        errors += 1;
                        con = None;
                    }
                }
                i += 1;
            }
            errors
        });
        Writer {
            stop,
            acked,
            handle: Some(handle),
        }
    }

    fn acked(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits until `n` more writes are acknowledged (bounded).
    fn wait_more(&self, n: usize) {
        let target = self.acked() + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.acked() < target {
            assert!(
                Instant::now() < deadline,
                "writes stalled at {}",
                self.acked()
            );
            std::thread::park_timeout(Duration::from_millis(5));
        }
    }

    /// Stops; returns the acknowledged writes and the count of errors.
    fn finish(mut self) -> (BTreeMap<u64, String>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let errors = self.handle.take().unwrap().join().unwrap();
        let acked = std::mem::take(&mut *self.acked.lock().unwrap());
        (acked, errors)
    }
}

fn info(con: &mut redis::Connection, section: &str) -> InfoDict {
    redis::cmd("INFO").arg(section).query(con).unwrap()
}

fn field(d: &InfoDict, k: &str) -> String {
    d.get::<String>(k)
        .unwrap_or_else(|| panic!("INFO has no {k}: {d:?}"))
}

/// Waits (bounded) until `f` holds, polling `INFO section` of `con`.
fn await_info(
    con: &mut redis::Connection,
    section: &str,
    what: &str,
    f: impl Fn(&InfoDict) -> bool,
) -> InfoDict {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = info(con, section);
        if f(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "{what}: never; last INFO {d:?}");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

fn voters(c: &Cluster, i: usize) -> Vec<u64> {
    let m = c.server(i).node().raft.metrics().borrow().clone();
    m.membership_config.membership().voter_ids().collect()
}

/// 3 replicas serving writes grow to 4 (the new one catches up, by snapshot,
/// and holds the same state), then the leader is removed; writes go on
/// throughout and every acknowledged one is there at the end, also after a
/// restart of every replica (the membership is in the stores).
#[test]
fn a_cluster_grows_and_shrinks_while_serving() {
    for kind in [StoreKind::List, StoreKind::BTree, StoreKind::Wal] {
        grow_and_shrink(kind);
    }
}

fn grow_and_shrink(kind: StoreKind) {
    let mut c = Cluster::start(kind, 3, &format!("member-{kind}"), |cfg| {
        cfg.raft.snapshot_every = 2000;
        cfg.raft.keep_logs = 100;
    });
    let leader = c.wait_leader();
    let follower = (leader + 1) % 3;
    // Data for the newcomer to catch up on: 4,000 keys of 1 KiB (a snapshot
    // and the log after it).
    let mut con = c.client(follower);
    let mut pipe = redis::pipe();
    for i in 0..4000 {
        pipe.set(format!("bulk{i}"), vec![b'a' + (i % 26) as u8; 1024])
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    // A writer that keeps going through every change, through a replica
    // that stays (the follower).
    let writer = Writer::start(c.url(follower));
    writer.wait_more(50);
    let joiner = c.spawn_joiner(|_| {});
    assert_eq!(joiner, 3);
    let new_peer = c.cfgs[3].peer_listen.to_string();
    // Asked of a follower, which forwards it to the leader.
    let t = Instant::now();
    let reply: String = redis::cmd("CLUSTER")
        .arg("ADDNODE")
        .arg(4)
        .arg(&new_peer)
        .query(&mut con)
        .unwrap_or_else(|e| panic!("{kind}: CLUSTER ADDNODE: {e}"));
    let add_secs = t.elapsed().as_secs_f64();
    assert!(reply.contains("added as a voter"), "{kind}: {reply}");
    eprintln!(
        "{kind}: replica 4 caught up on 4,000 × 1 KiB and became a voter in {add_secs:.3} s ({reply})"
    );
    assert_eq!(voters(&c, leader), vec![1, 2, 3, 4], "{kind}");
    writer.wait_more(50);
    // The newcomer applies what the leader applied, with the same values.
    let applied = c.server(leader).node().raft.metrics().borrow().last_applied;
    c.wait_applied(3, applied.unwrap().index);
    assert!(
        c.server(3)
            .node()
            .raft
            .metrics()
            .borrow()
            .snapshot
            .is_some(),
        "{kind}: the newcomer was sent a snapshot (the log before it was purged)"
    );
    for i in (0..4000).step_by(97) {
        let k = format!("bulk{i}");
        assert_eq!(c.local(3, &k), c.local(leader, &k), "{kind} {k}");
        assert_eq!(c.local(3, &k).map(|v| v.len()), Some(1024), "{kind} {k}");
    }
    // The newcomer serves clients (forwarding to the leader).
    let mut con4 = c.client(3);
    let _: () = con4.set("from4", "x").unwrap();
    assert_eq!(con.get::<_, String>("from4").unwrap(), "x");
    // Remove the leader, asked through the newcomer.
    let old_leader_id = leader as u64 + 1;
    let reply: String = redis::cmd("CLUSTER")
        .arg("REMOVENODE")
        .arg(old_leader_id)
        .query(&mut con4)
        .unwrap_or_else(|e| panic!("{kind}: CLUSTER REMOVENODE: {e}"));
    assert!(reply.contains("removed"), "{kind}: {reply}");
    // A new leader among the three that remain; writes go on.
    let new_leader = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let l = c.wait_leader_seen_by(3);
            if l != leader {
                break l;
            }
            assert!(
                Instant::now() < deadline,
                "{kind}: the removed leader still leads"
            );
            std::thread::park_timeout(Duration::from_millis(20));
        }
    };
    let mut expect: Vec<u64> = vec![1, 2, 3, 4];
    expect.retain(|&v| v != old_leader_id);
    assert_eq!(voters(&c, new_leader), expect, "{kind}");
    writer.wait_more(100);
    let (acked, errors) = writer.finish();
    eprintln!(
        "{kind}: {} writes acknowledged during the changes, {errors} failed or unknown",
        acked.len()
    );
    // Every acknowledged write is there (linearizable reads through a
    // remaining replica).
    let mut con = c.client(3);
    for (i, v) in &acked {
        let got: Option<String> = con.get(format!("w{i}")).unwrap();
        assert_eq!(got.as_deref(), Some(v.as_str()), "{kind}: w{i} lost");
    }
    drop(con);
    drop(con4);
    // The membership survives a restart of every replica.
    c.stop(leader);
    let rest: Vec<usize> = (0..4).filter(|&i| i != leader).collect();
    for &i in &rest {
        c.stop(i);
    }
    for &i in &rest {
        c.restart(i);
    }
    let l = c.wait_leader_seen_by(rest[0]);
    assert!(rest.contains(&l), "{kind}: leader {l} after the restart");
    assert_eq!(
        voters(&c, rest[0]),
        expect,
        "{kind}: membership after restart"
    );
    let mut con = c.client(rest[1]);
    for (i, v) in acked.iter().step_by(7) {
        let got: Option<String> = con.get(format!("w{i}")).unwrap();
        assert_eq!(
            got.as_deref(),
            Some(v.as_str()),
            "{kind}: w{i} after restart"
        );
    }
    assert_eq!(con.get::<_, String>("from4").unwrap(), "x");
}

/// Bad membership requests get clear errors and change nothing.
#[test]
fn bad_membership_requests_are_refused() {
    let c = Cluster::start(StoreKind::List, 3, "member-bad", |_| {});
    let mut con = c.client(1);
    let err = |args: &[&str], con: &mut redis::Connection| -> String {
        let mut cmd = redis::cmd("CLUSTER");
        for a in args {
            cmd.arg(*a);
        }
        match cmd.query::<String>(con) {
            Ok(r) => panic!("CLUSTER {args:?} answered {r}"),
            Err(e) => e.to_string(),
        }
    };
    assert!(err(&["ADDNODE", "x", "127.0.0.1:1"], &mut con).contains("positive integer"));
    assert!(err(&["ADDNODE", "4", "nohost"], &mut con).contains("host:port"));
    assert!(err(&["ADDNODE", "4"], &mut con).contains("wrong number"));
    assert!(err(&["REMOVENODE", "9"], &mut con).contains("not a member"));
    assert!(err(&["MEET", "a", "b"], &mut con).contains("ADDNODE"));
    // A member's address cannot be changed by adding it again.
    assert!(err(&["ADDNODE", "2", "127.0.0.1:1"], &mut con).contains("already a member"));
    // A replica nobody runs: it stays a learner after the catch-up times out.
    let mut c2 = c;
    c2.cfgs[1].catch_up_timeout = Duration::from_millis(500);
    drop(con);
    c2.stop(1);
    c2.restart(1);
    let mut con = c2.client(1);
    let leader = c2.wait_leader();
    let e = err(&["ADDNODE", "7", "127.0.0.1:9"], &mut con);
    assert!(
        e.contains("did not catch up") && e.contains("learner"),
        "{e}"
    );
    let m = c2.server(leader).node().raft.metrics().borrow().clone();
    assert!(m
        .membership_config
        .membership()
        .learner_ids()
        .any(|l| l == 7));
    assert_eq!(voters(&c2, leader), vec![1, 2, 3]);
    let r: String = redis::cmd("CLUSTER")
        .arg("REMOVENODE")
        .arg(7)
        .query(&mut con)
        .unwrap();
    assert!(r.contains("removed"), "{r}");
    let m = c2.server(leader).node().raft.metrics().borrow().clone();
    assert!(m.membership_config.membership().get_node(&7).is_none());
}

/// `INFO replication` as Redis clients parse it (the `redis` crate's
/// `InfoDict`): the leader lists every other replica with its matched index,
/// lag, voter/learner and reachability; a follower names its leader.
#[test]
fn info_replication_shows_every_replica() {
    let mut c = Cluster::start(StoreKind::List, 3, "info-repl", |_| {});
    let leader = c.wait_leader();
    let mut lcon = c.client(leader);
    for i in 0..100 {
        let _: () = lcon.set(format!("k{i}"), i).unwrap();
    }
    let d = await_info(
        &mut lcon,
        "replication",
        "both followers online and caught up",
        |d| {
            d.get::<String>("connected_slaves").as_deref() == Some("2")
                && (0..2).all(|i| {
                    d.get::<String>(&format!("slave{i}"))
                        .is_some_and(|l| l.contains("lag=0"))
                })
        },
    );
    assert_eq!(field(&d, "role"), "master");
    assert_eq!(field(&d, "raft_member"), "voter");
    let last: u64 = field(&d, "master_repl_offset").parse().unwrap();
    assert!(last >= 100, "{d:?}");
    let mut ids = Vec::new();
    for i in 0..2 {
        let line = field(&d, &format!("slave{i}"));
        let kv: BTreeMap<&str, &str> = line.split(',').filter_map(|p| p.split_once('=')).collect();
        assert_eq!(kv["state"], "online", "{line}");
        assert_eq!(kv["member"], "voter", "{line}");
        assert_eq!(kv["offset"].parse::<u64>().unwrap(), last, "{line}");
        assert_eq!(kv["ip"], "127.0.0.1", "{line}");
        let id: u64 = kv["id"].parse().unwrap();
        assert_eq!(
            kv["port"],
            c.cfgs[id as usize - 1].peer_listen.port().to_string(),
            "{line}"
        );
        assert!(kv["last_ack_ms"].parse::<u64>().unwrap() < 5000, "{line}");
        ids.push(id);
    }
    ids.sort();
    let mut want: Vec<u64> = (1..=3).filter(|&i| i != leader as u64 + 1).collect();
    want.sort();
    assert_eq!(ids, want);
    // A follower's view.
    let follower = (leader + 1) % 3;
    let mut fcon = c.client(follower);
    let d = await_info(
        &mut fcon,
        "replication",
        "the follower hears its leader",
        |d| d.get::<String>("master_link_status").as_deref() == Some("up"),
    );
    assert_eq!(field(&d, "role"), "slave");
    assert_eq!(field(&d, "master_id"), (leader + 1).to_string());
    assert_eq!(
        field(&d, "master_port"),
        c.cfgs[leader].peer_listen.port().to_string()
    );
    assert!(field(&d, "slave_repl_offset").parse::<u64>().unwrap() >= 100);
    // A stopped follower shows as offline, lagging behind new writes.
    let gone = (leader + 2) % 3;
    c.stop(gone);
    for i in 0..20 {
        let _: () = lcon.set(format!("after{i}"), i).unwrap();
    }
    let d = await_info(
        &mut lcon,
        "replication",
        "the stopped follower is offline",
        |d| d.get::<String>("connected_slaves").as_deref() == Some("1"),
    );
    let gone_line = (0..2)
        .map(|i| field(&d, &format!("slave{i}")))
        .find(|l| l.starts_with(&format!("id={},", gone + 1)))
        .unwrap();
    assert!(gone_line.contains("state=offline"), "{gone_line}");
    let lag: u64 = gone_line
        .split(',')
        .find_map(|p| p.strip_prefix("lag="))
        .unwrap()
        .parse()
        .unwrap();
    assert!(lag >= 20, "{gone_line}");
    // The store section tells how full the pool is.
    let d = info(&mut lcon, "store");
    assert!(field(&d, "pool_capacity_bytes").parse::<u64>().unwrap() > 0);
    assert_eq!(field(&d, "pool_full"), "no");
    let d = info(&mut lcon, "raft");
    assert_eq!(field(&d, "raft_running"), "ok");
}

/// Overwriting a few keys with far more data than the pool holds: the store
/// compacts (snapshot, purge, clean-up) and stays within the pool, no write
/// is refused and none fails.
#[test]
fn space_stays_bounded_under_overwrites() {
    for kind in [StoreKind::List, StoreKind::BTree] {
        let pool = 32u64 << 20;
        let c = Cluster::start(kind, 1, &format!("space-{kind}"), |cfg| {
            cfg.store.pool_size = pool;
        });
        let mut con = c.client(0);
        let value = vec![b'x'; 4096];
        // 8 × the pool (or FERRITE_SPACE_MULTIPLE ×), in pipelines of 32
        // writes over 64 keys.
        let multiple: u64 = std::env::var("FERRITE_SPACE_MULTIPLE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(8);
        let total = multiple * pool;
        let writes = total / value.len() as u64;
        let node = c.server(0).node().clone();
        let cap = node.replica.space().capacity.unwrap();
        let mut peak = 0u64;
        let mut peak_claimed = 0u64;
        let t = Instant::now();
        for round in 0..writes / 32 {
            let mut pipe = redis::pipe();
            for j in 0..32 {
                pipe.set(format!("k{}", (round * 32 + j) % 64), &value)
                    .ignore();
            }
            let r: redis::RedisResult<()> = pipe.query(&mut con);
            r.unwrap_or_else(|e| {
                panic!(
                    "{kind}: write {} of {writes} failed: {e} (space {:?})",
                    round * 32,
                    node.replica.space()
                )
            });
            let sp = node.replica.space();
            peak = peak.max(sp.used);
            peak_claimed = peak_claimed.max(cap - sp.unclaimed);
        }
        let secs = t.elapsed().as_secs_f64();
        let keys: i64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
        assert_eq!(keys, 64, "{kind}");
        for k in 0..64 {
            let v: Vec<u8> = con.get(format!("k{k}")).unwrap();
            assert_eq!(v, value, "{kind} k{k}");
        }
        let sp = node.replica.space();
        let m = node.raft.metrics().borrow().clone();
        eprintln!(
            "{kind}: {writes} writes of 4 KiB ({} MiB, {:.1} × the {} MiB pool) in {secs:.1} s: \
             peak {:.1} MiB ({:.0}% of the heap), chunks claimed at most {:.1} MiB ({:.0}%), \
             end {:.1} MiB, live {:.1} MiB, purged up to {:?}",
            total >> 20,
            total as f64 / pool as f64,
            pool >> 20,
            peak as f64 / (1 << 20) as f64,
            100.0 * peak as f64 / cap as f64,
            peak_claimed as f64 / (1 << 20) as f64,
            100.0 * peak_claimed as f64 / cap as f64,
            sp.used as f64 / (1 << 20) as f64,
            sp.live as f64 / (1 << 20) as f64,
            m.purged.map(|p| p.index)
        );
        assert!(
            m.purged.is_some_and(|p| p.index > writes / 2),
            "{kind}: the log was purged as it went: {:?}",
            m.purged
        );
        // Bounded inside the pool: compaction starts at 45 %, and writes
        // stop at the write limit (90 %) — where a write waits for the
        // clean-up to reclaim what the overwrites left (every write above
        // succeeded) — plus the pipeline in flight when the limit was met.
        // How far below the limit the background clean-up keeps the store
        // depends on how much CPU it gets; the bound does not.
        let limit = node.replica.space().write_limit(90).unwrap();
        assert!(
            peak <= limit + 32 * 2 * value.len() as u64,
            "{kind}: the store grew to {peak} of {cap} bytes (limit {limit})"
        );
        drop(con);
    }
}

/// The WAL store deletes its log segments once a snapshot covers them: the
/// directory stays small while the data written grows.
#[test]
fn wal_segments_are_deleted_after_snapshots() {
    let c = Cluster::start(StoreKind::Wal, 1, "space-wal", |cfg| {
        cfg.store.wal_segment_bytes = 256 << 10;
        cfg.raft.snapshot_every = 500;
        cfg.raft.keep_logs = 100;
    });
    let mut con = c.client(0);
    let value = vec![b'y'; 4096];
    let node = c.server(0).node().clone();
    let ferrite_raft::Replica::Wal(w) = &node.replica else {
        unreachable!()
    };
    let mut peak_bytes = 0;
    let mut peak_segments = 0;
    // 48 MiB through the log.
    for round in 0..(48 << 20) / 4096 / 32 {
        let mut pipe = redis::pipe();
        for j in 0..32 {
            pipe.set(format!("k{}", (round * 32 + j) % 64), &value)
                .ignore();
        }
        let _: () = pipe.query(&mut con).unwrap();
        peak_bytes = peak_bytes.max(w.disk_bytes());
        peak_segments = peak_segments.max(w.segments());
    }
    eprintln!(
        "wal: 48 MiB written through 256 KiB segments: peak {} segments, {:.1} MiB on disk",
        peak_segments,
        peak_bytes as f64 / (1 << 20) as f64
    );
    // A snapshot every 500 entries (2 MiB of log) keeping 100: a handful of
    // segments and a snapshot of 256 KiB of data at a time.
    assert!(peak_segments <= 16, "{peak_segments} segments");
    assert!(peak_bytes < 8 << 20, "{peak_bytes} bytes");
    assert!(
        !w.dir().join("wal-0000000000000000.log").exists(),
        "the first segment was deleted"
    );
}

/// A genuinely small pool filled through the service: writes get `-OOM`,
/// reads go on everywhere, no replica stops, nothing acknowledged is lost;
/// after `DEL`s the space comes back and writes work again.
#[test]
fn a_full_pool_refuses_writes_and_serves_reads() {
    for kind in [StoreKind::List, StoreKind::BTree] {
        full_pool(kind);
    }
}

fn full_pool(kind: StoreKind) {
    // No background space checks: whatever room a write finds, it finds
    // because a write that met a full pool had it reclaimed.
    let mut c = Cluster::start(kind, 3, &format!("full-{kind}"), |cfg| {
        cfg.store.pool_size = 16 << 20;
        cfg.space_check = Duration::from_secs(3600);
    });
    let mut con = c.client(1);
    let value = vec![b'z'; 8192];
    let mut acked = 0u64;
    let oom = loop {
        match con.set::<_, _, ()>(format!("fill{acked}"), &value) {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 10_000, "{kind}: a 16 MiB pool took 80 MiB");
    };
    assert_eq!(oom.code(), Some("OOM"), "{kind}: {oom}");
    assert!(oom.to_string().contains("pool is full"), "{kind}: {oom}");
    eprintln!(
        "{kind}: 16 MiB pools full after {acked} SETs of 8 KiB ({:.1} MiB): {oom}",
        acked as f64 * 8192.0 / (1 << 20) as f64
    );
    // Every replica still runs and serves reads of everything acknowledged.
    let leader = c.wait_leader();
    let applied = c.server(leader).node().raft.metrics().borrow().last_applied;
    for i in 0..3 {
        c.wait_applied(i, applied.unwrap().index);
        let mut ci = c.client(i);
        let d = info(&mut ci, "raft");
        assert_eq!(field(&d, "raft_running"), "ok", "{kind} replica {i}");
        for k in (0..acked).step_by(13) {
            let v: Vec<u8> = ci.get(format!("fill{k}")).unwrap();
            assert_eq!(v.len(), 8192, "{kind} replica {i} fill{k}");
        }
        let d = info(&mut ci, "store");
        if i == leader {
            assert_eq!(field(&d, "pool_full"), "yes", "{kind}: {d:?}");
        }
    }
    // Still refused, through another replica too. (The leader's compaction
    // may have freed a few KiB since the first refusal — superseded log
    // entries — so a write or two can fit again: write until refused.)
    let mut c2 = c.client(2);
    let mut extra = 0;
    let e = loop {
        match c2.set::<_, _, ()>(format!("more{extra}"), &value) {
            Ok(()) => extra += 1,
            Err(e) => break e,
        }
        assert!(
            extra < 16,
            "{kind}: {extra} more writes after the pool was full"
        );
    };
    assert_eq!(e.code(), Some("OOM"), "{kind}: {e}");
    // Deleting half the keys frees space: the next writes succeed at once
    // (a write that finds the pool full has the space the DELs left
    // reclaimed before it would be refused), through either replica.
    let mut pipe = redis::pipe();
    for k in (0..acked).filter(|k| k % 2 == 0) {
        pipe.del(format!("fill{k}")).ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    c2.set::<_, _, ()>("more", &value)
        .unwrap_or_else(|e| panic!("{kind}: writes did not come back after DEL: {e}"));
    for i in 0..acked / 4 {
        con.set::<_, _, ()>(format!("again{i}"), &value)
            .unwrap_or_else(|e| panic!("{kind}: write {i} after the DELs: {e}"));
    }
    // Everything is intact after a restart of every replica.
    drop((con, c2));
    for i in 0..3 {
        c.stop(i);
    }
    for i in 0..3 {
        c.restart(i);
    }
    c.wait_leader();
    let mut con = c.client(0);
    for k in 0..acked {
        let v: Option<Vec<u8>> = con.get(format!("fill{k}")).unwrap();
        assert_eq!(v.is_some(), k % 2 == 1, "{kind} fill{k}");
    }
    assert_eq!(con.get::<_, Vec<u8>>("more").unwrap(), value, "{kind}");
    for i in 0..acked / 4 {
        let v: Vec<u8> = con.get(format!("again{i}")).unwrap();
        assert_eq!(v, value, "{kind} again{i}");
    }
}
