//! The buffer manager's errors.

use std::path::PathBuf;

use ferrite_pm::PmError;
use ferrite_pmio::PmioError;

/// Errors of the buffer manager.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BufferError {
    /// The configuration is inconsistent (the text says how).
    #[error("invalid buffer configuration: {0}")]
    Config(String),
    /// Persistent state failed validation.
    #[error("{object} is corrupt: {detail}")]
    Corrupt { object: String, detail: String },
    /// An SSD read, write or fdatasync failed. After a failed write or sync
    /// the SSD tier refuses further writes until the store is reopened
    /// (committed data stays in the log; see docs/DURABILITY.md).
    #[error("SSD {op} of {path} failed: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An earlier SSD write or sync failed; writes are refused until reopen.
    #[error("the SSD tier failed earlier ({0}); reopen the store to recover from the log")]
    SsdFailed(String),
    /// The data does not fit the tiers (a design without eviction, or without
    /// SSD, ran out of DRAM or PM frames; or the SSD capacity is exhausted).
    #[error("capacity exceeded: {0}")]
    CapacityExceeded(String),
    /// Every DRAM frame is latched by running operations: the budget is too
    /// small for the number of threads.
    #[error("no DRAM frame can be evicted: {0}")]
    BufferFull(String),
    /// A write-ahead-log record or a transaction's undo list does not fit the log.
    #[error("log full: {0}")]
    LogFull(String),
    /// A key a transaction wants to write is locked by another transaction
    /// (no-wait locking: abort and retry).
    #[error("write conflict: key locked by transaction {holder}")]
    Conflict { holder: u64 },
    /// The transaction was already committed or aborted.
    #[error("transaction {0} is finished")]
    TxnFinished(u64),
    /// A missing cache line must be loaded, which needs the exclusive latch:
    /// the caller restarts with it (internal to data structures).
    #[error("cache line fault (restart with an exclusive latch)")]
    LineFault,
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// An error of the PM layer.
    #[error(transparent)]
    Pm(#[from] PmError),
    /// An error of the PM log.
    #[error(transparent)]
    Pmio(#[from] PmioError),
}

impl BufferError {
    /// [`BufferError::Corrupt`].
    pub fn corrupt(object: impl Into<String>, detail: impl Into<String>) -> BufferError {
        BufferError::Corrupt {
            object: object.into(),
            detail: detail.into(),
        }
    }

    /// True for [`BufferError::LineFault`].
    pub fn is_fault(&self) -> bool {
        matches!(self, BufferError::LineFault)
    }

    /// True for corruption of persistent state (here or in the PM layer).
    pub fn is_corrupt(&self) -> bool {
        match self {
            BufferError::Corrupt { .. } => true,
            BufferError::Pm(e) => e.is_bad_pool(),
            BufferError::Pmio(PmioError::Corrupt { .. }) => true,
            BufferError::Pmio(PmioError::Pm(e)) => e.is_bad_pool(),
            _ => false,
        }
    }
}

pub type Result<T> = std::result::Result<T, BufferError>;
