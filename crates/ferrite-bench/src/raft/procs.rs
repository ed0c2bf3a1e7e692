//! A cluster of `ferrite serve` processes for the benchmarks: started,
//! stopped, killed and restarted one by one, observed through `INFO`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::client::{info_field, Client, Reply};
use crate::{BenchError, Result};

/// One replica process.
pub struct Replica {
    pub id: u64,
    pub port: u16,
    pub peer_port: u16,
    pub pool: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
}

/// A cluster of replica processes on loopback.
pub struct Procs {
    pub exe: PathBuf,
    pub store: String,
    pub replicas: Vec<Replica>,
    dir: PathBuf,
}

fn err(what: String) -> BenchError {
    BenchError::Check(what)
}

impl Procs {
    /// Starts `n` replicas of `store` with pools in `dir` (created fresh),
    /// client ports from `port`, and `extra` arguments for `ferrite serve`.
    pub fn start(
        exe: &Path,
        store: &str,
        n: u64,
        dir: &Path,
        port: u16,
        extra: &[String],
    ) -> Result<Procs> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| BenchError::Io {
            path: dir.display().to_string(),
            source: e,
        })?;
        let peer = |i: u64| port + 10_000 + (i - 1) as u16;
        let mut replicas = Vec::new();
        for i in 1..=n {
            let pool = dir.join(format!(
                "replica-{i}.{}",
                if store == "wal" { "wal" } else { "pool" }
            ));
            let peers: Vec<String> = (1..=n)
                .filter(|&j| j != i)
                .map(|j| format!("{j}=127.0.0.1:{}", peer(j)))
                .collect();
            let mut args: Vec<String> = vec![
                "serve".into(),
                "--id".into(),
                i.to_string(),
                "--pool".into(),
                pool.display().to_string(),
                "--store".into(),
                store.into(),
                "--listen".into(),
                format!("127.0.0.1:{}", port + (i - 1) as u16),
                "--peer-listen".into(),
                format!("127.0.0.1:{}", peer(i)),
                "--peers".into(),
                peers.join(","),
                "--pool-size".into(),
                "4G".into(),
            ];
            args.extend(extra.iter().cloned());
            replicas.push(Replica {
                id: i,
                port: port + (i - 1) as u16,
                peer_port: peer(i),
                log: dir.join(format!("replica-{i}.log")),
                pool,
                child: None,
                args,
            });
        }
        let mut p = Procs {
            exe: exe.to_path_buf(),
            store: store.into(),
            replicas,
            dir: dir.to_path_buf(),
        };
        for i in 0..n as usize {
            p.spawn(i)?;
        }
        p.wait_leader(Duration::from_secs(60))?;
        Ok(p)
    }

    /// Starts replica `i`'s process; returns when it was spawned.
    pub fn spawn(&mut self, i: usize) -> Result<Instant> {
        let r = &mut self.replicas[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&r.log)
            .map_err(|e| BenchError::Io {
                path: r.log.display().to_string(),
                source: e,
            })?;
        let log2 = log.try_clone().map_err(|e| BenchError::Io {
            path: r.log.display().to_string(),
            source: e,
        })?;
        let t = Instant::now();
        let child = Command::new(&self.exe)
            .args(&r.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| BenchError::Io {
                path: self.exe.display().to_string(),
                source: e,
            })?;
        r.child = Some(child);
        Ok(t)
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        ([127, 0, 0, 1], self.replicas[i].port).into()
    }

    /// INFO of replica `i` (None when it does not answer).
    pub fn info(&self, i: usize) -> Option<String> {
        let mut c = Client::connect(self.addr(i), Duration::from_millis(200)).ok()?;
        match c.call(&[b"INFO"]).ok()? {
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        }
    }

    /// The applied index replica `i` reports.
    pub fn applied(&self, i: usize) -> Option<u64> {
        applied_index(&self.info(i)?)
    }

    /// Index of the replica every running one names as leader.
    pub fn wait_leader(&mut self, limit: Duration) -> Result<usize> {
        let deadline = Instant::now() + limit;
        loop {
            self.check_alive()?;
            let leaders: Vec<Option<u64>> = (0..self.replicas.len())
                .filter(|&i| self.replicas[i].child.is_some())
                .map(|i| {
                    self.info(i)
                        .and_then(|s| info_field(&s, "raft_leader_id")?.parse().ok())
                })
                .collect();
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l)) {
                    return Ok((*l - 1) as usize);
                }
            }
            if Instant::now() > deadline {
                return Err(err(format!(
                    "no leader within {limit:?} (logs in {})",
                    self.dir.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn check_alive(&mut self) -> Result<()> {
        for r in &mut self.replicas {
            if let Some(c) = r.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    let log = std::fs::read_to_string(&r.log).unwrap_or_default();
                    let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" / ");
                    return Err(err(format!("replica {} exited ({st}): {tail}", r.id)));
                }
            }
        }
        Ok(())
    }

    /// Polls replica `i` until `done` holds (returns when it did), or fails
    /// after `limit` saying the replica did not get to `what`.
    fn wait_until(
        &mut self,
        i: usize,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&mut Self) -> bool,
    ) -> Result<Instant> {
        let deadline = Instant::now() + limit;
        loop {
            if done(self) {
                return Ok(Instant::now());
            }
            self.check_alive()?;
            if Instant::now() > deadline {
                return Err(err(format!(
                    "replica {} did not get to {what} within {limit:?}",
                    i + 1
                )));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Waits until replica `i` reports an applied index of at least `index`;
    /// returns when it did.
    ///
    /// It polls `INFO raft` over one connection (made again if it fails), so
    /// the polling costs the replica it times little: no connection per poll,
    /// and no measuring of the store (`INFO store`).
    pub fn wait_applied(&mut self, i: usize, index: u64, limit: Duration) -> Result<Instant> {
        let mut conn: Option<Client> = None;
        self.wait_until(i, limit, &format!("index {index}"), |p| {
            if conn.is_none() {
                conn = Client::connect(p.addr(i), Duration::from_millis(200)).ok();
            }
            let Some(c) = conn.as_mut() else {
                return false;
            };
            match c.call(&[b"INFO", b"raft"]) {
                Ok(Reply::Bulk(Some(b))) => {
                    applied_index(&String::from_utf8_lossy(&b)).is_some_and(|a| a >= index)
                }
                _ => {
                    conn = None;
                    false
                }
            }
        })
    }

    /// Waits until replica `i`'s INFO says `store_index:ready` (a list
    /// indexes its versions in the background after an open).
    pub fn wait_index_ready(&mut self, i: usize, limit: Duration) -> Result<Instant> {
        self.wait_until(i, limit, "a whole index", |p| {
            p.info(i)
                .is_some_and(|t| info_field(&t, "store_index").as_deref() == Some("ready"))
        })
    }

    /// Stops replica `i` with SIGTERM (it commits and closes its store).
    pub fn stop(&mut self, i: usize) -> Result<()> {
        if let Some(mut c) = self.replicas[i].child.take() {
            // SAFETY: signalling a child process this harness started.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
        Ok(())
    }

    /// Kills replica `i` with SIGKILL.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.replicas[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The process id of replica `i` (None when it is not running).
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.replicas[i].child.as_ref().map(Child::id)
    }

    /// On-CPU time replica `i`'s process has used so far, in ms: the sum
    /// of its threads' run time in `/proc/PID/task/*/schedstat` (ns; threads
    /// that already exited are not counted). None when it is not running.
    pub fn cpu_ms(&self, i: usize) -> Option<f64> {
        let pid = self.pid(i)?;
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        let mut ns = 0u64;
        for t in tasks.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|x| x.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        Some(ns as f64 / 1e6)
    }

    /// Bytes of replica `i`'s store on its device (pool file or WAL directory).
    pub fn store_bytes(&self, i: usize) -> u64 {
        fn du(p: &Path) -> u64 {
            match std::fs::metadata(p) {
                Ok(m) if m.is_dir() => std::fs::read_dir(p)
                    .map(|d| d.flatten().map(|e| du(&e.path())).sum())
                    .unwrap_or(0),
                Ok(m) => {
                    use std::os::unix::fs::MetadataExt;
                    m.blocks() * 512
                }
                Err(_) => 0,
            }
        }
        du(&self.replicas[i].pool)
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for i in 0..self.replicas.len() {
            self.kill(i);
        }
        // FERRITE_BENCH_KEEP=1 keeps the replicas' logs and stores for a look.
        if std::env::var("FERRITE_BENCH_KEEP").as_deref() != Ok("1") {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The applied index an `INFO` text reports.
fn applied_index(info: &str) -> Option<u64> {
    info_field(info, "raft_applied_index")?.parse().ok()
}
