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
    /// Address for clients (RESP)
    #[arg(long, default_value = "127.0.0.1:6379")]
    pub listen: String,
    /// Address for the other replicas
    #[arg(long, default_value = "127.0.0.1:16379")]
    pub peer_listen: String,
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
    /// Group commit: commit after this many modifications (PM stores)
    #[arg(long, default_value_t = 10)]
    pub commit_every: usize,
    /// Group commit: commit at the latest this many µs after the first
    /// pending modification (PM stores)
    #[arg(long, default_value_t = 20)]
    pub commit_interval_us: u64,
    /// Build a snapshot and purge the log every this many entries
    #[arg(long, default_value_t = 5000)]
    pub snapshot_every: u64,
    /// Raft heartbeat interval (ms); elections time out after 6–12 of them
    #[arg(long, default_value_t = 100)]
    pub heartbeat_ms: u64,
    /// Most client connections
    #[arg(long, default_value_t = 10_000)]
    pub max_clients: usize,
    /// Largest client request (bytes)
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    pub max_request: u64,
    /// Log level: error, warn, info, debug
    #[arg(long, default_value = "warn")]
    pub log: String,
    /// Worker threads of the runtime
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

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
    cfg.raft.snapshot_every = a.snapshot_every.max(1);
    cfg.limits.max_clients = a.max_clients;
    cfg.limits.max_request = a.max_request as usize;
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
    let cfg = config(&a)?;
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
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        println!("ferrite serve: replica {} shutting down", cfg.id);
        server.shutdown().await;
        Ok(0)
    })
}
