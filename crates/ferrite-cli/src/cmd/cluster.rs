//! `ferrite cluster up N` / `ferrite cluster down`: a cluster of `ferrite
//! serve` processes on this machine's loopback interface.
//!
//! `up` starts the replicas in the background (their own sessions, output in
//! `<dir>/replica-<id>.log`), waits until they elect a leader, records them in
//! `<dir>/cluster.json` and prints how to reach them. `down` stops them with
//! SIGTERM (a replica commits and closes its store) and waits for them. The
//! replicas authenticate each other with a random secret `up` writes to
//! `<dir>/cluster.secret`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use ferrite_raft::StoreKind;
use serde::{Deserialize, Serialize};

use crate::util::parse_size;

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Start N replicas on this machine and wait for a leader
    Up(UpArgs),
    /// Stop the replicas `cluster up` started
    Down(DownArgs),
}

#[derive(Args)]
pub struct UpArgs {
    /// Number of replicas
    pub n: u64,
    /// list, btree or wal
    #[arg(long, default_value = "list")]
    pub store: String,
    /// Directory for pools, logs and the cluster record (default:
    /// /dev/shm/ferrite-cluster, or /var/tmp/ferrite-cluster for wal, which
    /// needs a real disk)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Client port of replica 1 (replica i listens on PORT+i-1, and on
    /// PORT+10000+i-1 for replicas)
    #[arg(long, default_value_t = 6380)]
    pub port: u16,
    /// Size of each replica's pool
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub pool_size: u64,
    /// Extra arguments for every `ferrite serve` (e.g. "--commit-every 1")
    #[arg(long, default_value = "")]
    pub serve_args: String,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct DownArgs {
    /// The directory given to `cluster up` (default: both default directories)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also delete the pools and logs
    #[arg(long)]
    pub purge: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ReplicaRecord {
    pub id: u64,
    pub pid: u32,
    pub port: u16,
    pub peer_port: u16,
    pub pool: PathBuf,
    pub log: PathBuf,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ClusterRecord {
    pub store: String,
    pub dir: PathBuf,
    pub replicas: Vec<ReplicaRecord>,
}

const RECORD: &str = "cluster.json";
/// The replicas' cluster secret, written by `up`.
const SECRET: &str = "cluster.secret";

fn default_dir(kind: StoreKind) -> PathBuf {
    if kind.is_pm() {
        PathBuf::from("/dev/shm/ferrite-cluster")
    } else {
        PathBuf::from("/var/tmp/ferrite-cluster")
    }
}

/// Sends one command and reads one reply (simple, error, integer or bulk).
pub fn resp_call(port: u16, args: &[&str], timeout: Duration) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)?;
    s.set_read_timeout(Some(timeout))?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let line = line.trim_end().to_string();
    match line.as_bytes().first() {
        Some(b'+') | Some(b':') => Ok(line[1..].to_string()),
        Some(b'-') => bail!("{}", &line[1..]),
        Some(b'$') => {
            let n: i64 = line[1..].parse().context("bulk length")?;
            if n < 0 {
                return Ok(String::new());
            }
            let mut b = vec![0u8; n as usize + 2];
            r.read_exact(&mut b)?;
            b.truncate(n as usize);
            Ok(String::from_utf8_lossy(&b).into_owned())
        }
        _ => bail!("unexpected reply {line:?}"),
    }
}

fn info_field(info: &str, key: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(&format!("{key}:"))
            .map(|v| v.trim().to_string())
    })
}

fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// True when `pid` is a `ferrite serve` process (guards against reused pids).
fn is_replica(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let s = String::from_utf8_lossy(&c).replace('\0', " ");
            s.contains("ferrite") && s.contains(" serve ")
        })
        .unwrap_or(false)
}

fn read_record(dir: &Path) -> Result<Option<ClusterRecord>> {
    let p = dir.join(RECORD);
    match std::fs::read(&p) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).with_context(|| {
            format!("{} is not a cluster record", p.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
    }
}

/// Whether a replica could listen on `port` (with SO_REUSEADDR, as it
/// does: connections of a killed replica lingering in TIME_WAIT do not count).
fn port_free(port: u16) -> bool {
    tokio::net::TcpSocket::new_v4()
        .and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(([127, 0, 0, 1], port).into())
        })
        .is_ok()
}

pub fn run(c: ClusterCommand) -> Result<i32> {
    match c {
        ClusterCommand::Up(a) => up(a),
        ClusterCommand::Down(a) => down(a),
    }
}

fn up(a: UpArgs) -> Result<i32> {
    let kind = StoreKind::parse(&a.store)
        .with_context(|| format!("--store takes list, btree or wal, not {:?}", a.store))?;
    if a.n == 0 || a.n > 9 {
        bail!("cluster up takes 1 to 9 replicas");
    }
    let dir = a.dir.clone().unwrap_or_else(|| default_dir(kind));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if let Some(old) = read_record(&dir)? {
        if old
            .replicas
            .iter()
            .any(|r| alive(r.pid) && is_replica(r.pid))
        {
            bail!(
                "a cluster is already running from {} (ports {}); stop it with `ferrite cluster down --dir {}`",
                dir.display(),
                old.replicas.iter().map(|r| r.port.to_string()).collect::<Vec<_>>().join(", "),
                dir.display()
            );
        }
    }
    let port = |i: u64| a.port as u64 + i - 1;
    let peer_port = |i: u64| a.port as u64 + 10_000 + i - 1;
    if peer_port(a.n) > u16::MAX as u64 {
        bail!("--port {} leaves no room for {} replicas", a.port, a.n);
    }
    for i in 1..=a.n {
        for p in [port(i), peer_port(i)] {
            if !port_free(p as u16) {
                bail!("port {p} on 127.0.0.1 is in use (pick another with --port)");
            }
        }
    }
    let exe = std::env::current_exe().context("locating the ferrite binary")?;
    let extra: Vec<String> = a
        .serve_args
        .split_whitespace()
        .map(str::to_string)
        .collect();
    // The replicas authenticate each other with a secret of this cluster's
    // own (readable by this user only), kept with the pools so a restart
    // finds it.
    let secret = dir.join(SECRET);
    if !secret.exists() {
        use std::os::unix::fs::OpenOptionsExt;
        let mut bytes = [0u8; 24];
        for c in bytes.chunks_mut(8) {
            c.copy_from_slice(&ferrite_pm::rng::random_u64().to_le_bytes());
        }
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&secret)
            .and_then(|mut f| f.write_all(hex.as_bytes()))
            .with_context(|| format!("writing {}", secret.display()))?;
    }
    let mut replicas = Vec::new();
    for i in 1..=a.n {
        let pool = if kind.is_pm() {
            dir.join(format!("replica-{i}.pool"))
        } else {
            dir.join(format!("replica-{i}.wal"))
        };
        let log = dir.join(format!("replica-{i}.log"));
        let peers: Vec<String> = (1..=a.n)
            .filter(|&j| j != i)
            .map(|j| format!("{j}=127.0.0.1:{}", peer_port(j)))
            .collect();
        let out =
            std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(&exe);
        cmd.arg("serve")
            .args(["--id", &i.to_string()])
            .arg("--pool")
            .arg(&pool)
            .args(["--store", kind.name()])
            .args(["--listen", &format!("127.0.0.1:{}", port(i))])
            .args(["--peer-listen", &format!("127.0.0.1:{}", peer_port(i))])
            .args(["--peers", &peers.join(",")])
            .arg("--cluster-secret-file")
            .arg(&secret)
            .args(["--pool-size", &a.pool_size.to_string()])
            .args(&extra)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: setsid in the child before exec only detaches it from our
        // session (so the replicas outlive this command and its terminal).
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting replica {i}"))?;
        replicas.push(ReplicaRecord {
            id: i,
            pid: child.id(),
            port: port(i) as u16,
            peer_port: peer_port(i) as u16,
            pool,
            log,
        });
    }
    let rec = ClusterRecord {
        store: kind.name().into(),
        dir: dir.clone(),
        replicas: replicas.clone(),
    };
    std::fs::write(dir.join(RECORD), serde_json::to_vec_pretty(&rec)?)?;
    // Wait until every replica answers and they agree on a leader.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut leader = None;
    let mut durability = String::new();
    'wait: loop {
        for r in &replicas {
            if !alive(r.pid) || !is_replica(r.pid) {
                let log = std::fs::read_to_string(&r.log).unwrap_or_default();
                bail!(
                    "replica {} exited at start; its log ({}):\n{}",
                    r.id,
                    r.log.display(),
                    log.trim_end()
                );
            }
        }
        let infos: Vec<Option<String>> = replicas
            .iter()
            .map(|r| resp_call(r.port, &["INFO"], Duration::from_millis(500)).ok())
            .collect();
        if infos.iter().all(Option::is_some) {
            let leaders: Vec<Option<String>> = infos
                .iter()
                .map(|i| {
                    info_field(i.as_deref().unwrap_or(""), "raft_leader_id").filter(|l| l != "-")
                })
                .collect();
            if leaders.iter().all(|l| l.is_some() && *l == leaders[0]) {
                leader = leaders[0].clone();
                durability =
                    info_field(infos[0].as_deref().unwrap_or(""), "durability").unwrap_or_default();
                break 'wait;
            }
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(leader) = leader else {
        bail!(
            "the replicas did not elect a leader within 60 s; see the logs in {} (stop them with `ferrite cluster down --dir {}`)",
            dir.display(),
            dir.display()
        );
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "store": kind.name(),
                "dir": dir,
                "leader": leader,
                "durability": durability,
                "replicas": replicas,
            }))?
        );
        return Ok(0);
    }
    println!(
        "ferrite cluster: {} replicas of the {} store, data in {} ({durability})",
        a.n,
        kind.name(),
        dir.display()
    );
    for r in &replicas {
        let tag = if r.id.to_string() == leader {
            "   (leader)"
        } else {
            ""
        };
        println!("  replica {}: redis-cli -p {}{tag}", r.id, r.port);
    }
    let p = |i: usize| replicas[i.min(replicas.len() - 1)].port;
    println!(
        "Any replica takes any command, e.g.:\n  redis-cli -p {} set k v\n  redis-cli -p {} get k\n  redis-cli -p {} set k w IFEQ v",
        p(0),
        p(1),
        p(2)
    );
    println!(
        "Stop it with: ferrite cluster down{}",
        if a.dir.is_some() {
            format!(" --dir {}", dir.display())
        } else {
            String::new()
        }
    );
    Ok(0)
}

/// Deletes the pools and logs of a cluster that is already stopped.
fn purge_leftovers(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("replica-") || name == SECRET {
            let p = e.path();
            let _ = std::fs::remove_file(&p);
            let _ = std::fs::remove_dir_all(&p);
            n += 1;
        }
    }
    let _ = std::fs::remove_dir(dir);
    if n > 0 {
        println!(
            "ferrite cluster: deleted {n} pools and logs of a stopped cluster in {}",
            dir.display()
        );
    }
    n > 0
}

fn down(a: DownArgs) -> Result<i32> {
    let dirs: Vec<PathBuf> = match &a.dir {
        Some(d) => vec![d.clone()],
        None => vec![default_dir(StoreKind::List), default_dir(StoreKind::Wal)],
    };
    let mut found = false;
    for dir in dirs {
        let Some(rec) = read_record(&dir)? else {
            if a.purge {
                found |= purge_leftovers(&dir);
            }
            continue;
        };
        found = true;
        let running: Vec<&ReplicaRecord> = rec
            .replicas
            .iter()
            .filter(|r| alive(r.pid) && is_replica(r.pid))
            .collect();
        for r in &running {
            // SAFETY: signalling a process we checked is one of our replicas.
            unsafe { libc::kill(r.pid as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut killed = Vec::new();
        for r in &running {
            while alive(r.pid) && is_replica(r.pid) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if alive(r.pid) && is_replica(r.pid) {
                // SAFETY: as above; it did not stop on SIGTERM.
                unsafe { libc::kill(r.pid as i32, libc::SIGKILL) };
                killed.push(r.id);
            }
        }
        let _ = std::fs::remove_file(dir.join(RECORD));
        if a.purge {
            for r in &rec.replicas {
                let _ = std::fs::remove_file(&r.pool);
                let _ = std::fs::remove_dir_all(&r.pool);
                let _ = std::fs::remove_file(&r.log);
            }
            let _ = std::fs::remove_file(dir.join(SECRET));
            let _ = std::fs::remove_dir(&dir);
        }
        println!(
            "ferrite cluster: stopped {} of {} replicas from {}{}{}",
            running.len(),
            rec.replicas.len(),
            dir.display(),
            if killed.is_empty() {
                String::new()
            } else {
                format!(" ({killed:?} did not stop on SIGTERM and were killed)")
            },
            if a.purge {
                "; pools and logs deleted"
            } else {
                "; pools kept (cluster up restarts from them)"
            }
        );
    }
    if !found {
        println!(
            "ferrite cluster: no cluster is running (nothing recorded in the default directories)"
        );
    }
    Ok(0)
}
