//! [`Db`]: one pool and the named collections in it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ferrite_index::{
    FerriteIndex, IndexOptions, FORMAT_TAG, FORMAT_TAG_V1, FORMAT_VERSION, INDEX_TYPE,
};
use ferrite_pm::{Durability, Pool, PoolOptions};

use crate::elf::ElfTable;
use crate::error::{Error, Result};
use crate::map::Map;

/// Capacity of the DRAM pool behind each [`Db::volatile_map`]: memory is
/// only used as the map grows (the pool is zeroed lazily by the kernel).
///
/// ```
/// assert_eq!(ferrite::VOLATILE_MAP_CAPACITY, 4 << 30);
/// ```
pub const VOLATILE_MAP_CAPACITY: u64 = 4 << 30;

struct DbInner {
    pool: Pool,
    maps: Mutex<HashMap<String, Map>>,
    elves: Mutex<HashMap<String, ElfTable>>,
}

/// A Ferrite database: one pool file holding any number of named
/// collections ([`Db::map`], [`Db::elf`]).
///
/// Only one process may open a pool at a time (a file lock): a second one
/// gets [`Error::InUse`]. Within the process, `Db` is a cheap handle: clone
/// it and share it between threads. The pool is unmapped (and the lock
/// released) when the last `Db`, `Map` and `ElfTable` of it are dropped.
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// # let path = std::env::temp_dir().join(format!("ferrite-doc-db-{}.pool", std::process::id()));
/// # let _ = std::fs::remove_file(&path);
/// let db = ferrite::Db::open_or_create(&path, 64 << 20)?;
/// let users = db.map("users")?;
/// users.upsert("alice", "admin")?;
/// drop(users);
/// db.close()?; // flushes, closes the pool and releases its lock
///
/// let db = ferrite::Db::open(&path)?;
/// assert_eq!(db.map("users")?.get("alice")?, Some(b"admin".to_vec()));
/// # drop(db);
/// # std::fs::remove_file(&path).unwrap();
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Db {
    inner: Arc<DbInner>,
}

impl Db {
    fn from_parts(pool: Pool) -> Db {
        Db {
            inner: Arc::new(DbInner {
                pool,
                maps: Mutex::new(HashMap::new()),
                elves: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Creates a new pool file of `size` bytes at `path` (an error if the
    /// file exists). Pools do not grow: size it generously; on tmpfs and DAX
    /// filesystems only the pages in use take memory. At least 16 MiB.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// # let path = std::env::temp_dir().join(format!("ferrite-doc-create-{}.pool", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// let db = ferrite::Db::create(&path, 64 << 20)?;
    /// assert!(ferrite::Db::create(&path, 64 << 20).is_err()); // exists
    /// # drop(db);
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    pub fn create(path: impl AsRef<Path>, size: u64) -> Result<Db> {
        Ok(Db::from_parts(Pool::create(
            path,
            size,
            &PoolOptions::default(),
        )?))
    }

    /// Opens an existing pool file for reading and writing. Errors:
    /// [`Error::InUse`] when another process has it open,
    /// [`Error::NotAPool`] / [`Error::NewerFormat`] when the file is not a pool
    /// this build reads, [`Error::Io`] when it cannot be opened.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let missing = std::env::temp_dir().join("ferrite-doc-no-such.pool");
    /// assert!(matches!(ferrite::Db::open(&missing), Err(ferrite::Error::Io { .. })));
    /// # Ok(())
    /// # }
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Db> {
        Ok(Db::from_parts(Pool::open(path, &PoolOptions::default())?))
    }

    /// Opens the pool at `path`, creating one of `size` bytes if there is no
    /// file there.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// # let path = std::env::temp_dir().join(format!("ferrite-doc-ooc-{}.pool", std::process::id()));
    /// # let _ = std::fs::remove_file(&path);
    /// let db = ferrite::Db::open_or_create(&path, 64 << 20)?; // creates
    /// drop(db);
    /// let db = ferrite::Db::open_or_create(&path, 64 << 20)?; // opens
    /// # drop(db);
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    pub fn open_or_create(path: impl AsRef<Path>, size: u64) -> Result<Db> {
        let path = path.as_ref();
        match Db::create(path, size) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
                Db::open(path)
            }
            r => r,
        }
    }

    /// A database in this process's memory, gone when it ends (for tests and
    /// caches: the same code as a pool file, without a file).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert_eq!(db.durability(), ferrite::Durability::Volatile);
    /// # Ok(())
    /// # }
    /// ```
    pub fn volatile(size: u64) -> Result<Db> {
        Ok(Db::from_parts(Pool::create_volatile(
            size,
            &PoolOptions::default(),
        )?))
    }

    /// A database over an open pool (the crash tests open crash images this
    /// way).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let pool = ferrite_pm::Pool::create_volatile(16 << 20, &Default::default()).unwrap();
    /// let db = ferrite::Db::from_pool(pool);
    /// db.map("m")?;
    /// # Ok(())
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn from_pool(pool: Pool) -> Db {
        Db::from_parts(pool)
    }

    /// What a write acknowledged by this database survives, for its maps and
    /// Elf tables: [`Durability::describe`] says it in words. On real
    /// persistent memory (a DAX filesystem) power loss; on tmpfs (`/dev/shm`)
    /// or an ordinary file a process crash, not power loss.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// # let path = format!("/dev/shm/ferrite-doc-dur-{}.pool", std::process::id());
    /// let db = ferrite::Db::create(&path, 64 << 20)?;
    /// println!("{}", db.durability().describe());
    /// # drop(db);
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    pub fn durability(&self) -> Durability {
        self.inner.pool.durability()
    }

    /// The pool file (`None` for [`Db::volatile`]).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// assert!(ferrite::Db::volatile(16 << 20)?.path().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn path(&self) -> Option<&Path> {
        self.inner.pool.path()
    }

    /// The ordered map named `name`, created empty if the pool has none. The
    /// same name always gives the same map (from Rust, C and Python alike);
    /// handles are shared, so calling this again is cheap.
    ///
    /// Opening a map that survived a crash completes or discards what was in
    /// flight (a write batch or transaction that was committed is applied).
    /// Errors: [`Error::WrongType`] when `name` is another kind of object,
    /// [`Error::NewerFormat`] when a newer Ferrite wrote it.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let a = db.map("users")?;
    /// a.insert("k", "v")?;
    /// assert!(db.map("users")?.contains("k")?); // the same map
    /// assert!(!db.map("orders")?.contains("k")?); // another one
    /// # Ok(())
    /// # }
    /// ```
    pub fn map(&self, name: &str) -> Result<Map> {
        if name.is_empty() {
            return Err(Error::Invalid("a map needs a non-empty name".into()));
        }
        let mut maps = self.inner.maps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = maps.get(name) {
            return Ok(m.clone());
        }
        let pool = &self.inner.pool;
        check_index_format(pool, name)?;
        let volatile = pool.durability() == Durability::Volatile;
        let idx = FerriteIndex::open_with(
            pool,
            name,
            &IndexOptions {
                no_persist: volatile,
            },
        )?;
        let id = pool.object(name, INDEX_TYPE)?;
        let m = Map::new(idx, name, pool.durability(), Some(id));
        maps.insert(name.to_string(), m.clone());
        Ok(m)
    }

    /// A new, empty ordered map in DRAM: the same code and API as
    /// [`Db::map`] without write-backs; nothing of it survives the process.
    /// Each call gives a separate map.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let cache = db.volatile_map()?;
    /// cache.upsert("session:1", "alice")?;
    /// assert_eq!(cache.durability(), ferrite::Durability::Volatile);
    /// # Ok(())
    /// # }
    /// ```
    pub fn volatile_map(&self) -> Result<Map> {
        let idx = FerriteIndex::volatile(VOLATILE_MAP_CAPACITY)?;
        Ok(Map::new(idx, "volatile", Durability::Volatile, None))
    }

    /// Opens the Elf table `name` (built earlier with [`Db::create_elf`] or
    /// `ferrite elf build`). [`Error::NotFound`] when there is none.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert!(matches!(db.elf("lineitem"), Err(ferrite::Error::NotFound { .. })));
    /// db.create_elf("lineitem", &[&[1, 2, 3], &[10, 20, 30]])?;
    /// assert_eq!(db.elf("lineitem")?.rows(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn elf(&self, name: &str) -> Result<ElfTable> {
        let mut elves = self.inner.elves.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = elves.get(name) {
            return Ok(t.clone());
        }
        let t = ElfTable::open(&self.inner.pool, name)?;
        elves.insert(name.to_string(), t.clone());
        Ok(t)
    }

    /// Builds an Elf table named `name` from its columns (one slice per
    /// column, all of the same length; row `i` gets row id `i`) and publishes
    /// it atomically. [`Error::Exists`] when `name` is taken.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let t = db.create_elf("t", &[&[5, 5, 7], &[1, 2, 3]])?;
    /// assert_eq!(t.query(&ferrite::ElfQuery::new().eq(0, 5))?, [0, 1]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn create_elf(&self, name: &str, columns: &[&[u32]]) -> Result<ElfTable> {
        let mut elves = self.inner.elves.lock().unwrap_or_else(|e| e.into_inner());
        let pool = &self.inner.pool;
        if elves.contains_key(name) || pool.objects().iter().any(|o| o.name == name) {
            return Err(Error::Exists { name: name.into() });
        }
        let t = ElfTable::create(pool, name, columns)?;
        elves.insert(name.to_string(), t.clone());
        Ok(t)
    }

    /// A persist barrier for the whole pool: see [`Map::flush`].
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// ferrite::Db::volatile(16 << 20)?.flush()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn flush(&self) -> Result<()> {
        Ok(self.inner.pool.fence()?)
    }

    /// Flushes and closes the pool, releasing its lock so that another
    /// process may open it. The pool closes only with the last handle of it:
    /// when `Map`s, `ElfTable`s, iterators, transactions or clones of this
    /// `Db` are still alive, this returns [`Error::StillOpen`] and the pool
    /// closes once they are dropped. Dropping every handle without calling
    /// `close` is as safe: every acknowledged write is already durable.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// # let path = format!("/dev/shm/ferrite-doc-close-{}.pool", std::process::id());
    /// let db = ferrite::Db::create(&path, 64 << 20)?;
    /// let m = db.map("m")?;
    /// m.insert("k", "v")?;
    /// assert!(matches!(db.clone().close(), Err(ferrite::Error::StillOpen { .. })));
    /// drop(m);
    /// db.close()?;
    /// let again = ferrite::Db::open(&path)?; // the lock is free again
    /// # drop(again);
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok(())
    /// # }
    /// ```
    pub fn close(self) -> Result<()> {
        self.flush()?;
        let mut handles = Arc::strong_count(&self.inner) - 1;
        {
            let maps = self.inner.maps.lock().unwrap_or_else(|e| e.into_inner());
            handles += maps.values().map(|m| m.handles() - 1).sum::<usize>();
            let elves = self.inner.elves.lock().unwrap_or_else(|e| e.into_inner());
            handles += elves.values().map(|t| t.handles() - 1).sum::<usize>();
        }
        if handles > 0 {
            return Err(Error::StillOpen { handles });
        }
        Ok(())
    }

    /// The pool under the database (for tools).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert_eq!(db.pool().size(), 16 << 20);
    /// # Ok(())
    /// # }
    /// ```
    #[doc(hidden)]
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }
}

/// Refuses to open an index object written in another format (root word 2
/// holds its format tag, `docs/FORMAT.md`), naming newer formats as such.
fn check_index_format(pool: &Pool, name: &str) -> Result<()> {
    let Ok(id) = pool.object(name, INDEX_TYPE) else {
        // Absent (created by the open) or of another type (the open says so).
        return Ok(());
    };
    if pool.root(id, 0) == 0 {
        return Ok(());
    }
    let tag = pool.root(id, 2);
    // Version 1 is read as it is (and retagged before its first long entry).
    if tag == FORMAT_TAG || tag == FORMAT_TAG_V1 {
        return Ok(());
    }
    let what = format!("map {name:?}");
    let (magic, version) = (tag >> 32, tag & 0xffff_ffff);
    if magic == FORMAT_TAG >> 32 {
        if version > FORMAT_VERSION {
            return Err(Error::NewerFormat {
                what,
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        return Err(Error::OlderFormat {
            what,
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    Err(Error::Corrupt {
        object: name.into(),
        detail: format!("format tag {tag:#x} is not an index's"),
    })
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.inner.pool.path())
            .field("durability", &self.inner.pool.durability().name())
            .finish()
    }
}
