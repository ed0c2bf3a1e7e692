//! One replica: its store, its openraft instance, both listeners, and the
//! routing of client requests to the leader.
//!
//! Writes go through the log (`client_write`). Reads are linearizable by
//! read-index (`ensure_linearizable`: the leader confirms with a quorum that it
//! still leads, waits until its state machine has applied up to its commit
//! index at that moment, then reads locally). A follower forwards both to the
//! leader over the peer protocol and returns its answer. A request is retried
//! on another leader only when it certainly did not execute (refused as "not
//! leader", or the leader could not be reached at all); when a forwarded
//! write's answer is lost, the client gets an error saying the outcome is
//! unknown.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_raft::{Replica, TypeConfig};
use openraft::{BasicNode, Raft, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::ServerConfig;
use crate::network::{CallError, NetworkFactory, PeerPool};
use crate::proto::{ClientOp, ClientReply, PeerMsg};
use crate::ServerError;

/// Prefix of a leader's refusal of a forwarded request it no longer leads for.
pub const NOT_LEADER: &str = "NOTLEADER";

/// A running replica (shared by its tasks).
pub struct Node {
    pub id: u64,
    pub raft: Raft<TypeConfig>,
    pub replica: Replica,
    pub cfg: ServerConfig,
    pub pool: Arc<PeerPool>,
    pub client_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    pub started: Instant,
    pub clients: AtomicUsize,
    pub next_client: AtomicU64,
    pub shutdown: watch::Receiver<bool>,
}

/// Why a request failed on the leader.
enum Local {
    NotLeader,
    Failed(String),
}

impl Node {
    fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// Executes `op` here, as the leader.
    async fn exec_local(&self, op: &ClientOp) -> Result<ClientReply, Local> {
        match op {
            ClientOp::Write(cmd) => match self.raft.client_write(cmd.clone()).await {
                Ok(r) => Ok(ClientReply::Write(r.data)),
                Err(e) if e.forward_to_leader::<BasicNode>().is_some() => Err(Local::NotLeader),
                Err(e) => Err(Local::Failed(e.to_string())),
            },
            ClientOp::Get(_) | ClientOp::DbSize => {
                match self.raft.ensure_linearizable().await {
                    Ok(_) => {}
                    Err(e) if e.forward_to_leader::<BasicNode>().is_some() => {
                        return Err(Local::NotLeader)
                    }
                    Err(e) => return Err(Local::Failed(e.to_string())),
                }
                match op {
                    ClientOp::Get(keys) => {
                        let mut out = Vec::with_capacity(keys.len());
                        for k in keys {
                            out.push(
                                self.replica
                                    .get(k)
                                    .map_err(|e| Local::Failed(e.to_string()))?,
                            );
                        }
                        Ok(ClientReply::Values(out))
                    }
                    _ => Ok(ClientReply::Count(self.replica.status().keys)),
                }
            }
        }
    }

    /// Executes a request forwarded by a follower (never forwards again).
    pub async fn exec_forwarded(&self, op: ClientOp) -> Result<ClientReply, String> {
        match self.exec_local(&op).await {
            Ok(r) => Ok(r),
            Err(Local::NotLeader) => Err(format!(
                "{NOT_LEADER} replica {} is not the leader",
                self.id
            )),
            Err(Local::Failed(e)) => Err(e),
        }
    }

    fn peer_addr_of(&self, id: u64) -> Option<String> {
        if let Some(a) = self.cfg.peers.get(&id) {
            return Some(a.clone());
        }
        let m = self.raft.metrics().borrow().membership_config.clone();
        m.membership().get_node(&id).map(|n| n.addr.clone())
    }

    /// Executes `op` on the leader, wherever it is.
    pub async fn exec(&self, op: ClientOp) -> Result<ClientReply, String> {
        let deadline = Instant::now() + self.cfg.raft.election_max * 4;
        let mut metrics = self.raft.metrics();
        loop {
            match self.leader() {
                Some(l) if l == self.id => match self.exec_local(&op).await {
                    Ok(r) => return Ok(r),
                    Err(Local::NotLeader) => {}
                    Err(Local::Failed(e)) => return Err(format!("ERR {e}")),
                },
                Some(l) => {
                    let Some(addr) = self.peer_addr_of(l) else {
                        return Err(format!("ERR no address for leader {l}"));
                    };
                    let ttl = self.cfg.raft.election_max * 4;
                    match self.pool.call(&addr, &PeerMsg::Forward(op.clone()), ttl).await {
                        Ok(PeerMsg::ForwardReply(Ok(r))) => return Ok(r),
                        Ok(PeerMsg::ForwardReply(Err(e))) if e.starts_with(NOT_LEADER) => {}
                        Ok(PeerMsg::ForwardReply(Err(e))) => return Err(format!("ERR {e}")),
                        Ok(m) => return Err(format!("ERR leader {l} answered with a {}", m.name())),
                        // Never reached the leader: safe to retry.
                        Err(CallError::Unreachable { .. }) => {}
                        Err(e) if matches!(op, ClientOp::Write(_)) => {
                            return Err(format!(
                                "ERR the leader ({l}) did not answer ({e}); the write may or may not have been applied"
                            ))
                        }
                        Err(_) => {}
                    }
                }
                None => {}
            }
            if Instant::now() >= deadline {
                return Err("TRYAGAIN no leader could serve the request; retry".into());
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), metrics.changed()).await;
        }
    }
}

/// A replica whose listeners are bound but not yet serving.
pub struct Bound {
    cfg: ServerConfig,
    client: TcpListener,
    peer: TcpListener,
}

impl Bound {
    /// Binds the client and peer ports (port 0 picks free ones).
    pub async fn bind(cfg: ServerConfig) -> Result<Bound, ServerError> {
        cfg.check_exposure().map_err(ServerError::Exposed)?;
        let client = TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| ServerError::io(format!("binding the client port {}", cfg.listen), e))?;
        let peer = TcpListener::bind(cfg.peer_listen).await.map_err(|e| {
            ServerError::io(format!("binding the peer port {}", cfg.peer_listen), e)
        })?;
        Ok(Bound { cfg, client, peer })
    }

    pub fn client_addr(&self) -> SocketAddr {
        self.client
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Opens the store, starts Raft and serves (with `peers` as the others).
    pub async fn start(self, peers: BTreeMap<u64, String>) -> Result<Server, ServerError> {
        let mut cfg = self.cfg;
        cfg.peers = peers;
        cfg.peers.remove(&cfg.id);
        let client_addr = self
            .client
            .local_addr()
            .map_err(|e| ServerError::io("client port", e))?;
        let peer_addr = self
            .peer
            .local_addr()
            .map_err(|e| ServerError::io("peer port", e))?;
        let store_cfg = cfg.store.clone();
        let t_open = Instant::now();
        let replica = tokio::task::spawn_blocking(move || Replica::open(&store_cfg))
            .await
            .map_err(|e| ServerError::Raft(e.to_string()))??;
        tracing::info!(
            "replica {}: {:?} store opened in {:.1} ms",
            cfg.id,
            replica.kind(),
            t_open.elapsed().as_secs_f64() * 1e3
        );
        let rc = openraft::Config {
            cluster_name: "ferrite".into(),
            heartbeat_interval: cfg.raft.heartbeat.as_millis() as u64,
            election_timeout_min: cfg.raft.election_min.as_millis() as u64,
            election_timeout_max: cfg.raft.election_max.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(cfg.raft.snapshot_every),
            max_in_snapshot_log_to_keep: cfg.raft.keep_logs,
            install_snapshot_timeout: 60_000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ServerError::Config(e.to_string()))?;
        let pool = Arc::new(PeerPool::new(
            cfg.limits.max_frame,
            cfg.id,
            cfg.cluster_secret.clone(),
        ));
        let net = NetworkFactory {
            pool: pool.clone(),
            peers: Arc::new(cfg.peers.clone()),
        };
        let raft = match &replica {
            Replica::List(s) => {
                let (l, m) = s.parts();
                Raft::new(cfg.id, Arc::new(rc), net, l, m).await
            }
            Replica::BTree(s) => {
                let (l, m) = s.parts();
                Raft::new(cfg.id, Arc::new(rc), net, l, m).await
            }
            Replica::Wal(s) => {
                let (l, m) = s.parts();
                Raft::new(cfg.id, Arc::new(rc), net, l, m).await
            }
        }
        .map_err(|e| ServerError::Raft(e.to_string()))?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let node = Arc::new(Node {
            id: cfg.id,
            raft: raft.clone(),
            replica,
            cfg: cfg.clone(),
            pool,
            client_addr,
            peer_addr,
            started: Instant::now(),
            clients: AtomicUsize::new(0),
            next_client: AtomicU64::new(1),
            shutdown: stop_rx,
        });
        let mut tasks = vec![
            tokio::spawn(crate::peer::accept(node.clone(), self.peer)),
            tokio::spawn(crate::client::accept(node.clone(), self.client)),
        ];
        // A new cluster: the replica with the smallest id proposes the
        // membership once (replicas that already hold a log skip this).
        let smallest = cfg.peers.keys().next().is_none_or(|&p| cfg.id < p);
        if smallest
            && !raft
                .is_initialized()
                .await
                .map_err(|e| ServerError::Raft(e.to_string()))?
        {
            let mut members = BTreeMap::new();
            members.insert(cfg.id, BasicNode::new(peer_addr.to_string()));
            for (id, a) in &cfg.peers {
                members.insert(*id, BasicNode::new(a.clone()));
            }
            let r = raft.clone();
            tasks.push(tokio::spawn(async move {
                if let Err(e) = r.initialize(members).await {
                    tracing::info!("cluster initialisation skipped: {e}");
                }
            }));
        }
        Ok(Server {
            node,
            stop: stop_tx,
            tasks,
        })
    }
}

/// A running replica.
pub struct Server {
    node: Arc<Node>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Server {
    /// Binds, opens the store and serves.
    pub async fn start(cfg: ServerConfig) -> Result<Server, ServerError> {
        let peers = cfg.peers.clone();
        Bound::bind(cfg).await?.start(peers).await
    }

    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    pub fn client_addr(&self) -> SocketAddr {
        self.node.client_addr
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.node.peer_addr
    }

    /// Stops serving, shuts Raft down and closes the store (its last group
    /// commits).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in &self.tasks {
            t.abort();
        }
        let _ = self.node.raft.shutdown().await;
        for t in self.tasks {
            let _ = t.await;
        }
        // Connection tasks see the stop signal and let go of the node; the
        // store closes when openraft's tasks have dropped their handles too.
        let closed = self.node.replica.closed_probe();
        drop(self.node);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !closed() {
            if Instant::now() >= deadline {
                tracing::warn!("the store is still in use 10 s after shutdown");
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
