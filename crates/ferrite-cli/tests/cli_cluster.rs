//! `ferrite cluster up 3` as a new user runs it, with Debian's unmodified
//! `redis-cli` and `redis-benchmark` (package redis-tools; `.ci/run` installs
//! it), then `kill -9` of every replica and a restart from their stores.

use std::path::PathBuf;
use std::process::{Command, Output};

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .unwrap()
}

fn tool(name: &str, args: &[&str]) -> Output {
    Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name} ({e}): install Debian's redis-tools (`apt-get install -y redis-tools`)"))
}

fn cli(port: u16, args: &[&str]) -> String {
    let p = port.to_string();
    let mut a = vec!["-p", &p];
    a.extend_from_slice(args);
    let o = tool("redis-cli", &a);
    assert!(
        o.status.success(),
        "redis-cli {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .trim_end_matches('\n')
        .to_string()
}

/// Waits (at most 10 s) until process `pid` has entirely exited, on a pidfd:
/// the kernel signals it once every thread is gone. (Not the state in
/// `/proc/PID/stat`: that is the main thread's, which turns zombie while
/// another thread, say one in an fsync, still holds the process's sockets.
/// `cluster up` then found a port still taken — a CI failure.)
fn wait_gone(pid: i32) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) } as i32;
    if fd < 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, 10_000) };
    // SAFETY: closing the descriptor pidfd_open returned, once.
    unsafe { libc::close(fd) };
    n == 1
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A cluster directory and port range of this test; stopped and deleted on drop.
struct Up {
    dir: PathBuf,
    port: u16,
}

impl Up {
    fn new(tag: &str, store: &str, port: u16) -> Up {
        let base = if store == "wal" { "/tmp" } else { "/dev/shm" };
        let dir = PathBuf::from(format!(
            "{base}/ferrite-cli-cluster-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let u = Up { dir, port };
        u.up(store);
        u
    }

    fn up(&self, store: &str) {
        let o = ferrite(&[
            "cluster",
            "up",
            "3",
            "--store",
            store,
            "--dir",
            self.dir.to_str().unwrap(),
            "--port",
            &self.port.to_string(),
            "--pool-size",
            "256M",
        ]);
        assert!(o.status.success(), "cluster up: {}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(&format!("redis-cli -p {}", self.port)),
            "{out}"
        );
        assert!(out.contains("set k w IFEQ v"), "{out}");
    }

    fn pids(&self) -> Vec<i32> {
        let rec: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.dir.join("cluster.json")).unwrap()).unwrap();
        rec["replicas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["pid"].as_i64().unwrap() as i32)
            .collect()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let o = ferrite(&[
            "cluster",
            "down",
            "--dir",
            self.dir.to_str().unwrap(),
            "--purge",
        ]);
        if !o.status.success() {
            eprintln!("cluster down: {}", text(&o));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn base_port(slot: u16) -> u16 {
    // Away from the defaults; distinct per test and per test process. Client
    // ports 11000..19012 (the bench test adds 4000) and peer ports (+10000)
    // stay below the kernel's ephemeral range (32768..), where a replica's
    // port could be taken as the local end of some outgoing connection.
    11000 + (std::process::id() % 400) as u16 * 10 + slot * 3
}

#[test]
fn cluster_up_3_serves_redis_cli_and_redis_benchmark() {
    let u = Up::new("tour", "list", base_port(0));
    let p = u.port;
    assert_eq!(cli(p, &["set", "k", "v"]), "OK");
    assert_eq!(cli(p + 1, &["get", "k"]), "v");
    assert_eq!(cli(p + 2, &["set", "k", "w", "IFEQ", "v"]), "OK");
    assert_eq!(cli(p, &["get", "k"]), "w");
    assert_eq!(
        cli(p + 1, &["set", "k", "z", "IFEQ", "v"]),
        "",
        "not applied: a nil reply"
    );
    assert_eq!(cli(p + 2, &["get", "k"]), "w");
    assert_eq!(cli(p, &["set", "k", "x", "NX"]), "");
    assert_eq!(cli(p + 1, &["del", "k", "nope"]), "1");
    assert_eq!(cli(p + 2, &["exists", "k"]), "0");
    let info = cli(p + 1, &["info", "raft"]);
    assert!(
        info.contains("raft_leader_id:") && info.contains("raft_term:"),
        "{info}"
    );
    // The RESP3 handshake redis-cli -3 does.
    assert_eq!(cli(p, &["-3", "get", "missing"]), "");
    // redis-benchmark, unmodified.
    let ps = p.to_string();
    let o = tool(
        "redis-benchmark",
        &["-p", &ps, "-t", "set,get", "-n", "2000", "-c", "20", "-q"],
    );
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    for t in ["SET: ", "GET: "] {
        assert!(
            out.contains(t) && out.contains("requests per second"),
            "{out}"
        );
    }
    assert!(!out.contains("ERR"), "{out}");
    // A second cluster in the same directory is refused while this one runs.
    let o = ferrite(&[
        "cluster",
        "up",
        "3",
        "--dir",
        u.dir.to_str().unwrap(),
        "--port",
        &(p + 100).to_string(),
    ]);
    assert!(
        !o.status.success() && text(&o).contains("already running"),
        "{}",
        text(&o)
    );
}

#[test]
fn every_replica_killed_with_sigkill_restarts_from_its_store() {
    for (slot, store) in [(1, "list"), (2, "btree"), (3, "wal")] {
        let u = Up::new(&format!("kill-{store}"), store, base_port(slot));
        let p = u.port;
        for i in 0..200 {
            assert_eq!(
                cli(p + (i % 3), &["set", &format!("key{i}"), &format!("v{i}")]),
                "OK",
                "{store}"
            );
        }
        assert_eq!(cli(p, &["set", "key7", "w", "IFEQ", "v7"]), "OK");
        for pid in u.pids() {
            // SAFETY: signalling the replica processes this test started.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        }
        for pid in u.pids() {
            // Not our children (cluster up detached them).
            assert!(wait_gone(pid), "replica {pid} survived SIGKILL");
        }
        u.up(store);
        for i in 0..200 {
            let want = if i == 7 {
                "w".to_string()
            } else {
                format!("v{i}")
            };
            assert_eq!(
                cli(p + (i as u16 % 3), &["get", &format!("key{i}")]),
                want,
                "{store} key{i}"
            );
        }
        assert_eq!(cli(p + 1, &["dbsize"]), "200", "{store}");
    }
}

#[test]
fn serve_refuses_bad_arguments_and_a_pool_in_use() {
    let o = ferrite(&[
        "serve",
        "--id",
        "1",
        "--pool",
        "/dev/shm/x",
        "--store",
        "nope",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("list, btree or wal"));
    let o = ferrite(&[
        "serve",
        "--id",
        "1",
        "--pool",
        "/dev/shm/x",
        "--peers",
        "2=nohost",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let u = Up::new("inuse", "list", base_port(4));
    let pool = u.dir.join("replica-1.pool");
    let o = ferrite(&[
        "serve",
        "--id",
        "1",
        "--pool",
        pool.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--peer-listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("in use"), "{}", text(&o));
}

#[test]
fn bench_raft_quick_reports_in_the_shared_json_shape() {
    let out = PathBuf::from(format!(
        "/tmp/ferrite-cli-bench-raft-{}",
        std::process::id()
    ));
    let port = (base_port(5) + 4000).to_string();
    let o = ferrite(&[
        "bench",
        "raft",
        "all",
        "--quick",
        "--stores",
        "list,wal",
        "--clients",
        "4",
        "--recovery-trials",
        "2",
        "--port",
        &port,
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    for stem in [
        "raft-structures",
        "raft-latency",
        "raft-recovery",
        "raft-commit",
    ] {
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join(format!("{stem}.json"))).unwrap())
                .unwrap();
        assert!(r["environment"].is_object(), "{stem}");
        let results = r["results"].as_array().unwrap();
        assert!(!results.is_empty(), "{stem}");
        for x in results {
            for k in ["bench", "variant", "threads", "mops"] {
                assert!(!x[k].is_null(), "{stem}: {k} missing in {x}");
            }
        }
        assert!(out.join(format!("{stem}.svg")).exists());
    }
    let lat: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("raft-latency.json")).unwrap()).unwrap();
    for r in lat["results"].as_array().unwrap() {
        assert_eq!(r["errors"].as_f64(), Some(0.0), "{r}");
        assert!(r["p50_ns"].as_f64().unwrap() > 0.0);
    }
    let notes = lat["notes"].to_string();
    assert!(notes.contains("bar: list SET p50"), "{notes}");
    // The replicas' on-CPU time beside the wall time of recovery and start.
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("raft-recovery.json")).unwrap()).unwrap();
    for r in rec["results"].as_array().unwrap() {
        assert!(r["follower_cpu_ms"].as_f64().unwrap() > 0.0, "{r}");
        if r["bench"] == "recovery" {
            // Two trials (the second on a fresh cluster); the median of
            // two is the lower.
            let trials: Vec<f64> = r["trials_ms"]
                .as_str()
                .unwrap()
                .split(" / ")
                .map(|t| t.parse().unwrap())
                .collect();
            assert_eq!(trials.len(), 2, "{r}");
            let lower = trials.iter().cloned().fold(f64::MAX, f64::min);
            assert_eq!(r["ms"].as_f64().unwrap().round(), lower, "{r}");
        }
    }
    assert!(
        rec["notes"].to_string().contains("medians of 2 trials"),
        "{}",
        rec["notes"]
    );
    // The throughput chart, and redrawn from the saved report.
    let thr = out.join("raft-throughput.svg");
    let com = out.join("raft-commit.svg");
    assert!(thr.exists());
    std::fs::remove_file(&thr).unwrap();
    std::fs::remove_file(&com).unwrap();
    let o = ferrite(&["bench", "raft", "--replot", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(std::fs::read_to_string(&thr).unwrap().contains("<svg"));
    assert!(std::fs::read_to_string(&com)
        .unwrap()
        .contains("k=1 t=0 µs"));
    let _ = std::fs::remove_dir_all(&out);
}
