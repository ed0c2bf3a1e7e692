//! A cluster of `ferrite serve` processes on loopback whose replica-to-replica
//! links all go through fault-injecting proxies ([`crate::proxy`]), with the
//! process faults a harness needs: `kill -9` and restart from the pool,
//! `SIGSTOP`/`SIGCONT`, restart of every replica at once.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::proxy::{Link, Proxy};

/// How to run the replicas.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// The `ferrite` binary.
    pub bin: PathBuf,
    /// Where pools and logs go (created; the caller removes it).
    pub dir: PathBuf,
    pub replicas: usize,
    /// `list`, `btree` or `wal`.
    pub store: String,
    /// Extra arguments for every `ferrite serve` (e.g. timing, secrets).
    pub extra: Vec<String>,
}

struct Replica {
    id: u64,
    client: SocketAddr,
    peer: SocketAddr,
    /// This replica's view of the others: peer id -> proxy address.
    peers: BTreeMap<u64, SocketAddr>,
    child: Option<Child>,
    paused: bool,
}

/// Removes a cluster's directory (pools, logs) however a test ends; declare
/// it before the [`Cluster`], so the replicas are killed first.
pub struct DirGuard(pub PathBuf);

impl Drop for DirGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running cluster. Dropping it kills every replica (the caller deletes
/// `dir`).
pub struct Cluster {
    spec: ClusterSpec,
    replicas: Vec<Replica>,
    /// (from, to) -> the proxy `from` uses to reach `to`.
    links: BTreeMap<(u64, u64), Proxy>,
    /// Replicas that exited without being killed (a crash, a failed start).
    unexpected_exits: Vec<String>,
}

/// A free loopback port *below* the kernel's ephemeral range: a replica
/// restarted after `kill -9` binds its ports again, and a port from the
/// ephemeral range may meanwhile have become the local end of some outgoing
/// connection (the proxies', the clients'), which makes the bind fail.
/// (`ferrite-server`'s in-process test clusters use it for the same reason.)
pub fn free_port() -> std::io::Result<SocketAddr> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let ephemeral_lo = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32768);
    const LO: u64 = 10_000;
    if ephemeral_lo > LO + 1000 {
        let span = ephemeral_lo - LO;
        // Spread processes apart, then probe.
        let start = (std::process::id() as u64 * 7919) % span;
        for _ in 0..2000 {
            let port = LO + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port as u16)) {
                return l.local_addr();
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on the pid of a child this process spawned and has not
    // yet waited for; it has no memory effects.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in
/// `/proc/PID/task/TID/stat`), or has exited (a process that is gone, or a
/// zombie, will not run again either).
fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|st| {
            // The state follows the command name, which is in parentheses.
            st.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with(['T', 't', 'Z', 'X']))
        })
    })
}

impl Cluster {
    /// Starts every replica (ids 1..=n) with proxies on all links.
    pub fn start(spec: ClusterSpec) -> std::io::Result<Cluster> {
        std::fs::create_dir_all(&spec.dir)?;
        let ids: Vec<u64> = (1..=spec.replicas as u64).collect();
        let mut replicas = Vec::new();
        for &id in &ids {
            replicas.push(Replica {
                id,
                client: free_port()?,
                peer: free_port()?,
                peers: BTreeMap::new(),
                child: None,
                paused: false,
            });
        }
        let mut links = BTreeMap::new();
        for from in &ids {
            for to in &ids {
                if from == to {
                    continue;
                }
                let target = replicas[(*to - 1) as usize].peer;
                let p = Proxy::start(target)?;
                replicas[(*from - 1) as usize].peers.insert(*to, p.addr());
                links.insert((*from, *to), p);
            }
        }
        let mut c = Cluster {
            spec,
            replicas,
            links,
            unexpected_exits: Vec::new(),
        };
        for i in 0..c.replicas.len() {
            c.spawn(i)?;
        }
        Ok(c)
    }

    fn pool_path(&self, id: u64) -> PathBuf {
        let name = if self.spec.store == "wal" {
            format!("replica-{id}")
        } else {
            format!("replica-{id}.pool")
        };
        self.spec.dir.join(name)
    }

    fn spawn(&mut self, i: usize) -> std::io::Result<()> {
        let r = &self.replicas[i];
        let peers: Vec<String> = r.peers.iter().map(|(id, a)| format!("{id}={a}")).collect();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.spec.dir.join(format!("replica-{}.log", r.id)))?;
        let child = Command::new(&self.spec.bin)
            .arg("serve")
            .args(["--id", &r.id.to_string()])
            .arg("--pool")
            .arg(self.pool_path(r.id))
            .args(["--listen", &r.client.to_string()])
            .args(["--peer-listen", &r.peer.to_string()])
            .args(["--peers", &peers.join(",")])
            .args(["--store", &self.spec.store])
            .args(&self.spec.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()?;
        let r = &mut self.replicas[i];
        r.child = Some(child);
        r.paused = false;
        Ok(())
    }

    pub fn ids(&self) -> Vec<u64> {
        self.replicas.iter().map(|r| r.id).collect()
    }

    /// The client (RESP) address of replica `id`.
    pub fn client_addr(&self, id: u64) -> SocketAddr {
        self.replicas[(id - 1) as usize].client
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.replicas[(id - 1) as usize].child.is_some()
    }

    /// `kill -9` replica `id` (and reap it).
    pub fn kill(&mut self, id: u64) {
        let r = &mut self.replicas[(id - 1) as usize];
        if let Some(mut c) = r.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        r.paused = false;
    }

    /// Restarts a killed replica from its pool.
    pub fn restart(&mut self, id: u64) -> std::io::Result<()> {
        if !self.is_running(id) {
            self.spawn((id - 1) as usize)?;
        }
        Ok(())
    }

    /// `SIGSTOP` (`pause = true`) or `SIGCONT` replica `id`. A pause returns
    /// once every thread of the replica is stopped (or after 5 s): the signal
    /// is asynchronous, and on a busy machine a thread can run on for a while
    /// after `kill` returns.
    pub fn pause(&mut self, id: u64, pause: bool) {
        let r = &mut self.replicas[(id - 1) as usize];
        if let Some(c) = &r.child {
            signal(c, if pause { libc::SIGSTOP } else { libc::SIGCONT });
            r.paused = pause;
            if pause {
                let deadline = Instant::now() + Duration::from_secs(5);
                while !all_stopped(c.id()) && Instant::now() < deadline {
                    std::thread::park_timeout(Duration::from_millis(1));
                }
            }
        }
    }

    /// Kills every replica, then starts them all again.
    pub fn restart_all(&mut self) -> std::io::Result<()> {
        for id in self.ids() {
            self.kill(id);
        }
        for id in self.ids() {
            self.restart(id)?;
        }
        Ok(())
    }

    /// Cuts every link between `side` and the other replicas (both ways).
    pub fn isolate(&mut self, side: &[u64], how: Link) {
        for ((from, to), p) in &self.links {
            if side.contains(from) != side.contains(to) {
                p.set(how);
            }
        }
    }

    /// Notes (and reaps) replicas that exited without being killed.
    pub fn reap_unexpected(&mut self) {
        for r in &mut self.replicas {
            if let Some(c) = &mut r.child {
                if let Ok(Some(status)) = c.try_wait() {
                    self.unexpected_exits
                        .push(format!("replica {} exited by itself: {status}", r.id));
                    r.child = None;
                    r.paused = false;
                }
            }
        }
    }

    /// Replicas that exited without being killed, so far.
    pub fn unexpected_exits(&self) -> &[String] {
        &self.unexpected_exits
    }

    /// Restores every link, resumes paused replicas and restarts killed ones
    /// (and ones that exited by themselves, which are noted).
    pub fn heal(&mut self) -> std::io::Result<()> {
        for p in self.links.values() {
            p.set(Link::Pass);
        }
        self.reap_unexpected();
        for id in self.ids() {
            if self.replicas[(id - 1) as usize].paused {
                self.pause(id, false);
            }
            self.restart(id)?;
        }
        Ok(())
    }

    /// Stops every replica with SIGTERM (graceful shutdown) and waits up to
    /// `grace` for each; kills what is left. Returns the ids that had to be
    /// killed.
    pub fn stop(&mut self, grace: Duration) -> Vec<u64> {
        let mut killed = Vec::new();
        for r in &mut self.replicas {
            if let Some(mut c) = r.child.take() {
                if r.paused {
                    signal(&c, libc::SIGCONT);
                }
                signal(&c, libc::SIGTERM);
                let deadline = Instant::now() + grace;
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::park_timeout(Duration::from_millis(20))
                        }
                        _ => {
                            let _ = c.kill();
                            let _ = c.wait();
                            killed.push(r.id);
                            break;
                        }
                    }
                }
            }
        }
        killed
    }

    /// The directory holding pools and the replicas' logs.
    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in self.ids() {
            if self.replicas[(id - 1) as usize].paused {
                self.pause(id, false);
            }
            self.kill(id);
        }
    }
}
