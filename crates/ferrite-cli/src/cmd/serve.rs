//! `ferrite serve`: one replica of the replicated key-value service.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use ferrite_raft::{StoreConfig, StoreKind};
use ferrite_server::{parse_peers, Server, ServerConfig, ServerError};

use crate::util::{parse_size, EXIT_BAD_POOL};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// This replica's id (a positive number, unique in the cluster)
    #[arg(long)]
    pub id: u64,
    /// The pool file (list, btree; created when absent) or directory (wal)
    #[arg(long)]
    pub pool: PathBuf,
    /// Address for clients (RESP). Loopback unless told: any other address
    /// needs --requirepass (or --requirepass-file)
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub listen: String,
    /// Address for the other replicas. Loopback unless told: any other
    /// address needs --cluster-secret-file (or --cluster-secret)
    #[arg(long, default_value = "127.0.0.1:16379")]
    pub peer_listen: String,
    /// Password clients must give with AUTH (redis-cli -a PASSWORD) before
    /// any other command
    #[arg(long, conflicts_with = "requirepass_file")]
    pub requirepass: Option<String>,
    /// Read the client password from this file (first line; keeps it out of
    /// the process list)
    #[arg(long)]
    pub requirepass_file: Option<PathBuf>,
    /// Secret shared by the cluster's replicas: each proves it to the others
    /// (HMAC challenge) when a replica-to-replica connection opens; a replica
    /// without it is refused and logged
    #[arg(long, conflicts_with = "cluster_secret_file")]
    pub cluster_secret: Option<String>,
    /// Read the cluster secret from this file (its whole content, trailing
    /// newline removed)
    #[arg(long)]
    pub cluster_secret_file: Option<PathBuf>,
    /// The other replicas: id=host:port of their --peer-listen, comma separated
    #[arg(long, default_value = "")]
    pub peers: String,
    /// Where the log and state live: list (PM list + DRAM index), btree (PM
    /// B+-tree), wal (write-ahead log and snapshots in files, state in DRAM)
    #[arg(long, default_value = "list")]
    pub store: String,
    /// Size of a new pool
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub pool_size: u64,
    /// Group commit: commit after this many modifications (PM stores; 1:
    /// one commit per batch openraft appends, measured best here)
    #[arg(long, default_value_t = 1)]
    pub commit_every: usize,
    /// Group commit: commit at the latest this many µs after the first
    /// pending modification (PM stores)
    #[arg(long, default_value_t = 20)]
    pub commit_interval_us: u64,
    /// Build a snapshot and purge the log every this many entries [default:
    /// 1000 for the PM stores, whose snapshot costs nothing; 5000 for wal,
    /// whose snapshot writes its state to a file]
    #[arg(long)]
    pub snapshot_every: Option<u64>,
    /// Raft heartbeat interval (ms); elections time out after 6–12 of them
    #[arg(long, default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// Most client connections
    #[arg(long, default_value_t = 10_000)]
    pub max_clients: usize,
    /// Largest client request (bytes)
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    pub max_request: u64,
    /// Join a running cluster instead of starting one: the replica waits to
    /// be added (CLUSTER ADDNODE on any member, or `ferrite cluster add`)
    #[arg(long)]
    pub join: bool,
    /// Share of the pool (percent) data may fill, and never its last 32
    /// chunks: beyond it writes are refused with -OOM while reads and DEL go
    /// on (PM stores)
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u8).range(10..=99))]
    pub max_pool_use: u8,
    /// How long a write that finds the pool full waits for space freed by
    /// DEL and overwrites to be reclaimed before -OOM (ms; sooner when
    /// nothing is left to reclaim)
    #[arg(long, default_value_t = 5000)]
    pub room_wait_ms: u64,
    /// How long CLUSTER ADDNODE waits for a new replica to catch up (s)
    #[arg(long, default_value_t = 300)]
    pub catch_up_timeout_s: u64,
    /// Tripwire for the fault tests: GET reads this replica's own state
    /// without the read-index round (stale reads the checker must catch)
    #[arg(long, hide = true)]
    pub tripwire_stale_reads: bool,
    /// Tripwire for the fault tests: the leader acknowledges a SET before a
    /// majority holds it (lost writes the checker must catch)
    #[arg(long, hide = true)]
    pub tripwire_early_ack: bool,
    /// Log level: error, warn, info, debug
    #[arg(long, default_value = "warn")]
    pub log: String,
    /// Worker threads of the runtime
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

/// A secret from the command line or from a file (trailing newline removed).
fn secret(inline: &Option<String>, file: &Option<PathBuf>, what: &str) -> Result<Option<String>> {
    let s = match (inline, file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(f)) => {
            let t = std::fs::read_to_string(f)
                .with_context(|| format!("reading the {what} from {}", f.display()))?;
            Some(t.trim_end_matches(['\r', '\n']).to_string())
        }
        (None, None) => None,
    };
    if s.as_deref() == Some("") {
        bail!("the {what} is empty");
    }
    Ok(s)
}

/// A usage error: the replica would listen on a network without a password
/// or secret (exit status 64).
#[derive(Debug)]
pub struct Exposed(pub String);

impl std::fmt::Display for Exposed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Exposed {}

/// Builds the replica's configuration from the arguments.
pub fn config(a: &ServeArgs) -> Result<ServerConfig> {
    let kind = StoreKind::parse(&a.store)
        .with_context(|| format!("--store takes list, btree or wal, not {:?}", a.store))?;
    if a.id == 0 {
        bail!("--id must be a positive number");
    }
    let listen = a
        .listen
        .parse()
        .with_context(|| format!("--listen {:?} is not an address:port", a.listen))?;
    let peer_listen = a
        .peer_listen
        .parse()
        .with_context(|| format!("--peer-listen {:?} is not an address:port", a.peer_listen))?;
    let peers = parse_peers(&a.peers).map_err(|e| anyhow::anyhow!("--peers: {e}"))?;
    if peers.contains_key(&a.id) {
        bail!("--peers names this replica's own id {}", a.id);
    }
    if a.commit_every == 0 {
        bail!("--commit-every must be at least 1");
    }
    let mut store = StoreConfig::new(kind, &a.pool);
    store.pool_size = a.pool_size;
    store.policy.every = a.commit_every;
    store.policy.interval = Duration::from_micros(a.commit_interval_us);
    let mut cfg = ServerConfig::new(a.id, store, listen, peer_listen);
    cfg.peers = peers;
    cfg.raft.heartbeat = Duration::from_millis(a.heartbeat_ms.max(1));
    cfg.raft.election_min = cfg.raft.heartbeat * 6;
    cfg.raft.election_max = cfg.raft.heartbeat * 12;
    if let Some(n) = a.snapshot_every {
        cfg.raft.snapshot_every = n.max(1);
    }
    cfg.limits.max_clients = a.max_clients;
    cfg.limits.max_request = a.max_request as usize;
    cfg.tripwire_stale_reads = a.tripwire_stale_reads;
    cfg.tripwire_early_ack = a.tripwire_early_ack;
    cfg.join = a.join;
    cfg.max_pool_use = a.max_pool_use;
    cfg.room_wait = Duration::from_millis(a.room_wait_ms);
    cfg.catch_up_timeout = Duration::from_secs(a.catch_up_timeout_s.max(1));
    cfg.requirepass = secret(&a.requirepass, &a.requirepass_file, "client password")?;
    cfg.cluster_secret = secret(&a.cluster_secret, &a.cluster_secret_file, "cluster secret")?
        .map(String::into_bytes)
        .unwrap_or_default();
    cfg.check_exposure()
        .map_err(|e| anyhow::Error::new(Exposed(e)))?;
    Ok(cfg)
}

fn level(s: &str) -> Result<tracing::Level> {
    Ok(match s {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "info" => tracing::Level::INFO,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => bail!("--log takes error, warn, info, debug or trace"),
    })
}

/// Exit status for a failed start: 2 for a bad, missing or busy pool.
fn code(e: &ServerError) -> Option<i32> {
    match e {
        ServerError::Store(s) if s.is_corrupt() => Some(EXIT_BAD_POOL),
        ServerError::Store(ferrite_raft::StoreError::Pm(ferrite_pm::PmError::InUse { .. })) => {
            Some(EXIT_BAD_POOL)
        }
        _ => None,
    }
}

pub fn run(a: ServeArgs) -> Result<i32> {
    let cfg = match config(&a) {
        Ok(c) => c,
        Err(e) if e.downcast_ref::<Exposed>().is_some() => {
            eprintln!("ferrite serve: {e}");
            return Ok(crate::util::EXIT_USAGE);
        }
        Err(e) => return Err(e),
    };
    tracing_subscriber::fmt()
        .with_max_level(level(&a.log)?)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let server = match Server::start(cfg.clone()).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("ferrite: replica {}: {e}", cfg.id);
                return Ok(code(&e).unwrap_or(crate::util::EXIT_ERROR));
            }
        };
        let node = server.node();
        println!(
            "ferrite serve: replica {} ({} store at {}, durability {}) serving clients on {}, replicas on {}; peers: {}",
            cfg.id,
            node.replica.kind(),
            cfg.store.path.display(),
            node.replica.durability(),
            server.client_addr(),
            server.peer_addr(),
            if cfg.peers.is_empty() {
                "none (a one-replica cluster)".to_string()
            } else {
                cfg.peers.iter().map(|(i, a)| format!("{i}={a}")).collect::<Vec<_>>().join(",")
            }
        );
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        println!(
            "ferrite serve: replica {} got {name}: shutting down (no new requests; those in flight are answered; \
             the store commits and closes); a second signal stops at once",
            cfg.id
        );
        // A second signal: stop now (the store recovers its last commit at
        // the next start, as after a crash).
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            eprintln!("ferrite serve: second signal: exiting without a clean close");
            std::process::exit(crate::util::EXIT_ERROR);
        });
        if server.shutdown().await {
            println!("ferrite serve: replica {} stopped; its store closed cleanly", cfg.id);
            Ok(0)
        } else {
            eprintln!(
                "ferrite serve: replica {}: the store was still in use 10 s after the shutdown; exiting without closing it",
                cfg.id
            );
            Ok(crate::util::EXIT_ERROR)
        }
    })
}
