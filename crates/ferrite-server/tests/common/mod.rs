//! An in-process cluster of replicas on loopback ports, for the tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ferrite_raft::{StoreConfig, StoreKind};
use ferrite_server::{Bound, RaftTuning, Server, ServerConfig};

pub struct Cluster {
    pub rt: tokio::runtime::Runtime,
    pub servers: Vec<Option<Server>>,
    pub cfgs: Vec<ServerConfig>,
    pub paths: Vec<PathBuf>,
    pub kind: StoreKind,
}

fn store_path(kind: StoreKind, tag: &str, id: u64) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let base = if kind.is_pm() { "/dev/shm" } else { "/tmp" };
    PathBuf::from(base).join(format!("ferrite-srv-{tag}-{}-{n}-{id}", std::process::id()))
}

/// A loopback address below the ephemeral port range: a restarted replica
/// binds its ports again, and a port from the ephemeral range may meanwhile
/// be the local end of an outgoing connection (CI saw `AddrInUse` so).
fn port() -> SocketAddr {
    ferrite_chaos::cluster::free_port().expect("a free loopback port")
}

pub fn tuning() -> RaftTuning {
    RaftTuning {
        heartbeat: Duration::from_millis(50),
        election_min: Duration::from_millis(300),
        election_max: Duration::from_millis(600),
        ..RaftTuning::default()
    }
}

impl Cluster {
    /// Starts `n` replicas of `kind` and waits for a leader.
    pub fn start(kind: StoreKind, n: u64, tag: &str, tune: impl Fn(&mut ServerConfig)) -> Cluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut cfgs = Vec::new();
        let mut paths = Vec::new();
        let mut bound = Vec::new();
        for id in 1..=n {
            let path = store_path(kind, tag, id);
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_dir_all(&path);
            let mut store = StoreConfig::new(kind, &path);
            store.pool_size = 256 << 20;
            let mut cfg = ServerConfig::new(id, store, port(), port());
            cfg.raft = tuning();
            tune(&mut cfg);
            let b = rt.block_on(Bound::bind(cfg.clone())).unwrap();
            // Restarts reuse the ports.
            cfg.listen = b.client_addr();
            cfg.peer_listen = b.peer_addr();
            cfgs.push(cfg);
            paths.push(path);
            bound.push(b);
        }
        let peers: BTreeMap<u64, String> = cfgs
            .iter()
            .map(|c| (c.id, c.peer_listen.to_string()))
            .collect();
        for c in &mut cfgs {
            c.peers = peers.clone();
            c.peers.remove(&c.id);
        }
        let servers = bound
            .into_iter()
            .map(|b| Some(rt.block_on(b.start(peers.clone())).unwrap()))
            .collect();
        let c = Cluster {
            rt,
            servers,
            cfgs,
            paths,
            kind,
        };
        c.wait_leader();
        c
    }

    pub fn addr(&self, i: usize) -> SocketAddr {
        self.cfgs[i].listen
    }

    pub fn url(&self, i: usize) -> String {
        format!("redis://{}/", self.addr(i))
    }

    pub fn client(&self, i: usize) -> redis::Connection {
        redis::Client::open(self.url(i))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    /// The index of the leader, once all running replicas agree on one.
    pub fn wait_leader(&self) -> usize {
        let first = self.servers.iter().flatten().next().unwrap();
        self.wait_leader_seen_by(first.node().id as usize - 1)
    }

    /// The index of the leader as replica `i` sees it, once it sees one.
    pub fn wait_leader_seen_by(&self, i: usize) -> usize {
        let raft = self.server(i).node().raft.clone();
        let m = self
            .rt
            .block_on(
                raft.wait(Some(Duration::from_secs(20)))
                    .metrics(|m| m.current_leader.is_some(), "a leader"),
            )
            .expect("a leader is elected");
        (m.current_leader.unwrap() - 1) as usize
    }

    pub fn stop(&mut self, i: usize) {
        if let Some(s) = self.servers[i].take() {
            self.rt.block_on(s.shutdown());
        }
    }

    pub fn restart(&mut self, i: usize) {
        assert!(self.servers[i].is_none());
        let s = self
            .rt
            .block_on(Server::start(self.cfgs[i].clone()))
            .unwrap();
        self.servers[i] = Some(s);
    }

    /// Starts one more replica (id = count + 1) that joins the running
    /// cluster (`--join`: it waits to be added); returns its index.
    pub fn spawn_joiner(&mut self, tune: impl Fn(&mut ServerConfig)) -> usize {
        let id = self.cfgs.len() as u64 + 1;
        let path = store_path(self.kind, "join", id);
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_dir_all(&path);
        let mut store = StoreConfig::new(self.kind, &path);
        store.pool_size = self.cfgs[0].store.pool_size;
        let mut cfg = ServerConfig::new(id, store, port(), port());
        cfg.raft = self.cfgs[0].raft.clone();
        cfg.join = true;
        tune(&mut cfg);
        let b = self.rt.block_on(Bound::bind(cfg.clone())).unwrap();
        cfg.listen = b.client_addr();
        cfg.peer_listen = b.peer_addr();
        let peers: BTreeMap<u64, String> = self
            .cfgs
            .iter()
            .map(|c| (c.id, c.peer_listen.to_string()))
            .collect();
        cfg.peers = peers.clone();
        let s = self.rt.block_on(b.start(peers)).unwrap();
        self.cfgs.push(cfg);
        self.paths.push(path);
        self.servers.push(Some(s));
        self.servers.len() - 1
    }

    /// Replica `i`'s own value of `key` (its state machine, no read-index).
    pub fn local(&self, i: usize, key: &str) -> Option<Vec<u8>> {
        self.server(i).node().replica.get(key.as_bytes()).unwrap()
    }

    pub fn server(&self, i: usize) -> &Server {
        self.servers[i].as_ref().unwrap()
    }

    /// Waits until replica `i` has applied at least `index`.
    pub fn wait_applied(&self, i: usize, index: u64) {
        let raft = self.server(i).node().raft.clone();
        self.rt
            .block_on(
                raft.wait(Some(Duration::from_secs(60)))
                    .applied_index_at_least(Some(index), "catch up"),
            )
            .expect("the replica catches up");
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.servers.len() {
            self.stop(i);
        }
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
            let _ = std::fs::remove_dir_all(p);
        }
    }
}
