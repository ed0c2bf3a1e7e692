//! The sending side of the replica-to-replica protocol: openraft's
//! `RaftNetwork` over pooled TCP connections.
//!
//! Every call takes an idle connection to the target (or opens one), writes
//! one request frame and reads one reply frame within the call's time limit;
//! a connection that failed in any way is dropped, never reused. A snapshot
//! goes over a connection of its own as a stream of chunk frames.
//!
//! A replica that starts announces itself: it opens a connection to every
//! peer (the handshake names it), and a peer's acceptor records the arrival
//! ([`PeerPool::arrived`]). A call that finds its target refusing connections
//! waits for that target's arrival before it gives up ([`PeerPool::reach`]):
//! a log append within half its time limit; a snapshot, after letting its
//! data go, as long as [`SNAPSHOT_WAIT`] (probing every [`PROBE`] in case the
//! announcement was lost), and then it fails at once so that openraft sends
//! the snapshot current by then.
//! Without it, a restarted replica waited for the end of openraft's backoff
//! after the last refused call (up to 20 ms, 10 on average) before the
//! leader tried again, and a replica that is down drew a refused call and a
//! warning every 20 ms.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrite_raft::snapshot::Chunk;
use ferrite_raft::types::{SnapshotMeta, Vote};
use ferrite_raft::TypeConfig;
use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Timeout, Unreachable,
};
use openraft::network::{Backoff, RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{BasicNode, RPCTypes, Snapshot};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::proto::{read_frame, write_frame, write_records_frame, FrameError, PeerMsg};

/// Why a call to a peer failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot connect to {addr}: {source}")]
    Unreachable {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no reply from {0} in time")]
    Timeout(String),
    /// A replica that refused connections is back (the call's data, a
    /// snapshot, is sent anew: it may be outdated by then).
    #[error("{0} is reachable again")]
    Returned(String),
    #[error("{addr}: {source}")]
    Frame {
        addr: String,
        #[source]
        source: FrameError,
    },
    #[error("{0}")]
    Protocol(String),
}

/// The outcome of the latest calls to one peer address.
#[derive(Debug, Clone, Default)]
pub struct Contact {
    /// When a call last got its reply.
    pub last_ok: Option<Instant>,
    /// When a call last failed, and why.
    pub last_error: Option<(Instant, String)>,
}

impl Contact {
    /// Whether the last call succeeded and is at most `within` old.
    pub fn reachable(&self, within: Duration) -> bool {
        match (&self.last_ok, &self.last_error) {
            (Some(ok), Some((err, _))) if err > ok => false,
            (Some(ok), _) => ok.elapsed() <= within,
            _ => false,
        }
    }
}

/// Idle connections to peers, by address.
pub struct PeerPool {
    idle: Mutex<HashMap<String, Vec<TcpStream>>>,
    contacts: Mutex<HashMap<String, Contact>>,
    max_frame: usize,
    /// This replica's id and the cluster secret, for the handshake.
    id: u64,
    secret: Vec<u8>,
    /// Counts of the announcements each peer (by id) made ([`PeerPool::arrived`]).
    arrivals: Mutex<HashMap<u64, watch::Sender<u64>>>,
}

/// How long a snapshot waits for a target that refuses connections to
/// announce itself before the call fails (openraft then backs off and calls
/// again); the replication's cancellation ends the wait sooner.
pub const SNAPSHOT_WAIT: Duration = Duration::from_secs(2);
/// How often a call that waits for an announcement tries to connect anyway
/// (an announcement can be lost: the announcing replica's connection may
/// fail).
pub const PROBE: Duration = Duration::from_millis(100);

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// The cluster-secret handshake on a new connection (two round trips; the
/// caller's own deadline usually ends a call to a paused replica first).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
const MAX_IDLE: usize = 8;

impl PeerPool {
    pub fn new(max_frame: usize, id: u64, secret: Vec<u8>) -> PeerPool {
        PeerPool {
            idle: Mutex::new(HashMap::new()),
            contacts: Mutex::new(HashMap::new()),
            max_frame,
            id,
            secret,
            arrivals: Mutex::new(HashMap::new()),
        }
    }

    /// A receiver of replica `peer`'s announcements ([`PeerPool::reach`]
    /// waits on it; one kept across calls also sees the announcements made
    /// between them).
    pub fn arrivals_of(&self, peer: u64) -> watch::Receiver<u64> {
        self.with_arrivals(peer, |s| s.subscribe())
    }

    /// Records that replica `peer` announced itself (a connection from it
    /// passed the handshake): calls waiting for it try again at once.
    pub fn arrived(&self, peer: u64) {
        self.with_arrivals(peer, |s| s.send_modify(|n| *n += 1));
    }

    fn with_arrivals<T>(&self, peer: u64, f: impl FnOnce(&watch::Sender<u64>) -> T) -> T {
        let mut a = self.arrivals.lock().unwrap();
        f(a.entry(peer).or_insert_with(|| watch::channel(0).0))
    }

    /// A connection to `addr`. If it refuses connections (the replica there
    /// is down or starting), tries again whenever that replica announces
    /// itself (`arrivals`, from [`PeerPool::arrivals_of`]; an announcement
    /// it has not seen yet counts at once), every `probe` (None: only then),
    /// and once more at the end of `wait`; the last refusal is the error.
    /// Each refusal is recorded ([`PeerPool::contact`]).
    pub async fn reach(
        &self,
        arrivals: &mut watch::Receiver<u64>,
        addr: &str,
        wait: Duration,
        probe: Option<Duration>,
    ) -> Result<TcpStream, CallError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let err = match self.connect(addr).await {
                Err(e @ CallError::Unreachable { .. }) => e,
                r => return r,
            };
            self.note_error(addr, &err);
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(err);
            }
            let until = probe.map_or(deadline, |p| deadline.min(now + p));
            tokio::select! {
                r = arrivals.changed() => {
                    if r.is_err() {
                        return Err(err);
                    }
                }
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Announces this replica to each of `peers` (id → address): opens a
    /// connection to each (the handshake names this replica; the peer's
    /// acceptor records it) and keeps it for later calls. A peer that cannot
    /// be reached is skipped.
    pub async fn announce(self: &Arc<Self>, peers: &BTreeMap<u64, String>) {
        let mut set = tokio::task::JoinSet::new();
        for addr in peers.values() {
            let (pool, addr) = (self.clone(), addr.clone());
            set.spawn(async move {
                match pool.connect(&addr).await {
                    Ok(c) => pool.put_back(&addr, c),
                    Err(e) => tracing::debug!("replica {}: announcing to {addr}: {e}", pool.id),
                }
            });
        }
        while set.join_next().await.is_some() {}
    }

    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// An idle connection to `addr`, or a new one.
    pub async fn connect(&self, addr: &str) -> Result<TcpStream, CallError> {
        loop {
            let Some(c) = self.idle.lock().unwrap().get_mut(addr).and_then(Vec::pop) else {
                break;
            };
            // The peer may have closed it while it sat idle (it stopped or
            // restarted): then it is dropped before anything is sent on it,
            // so a request never goes out on a connection that cannot be
            // answered (whose outcome would be unknown).
            let mut probe = [0u8; 1];
            match c.try_read(&mut probe) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(c),
                _ => continue,
            }
        }
        let unreachable = |source| CallError::Unreachable {
            addr: addr.to_string(),
            source,
        };
        let timed_out = || {
            unreachable(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out",
            ))
        };
        let mut s = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| timed_out())?
            .map_err(unreachable)?;
        let _ = s.set_nodelay(true);
        tokio::time::timeout(
            HANDSHAKE_TIMEOUT,
            crate::auth::connect(&mut s, &self.secret, self.id, self.max_frame),
        )
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| {
            tracing::error!("replica {}: handshake with {addr} failed: {e}", self.id);
            CallError::Protocol(format!("{addr}: handshake: {e}"))
        })?;
        Ok(s)
    }

    pub(crate) fn put_back(&self, addr: &str, c: TcpStream) {
        let mut idle = self.idle.lock().unwrap();
        let v = idle.entry(addr.to_string()).or_default();
        if v.len() < MAX_IDLE {
            v.push(c);
        }
    }

    /// How the latest calls to `addr` went.
    pub fn contact(&self, addr: &str) -> Contact {
        self.contacts
            .lock()
            .unwrap()
            .get(addr)
            .cloned()
            .unwrap_or_default()
    }

    fn note<T>(&self, addr: &str, r: &Result<T, CallError>) {
        match r {
            Ok(_) => {
                let mut c = self.contacts.lock().unwrap();
                c.entry(addr.to_string()).or_default().last_ok = Some(Instant::now());
            }
            Err(err) => self.note_error(addr, err),
        }
    }

    fn note_error(&self, addr: &str, err: &CallError) {
        let mut c = self.contacts.lock().unwrap();
        c.entry(addr.to_string()).or_default().last_error = Some((Instant::now(), err.to_string()));
    }

    /// One request, one reply, within `ttl`.
    pub async fn call(
        &self,
        addr: &str,
        msg: &PeerMsg,
        ttl: Duration,
    ) -> Result<PeerMsg, CallError> {
        let r = self.call_once(None, addr, msg, ttl).await;
        self.note(addr, &r);
        r
    }

    /// One request to the replica at `addr`, one reply, within `ttl`; if
    /// `addr` refuses connections, waits for the replica to announce itself
    /// (`arrivals`) for up to half of `ttl` ([`PeerPool::reach`]).
    pub async fn call_peer(
        &self,
        arrivals: &mut watch::Receiver<u64>,
        addr: &str,
        msg: &PeerMsg,
        ttl: Duration,
    ) -> Result<PeerMsg, CallError> {
        let r = self.call_once(Some(arrivals), addr, msg, ttl).await;
        self.note(addr, &r);
        r
    }

    async fn call_once(
        &self,
        arrivals: Option<&mut watch::Receiver<u64>>,
        addr: &str,
        msg: &PeerMsg,
        ttl: Duration,
    ) -> Result<PeerMsg, CallError> {
        let fut = async {
            let mut c = match arrivals {
                Some(a) => self.reach(a, addr, ttl / 2, None).await?,
                None => self.connect(addr).await?,
            };
            let frame = |source| CallError::Frame {
                addr: addr.to_string(),
                source,
            };
            write_frame(&mut c, msg)
                .await
                .map_err(|e| frame(FrameError::Io(e)))?;
            let reply = read_frame(&mut c, self.max_frame).await.map_err(frame)?;
            self.put_back(addr, c);
            Ok(reply)
        };
        tokio::time::timeout(ttl, fut)
            .await
            .map_err(|_| CallError::Timeout(addr.to_string()))?
    }
}

/// Creates openraft's clients for the peers.
pub struct NetworkFactory {
    pub pool: Arc<PeerPool>,
    /// How this replica reaches each peer (overrides the membership's addresses).
    pub peers: Arc<BTreeMap<u64, String>>,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            arrivals: self.pool.arrivals_of(target),
            addr: self
                .peers
                .get(&target)
                .cloned()
                .unwrap_or_else(|| node.addr.clone()),
            pool: self.pool.clone(),
        }
    }
}

/// openraft's client for one peer.
pub struct PeerClient {
    target: u64,
    /// The target's announcements ([`PeerPool::reach`]).
    arrivals: watch::Receiver<u64>,
    addr: String,
    pool: Arc<PeerPool>,
}

type RpcErr<E = RaftError<u64>> = RPCError<u64, BasicNode, E>;

impl PeerClient {
    fn rpc_err<E: std::error::Error>(
        &self,
        e: CallError,
        action: RPCTypes,
        ttl: Duration,
    ) -> RpcErr<E> {
        match e {
            CallError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Timeout(_) => RPCError::Timeout(Timeout {
                action,
                id: 0,
                target: self.target,
                timeout: ttl,
            }),
            other => RPCError::Network(NetworkError::new(&other)),
        }
    }
}

fn unexpected(m: &PeerMsg) -> CallError {
    CallError::Protocol(format!("unexpected {} in reply", m.name()))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RpcErr> {
        let ttl = option.hard_ttl();
        let r = self
            .pool
            .call_peer(
                &mut self.arrivals,
                &self.addr,
                &PeerMsg::AppendEntries(rpc),
                ttl,
            )
            .await;
        match r.map_err(|e| self.rpc_err(e, RPCTypes::AppendEntries, ttl))? {
            PeerMsg::AppendEntriesReply(Ok(r)) => Ok(r),
            PeerMsg::AppendEntriesReply(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            m => Err(self.rpc_err(unexpected(&m), RPCTypes::AppendEntries, ttl)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RpcErr> {
        let ttl = option.hard_ttl();
        let r = self.pool.call(&self.addr, &PeerMsg::Vote(rpc), ttl).await;
        match r.map_err(|e| self.rpc_err(e, RPCTypes::Vote, ttl))? {
            PeerMsg::VoteReply(Ok(r)) => Ok(r),
            PeerMsg::VoteReply(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            m => Err(self.rpc_err(unexpected(&m), RPCTypes::Vote, ttl)),
        }
    }

    /// Retry an unreachable replica every 20 ms (openraft's default is 500
    /// ms): a replica that restarts is caught up as soon as it listens, and a
    /// refused connection on loopback costs next to nothing.
    ///
    /// Except after the replica announced itself: a call that failed then
    /// (a snapshot call fails at once when its target is back, see
    /// [`PeerPool::reach`]) is made again without waiting. openraft keeps a
    /// backoff until a call succeeds, so without this a heartbeat refused
    /// while the replica was down made the snapshot for its return wait
    /// 20 ms.
    fn backoff(&self) -> Backoff {
        let mut arrivals = self.pool.arrivals_of(self.target);
        Backoff::new(std::iter::repeat_with(move || {
            if arrivals.has_changed().unwrap_or(false) {
                arrivals.mark_unchanged();
                Duration::ZERO
            } else {
                Duration::from_millis(20)
            }
        }))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot<TypeConfig>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<u64>, StreamingError<TypeConfig, Fatal<u64>>> {
        let net = |e: CallError| StreamingError::Network(NetworkError::new(&e));
        let pool = self.pool.clone();
        let addr = self.addr.clone();
        let arrivals = &mut self.arrivals;
        let send = async move {
            let r = match pool.connect(&addr).await {
                Ok(c) => {
                    send_snapshot(&pool, c, &addr, vote, snapshot.meta, snapshot.snapshot).await
                }
                Err(e @ CallError::Unreachable { .. }) => {
                    // Down or starting. The snapshot is let go at once (a
                    // view pins the versions it needs and pauses the list's
                    // clean-up), and the wait is for the replica's return:
                    // then this call fails without backing off, and openraft
                    // sends the snapshot current by then.
                    drop(snapshot);
                    match pool
                        .reach(arrivals, &addr, SNAPSHOT_WAIT, Some(PROBE))
                        .await
                    {
                        Ok(c) => {
                            pool.put_back(&addr, c);
                            return Err(CallError::Returned(addr));
                        }
                        Err(_) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
            pool.note(&addr, &r);
            r
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            r = send => match r {
                Ok(resp) => Ok(resp),
                Err(e @ CallError::Unreachable { .. }) => Err(StreamingError::Unreachable(Unreachable::new(&e))),
                Err(e) => Err(net(e)),
            },
        }
    }
}

/// Streams a snapshot over a connection of its own.
async fn send_snapshot(
    pool: &PeerPool,
    mut c: TcpStream,
    addr: &str,
    vote: Vote,
    meta: SnapshotMeta,
    mut data: Box<ferrite_raft::SnapshotData>,
) -> Result<SnapshotResponse<u64>, CallError> {
    let t0 = std::time::Instant::now();
    let (mut chunks, mut items_out, mut bytes_out) = (0u64, 0u64, 0u64);
    let frame = |source| CallError::Frame {
        addr: addr.to_string(),
        source,
    };
    let snapshot_id = meta.snapshot_id.clone();
    write_frame(&mut c, &PeerMsg::SnapshotBegin { vote, meta })
        .await
        .map_err(|e| frame(FrameError::Io(e)))?;
    let chunk = (pool.max_frame() / 2).clamp(4096, 1 << 20);
    // The chunks are read on a thread of their own, one or two ahead of the
    // socket: reading the next overlaps writing this one. If the stream
    // fails, the reader stops at its next chunk and lets the snapshot go.
    // Written chunks go back to the reader to be filled again.
    let (tx, mut rx) = tokio::sync::mpsc::channel(2);
    let (back, spares) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = tokio::task::spawn_blocking(move || {
        let t = std::time::Instant::now();
        loop {
            let next = data.next_chunk(chunk, spares.try_recv().unwrap_or_default());
            let end = !matches!(next, Ok(Some(_)));
            if tx.blocking_send(next).is_err() || end {
                break;
            }
        }
        drop(data);
        t.elapsed()
    });
    while let Some(next) = rx.recv().await {
        let next = next.map_err(|e| CallError::Protocol(format!("reading the snapshot: {e}")))?;
        let Some(next) = next else { break };
        chunks += 1;
        let sent = match next {
            Chunk::Items(items) => {
                items_out += items.len() as u64;
                write_frame(&mut c, &PeerMsg::SnapshotChunk(items)).await
            }
            Chunk::Records(bytes) => {
                bytes_out += bytes.len() as u64;
                // The records as they are: no copy into a frame.
                let r = write_records_frame(&mut c, &bytes).await;
                let _ = back.send(bytes);
                r
            }
        };
        sent.map_err(|e| frame(FrameError::Io(e)))?;
    }
    drop(rx);
    let reading = reader
        .await
        .map_err(|e| CallError::Protocol(format!("reading the snapshot: {e}")))?;
    write_frame(&mut c, &PeerMsg::SnapshotEnd)
        .await
        .map_err(|e| frame(FrameError::Io(e)))?;
    let sent = t0.elapsed();
    let reply = read_frame(&mut c, pool.max_frame()).await.map_err(frame)?;
    tracing::info!(
        "snapshot {} to {addr}: {items_out} items and {bytes_out} bytes of records in {chunks} chunks sent in {:.1} ms (read from the store alongside in {:.1} ms), answered after {:.1} ms",
        snapshot_id,
        sent.as_secs_f64() * 1e3,
        reading.as_secs_f64() * 1e3,
        t0.elapsed().as_secs_f64() * 1e3
    );
    match reply {
        PeerMsg::SnapshotReply(Ok(r)) => {
            pool.put_back(addr, c);
            Ok(r)
        }
        PeerMsg::SnapshotReply(Err(e)) => Err(CallError::Protocol(format!(
            "{addr} refused the snapshot: {e}"
        ))),
        m => Err(unexpected(&m)),
    }
}
