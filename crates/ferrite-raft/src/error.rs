//! Errors of the replicated stores.

use ferrite_pm::PmError;

/// Everything that can go wrong in a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The PM layer failed (pool full, failed write-back, bad pool, …).
    #[error(transparent)]
    Pm(#[from] PmError),
    /// A file operation of the WAL baseline failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The persistent data is not what this build wrote.
    #[error("{store} is corrupt: {detail}")]
    Corrupt { store: String, detail: String },
    /// A request the store refuses (limits, wrong kind, …).
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    pub(crate) fn corrupt(store: &str, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            store: store.to_string(),
            detail: detail.into(),
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> StoreError {
        StoreError::Io {
            what: what.into(),
            source,
        }
    }

    /// True when the store's files or pool are damaged or not a store.
    pub fn is_corrupt(&self) -> bool {
        match self {
            StoreError::Corrupt { .. } => true,
            StoreError::Pm(e) => e.is_bad_pool(),
            _ => false,
        }
    }

    /// True when the pool (or filesystem) has no room left.
    pub fn is_full(&self) -> bool {
        match self {
            StoreError::Pm(PmError::PoolFull { .. }) => true,
            StoreError::Io { source, .. } => source.raw_os_error() == Some(libc::ENOSPC),
            _ => false,
        }
    }
}

/// Result type of the stores.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Converts store errors into openraft's storage errors (which stop the node).
pub(crate) fn to_storage(
    verb: openraft::ErrorVerb,
    subject: openraft::ErrorSubject<u64>,
    e: StoreError,
) -> openraft::StorageError<u64> {
    openraft::StorageIOError::new(subject, verb, openraft::AnyError::new(&e)).into()
}

pub(crate) fn write_err(e: StoreError) -> openraft::StorageError<u64> {
    to_storage(openraft::ErrorVerb::Write, openraft::ErrorSubject::Store, e)
}

pub(crate) fn read_err(e: StoreError) -> openraft::StorageError<u64> {
    to_storage(openraft::ErrorVerb::Read, openraft::ErrorSubject::Store, e)
}
