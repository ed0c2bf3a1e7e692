//! A replica's configuration.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use ferrite_raft::StoreConfig;

/// Limits that keep a misbehaving client or peer from growing memory.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest client request (one RESP command with its arguments), bytes.
    pub max_request: usize,
    /// Most arguments in one client request.
    pub max_args: usize,
    /// Largest replica-to-replica frame, bytes.
    pub max_frame: usize,
    /// Most client connections at once (more are answered with an error and
    /// closed).
    pub max_clients: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request: 16 << 20,
            max_args: 1 << 16,
            max_frame: 64 << 20,
            max_clients: 10_000,
        }
    }
}

/// Raft timing and log compaction.
#[derive(Debug, Clone)]
pub struct RaftTuning {
    pub heartbeat: Duration,
    pub election_min: Duration,
    pub election_max: Duration,
    /// Build a snapshot (and purge the log) after this many entries
    /// ([`RaftTuning::snapshot_every_for`] the store by default).
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot (lagging replicas within
    /// this distance catch up from the log, further ones by snapshot).
    pub keep_logs: u64,
}

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat: Duration::from_millis(100),
            election_min: Duration::from_millis(600),
            election_max: Duration::from_millis(1200),
            snapshot_every: 5000,
            keep_logs: 500,
        }
    }
}

impl RaftTuning {
    /// The default snapshot interval of a store kind. A PM store's snapshot
    /// costs nothing (the map is the snapshot: building one writes its
    /// metadata), so it snapshots often, and a lagging replica gets the
    /// snapshot and at most about this many entries after it; the WAL
    /// store's snapshot writes its whole state to a file, so it snapshots
    /// rarely. See `docs/BENCHMARKS.md`, "Lagging replica and process start".
    pub fn snapshot_every_for(kind: ferrite_raft::StoreKind) -> u64 {
        match kind {
            ferrite_raft::StoreKind::Wal => 5000,
            _ => PM_SNAPSHOT_EVERY,
        }
    }
}

/// Default snapshot interval of the PM stores (entries).
pub const PM_SNAPSHOT_EVERY: u64 = 1000;

/// Everything one replica needs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub id: u64,
    pub store: StoreConfig,
    /// Client (RESP) address.
    pub listen: SocketAddr,
    /// Replica-to-replica address.
    pub peer_listen: SocketAddr,
    /// The other replicas: id → peer address (how this replica reaches them).
    pub peers: BTreeMap<u64, String>,
    pub limits: Limits,
    pub raft: RaftTuning,
    /// Clients must `AUTH` with this password first (`requirepass`).
    pub requirepass: Option<String>,
    /// The secret replicas prove to each other when a replica-to-replica
    /// connection opens (empty: none, only allowed on loopback).
    pub cluster_secret: Vec<u8>,
    /// Tripwire (tests only): answer `GET` from this replica's own state
    /// machine, without the read-index round through the leader — stale
    /// reads, which the fault harness's linearizability check must catch.
    pub tripwire_stale_reads: bool,
    /// Tripwire (tests only): the leader acknowledges an unconditional `SET`
    /// as soon as it has handed it to its own log, before a majority holds
    /// it (before commit) — acknowledged writes a leader change can lose,
    /// which the fault harness's checks must catch.
    pub tripwire_early_ack: bool,
    /// This replica joins a running cluster (which adds it with `CLUSTER
    /// ADDNODE`): it never initialises a cluster of its own.
    pub join: bool,
    /// How much of a PM pool the store may fill with data (percent): above
    /// it, writes that add data are refused with `-OOM` (`DEL` still runs);
    /// the rest is room for replicas whose clean-up lags, for `DEL`s and
    /// for the clean-up itself.
    pub max_pool_use: u8,
    /// How long a write that finds the pool full waits for the space
    /// `DEL`s and overwrites have left to be reclaimed (a compaction and
    /// clean-up steps run at once) before it is refused with `-OOM`. It is
    /// refused sooner when a pass reclaims nothing.
    pub room_wait: Duration,
    /// How often a PM store's space is checked (and, under pressure, the
    /// log compacted) in the background. Writes that find the pool full ask
    /// for a check at once whatever this is.
    pub space_check: Duration,
    /// How long `CLUSTER ADDNODE` waits for the new replica to catch up
    /// before it would make it a voter.
    pub catch_up_timeout: Duration,
    /// How long a graceful shutdown waits for requests in flight.
    pub drain_timeout: Duration,
}

impl ServerConfig {
    pub fn new(
        id: u64,
        store: StoreConfig,
        listen: SocketAddr,
        peer_listen: SocketAddr,
    ) -> ServerConfig {
        let raft = RaftTuning {
            snapshot_every: RaftTuning::snapshot_every_for(store.kind),
            ..RaftTuning::default()
        };
        ServerConfig {
            id,
            store,
            listen,
            peer_listen,
            peers: BTreeMap::new(),
            limits: Limits::default(),
            raft,
            requirepass: None,
            cluster_secret: Vec::new(),
            tripwire_stale_reads: false,
            tripwire_early_ack: false,
            join: false,
            max_pool_use: 90,
            room_wait: Duration::from_secs(5),
            space_check: Duration::from_millis(50),
            catch_up_timeout: Duration::from_secs(300),
            drain_timeout: Duration::from_secs(10),
        }
    }

    /// Safe on a network by default: a client port on a non-loopback
    /// address needs a password, a peer port on one needs a cluster secret.
    pub fn check_exposure(&self) -> Result<(), String> {
        if !self.listen.ip().is_loopback() && self.requirepass.as_deref().unwrap_or("").is_empty() {
            return Err(format!(
                "refusing to serve clients on {} (not a loopback address) without a password: \
                 set one with --requirepass (clients then AUTH), or listen on 127.0.0.1",
                self.listen
            ));
        }
        if !self.peer_listen.ip().is_loopback() && self.cluster_secret.is_empty() {
            return Err(format!(
                "refusing to listen for replicas on {} (not a loopback address) without a \
                 cluster secret: give every replica the same --cluster-secret-file",
                self.peer_listen
            ));
        }
        Ok(())
    }
}

/// Parses `--peers id=host:port,…`.
pub fn parse_peers(s: &str) -> Result<BTreeMap<u64, String>, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('=')
            .ok_or_else(|| format!("peer {part:?} is not id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("peer id {id:?} is not a number"))?;
        let addr = addr.trim();
        if addr
            .rsplit_once(':')
            .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
        {
            return Err(format!("peer address {addr:?} is not host:port"));
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(format!("peer {id} named twice"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_ports_need_a_password_and_a_secret() {
        let store = ferrite_raft::StoreConfig::new(ferrite_raft::StoreKind::Wal, "/nonexistent");
        let lo = "127.0.0.1:7001".parse().unwrap();
        let any = "0.0.0.0:7001".parse().unwrap();
        let mut c = ServerConfig::new(1, store, lo, lo);
        assert!(c.check_exposure().is_ok());
        c.listen = any;
        let e = c.check_exposure().unwrap_err();
        assert!(e.contains("--requirepass"), "{e}");
        c.requirepass = Some(String::new());
        assert!(c.check_exposure().is_err(), "an empty password is none");
        c.requirepass = Some("pw".into());
        assert!(c.check_exposure().is_ok());
        c.peer_listen = "[::]:7002".parse().unwrap();
        let e = c.check_exposure().unwrap_err();
        assert!(e.contains("--cluster-secret"), "{e}");
        c.cluster_secret = b"s".to_vec();
        assert!(c.check_exposure().is_ok());
    }

    #[test]
    fn peers_parse_and_bad_ones_are_refused() {
        let p = parse_peers("2=127.0.0.1:7102, 3=localhost:7103").unwrap();
        assert_eq!(p[&2], "127.0.0.1:7102");
        assert_eq!(p[&3], "localhost:7103");
        for bad in [
            "2",
            "x=1.2.3.4:5",
            "2=1.2.3.4",
            "2=:5",
            "2=a:b",
            "2=a:1,2=b:2",
        ] {
            assert!(parse_peers(bad).is_err(), "{bad}");
        }
        assert!(parse_peers("").unwrap().is_empty());
    }
}
