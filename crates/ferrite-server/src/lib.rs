//! Ferrite's replicated key-value service: one replica per process, a
//! cluster of them replicating a [`ferrite_raft`] store with openraft.
//!
//! | module | holds |
//! | --- | --- |
//! | [`config`] | a replica's configuration, limits, Raft timing, exposure rules |
//! | [`auth`] | the client password and the replicas' cluster-secret handshake |
//! | [`node`] | the replica: store, Raft, listeners, routing to the leader, shutdown |
//! | [`proto`] | the replica-to-replica frames (versioned, length-prefixed, postcard) |
//! | [`network`] | openraft's network over pooled TCP connections |
//! | `peer` | the replica-to-replica listener |
//! | `client` | client connections (pipelining) |
//! | [`resp`] | RESP2/RESP3 parsing with limits, reply encoding (`redis-protocol`) |
//! | [`commands`] | the Redis commands |
//!
//! Reads are linearizable by read-index (openraft's `ensure_linearizable`),
//! not by a leader lease: a lease would need bounded clock drift, read-index
//! needs one heartbeat round per read.

pub mod auth;
mod client;
pub mod commands;
pub mod config;
pub mod network;
pub mod node;
mod peer;
pub mod proto;
pub mod resp;

pub use config::{parse_peers, Limits, RaftTuning, ServerConfig};
pub use node::{Bound, Node, Server};

/// Why a replica could not start or serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error(transparent)]
    Store(#[from] ferrite_raft::StoreError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A port on a non-loopback address without a password or secret.
    #[error("{0}")]
    Exposed(String),
    #[error("raft: {0}")]
    Raft(String),
}

impl ServerError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> ServerError {
        ServerError::Io {
            what: what.into(),
            source,
        }
    }
}
