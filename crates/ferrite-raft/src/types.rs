//! The replicated state machine's types: the openraft type configuration,
//! the commands clients submit and the replies they get.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::snapshot::SnapshotData;

openraft::declare_raft_types!(
    /// Ferrite's openraft type configuration: `u64` node ids, nodes with a
    /// peer address, [`Command`]s in, [`Reply`]s out, and [`SnapshotData`]
    /// (a view of a store, or a snapshot being received) as snapshots.
    pub TypeConfig:
        D = Command,
        R = Reply,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = SnapshotData,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A log entry of Ferrite's state machine.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (term, leader, index).
pub type LogId = openraft::LogId<u64>;
/// A vote (term, candidate, committed).
pub type Vote = openraft::Vote<u64>;
/// A cluster configuration.
pub type Membership = openraft::Membership<u64, openraft::BasicNode>;
/// A cluster configuration and the log id that introduced it.
pub type StoredMembership = openraft::StoredMembership<u64, openraft::BasicNode>;
/// A snapshot's metadata.
pub type SnapshotMeta = openraft::SnapshotMeta<u64, openraft::BasicNode>;
/// A storage error as openraft wants it.
pub type StorageError = openraft::StorageError<u64>;

/// The condition of a `SET`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Cond {
    /// Always set.
    Always,
    /// `NX`: only when the key is absent.
    Nx,
    /// `XX`: only when the key is present.
    Xx,
    /// `IFEQ expected` (Valkey 8.1): only when the key is present with this value.
    IfEq(#[serde(with = "serde_bytes")] Vec<u8>),
}

/// A mutation of the replicated map (the `D` of the type configuration).
#[derive(Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Command {
    /// `SET key value [NX|XX|IFEQ expected]`.
    Set {
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
        cond: Cond,
    },
    /// `DEL key [key …]`.
    Del {
        #[serde(with = "crate::wire::list")]
        keys: Vec<Vec<u8>>,
    },
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = |b: &[u8]| -> String {
            let s = String::from_utf8_lossy(&b[..b.len().min(24)]).into_owned();
            if b.len() > 24 {
                format!("{s}…({} bytes)", b.len())
            } else {
                s
            }
        };
        match self {
            Command::Set { key, value, cond } => {
                write!(f, "SET {} {} {:?}", short(key), short(value), cond)
            }
            Command::Del { keys } => {
                write!(f, "DEL")?;
                for k in keys {
                    write!(f, " {}", short(k))?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What applying an entry answered (the `R` of the type configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum Reply {
    /// A blank or membership entry.
    #[default]
    None,
    /// A `SET`: whether its condition held and the value was written.
    Set { applied: bool },
    /// A `DEL`: how many of the keys existed (and were removed).
    Del { removed: u64 },
}

/// Which structure keeps a replica's log and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StoreKind {
    /// The hybrid: an append-only PM list indexed by a DRAM search tree.
    List,
    /// A persistent B+-tree of small fan-out.
    BTree,
    /// The baseline: a write-ahead log and snapshots in files, state in DRAM.
    Wal,
}

impl StoreKind {
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::List => "list",
            StoreKind::BTree => "btree",
            StoreKind::Wal => "wal",
        }
    }

    pub fn parse(s: &str) -> Option<StoreKind> {
        match s {
            "list" => Some(StoreKind::List),
            "btree" => Some(StoreKind::BTree),
            "wal" => Some(StoreKind::Wal),
            _ => None,
        }
    }

    /// The PM stores (everything but the WAL baseline).
    pub fn is_pm(self) -> bool {
        !matches!(self, StoreKind::Wal)
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Largest key a store accepts (bytes).
pub const MAX_KEY: usize = 64 * 1024;
/// Largest value a store accepts (bytes).
pub const MAX_VALUE: usize = 8 * 1024 * 1024;

impl Command {
    /// Checks the command against the stores' limits.
    pub fn check_limits(&self) -> Result<(), String> {
        let key = |k: &[u8]| {
            if k.len() > MAX_KEY {
                Err(format!(
                    "key of {} bytes exceeds the limit of {MAX_KEY}",
                    k.len()
                ))
            } else {
                Ok(())
            }
        };
        match self {
            Command::Set {
                key: k,
                value,
                cond,
            } => {
                key(k)?;
                let expected = match cond {
                    Cond::IfEq(e) => e.len(),
                    _ => 0,
                };
                if value.len() > MAX_VALUE || expected > MAX_VALUE {
                    return Err(format!(
                        "value of {} bytes exceeds the limit of {MAX_VALUE}",
                        value.len().max(expected)
                    ));
                }
                Ok(())
            }
            Command::Del { keys } => {
                if keys.is_empty() {
                    return Err("DEL needs at least one key".into());
                }
                keys.iter().try_for_each(|k| key(k))
            }
        }
    }
}
