//! Errors of the PM layer.

use std::path::PathBuf;

/// Everything that can go wrong in the PM layer. Variants that mean "this file is
/// not a healthy pool" are grouped by [`PmError::is_bad_pool`] so that tools can map
/// them to one exit status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    BadPool(String),
    #[error("pool format version {found} is newer than this build understands (max {supported}); upgrade Ferrite")]
    NewerVersion { found: u32, supported: u32 },
    #[error("pool format version {found} is no longer supported (this build reads {supported})")]
    OlderVersion { found: u32, supported: u32 },
    #[error("pool is full: no free chunk for a {requested}-byte allocation ({used} of {total} heap bytes in use)")]
    PoolFull {
        requested: usize,
        used: u64,
        total: u64,
    },
    #[error("allocation of {requested} bytes exceeds the pool's largest block ({max} bytes)")]
    TooLarge { requested: usize, max: usize },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("no object named {0:?} in the pool")]
    NoSuchObject(String),
    #[error("an object named {0:?} already exists")]
    ObjectExists(String),
    #[error("object {name:?} is a {found}, not a {expected}")]
    WrongType {
        name: String,
        found: String,
        expected: String,
    },
    #[error("the root directory is full ({0} objects)")]
    DirectoryFull(usize),
    #[error("the heap of object {0:?} is already open")]
    HeapBusy(String),
    #[error("object {object:?} is corrupt: {detail}")]
    CorruptObject { object: String, detail: String },
    #[error("{}: the pool is in use by another process (it is open for writing elsewhere, or you asked to {wanted} while another process reads it); close the other user first", path.display())]
    InUse { path: PathBuf, wanted: &'static str },
    #[error("the pool is open read-only")]
    ReadOnly,
    #[error("pool range {off:#x}+{len} lies outside the pool ({size} bytes): a corrupt offset")]
    OutOfBounds { off: u64, len: usize, size: u64 },
}

impl PmError {
    /// True when the file exists but is not a usable pool (truncated, zeroed,
    /// wrong magic, checksum mismatch, unknown version, inconsistent metadata).
    pub fn is_bad_pool(&self) -> bool {
        matches!(
            self,
            PmError::BadPool(_)
                | PmError::NewerVersion { .. }
                | PmError::OlderVersion { .. }
                | PmError::CorruptObject { .. }
                | PmError::OutOfBounds { .. }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> PmError {
        PmError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result type of the PM layer.
pub type Result<T, E = PmError> = std::result::Result<T, E>;
