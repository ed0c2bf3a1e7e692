//! [`Database`]: a buffer manager with B-trees in it (opened by name from its
//! catalog), [`Transaction`]s over several operations, and the store-wide
//! check used by tests and the crash checker.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ferrite_buffer::{
    BufferConfig, BufferError, BufferManager, CatalogEntry, Ctx, DirectFiles, Hint, Mode,
    RestartReport, SsdBackend, Txn,
};
use ferrite_kv::{check_sizes, KvResult};
use ferrite_pm::{Pool, PoolOptions};

use crate::node::{self, INNER, LEAF};
use crate::registry::{TreeRegistry, Trees, BTREE_KIND};
use crate::tree::{Kind, TreeInner};
use crate::{kv_err, BTree};

pub(crate) struct DbInner {
    pub bm: Arc<BufferManager>,
    pub registry: Arc<TreeRegistry>,
    create: Mutex<()>,
    report: RestartReport,
}

/// A store of named B-trees on a buffer manager. Cheap to clone.
#[derive(Clone)]
pub struct Database {
    pub(crate) inner: Arc<DbInner>,
}

/// Opens the tree of catalog entry `e` (checks its root, pins it in DRAM).
pub(crate) fn open_tree(
    bm: &BufferManager,
    e: &CatalogEntry,
    label: &str,
) -> ferrite_buffer::Result<Arc<TreeInner>> {
    if e.kind != BTREE_KIND {
        return Err(BufferError::Invalid(format!(
            "{:?} is a structure of kind {}, not a B-tree",
            e.name, e.kind
        )));
    }
    let _r = bm.reader();
    let mut g = bm.fix(e.root, Mode::Shared, Hint::Whole)?;
    let k = g.kind()?;
    node::header(&mut g)?;
    if (k != LEAF && k != INNER) || g.u32_at(node::OFF_TREE)? != e.id {
        return Err(BufferError::corrupt(
            format!("B-tree {:?}", e.name),
            format!("root page {} is not this tree's node", e.root),
        ));
    }
    g.pin(true);
    let (max_key, max_value) = node::limits(bm.page_size());
    Ok(Arc::new(TreeInner {
        id: e.id,
        name: e.name.clone(),
        root: e.root,
        label: label.to_string(),
        max_key,
        max_value,
        root_frame: std::sync::atomic::AtomicU32::new(u32::MAX),
    }))
}

impl Database {
    /// Opens the store `name` in `pool` (creating it when absent), with SSD
    /// page files behind `ssd` when the configuration has an SSD tier, and
    /// runs restart (see [`Database::restart_report`]).
    pub fn open(
        pool: &Pool,
        name: &str,
        ssd: Option<Arc<dyn SsdBackend>>,
        cfg: BufferConfig,
    ) -> KvResult<Database> {
        let trees: Trees = Arc::default();
        let label = format!("btree-{}", cfg.design.name());
        let registry = Arc::new(TreeRegistry { trees, label });
        let (bm, report) =
            BufferManager::open(pool, name, ssd, cfg, registry.clone()).map_err(kv_err)?;
        Ok(Database {
            inner: Arc::new(DbInner {
                bm,
                registry,
                create: Mutex::new(()),
                report,
            }),
        })
    }

    /// Opens (creating) a store on files: the PM pool at `pool_path` (created
    /// with [`BufferConfig::pool_bytes`] when absent; on `/dev/shm` it is
    /// emulated PM) and, for designs with an SSD tier, the page files in
    /// `ssd_dir` (`O_DIRECT` where the filesystem allows it).
    pub fn open_files(
        pool_path: &Path,
        ssd_dir: Option<&Path>,
        cfg: BufferConfig,
    ) -> KvResult<Database> {
        let pool = if pool_path.exists() {
            Pool::open(pool_path, &PoolOptions::default())
        } else {
            Pool::create(pool_path, cfg.pool_bytes(), &PoolOptions::default())
        }
        .map_err(|e| kv_err(e.into()))?;
        let ssd: Option<Arc<dyn SsdBackend>> = match (cfg.ssd_pages, ssd_dir) {
            (0, _) => None,
            (_, None) => {
                return Err(kv_err(BufferError::Config(
                    "the configuration has an SSD tier: give a directory for its page files".into(),
                )))
            }
            (_, Some(d)) => Some(Arc::new(DirectFiles::open(d, cfg.page_size).map_err(
                |e| {
                    kv_err(BufferError::Io {
                        op: "open",
                        path: d.to_path_buf(),
                        source: e,
                    })
                },
            )?)),
        };
        Database::open(&pool, "store", ssd, cfg)
    }

    pub fn buffer(&self) -> &Arc<BufferManager> {
        &self.inner.bm
    }

    /// What the restart at open did and how long each phase took.
    pub fn restart_report(&self) -> &RestartReport {
        &self.inner.report
    }

    /// The tree `name`, created empty when absent.
    pub fn tree(&self, name: &str) -> KvResult<BTree> {
        let bm = &self.inner.bm;
        let _one = self.inner.create.lock().unwrap();
        let cat = bm.catalog().map_err(kv_err)?;
        let id = match cat.iter().find(|e| e.name == name) {
            Some(e) => e.id,
            None => self.create_tree(name).map_err(kv_err)?,
        };
        let t = self.inner.registry.tree(bm, id).map_err(kv_err)?;
        Ok(BTree {
            db: self.inner.clone(),
            inner: t,
        })
    }

    fn create_tree(&self, name: &str) -> ferrite_buffer::Result<u32> {
        let bm = &self.inner.bm;
        let mut op = bm.begin_op(Ctx::System, 2, 0)?;
        let mut meta = op.fix_meta(Mode::Exclusive)?;
        let mut root = op.alloc_page(&mut meta, LEAF)?;
        node::init(&mut root, 0, 0)?;
        let id = op.catalog_add(&mut meta, name, BTREE_KIND, root.pid())?;
        root.put_u32(node::OFF_TREE, id)?;
        op.log(&mut [&mut meta, &mut root], None)?;
        drop(root);
        drop(meta);
        op.finish()?;
        Ok(id)
    }

    /// Names of the trees in the store.
    pub fn tree_names(&self) -> KvResult<Vec<String>> {
        Ok(self
            .inner
            .bm
            .catalog()
            .map_err(kv_err)?
            .into_iter()
            .map(|e| e.name)
            .collect())
    }

    /// Begins a transaction.
    pub fn begin(&self) -> Transaction {
        Transaction {
            txn: Some(self.inner.bm.begin()),
            db: self.inner.clone(),
        }
    }

    pub fn checkpoint(&self) -> KvResult<()> {
        self.inner.bm.checkpoint().map_err(kv_err)
    }

    /// Writes every page newer in PM than on SSD to SSD and marks the PM
    /// copies clean (after a checkpoint); the pages written
    /// ([`ferrite_buffer::BufferManager::write_pm_to_ssd`]).
    pub fn write_pm_to_ssd(&self) -> KvResult<u64> {
        self.inner.bm.write_pm_to_ssd().map_err(kv_err)
    }

    /// A clean close (a checkpoint): the next open redoes nothing.
    pub fn close(&self) -> KvResult<()> {
        self.inner.bm.close().map_err(kv_err)
    }

    /// Checks every tree's structure and that every page id below the next
    /// unallocated one is used exactly once: by a tree, by the free list, or
    /// as the meta page (page 0). Returns the trees' shapes.
    pub fn check(&self) -> Result<Vec<(String, crate::TreeShape)>, String> {
        let bm = &self.inner.bm;
        let mut owner: HashSet<u64> = HashSet::new();
        owner.insert(0);
        let mut shapes = Vec::new();
        for e in bm.catalog().map_err(|e| e.to_string())? {
            let t = self
                .inner
                .registry
                .tree(bm, e.id)
                .map_err(|e| e.to_string())?;
            let shape = t.check(bm).map_err(|m| format!("tree {:?}: {m}", e.name))?;
            for &p in &shape.pages {
                if !owner.insert(p) {
                    return Err(format!("page {p} is used twice (tree {:?})", e.name));
                }
            }
            shapes.push((e.name.clone(), shape));
        }
        for p in bm.free_pages().map_err(|e| e.to_string())? {
            if !owner.insert(p) {
                return Err(format!("free page {p} is also in use"));
            }
        }
        let (next, _) = bm.allocation_state().map_err(|e| e.to_string())?;
        for p in 0..next {
            if !owner.contains(&p) {
                return Err(format!(
                    "page {p} is allocated but neither in a tree nor free: leaked"
                ));
            }
        }
        if let Some(p) = owner.iter().find(|&&p| p >= next) {
            return Err(format!(
                "page {p} is in use but at or beyond the next page id {next}"
            ));
        }
        Ok(shapes)
    }
}

/// A transaction over one or more trees of a [`Database`]: writes take
/// exclusive key locks (no-wait: a key another transaction holds is an error,
/// see [`crate::is_conflict`]); commit makes them durable, abort (or drop)
/// undoes them. Reads see the latest data, committed or not.
pub struct Transaction {
    txn: Option<Txn>,
    db: Arc<DbInner>,
}

impl Transaction {
    fn txn(&self) -> &Txn {
        self.txn.as_ref().expect("live until commit or abort")
    }

    pub fn id(&self) -> u64 {
        self.txn().id()
    }

    fn write(&self, tree: &BTree, kind: Kind, key: &[u8], value: Option<&[u8]>) -> KvResult<bool> {
        let (mk, mv) = (tree.inner.max_key, tree.inner.max_value);
        check_sizes(key, value, mk, mv)?;
        tree.inner
            .write(
                &self.db.bm,
                Ctx::Txn(self.txn()),
                kind,
                key,
                value.unwrap_or(&[]),
            )
            .map_err(kv_err)
    }

    /// Inserts a new key; false when it exists.
    pub fn insert(&self, tree: &BTree, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.write(tree, Kind::Insert, key, Some(value))
    }

    /// Replaces an existing key's value; false when absent.
    pub fn update(&self, tree: &BTree, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.write(tree, Kind::Update, key, Some(value))
    }

    /// Inserts or replaces; true when the key was new.
    pub fn upsert(&self, tree: &BTree, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.write(tree, Kind::Upsert, key, Some(value))
    }

    /// Removes a key; false when absent.
    pub fn remove(&self, tree: &BTree, key: &[u8]) -> KvResult<bool> {
        self.write(tree, Kind::Remove, key, None)
    }

    /// Overwrites part of an existing key's value in place (see
    /// [`BTree::update_part`]); false when absent. Undone on abort.
    pub fn update_part(
        &self,
        tree: &BTree,
        key: &[u8],
        off: usize,
        bytes: &[u8],
    ) -> KvResult<bool> {
        check_sizes(key, None, tree.inner.max_key, tree.inner.max_value)?;
        tree.inner
            .patch(&self.db.bm, Ctx::Txn(self.txn()), key, off, bytes)
            .map_err(kv_err)
    }

    /// Operations done so far.
    pub fn ops(&self) -> usize {
        self.txn().ops()
    }

    /// Commits: durable when this returns.
    pub fn commit(mut self) -> KvResult<()> {
        let t = self.txn.take().expect("live");
        self.db.bm.commit(&t).map_err(kv_err)
    }

    /// Aborts: every write undone.
    pub fn abort(mut self) -> KvResult<()> {
        let t = self.txn.take().expect("live");
        self.db.bm.abort(&t).map_err(kv_err)
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if let Some(t) = self.txn.take() {
            let _ = self.db.bm.abort(&t);
        }
    }
}
