//! Operations on real `ferrite serve` processes: a graceful shutdown on
//! SIGTERM and SIGINT (requests in flight answered, the store closed, exit
//! status 0, every acknowledged write there after a restart), and `ferrite
//! cluster add` / `remove` / `down` / `up` with Debian's `redis-cli`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn ferrite(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One RESP request, one reply line (with a bulk's payload), or an error.
fn call(s: &mut BufReader<TcpStream>, args: &[&str]) -> std::io::Result<String> {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.get_mut().write_all(req.as_bytes())?;
    let mut line = String::new();
    if s.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let line = line.trim_end().to_string();
    if let Some(n) = line.strip_prefix('$') {
        let n: i64 = n.parse().unwrap();
        if n < 0 {
            return Ok("(nil)".into());
        }
        let mut b = vec![0u8; n as usize + 2];
        s.read_exact(&mut b)?;
        b.truncate(n as usize);
        return Ok(String::from_utf8_lossy(&b).into_owned());
    }
    Ok(line)
}

fn connect(addr: &str) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    BufReader::new(s)
}

/// A `ferrite serve` child with its client address (read from its banner).
struct Replica {
    child: Child,
    addr: String,
    out: Arc<Mutex<String>>,
}

fn start_serve(pool: &Path, store: &str) -> Replica {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["serve", "--id", "1", "--store", store, "--pool-size", "64M"])
        .arg("--pool")
        .arg(pool)
        .args(["--listen", "127.0.0.1:0", "--peer-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    lines.read_line(&mut banner).unwrap();
    let addr = banner
        .split("serving clients on ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_string();
    let out = Arc::new(Mutex::new(banner));
    let o = out.clone();
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = lines.read_to_string(&mut rest);
        o.lock().unwrap().push_str(&rest);
    });
    // A one-replica cluster elects itself; wait until it takes writes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = TcpStream::connect(&addr) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut s = BufReader::new(s);
            if call(&mut s, &["SET", "ready", "1"]).is_ok_and(|r| r == "+OK") {
                break;
            }
        }
        assert!(Instant::now() < deadline, "the replica never took a write");
        std::thread::park_timeout(Duration::from_millis(20));
    }
    Replica { child, addr, out }
}

/// Waits (bounded) for the child to exit; its exit code.
fn wait_exit(child: &mut Child, within: Duration) -> i32 {
    let deadline = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the replica did not exit within {within:?}");
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// Writers that keep writing unique keys until their connection ends;
/// returns the acknowledged ones.
fn writers(
    addr: &str,
    n: usize,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    (0..n)
        .map(|t| {
            let addr = addr.to_string();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut s = connect(&addr);
                let mut acked = Vec::new();
                for i in 0..1_000_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let k = format!("t{t}-{i}");
                    match call(&mut s, &["SET", &k, &k]) {
                        Ok(r) if r == "+OK" => acked.push(k),
                        _ => break,
                    }
                }
                acked
            })
        })
        .collect()
}

fn graceful(store: &str, sig: libc::c_int) {
    let base = if store == "wal" { "/tmp" } else { "/dev/shm" };
    let pool = PathBuf::from(format!(
        "{base}/ferrite-cli-ops-term-{store}-{sig}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_dir_all(&pool);
    let mut r = start_serve(&pool, store);
    let stop = Arc::new(AtomicBool::new(false));
    let hs = writers(&r.addr, 4, stop.clone());
    // Signal while the writers are busy (their requests are in flight).
    let mut probe = connect(&r.addr);
    let deadline = Instant::now() + Duration::from_secs(60);
    let dbsize = |s: &mut BufReader<TcpStream>| -> u64 {
        let r = call(s, &["DBSIZE"]).unwrap();
        r.trim_start_matches(':').parse().unwrap()
    };
    let seen = loop {
        let n = dbsize(&mut probe);
        if n >= 400 {
            break n as usize;
        }
        assert!(Instant::now() < deadline, "writes stalled");
        std::thread::park_timeout(Duration::from_millis(5));
    };
    drop(probe);
    // SAFETY: signalling the child this test spawned.
    assert_eq!(unsafe { libc::kill(r.child.id() as i32, sig) }, 0);
    let code = wait_exit(&mut r.child, Duration::from_secs(30));
    stop.store(true, Ordering::Relaxed);
    let acked: Vec<String> = hs.into_iter().flat_map(|h| h.join().unwrap()).collect();
    // The banner thread has the rest of stdout once the pipe closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !r.out.lock().unwrap().contains("stopped") && Instant::now() < deadline {
        std::thread::park_timeout(Duration::from_millis(10));
    }
    let out = r.out.lock().unwrap().clone();
    assert_eq!(code, 0, "{store}: exit status after signal {sig}: {out}");
    assert!(out.contains("closed cleanly"), "{store}: {out}");
    // The probe saw `seen` keys applied; each writer may have had one of
    // them in flight (applied, its reply not yet read) when the signal
    // came, so at least `seen - 4` were acknowledged.
    assert!(
        acked.len() + 4 >= seen,
        "{store}: {} acknowledged, {seen} applied before the signal",
        acked.len()
    );
    if store != "wal" {
        let o = ferrite(&["check", pool.to_str().unwrap()]);
        assert!(o.status.success(), "{store}: ferrite check: {}", text(&o));
    }
    // Every acknowledged write is there after a restart.
    let mut r2 = start_serve(&pool, store);
    let mut s = connect(&r2.addr);
    for k in &acked {
        assert_eq!(call(&mut s, &["GET", k]).unwrap(), *k, "{store}: {k} lost");
    }
    eprintln!(
        "{store}: signal {sig} with 4 writers busy: exit 0, {} acknowledged writes all there after the restart",
        acked.len()
    );
    drop(s);
    // SAFETY: as above.
    unsafe { libc::kill(r2.child.id() as i32, libc::SIGTERM) };
    assert_eq!(wait_exit(&mut r2.child, Duration::from_secs(30)), 0);
    let _ = std::fs::remove_file(&pool);
    let _ = std::fs::remove_dir_all(&pool);
}

#[test]
fn sigterm_and_sigint_stop_gracefully_and_lose_nothing() {
    graceful("list", libc::SIGTERM);
    graceful("btree", libc::SIGINT);
    graceful("wal", libc::SIGTERM);
}

fn cli(port: u16, args: &[&str]) -> String {
    let p = port.to_string();
    let mut a = vec!["-p", &p];
    a.extend_from_slice(args);
    let o = Command::new("redis-cli")
        .args(&a)
        .output()
        .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): install Debian's redis-tools"));
    assert!(o.status.success(), "redis-cli {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout)
        .trim_end_matches('\n')
        .to_string()
}

fn info_field(info: &str, key: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(&format!("{key}:"))
            .map(|v| v.trim().to_string())
    })
}

#[test]
fn cluster_add_remove_down_up() {
    let port = 11000 + (std::process::id() % 400) as u16 * 10 + 7;
    let dir = PathBuf::from(format!(
        "/dev/shm/ferrite-cli-ops-cluster-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    struct Down<'a>(&'a str);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            let _ = ferrite(&["cluster", "down", "--dir", self.0, "--purge"]);
        }
    }
    let _down = Down(d);
    let ps = port.to_string();
    let o = ferrite(&[
        "cluster",
        "up",
        "3",
        "--dir",
        d,
        "--port",
        &ps,
        "--pool-size",
        "128M",
    ]);
    assert!(o.status.success(), "cluster up: {}", text(&o));
    for i in 0..300 {
        assert_eq!(
            cli(port + (i % 3), &["set", &format!("k{i}"), &format!("v{i}")]),
            "OK"
        );
    }
    // A fourth replica.
    let o = ferrite(&["cluster", "add", "--dir", d]);
    assert!(o.status.success(), "cluster add: {}", text(&o));
    assert!(text(&o).contains("replica 4 added"), "{}", text(&o));
    assert_eq!(cli(port + 3, &["get", "k7"]), "v7");
    assert_eq!(cli(port + 3, &["set", "k300", "v300"]), "OK");
    let leader: u16 = info_field(&cli(port, &["info", "raft"]), "raft_leader_id")
        .unwrap()
        .parse()
        .unwrap();
    let info = cli(port + leader - 1, &["info", "replication"]);
    assert_eq!(
        info_field(&info, "connected_slaves").as_deref(),
        Some("3"),
        "{info}"
    );
    // Remove the leader.
    let o = ferrite(&["cluster", "remove", &leader.to_string(), "--dir", d]);
    assert!(o.status.success(), "cluster remove: {}", text(&o));
    let alive: Vec<u16> = (1..=4).filter(|&i| i != leader).collect();
    for (n, &i) in alive.iter().enumerate() {
        assert_eq!(cli(port + i - 1, &["set", &format!("after{n}"), "x"]), "OK");
    }
    // down / up restart the recorded replicas (not 1..3).
    let o = ferrite(&["cluster", "down", "--dir", d]);
    assert!(o.status.success(), "cluster down: {}", text(&o));
    for i in 1..=4 {
        let log = std::fs::read_to_string(dir.join(format!("replica-{i}.log"))).unwrap_or_default();
        assert!(log.contains("closed cleanly"), "replica {i} log: {log}");
    }
    let o = ferrite(&[
        "cluster",
        "up",
        "3",
        "--dir",
        d,
        "--port",
        &ps,
        "--pool-size",
        "128M",
    ]);
    assert!(o.status.success(), "cluster up again: {}", text(&o));
    for i in (0..=300).step_by(17) {
        let p = port + alive[i as usize % 3] - 1;
        assert_eq!(cli(p, &["get", &format!("k{i}")]), format!("v{i}"));
    }
    for n in 0..3 {
        assert_eq!(
            cli(port + alive[0] - 1, &["get", &format!("after{n}")]),
            "x"
        );
    }
    let members = info_field(&cli(port + alive[0] - 1, &["info", "raft"]), "raft_members").unwrap();
    assert!(!members.contains(&format!("{leader}=")), "{members}");
    assert!(members.contains("4="), "{members}");
}
