//! [`Error`], the one error type of the facade, and how the layers' errors
//! (`PmError`, `KvError`, `ElfError`) become it.

use std::path::PathBuf;

use ferrite_elf::ElfError;
use ferrite_kv::KvError;
use ferrite_pm::PmError;

/// Everything that can go wrong, one variant per failure a program may want
/// to handle. New variants may be added, so match with a `_` arm.
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// let m = db.map("m")?;
/// match m.insert(&[0u8; 2000], b"v") {
///     Err(ferrite::Error::KeyTooLarge { len, max }) => assert_eq!((len, max), (2000, 1024)),
///     other => panic!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another process holds the pool open (for writing, or you asked to write
    /// while it reads). Pools are locked with `flock`: one writer at a time.
    #[error("{}: the pool is in use by another process; close it there first", path.display())]
    InUse { path: PathBuf },
    /// The pool has no free space left for this write. Pools do not grow:
    /// create a larger one (tmpfs and DAX files cost only what is used).
    #[error("the pool is full: {requested} bytes requested, {used} of {total} heap bytes in use")]
    PoolFull {
        requested: usize,
        used: u64,
        total: u64,
    },
    /// One allocation larger than the pool's largest block (for example a
    /// transaction whose log does not fit one chunk).
    #[error("{requested} bytes in one allocation exceed the pool's largest block ({max} bytes)")]
    TooLarge { requested: usize, max: usize },
    /// The key is longer than [`MAX_KEY`](crate::MAX_KEY).
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    /// The value is longer than [`MAX_VALUE`](crate::MAX_VALUE).
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    /// The name belongs to an object of another kind (say, an Elf table opened
    /// as a map).
    #[error("object {name:?} is a {found}, not a {expected}")]
    WrongType {
        name: String,
        found: String,
        expected: String,
    },
    /// The pool (or an object in it) was written by a newer Ferrite.
    #[error("{what} has format version {found}, newer than this build understands ({supported}); upgrade Ferrite")]
    NewerFormat {
        what: String,
        found: u64,
        supported: u64,
    },
    /// The pool was written in a format this build no longer reads.
    #[error("{what} has format version {found}, which this build no longer reads ({supported})")]
    OlderFormat {
        what: String,
        found: u64,
        supported: u64,
    },
    /// The file is not a Ferrite pool (truncated, zeroed, wrong magic,
    /// checksum mismatch).
    #[error("not a usable Ferrite pool: {0}")]
    NotAPool(String),
    /// Persistent state failed validation.
    #[error("object {object:?} is corrupt: {detail}")]
    Corrupt { object: String, detail: String },
    /// No object of that name (for [`Db::elf`](crate::Db::elf)).
    #[error("the pool holds no {kind} named {name:?}")]
    NotFound { kind: &'static str, name: String },
    /// An object of that name exists already (for
    /// [`Db::create_elf`](crate::Db::create_elf)).
    #[error("an object named {name:?} already exists")]
    Exists { name: String },
    /// The calling thread holds a transaction on this map, or runs inside
    /// [`Map::update_with`](crate::Map::update_with)'s closure: a write through
    /// the map itself would wait for that thread forever. Write through the
    /// [`Transaction`](crate::Transaction) instead.
    #[error("this thread holds a transaction or an update on map {map:?}: write through it, not through the map")]
    TransactionActive { map: String },
    /// A transaction's commit failed part-way (the pool filled up or a
    /// write-back failed while its committed log was applied). The log is
    /// durable and is replayed when the pool is next opened; until then the
    /// map refuses writes.
    #[error("map {map:?} needs a reopen: a committed transaction could not be applied ({detail})")]
    NeedsReopen { map: String, detail: String },
    /// [`Db::close`](crate::Db::close) found other handles of the pool still
    /// alive (maps, tables, iterators, transactions, `Db` clones): the pool
    /// closes, and its lock is released, when the last of them is dropped.
    #[error("the pool stays open: {handles} other handles of it are alive (maps, tables, iterators, transactions or Db clones); it closes when they are dropped")]
    StillOpen { handles: usize },
    /// A bad argument (an empty or too long object name, a pool size below
    /// the minimum, a malformed query, …).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// An I/O error on the pool file (missing file, permissions, a failed
    /// write-back in msync mode, …).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Any other failure of a layer below, as its own error.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
}

/// The facade's result type.
///
/// ```
/// fn first_user(db: &ferrite::Db) -> ferrite::Result<Option<Vec<u8>>> {
///     Ok(db.map("users")?.iter().next().transpose()?.map(|(k, _)| k))
/// }
/// # let db = ferrite::Db::volatile(16 << 20).unwrap();
/// # assert_eq!(first_user(&db).unwrap(), None);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<PmError> for Error {
    fn from(e: PmError) -> Error {
        match e {
            PmError::InUse { path, .. } => Error::InUse { path },
            PmError::PoolFull {
                requested,
                used,
                total,
            } => Error::PoolFull {
                requested,
                used,
                total,
            },
            PmError::TooLarge { requested, max } => Error::TooLarge { requested, max },
            PmError::WrongType {
                name,
                found,
                expected,
            } => Error::WrongType {
                name,
                found,
                expected,
            },
            PmError::NewerVersion { found, supported } => Error::NewerFormat {
                what: "the pool".into(),
                found: found.into(),
                supported: supported.into(),
            },
            PmError::OlderVersion { found, supported } => Error::OlderFormat {
                what: "the pool".into(),
                found: found.into(),
                supported: supported.into(),
            },
            PmError::BadPool(s) => Error::NotAPool(s),
            PmError::CorruptObject { object, detail } => Error::Corrupt { object, detail },
            PmError::OutOfBounds { off, len, size } => Error::Corrupt {
                object: "pool".into(),
                detail: format!("range {off:#x}+{len} outside the pool ({size} bytes)"),
            },
            PmError::Invalid(s) => Error::Invalid(s),
            PmError::ObjectExists(name) => Error::Exists { name },
            PmError::Io { path, source } => Error::Io { path, source },
            e => Error::Other(Box::new(e)),
        }
    }
}

impl From<KvError> for Error {
    fn from(e: KvError) -> Error {
        match e {
            KvError::KeyTooLarge { len, max } => Error::KeyTooLarge { len, max },
            KvError::ValueTooLarge { len, max } => Error::ValueTooLarge { len, max },
            KvError::Corrupt { object, detail } => Error::Corrupt { object, detail },
            KvError::Storage(b) => match b.downcast::<PmError>() {
                Ok(pm) => Error::from(*pm),
                Err(b) => Error::Other(b),
            },
            e => Error::Other(Box::new(e)),
        }
    }
}

impl From<ElfError> for Error {
    fn from(e: ElfError) -> Error {
        match e {
            ElfError::Pm(p) => Error::from(p),
            ElfError::Corrupt(detail) => Error::Corrupt {
                object: "elf".into(),
                detail,
            },
            ElfError::NoElf(name) => Error::NotFound {
                kind: "Elf table",
                name,
            },
            ElfError::InvalidTable(s) => Error::Invalid(format!("table: {s}")),
            ElfError::InvalidQuery(s) => Error::Invalid(format!("query: {s}")),
            ElfError::TooLarge(s) => Error::Invalid(format!("table too large: {s}")),
            e => Error::Other(Box::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_errors_become_their_variants() {
        let full = KvError::storage(PmError::PoolFull {
            requested: 64,
            used: 1,
            total: 2,
        });
        assert!(matches!(
            Error::from(full),
            Error::PoolFull {
                requested: 64,
                used: 1,
                total: 2
            }
        ));
        let newer = PmError::NewerVersion {
            found: 9,
            supported: 1,
        };
        assert!(matches!(
            Error::from(newer),
            Error::NewerFormat {
                found: 9,
                supported: 1,
                ..
            }
        ));
        let busy = PmError::InUse {
            path: "/x".into(),
            wanted: "open it for writing",
        };
        assert!(matches!(Error::from(busy), Error::InUse { .. }));
        assert!(matches!(
            Error::from(KvError::KeyTooLarge { len: 2, max: 1 }),
            Error::KeyTooLarge { len: 2, max: 1 }
        ));
        assert!(matches!(
            Error::from(ElfError::NoElf("t".into())),
            Error::NotFound { .. }
        ));
        // Anything else keeps its own message.
        let e = Error::from(PmError::HeapBusy("x".into()));
        assert_eq!(e.to_string(), PmError::HeapBusy("x".into()).to_string());
    }
}
