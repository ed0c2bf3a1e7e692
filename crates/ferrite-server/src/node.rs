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
//!
//! Membership changes (`CLUSTER ADDNODE` / `CLUSTER REMOVENODE`) are
//! openraft's own: `add_learner`, then `change_membership` (joint consensus)
//! once the learner has caught up. A PM store's space is watched: past half
//! of the allowed share of the pool the replica compacts (snapshot and purge
//! of its whole log, which also drops the superseded versions) and cleans up
//! eagerly; past the allowed share, writes that add data are refused with
//! `-OOM` while reads and `DEL` go on.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrite_raft::{Command, Cond, Replica, Reply, TypeConfig};
use openraft::{BasicNode, ChangeMembers, Raft, ServerState, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::config::ServerConfig;
use crate::network::{CallError, NetworkFactory, PeerPool};
use crate::proto::{ClientOp, ClientReply, PeerMsg};
use crate::ServerError;

/// Prefix of a leader's refusal of a forwarded request it no longer leads for.
pub const NOT_LEADER: &str = "NOTLEADER";

/// Logged (at `warn`, once per read) when a linearizable read's leadership
/// round came back without a quorum and is repeated while this replica still
/// leads (`Node::confirm_leadership`).
pub const READ_ROUND_REPEATED: &str =
    "a read's leadership round came back without a quorum; repeating it while this replica leads";

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
    /// Requests being executed (client commands and forwarded requests): a
    /// graceful shutdown waits for them.
    inflight: AtomicUsize,
    drained: Notify,
    /// When the last AppendEntries (a heartbeat or entries) arrived from a
    /// leader.
    pub last_leader_contact: Mutex<Option<Instant>>,
    /// Writers short of room ask [`keep_space`] for a pass now.
    room: Room,
}

/// How a write that finds the pool full asks for the space others have
/// freed (`DEL`s, overwrites) before it is refused: it takes a ticket and
/// wakes [`keep_space`], whose next pass compacts the log and runs clean-up
/// steps at once, then publishes the last ticket it served and what came of
/// it. Without it a write was refused whenever the background clean-up had
/// fallen behind, with the room there to be taken.
struct Room {
    wake: Notify,
    /// Tickets taken.
    asked: AtomicU64,
    /// The last ticket a pass served, and what that pass found.
    served: watch::Sender<(u64, Pass)>,
}

/// What a pass of [`keep_space`] a writer asked for came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    /// It gave space back (a compaction or freed bytes): worth another.
    Reclaimed,
    /// Nothing yet, but dead space is held back by something that passes:
    /// a replica still receiving the entries that superseded it (the
    /// leader purges no further than every reachable replica holds) or a
    /// snapshot being read. Worth another once that moves.
    HeldBack,
    /// Nothing to reclaim: the pool is full of live data.
    Nothing,
}

impl Room {
    fn new() -> Room {
        Room {
            wake: Notify::new(),
            asked: AtomicU64::new(0),
            served: watch::Sender::new((0, Pass::Nothing)),
        }
    }
}

/// Counts a request in flight until dropped.
pub struct InFlight<'a>(&'a Node);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Why a request failed on the leader.
enum Local {
    NotLeader,
    Failed(String),
    /// Refused with a reply of its own kind (`OOM …`), sent as it is.
    Refused(String),
}

/// How long a write short of room waits before asking for another pass
/// when dead space is held back and the raft metrics do not move.
const HELD_BACK_RETRY: Duration = Duration::from_millis(20);

/// How long a compaction waits for raft to carry out the purge it asked
/// for (it is queued, and deferred while the entries are being sent).
const PURGE_WAIT: Duration = Duration::from_secs(1);

/// Prefix of the refusal of a write that would fill the pool (Redis's reply
/// when `maxmemory` is reached starts with it too).
pub const OOM: &str = "OOM";

impl Node {
    fn leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// Marks a request in flight until the guard is dropped.
    pub fn begin_request(&self) -> InFlight<'_> {
        self.inflight.fetch_add(1, Ordering::AcqRel);
        InFlight(self)
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.inflight.load(Ordering::Acquire)
    }

    /// Waits until no request is in flight, or `deadline`; returns how many
    /// still are.
    async fn drain(&self, deadline: Instant) -> usize {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let n = self.in_flight();
            if n == 0 {
                return 0;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, notified).await.is_err() {
                return self.in_flight();
            }
        }
    }

    /// Why a write would be refused for lack of room in the pool, if it
    /// would: `SET`s while the store holds more than the allowed share of
    /// the pool; `DEL`s (which free space once compacted) only past half of
    /// the rest.
    fn space_refusal(&self, cmd: &Command) -> Option<String> {
        let sp = self.replica.space();
        let cap = sp.capacity?;
        let limit = sp.write_limit(self.cfg.max_pool_use)?;
        let (need, allowed) = match cmd {
            Command::Set { key, value, .. } => {
                // The version and the log record that names it.
                (2 * key.len() as u64 + value.len() as u64 + 96, limit)
            }
            Command::Del { keys } => (
                keys.iter().map(|k| 2 * k.len() as u64 + 64).sum(),
                limit + (cap - limit) / 2,
            ),
        };
        (sp.used + need > allowed).then(|| {
            format!(
                "{OOM} command not allowed: the pool is full ({} of {cap} bytes used, writes stop at {limit} (--max-pool-use {}%, at most the pool less 32 chunks)); DEL frees space",
                sp.used, self.cfg.max_pool_use
            )
        })
    }

    /// Reclaims what can be reclaimed for `cmd` before it is refused: asks
    /// [`keep_space`] for passes until the command fits, a pass finds
    /// nothing to reclaim, or `room_wait` has passed. A pass that finds
    /// dead space held back (a follower still receiving the `DEL`s, a
    /// snapshot being read) is asked again once the raft state moves (or
    /// after [`HELD_BACK_RETRY`]). Returns the refusal if the command still
    /// does not fit.
    async fn make_room(&self, cmd: &Command) -> Option<String> {
        let deadline = Instant::now() + self.cfg.room_wait;
        let mut served = self.room.served.subscribe();
        let mut metrics = self.raft.metrics();
        loop {
            self.space_refusal(cmd)?;
            let ticket = self.room.asked.fetch_add(1, Ordering::AcqRel) + 1;
            self.room.wake.notify_one();
            let left = deadline.saturating_duration_since(Instant::now());
            let pass = tokio::time::timeout(left, served.wait_for(|(t, _)| *t >= ticket)).await;
            match pass.map(|r| r.map(|p| p.1)) {
                Ok(Ok(Pass::Reclaimed)) => continue,
                Ok(Ok(Pass::HeldBack)) => {
                    metrics.borrow_and_update();
                    let left = deadline.saturating_duration_since(Instant::now());
                    let wait = left.min(HELD_BACK_RETRY);
                    if wait.is_zero() {
                        return self.space_refusal(cmd);
                    }
                    // Replication progress shows in the metrics; a snapshot
                    // read ending does not, hence the bound.
                    let _ = tokio::time::timeout(wait, metrics.changed()).await;
                }
                // Nothing to reclaim, the time is up, or the space keeper
                // has stopped.
                _ => return self.space_refusal(cmd),
            }
        }
    }

    /// Executes `op` here, as the leader.
    async fn exec_local(&self, op: &ClientOp) -> Result<ClientReply, Local> {
        match op {
            ClientOp::Write(cmd) => {
                if self.space_refusal(cmd).is_some() {
                    if self.leader() != Some(self.id) {
                        return Err(Local::NotLeader);
                    }
                    if let Some(why) = self.make_room(cmd).await {
                        return Err(Local::Refused(why));
                    }
                }
                if self.cfg.tripwire_early_ack
                    && matches!(
                        cmd,
                        Command::Set {
                            cond: Cond::Always,
                            ..
                        }
                    )
                {
                    // Broken on purpose (tests only): acknowledged as soon as
                    // the leader has taken it into its own log, before a
                    // majority holds it.
                    if self.raft.metrics().borrow().state != ServerState::Leader {
                        return Err(Local::NotLeader);
                    }
                    return match self.raft.client_write_ff(cmd.clone()).await {
                        Ok(_) => Ok(ClientReply::Write(Reply::Set { applied: true })),
                        Err(e) => Err(Local::Failed(e.to_string())),
                    };
                }
                match self.raft.client_write(cmd.clone()).await {
                    Ok(r) => Ok(ClientReply::Write(r.data)),
                    Err(e) if e.forward_to_leader::<BasicNode>().is_some() => Err(Local::NotLeader),
                    Err(e) => Err(Local::Failed(e.to_string())),
                }
            }
            ClientOp::AddNode {
                id,
                addr,
                learner,
                catch_up_ms,
            } => {
                self.add_node(*id, addr, *learner, Duration::from_millis(*catch_up_ms))
                    .await
            }
            ClientOp::RemoveNode { id } => self.remove_node(*id).await,
            ClientOp::Get(_) | ClientOp::DbSize => {
                self.confirm_leadership().await?;
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

    /// The read-index step of a linearizable read: a quorum confirms that this
    /// replica still leads. One round gives each follower one heartbeat
    /// interval to answer (openraft); on a busy machine a round can come back
    /// without a quorum although nothing failed, so while this replica is
    /// still leader the round is repeated, for up to the longest election
    /// timeout. After that (followers really unreachable) the client gets the
    /// error; a higher term seen on the way makes it `NotLeader` at once.
    async fn confirm_leadership(&self) -> Result<(), Local> {
        let deadline = Instant::now() + self.cfg.raft.election_max;
        let mut repeated = false;
        loop {
            match self.raft.ensure_linearizable().await {
                Ok(_) => return Ok(()),
                Err(e) if e.forward_to_leader::<BasicNode>().is_some() => {
                    return Err(Local::NotLeader)
                }
                Err(openraft::error::RaftError::APIError(
                    openraft::error::CheckIsLeaderError::QuorumNotEnough(_),
                )) if Instant::now() < deadline
                    && self.raft.metrics().borrow().state == ServerState::Leader =>
                {
                    // Once per read: the fault tests await this line.
                    if !repeated {
                        tracing::warn!("{READ_ROUND_REPEATED}");
                        repeated = true;
                    }
                }
                Err(e) => return Err(Local::Failed(e.to_string())),
            }
        }
    }

    /// `CLUSTER ADDNODE`, on the leader: the replica joins as a learner,
    /// catches up (from the log, or by snapshot when the log it needs is
    /// purged), then becomes a voter by a joint-consensus change.
    async fn add_node(
        &self,
        id: u64,
        addr: &str,
        learner: bool,
        catch_up: Duration,
    ) -> Result<ClientReply, Local> {
        let failed = |what: &str, e: String| Local::Failed(format!("{what}: {e}"));
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return Err(Local::NotLeader);
        }
        let membership = m.membership_config.membership().clone();
        if let Some(n) = membership.get_node(&id) {
            if n.addr != addr {
                return Err(Local::Failed(format!(
                    "replica {id} is already a member, at {}; remove it first to move it",
                    n.addr
                )));
            }
            if membership.voter_ids().any(|v| v == id) {
                return Ok(ClientReply::Done(format!(
                    "replica {id} is already a voter"
                )));
            }
        }
        let started = Instant::now();
        match self
            .raft
            .add_learner(id, BasicNode::new(addr.to_string()), false)
            .await
        {
            Ok(_) => {}
            Err(e) if e.forward_to_leader::<BasicNode>().is_some() => return Err(Local::NotLeader),
            Err(e) => return Err(failed("adding the learner", e.to_string())),
        }
        // Caught up: the learner holds the leader's log as it was when the
        // learner was added (every entry up to then, its own addition too).
        let target = self.raft.metrics().borrow().last_log_index.unwrap_or(0);
        let mut rx = self.raft.metrics();
        let deadline = started + catch_up;
        loop {
            let (matched, leading) = {
                let m = rx.borrow_and_update();
                let matched = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(&id).cloned().flatten())
                    .map(|l| l.index);
                (matched, m.state == ServerState::Leader)
            };
            if !leading {
                return Err(Local::Failed(format!(
                    "this replica stopped leading while replica {id} caught up; it is a learner now \
                     (CLUSTER ADDNODE again to finish, or CLUSTER REMOVENODE {id})"
                )));
            }
            if matched.is_some_and(|i| i >= target) {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, rx.changed()).await.is_err() {
                let c = self.pool.contact(addr);
                return Err(Local::Failed(format!(
                    "replica {id} at {addr} did not catch up within {} s (it holds up to entry {}, the log is at {target}{}); \
                     it stays a learner: CLUSTER REMOVENODE {id} removes it",
                    catch_up.as_secs(),
                    matched.map_or("none".to_string(), |i| i.to_string()),
                    c.last_error.map(|(_, e)| format!("; last error: {e}")).unwrap_or_default()
                )));
            }
        }
        let caught_up = started.elapsed();
        tracing::info!(
            "replica {}: replica {id} caught up to entry {target} in {:.3} s",
            self.id,
            caught_up.as_secs_f64()
        );
        if learner {
            return Ok(ClientReply::Done(format!(
                "replica {id} added as a learner, caught up to entry {target} in {:.3} s",
                caught_up.as_secs_f64()
            )));
        }
        match self
            .raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
        {
            Ok(r) => Ok(ClientReply::Done(format!(
                "replica {id} added as a voter (caught up to entry {target} in {:.3} s; membership at entry {})",
                caught_up.as_secs_f64(),
                r.log_id.index
            ))),
            Err(e) if e.forward_to_leader::<BasicNode>().is_some() => Err(Local::NotLeader),
            Err(e) => Err(failed("making it a voter", e.to_string())),
        }
    }

    /// `CLUSTER REMOVENODE`, on the leader: a voter leaves by a
    /// joint-consensus change (the leader itself too: it steps down once the
    /// change commits, and the others elect a new leader); a learner is
    /// dropped.
    async fn remove_node(&self, id: u64) -> Result<ClientReply, Local> {
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader {
            return Err(Local::NotLeader);
        }
        let membership = m.membership_config.membership().clone();
        let change = if membership.voter_ids().any(|v| v == id) {
            if membership.voter_ids().count() == 1 {
                return Err(Local::Failed(format!(
                    "replica {id} is the only voter; a cluster cannot remove its last one"
                )));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if membership.learner_ids().any(|l| l == id) {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Err(Local::Failed(format!("replica {id} is not a member")));
        };
        match self.raft.change_membership(change, false).await {
            Ok(r) => Ok(ClientReply::Done(format!(
                "replica {id} removed (membership at entry {}){}",
                r.log_id.index,
                if id == self.id {
                    "; it was the leader and steps down"
                } else {
                    ""
                }
            ))),
            Err(e) if e.forward_to_leader::<BasicNode>().is_some() => Err(Local::NotLeader),
            Err(e) => Err(Local::Failed(format!("removing replica {id}: {e}"))),
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
            Err(Local::Refused(e)) => Err(e),
        }
    }

    /// The address this replica uses to reach replica `id` (its
    /// `--peers` entry, else the one in the membership).
    pub fn peer_addr_of(&self, id: u64) -> Option<String> {
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
                    Err(Local::Refused(e)) => return Err(e),
                },
                Some(l) => {
                    let Some(addr) = self.peer_addr_of(l) else {
                        return Err(format!("ERR no address for leader {l}"));
                    };
                    let mut ttl = self.cfg.raft.election_max * 4;
                    if let ClientOp::AddNode { catch_up_ms, .. } = &op {
                        // The leader waits for the new replica to catch up.
                        ttl += Duration::from_millis(*catch_up_ms);
                    }
                    match self.pool.call(&addr, &PeerMsg::Forward(op.clone()), ttl).await {
                        Ok(PeerMsg::ForwardReply(Ok(r))) => return Ok(r),
                        Ok(PeerMsg::ForwardReply(Err(e))) if e.starts_with(NOT_LEADER) => {}
                        Ok(PeerMsg::ForwardReply(Err(e))) if e.starts_with(OOM) => return Err(e),
                        Ok(PeerMsg::ForwardReply(Err(e))) => return Err(format!("ERR {e}")),
                        Ok(m) => return Err(format!("ERR leader {l} answered with a {}", m.name())),
                        // Never reached the leader: safe to retry.
                        Err(CallError::Unreachable { .. }) => {}
                        Err(e) if op.is_mutation() => {
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
            inflight: AtomicUsize::new(0),
            drained: Notify::new(),
            last_leader_contact: Mutex::new(None),
            room: Room::new(),
        });
        let mut tasks = vec![
            tokio::spawn(crate::peer::accept(node.clone(), self.peer)),
            tokio::spawn(crate::client::accept(node.clone(), self.client)),
        ];
        if node.replica.kind().is_pm() {
            tasks.push(tokio::spawn(keep_space(node.clone())));
        }
        // Tell the peers this replica is up: a leader waiting to reach it
        // (to send it a snapshot or entries) tries again at once.
        {
            let (pool, peers) = (node.pool.clone(), cfg.peers.clone());
            tasks.push(tokio::spawn(async move { pool.announce(&peers).await }));
        }
        // A new cluster: the replica with the smallest id proposes the
        // membership once (replicas that already hold a log skip this; a
        // replica that joins a running cluster never does).
        let smallest = cfg.peers.keys().next().is_none_or(|&p| cfg.id < p);
        if smallest
            && !cfg.join
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

    /// Stops gracefully: stops accepting connections and requests (idle
    /// connections close), lets the requests in flight finish and answers
    /// them (up to the configured drain time, while Raft still runs), then
    /// shuts Raft down and closes the store (its last group commits, its
    /// pool is unmapped and unlocked). Returns whether the store closed.
    pub async fn shutdown(self) -> bool {
        let _ = self.stop.send(true);
        let deadline = Instant::now() + self.node.cfg.drain_timeout;
        let left = self.node.drain(deadline).await;
        if left > 0 {
            tracing::warn!(
                "replica {}: {left} requests still in flight after {:?}; stopping anyway",
                self.node.id,
                self.node.cfg.drain_timeout
            );
        }
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
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

/// Keeps a PM store's space bounded: every `space_check` (50 ms), and at
/// once when a write finds the pool full ([`Room`]), compares what the
/// store occupies with the share of the pool writes may fill. Past half of
/// that share, the store is under pressure: it cleans up eagerly, and the
/// replica compacts — a snapshot (free for a PM store: the map is the
/// snapshot) and a purge of the whole log up to it, which drops every
/// superseded version and deleted key. (The usual snapshot policy, every `snapshot_every` entries with
/// `keep_logs` kept, counts entries, not bytes: large values could fill a
/// pool between two snapshots.) A pass a writer asked for compacts if
/// anything was applied since the last compaction and runs clean-up steps
/// itself, rather than leaving them to the committer between groups.
async fn keep_space(node: Arc<Node>) {
    /// Clean-up steps (pages) of one pass a writer asked for.
    const RECLAIM_STEPS: usize = 256;
    let mut stop = node.shutdown.clone();
    let mut compacted_at: Option<u64> = None;
    // Whether the last compaction's purge stopped short of its snapshot (a
    // reachable replica lacked entries): the next pass under pressure
    // compacts again even with nothing new applied.
    let mut purge_short = false;
    let mut served = 0;
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(node.cfg.space_check) => {}
            _ = node.room.wake.notified() => {}
        }
        let ticket = node.room.asked.load(Ordering::Acquire);
        let asked = ticket > served;
        let sp = node.replica.space();
        let (Some(cap), Some(limit)) = (sp.capacity, sp.write_limit(node.cfg.max_pool_use)) else {
            return;
        };
        // Under pressure when the structure holds more than half of what
        // writes may fill, or when the heap has almost no unclaimed chunks
        // left (a size class that runs out of blocks then has nowhere to
        // grow: reclaiming dead blocks refills the classes).
        let pressed = asked || sp.used > limit / 2 || sp.unclaimed < cap / 10;
        node.replica.set_space_pressure(pressed);
        if !pressed {
            continue;
        }
        let applied = node
            .raft
            .metrics()
            .borrow()
            .last_applied
            .map_or(0, |l| l.index);
        // Compact when at least a few entries were applied since the last
        // time (each compaction writes a little metadata itself), or any
        // when a writer waits, or again when the last purge fell short.
        let due = match compacted_at {
            None => true,
            Some(c) if asked => applied > c || purge_short,
            Some(c) => applied >= c + 16 || purge_short,
        };
        if due {
            match compact(&node, applied, cap, sp.used).await {
                Err(()) => return,
                Ok(short) => purge_short = short,
            }
            compacted_at = Some(applied);
        }
        if asked {
            let n = node.clone();
            let freed = tokio::task::spawn_blocking(move || n.replica.reclaim(RECLAIM_STEPS))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
            let freed = freed.unwrap_or_else(|e| {
                tracing::error!("replica {}: clean-up failed: {e}", node.id);
                0
            });
            let now = node.replica.space();
            let pass = if freed > 0 || now.used < sp.used || now.live < sp.live {
                Pass::Reclaimed
            } else if purge_short || now.held_back > 0 {
                Pass::HeldBack
            } else {
                Pass::Nothing
            };
            node.room.served.send_replace((ticket, pass));
            served = ticket;
        }
    }
}

/// One compaction: a snapshot at `applied` and a purge of the log up to it
/// (as far as [`purge_bound`] allows). `Ok(true)` when it fell short: the
/// purge stopped before `applied` (a reachable replica still lacks
/// entries, raft has not carried it out yet, no snapshot was built); `Err`
/// when the raft instance has stopped.
async fn compact(node: &Node, applied: u64, cap: u64, used: u64) -> Result<bool, ()> {
    if node.raft.trigger().snapshot().await.is_err() {
        return Err(());
    }
    let mut rx = node.raft.metrics();
    let built = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let s = rx.borrow_and_update().snapshot.map(|l| l.index);
            if s.is_some_and(|s| s >= applied) {
                return s;
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    })
    .await;
    let Ok(Some(snap)) = built else {
        // No snapshot in time: nothing purged; the next pass tries again.
        return Ok(true);
    };
    // A leader keeps the entries a reachable replica still lacks: purged,
    // they could only reach it in a snapshot, which a replica short of
    // space cannot stage. (An unreachable one gets a snapshot when it is
    // back.)
    let upto = purge_bound(node, snap);
    if node.raft.trigger().purge_log(upto).await.is_err() {
        return Err(());
    }
    // The trigger only queues the purge, and raft defers it while entries
    // up to `upto` are still being sent: wait (a little) for it, so that a
    // pass measures what the purge gave back. A purge still pending counts
    // as one that fell short: the next pass tries again.
    let purged = tokio::time::timeout(PURGE_WAIT, async {
        loop {
            if rx
                .borrow_and_update()
                .purged
                .is_some_and(|p| p.index >= upto)
            {
                return true;
            }
            if rx.changed().await.is_err() {
                return false;
            }
        }
    })
    .await
    .unwrap_or(false);
    tracing::debug!(
        "replica {}: space pressure ({used} of {cap} bytes): compacted up to {upto} (snapshot {snap})",
        node.id
    );
    Ok(upto < snap || !purged)
}

/// How far a replica under space pressure purges its log: up to its
/// snapshot at `snapshot`, and, on a leader, not past the last entry any
/// reachable member is known to hold.
fn purge_bound(node: &Node, snapshot: u64) -> u64 {
    let m = node.raft.metrics().borrow().clone();
    let Some(repl) = &m.replication else {
        return snapshot;
    };
    let within = node.cfg.raft.election_max;
    let mut upto = snapshot;
    for (id, matched) in repl {
        if *id == node.id {
            continue;
        }
        let reachable = node
            .peer_addr_of(*id)
            .is_some_and(|a| node.pool.contact(&a).reachable(within));
        if reachable {
            upto = upto.min(matched.map_or(0, |l| l.index));
        }
    }
    upto
}
