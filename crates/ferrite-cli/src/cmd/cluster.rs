//! `ferrite cluster up N` / `down` / `add` / `remove`: a cluster of `ferrite
//! serve` processes on this machine's loopback interface.
//!
//! `up` starts the replicas in the background (their own sessions, output in
//! `<dir>/replica-<id>.log`), waits until they elect a leader, records them in
//! `<dir>/cluster.json` and prints how to reach them. `down` stops them with
//! SIGTERM (a replica answers the requests in flight, commits and closes its
//! store) and waits for them; the record stays (without `--purge`), so `up`
//! restarts the same replicas. `add` starts one more replica (`serve
//! --join`) and adds it with `CLUSTER ADDNODE`; `remove ID` removes one with
//! `CLUSTER REMOVENODE` and stops it. The replicas authenticate each other
//! with a random secret `up` writes to `<dir>/cluster.secret`.

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
    /// Stop the replicas `cluster up` started (SIGTERM: a graceful shutdown)
    Down(DownArgs),
    /// Start one more replica and add it to the running cluster (it catches
    /// up, then becomes a voter)
    Add(AddArgs),
    /// Remove a replica from the running cluster (the leader too) and stop it
    Remove(RemoveArgs),
}

#[derive(Args)]
pub struct AddArgs {
    /// The directory given to `cluster up` (default: the list store's default
    /// directory, then wal's)
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Add it as a learner (it replicates but does not vote)
    #[arg(long)]
    pub learner: bool,
    /// Print one JSON object
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct RemoveArgs {
    /// The replica's id
    pub id: u64,
    /// The directory given to `cluster up`
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also delete its pool and log
    #[arg(long)]
    pub purge: bool,
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
    /// `--port` of `up` (replica i listens on PORT+i-1).
    #[serde(default)]
    pub base_port: Option<u16>,
    /// `--pool-size` of `up`.
    #[serde(default)]
    pub pool_size: Option<u64>,
    /// `--serve-args` of `up`.
    #[serde(default)]
    pub serve_args: Option<String>,
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
    resp_call_waiting(port, args, timeout, timeout)
}

/// [`resp_call`] that waits up to `wait` for the reply.
fn resp_call_waiting(
    port: u16,
    args: &[&str],
    timeout: Duration,
    wait: Duration,
) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)?;
    s.set_read_timeout(Some(wait))?;
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

/// Waits until replica `pid` has exited or `deadline` has passed; true when
/// it is gone. The replicas are not this process's children (an earlier
/// `cluster up` started them), so the wait is on a pidfd, which becomes
/// readable when the process exits; where pidfds are unavailable (kernels
/// before 5.3) it checks every 20 ms.
fn wait_exit(pid: u32, deadline: Instant) -> bool {
    let gone = || !(alive(pid) && is_replica(pid));
    // The replica may have exited, and its pid been reused, before the pidfd
    // was opened: `gone` guards against waiting on a stranger.
    if let Some(exited) = pidfd_wait(pid, deadline, gone) {
        if exited {
            return true;
        }
    }
    while !gone() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    gone()
}

/// Waits on a pidfd until process `pid` has entirely exited (the kernel
/// signals a pidfd once every thread is gone, not when the main thread is:
/// a killed replica's sockets stay open until its last thread exits) or
/// `deadline` passes. `gone` is checked once the pidfd is open. None when
/// pidfds are unavailable (kernels before 5.3); Some(true) when it exited.
fn pidfd_wait(pid: u32, deadline: Instant, gone: impl Fn() -> bool) -> Option<bool> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor
    // or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0u32) } as i32;
    if fd < 0 {
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ESRCH) => Some(true),
            _ => None,
        };
    }
    let mut exited = gone();
    while !exited {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().clamp(1, 60_000) as i32) };
        if n > 0 {
            exited = true;
        } else if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
        {
            break;
        }
    }
    // SAFETY: closing the descriptor pidfd_open returned, once.
    unsafe { libc::close(fd) };
    Some(exited)
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
        ClusterCommand::Add(a) => add(a),
        ClusterCommand::Remove(a) => remove(a),
    }
}

/// How to start one replica.
struct Spawn<'a> {
    exe: &'a Path,
    dir: &'a Path,
    kind: StoreKind,
    id: u64,
    port: u16,
    peer_port: u16,
    /// The others: (id, peer port).
    peers: Vec<(u64, u16)>,
    pool_size: u64,
    extra: &'a [String],
    join: bool,
}

/// Starts one replica in the background (its own session, output in its log).
fn spawn_replica(sp: Spawn<'_>) -> Result<ReplicaRecord> {
    let i = sp.id;
    let pool = if sp.kind.is_pm() {
        sp.dir.join(format!("replica-{i}.pool"))
    } else {
        sp.dir.join(format!("replica-{i}.wal"))
    };
    let log = sp.dir.join(format!("replica-{i}.log"));
    let peers: Vec<String> = sp
        .peers
        .iter()
        .map(|(j, p)| format!("{j}=127.0.0.1:{p}"))
        .collect();
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = out.try_clone()?;
    let mut cmd = Command::new(sp.exe);
    cmd.arg("serve")
        .args(["--id", &i.to_string()])
        .arg("--pool")
        .arg(&pool)
        .args(["--store", sp.kind.name()])
        .args(["--listen", &format!("127.0.0.1:{}", sp.port)])
        .args(["--peer-listen", &format!("127.0.0.1:{}", sp.peer_port)])
        .args(["--peers", &peers.join(",")])
        .arg("--cluster-secret-file")
        .arg(sp.dir.join(SECRET))
        .args(["--pool-size", &sp.pool_size.to_string()])
        .args(sp.extra)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    if sp.join {
        cmd.arg("--join");
    }
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
    Ok(ReplicaRecord {
        id: i,
        pid: child.id(),
        port: sp.port,
        peer_port: sp.peer_port,
        pool,
        log,
    })
}

/// The cluster recorded in `dir` (or in the default directories).
fn find_record(dir: &Option<PathBuf>) -> Result<ClusterRecord> {
    let dirs: Vec<PathBuf> = match dir {
        Some(d) => vec![d.clone()],
        None => vec![default_dir(StoreKind::List), default_dir(StoreKind::Wal)],
    };
    for d in &dirs {
        if let Some(r) = read_record(d)? {
            if r.replicas.iter().any(|x| alive(x.pid) && is_replica(x.pid)) {
                return Ok(r);
            }
        }
    }
    bail!(
        "no running cluster in {} (start one with `ferrite cluster up 3`)",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    )
}

fn write_record(rec: &ClusterRecord) -> Result<()> {
    let p = rec.dir.join(RECORD);
    let tmp = rec.dir.join(format!("{RECORD}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(rec)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))
}

/// Sends `args` to the running replicas in turn (those in `prefer` first)
/// until one answers; returns its reply (an error reply is an error).
fn admin_call(
    rec: &ClusterRecord,
    prefer: &[u64],
    args: &[&str],
    wait: Duration,
) -> Result<String> {
    let mut order: Vec<&ReplicaRecord> = rec
        .replicas
        .iter()
        .filter(|r| alive(r.pid) && is_replica(r.pid))
        .collect();
    order.sort_by_key(|r| !prefer.contains(&r.id));
    let mut last = None;
    for r in order {
        match resp_call_waiting(r.port, args, Duration::from_secs(2), wait) {
            Ok(s) => return Ok(s),
            Err(e) => {
                let connect = e
                    .downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
                if !connect {
                    // The replica answered (an error) or the reply never
                    // came: the outcome is the answer.
                    return Err(e);
                }
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no replica of the cluster is running")))
}

/// Sends SIGTERM and waits up to 15 s (then SIGKILL); returns whether it
/// stopped on SIGTERM.
fn stop_replica(r: &ReplicaRecord) -> bool {
    if !(alive(r.pid) && is_replica(r.pid)) {
        return true;
    }
    // SAFETY: signalling a process we checked is one of our replicas.
    unsafe { libc::kill(r.pid as i32, libc::SIGTERM) };
    if !wait_exit(r.pid, Instant::now() + Duration::from_secs(15)) {
        // SAFETY: as above; it did not stop on SIGTERM.
        unsafe { libc::kill(r.pid as i32, libc::SIGKILL) };
        return false;
    }
    true
}

fn add(a: AddArgs) -> Result<i32> {
    let mut rec = find_record(&a.dir)?;
    let kind = StoreKind::parse(&rec.store)
        .with_context(|| format!("the cluster record names store {:?}", rec.store))?;
    let id = rec.replicas.iter().map(|r| r.id).max().unwrap_or(0) + 1;
    let first = rec
        .replicas
        .iter()
        .min_by_key(|r| r.id)
        .context("the cluster record lists no replica")?;
    let base = rec
        .base_port
        .unwrap_or_else(|| (first.port as u64 + 1 - first.id) as u16);
    let port = base as u64 + id - 1;
    let peer_port = base as u64 + 10_000 + id - 1;
    if peer_port > u16::MAX as u64 {
        bail!("no port left for replica {id} above {base}");
    }
    for p in [port, peer_port] {
        if !port_free(p as u16) {
            bail!("port {p} on 127.0.0.1 (for replica {id}) is in use");
        }
    }
    let exe = std::env::current_exe().context("locating the ferrite binary")?;
    let extra: Vec<String> = rec
        .serve_args
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let pool_size = rec.pool_size.unwrap_or(1 << 30);
    let new = spawn_replica(Spawn {
        exe: &exe,
        dir: &rec.dir,
        kind,
        id,
        port: port as u16,
        peer_port: peer_port as u16,
        peers: rec.replicas.iter().map(|r| (r.id, r.peer_port)).collect(),
        pool_size,
        extra: &extra,
        join: true,
    })?;
    // It answers once it has opened its store (it serves nothing yet but
    // PING and INFO until it is added).
    let deadline = Instant::now() + Duration::from_secs(60);
    while resp_call(new.port, &["PING"], Duration::from_millis(500)).is_err() {
        if !(alive(new.pid) && is_replica(new.pid)) || Instant::now() > deadline {
            let log = std::fs::read_to_string(&new.log).unwrap_or_default();
            stop_replica(&new);
            bail!(
                "replica {id} did not start; its log ({}):\n{}",
                new.log.display(),
                log.trim_end()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    rec.replicas.push(new.clone());
    write_record(&rec)?;
    let t = Instant::now();
    let mut args = vec![
        "CLUSTER".to_string(),
        "ADDNODE".into(),
        id.to_string(),
        format!("127.0.0.1:{peer_port}"),
    ];
    if a.learner {
        args.push("LEARNER".into());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // CLUSTER ADDNODE waits for the catch-up (`serve --catch-up-timeout-s`,
    // 300 s by default).
    let reply = admin_call(&rec, &[], &args, Duration::from_secs(3600));
    let reply = match reply {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "ferrite cluster: adding replica {id} failed: {e}\n  it is still running (redis-cli -p {port}); \
                 if it stays a learner, `ferrite cluster remove {id}{}` removes and stops it",
                a.dir.as_ref().map(|d| format!(" --dir {}", d.display())).unwrap_or_default()
            );
            return Ok(crate::util::EXIT_ERROR);
        }
    };
    let secs = t.elapsed().as_secs_f64();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "id": id,
                "port": port,
                "peer_port": peer_port,
                "pid": new.pid,
                "seconds": secs,
                "reply": reply,
            }))?
        );
    } else {
        println!(
            "ferrite cluster: replica {id} added in {secs:.2} s ({reply}): redis-cli -p {port}"
        );
    }
    Ok(0)
}

fn remove(a: RemoveArgs) -> Result<i32> {
    let mut rec = find_record(&a.dir)?;
    let Some(pos) = rec.replicas.iter().position(|r| r.id == a.id) else {
        bail!(
            "the cluster in {} has no replica {} (it has {})",
            rec.dir.display(),
            a.id,
            rec.replicas
                .iter()
                .map(|r| r.id.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    // Ask another replica (the removed one may be the leader: it commits the
    // change, then steps down).
    let others: Vec<u64> = rec
        .replicas
        .iter()
        .map(|r| r.id)
        .filter(|&i| i != a.id)
        .collect();
    let reply = admin_call(
        &rec,
        &others,
        &["CLUSTER", "REMOVENODE", &a.id.to_string()],
        Duration::from_secs(60),
    )
    .with_context(|| format!("removing replica {}", a.id))?;
    let r = rec.replicas.remove(pos);
    let graceful = stop_replica(&r);
    if a.purge {
        let _ = std::fs::remove_file(&r.pool);
        let _ = std::fs::remove_dir_all(&r.pool);
        let _ = std::fs::remove_file(&r.log);
    }
    write_record(&rec)?;
    println!(
        "ferrite cluster: replica {} removed ({reply}) and stopped{}{}",
        a.id,
        if graceful {
            ""
        } else {
            " (killed: it did not stop on SIGTERM)"
        },
        if a.purge {
            "; its pool and log deleted"
        } else {
            ""
        }
    );
    Ok(0)
}

fn up(a: UpArgs) -> Result<i32> {
    let kind = StoreKind::parse(&a.store)
        .with_context(|| format!("--store takes list, btree or wal, not {:?}", a.store))?;
    if a.n == 0 || a.n > 9 {
        bail!("cluster up takes 1 to 9 replicas");
    }
    let dir = a.dir.clone().unwrap_or_else(|| default_dir(kind));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let port = |i: u64| a.port as u64 + i - 1;
    let peer_port = |i: u64| a.port as u64 + 10_000 + i - 1;
    if peer_port(a.n) > u16::MAX as u64 {
        bail!("--port {} leaves no room for {} replicas", a.port, a.n);
    }
    // (id, client port, peer port) of each replica: 1..=N, or the replicas
    // recorded by an earlier `up` (and `add` / `remove`) in this directory.
    let mut plan: Vec<(u64, u16, u16)> = (1..=a.n)
        .map(|i| (i, port(i) as u16, peer_port(i) as u16))
        .collect();
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
        // A replica killed a moment ago (`kill -9`) holds its ports until its
        // last thread has exited, which can take a while after its main
        // thread has (a thread in an fsync): give the recorded ones 5 s.
        let deadline = Instant::now() + Duration::from_secs(5);
        for r in &old.replicas {
            if alive(r.pid) && !(port_free(r.port) && port_free(r.peer_port)) {
                pidfd_wait(r.pid, deadline, || false);
            }
        }
        let recorded: Vec<u64> = old.replicas.iter().map(|r| r.id).collect();
        if recorded != (1..=a.n).collect::<Vec<_>>() && old.store == kind.name() {
            if recorded.len() as u64 != a.n {
                bail!(
                    "the cluster stopped in {} has replicas {} (changed by `cluster add` / `remove`): \
                     restart it with `ferrite cluster up {}`, or start afresh after `ferrite cluster down --purge`",
                    dir.display(),
                    recorded.iter().map(u64::to_string).collect::<Vec<_>>().join(", "),
                    recorded.len()
                );
            }
            plan = old
                .replicas
                .iter()
                .map(|r| (r.id, r.port, r.peer_port))
                .collect();
        }
    }
    for &(_, p, q) in &plan {
        for p in [p, q] {
            if !port_free(p) {
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
    for &(i, port, peer_port) in &plan {
        replicas.push(spawn_replica(Spawn {
            exe: &exe,
            dir: &dir,
            kind,
            id: i,
            port,
            peer_port,
            peers: plan
                .iter()
                .filter(|p| p.0 != i)
                .map(|p| (p.0, p.2))
                .collect(),
            pool_size: a.pool_size,
            extra: &extra,
            join: false,
        })?);
    }
    let rec = ClusterRecord {
        store: kind.name().into(),
        dir: dir.clone(),
        replicas: replicas.clone(),
        base_port: Some(a.port),
        pool_size: Some(a.pool_size),
        serve_args: Some(a.serve_args.clone()),
    };
    write_record(&rec)?;
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
            if !wait_exit(r.pid, deadline) {
                // SAFETY: as above; it did not stop on SIGTERM.
                unsafe { libc::kill(r.pid as i32, libc::SIGKILL) };
                killed.push(r.id);
            }
        }
        if a.purge {
            let _ = std::fs::remove_file(dir.join(RECORD));
            for r in &rec.replicas {
                let _ = std::fs::remove_file(&r.pool);
                let _ = std::fs::remove_dir_all(&r.pool);
                let _ = std::fs::remove_file(&r.log);
            }
            // Also the pools and logs of replicas `cluster remove` stopped
            // without --purge.
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if e.file_name().to_string_lossy().starts_with("replica-") {
                        let _ = std::fs::remove_file(e.path());
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
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
