//! A linearizable read on the leader while both followers are stopped
//! (`SIGSTOP`) for longer than one leadership round: the leader repeats the
//! round while it still leads, and the read is answered once the followers
//! run again (`SIGCONT`), instead of failing with "not enough for a quorum".
//!
//! Real processes, a real signal; no timing assertion: the test awaits the
//! leader's log line that says a round came back without a quorum, and fails
//! if the read ends (with any answer) before that, while both followers are
//! still stopped.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ferrite_chaos::cluster::{Cluster, ClusterSpec, DirGuard};
use ferrite_chaos::ferrite_binary;
use ferrite_chaos::run::await_leader;
use ferrite_server::node::READ_ROUND_REPEATED;

fn connect(addr: std::net::SocketAddr) -> redis::Connection {
    let c = redis::Client::open(format!("redis://{addr}/")).unwrap();
    let con = c
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    con
}

#[test]
fn a_read_waits_out_followers_stopped_for_a_leadership_round() {
    let dir = PathBuf::from(format!(
        "/dev/shm/ferrite-read-index-{}",
        std::process::id()
    ));
    let _guard = DirGuard(dir.clone());
    // Elections time out after 6–12 heartbeats (1.2–2.4 s): the followers,
    // stopped for about one round, do not campaign when they resume, and the
    // leader repeats its round for up to 2.4 s.
    let spec = ClusterSpec {
        bin: ferrite_binary().unwrap(),
        dir: dir.clone(),
        replicas: 3,
        store: "list".into(),
        extra: [
            "--pool-size",
            "64M",
            "--heartbeat-ms",
            "200",
            "--threads",
            "1",
        ]
        .map(String::from)
        .to_vec(),
    };
    let mut c = Cluster::start(spec).unwrap();
    let leader = await_leader(&c, &None, Instant::now() + Duration::from_secs(30))
        .unwrap_or_else(|| panic!("no leader within 30 s (logs in {})", dir.display()));
    let mut con = connect(c.client_addr(leader));
    redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query::<()>(&mut con)
        .unwrap();
    // A read before the fault is answered at once.
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v.as_deref(), Some("v"));

    let log = dir.join(format!("replica-{leader}.log"));
    let repeats = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches(READ_ROUND_REPEATED)
            .count()
    };
    let seen_before = repeats();
    let followers: Vec<u64> = c.ids().into_iter().filter(|&id| id != leader).collect();
    for &f in &followers {
        c.pause(f, true);
    }
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let r = redis::cmd("GET")
            .arg("k")
            .query::<Option<String>>(&mut con)
            .map_err(|e| e.to_string());
        let _ = tx.send(());
        r
    });
    // Await the leader's word that a round failed and is being repeated.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if repeats() > seen_before {
            break;
        }
        if rx.try_recv().is_ok() {
            let r = reader.join().unwrap();
            panic!(
                "the read ended while both followers were stopped, without a repeated round: {r:?}"
            );
        }
        assert!(
            Instant::now() < deadline,
            "no repeated leadership round logged within 30 s (log {})",
            log.display()
        );
        std::thread::park_timeout(Duration::from_millis(5));
    }
    for &f in &followers {
        c.pause(f, false);
    }
    let r = reader.join().unwrap();
    assert_eq!(
        r,
        Ok(Some("v".to_string())),
        "the read after the followers resumed (logs in {})",
        dir.display()
    );
}
