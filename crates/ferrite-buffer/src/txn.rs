//! Transactions: the table of running transactions (their undo lists, for
//! abort, checkpoints and restart) and exclusive key locks.
//!
//! Isolation: a transaction locks every key it writes until it ends (no-wait:
//! a key locked by another transaction is a [`BufferError::Conflict`], so
//! there are no deadlocks); a single operation outside a transaction fails the
//! same way on a locked key. This makes logical undo safe (no other writer
//! touched the key). Reads take no locks: they may see writes of transactions
//! that have not committed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{BufferError, Result};
use crate::manager::BufferManager;
use crate::wal::record::UndoEntry;

pub(crate) struct TxnInner {
    pub undo: Vec<UndoEntry>,
    pub locks: Vec<(u32, Vec<u8>)>,
    pub next_seq: u64,
    pub finished: bool,
}

/// A running transaction. Commit or abort it with
/// [`BufferManager::commit`] / [`BufferManager::abort`]; dropping it unfinished
/// aborts it.
pub struct Txn {
    pub(crate) id: u64,
    pub(crate) inner: Arc<Mutex<TxnInner>>,
    pub(crate) bm: Arc<BufferManager>,
}

impl Txn {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Operations logged so far (not counting undone ones).
    pub fn ops(&self) -> usize {
        self.inner.lock().unwrap().undo.len()
    }

    pub fn is_finished(&self) -> bool {
        self.inner.lock().unwrap().finished
    }
}

impl Drop for Txn {
    fn drop(&mut self) {
        if !self.is_finished() {
            let _ = self.bm.abort(self);
        }
    }
}

pub(crate) struct TxnTable {
    pub next_id: AtomicU64,
    pub active: Mutex<HashMap<u64, Arc<Mutex<TxnInner>>>>,
}

impl TxnTable {
    pub fn new() -> TxnTable {
        TxnTable {
            next_id: AtomicU64::new(1),
            active: Mutex::new(HashMap::new()),
        }
    }

    pub fn register(&self, id: u64, undo: Vec<UndoEntry>) -> Arc<Mutex<TxnInner>> {
        let next_seq = undo.iter().map(|e| e.seq).max().unwrap_or(0) + 1;
        let t = Arc::new(Mutex::new(TxnInner {
            undo,
            locks: Vec::new(),
            next_seq,
            finished: false,
        }));
        self.active.lock().unwrap().insert(id, t.clone());
        t
    }

    /// The undo lists of the running transactions (checkpoints).
    pub fn snapshot(&self) -> Vec<(u64, Vec<UndoEntry>)> {
        let mut v: Vec<_> = self
            .active
            .lock()
            .unwrap()
            .iter()
            .map(|(id, t)| (*id, t.lock().unwrap().undo.clone()))
            .filter(|(_, u)| !u.is_empty())
            .collect();
        v.sort_by_key(|t| t.0);
        v
    }
}

const SHARDS: usize = 64;

type LockMap = HashMap<(u32, Vec<u8>), u64>;

pub(crate) struct KeyLocks {
    shards: Box<[Mutex<LockMap>]>,
    held: AtomicUsize,
}

impl KeyLocks {
    pub fn new() -> KeyLocks {
        KeyLocks {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            held: AtomicUsize::new(0),
        }
    }

    fn shard(&self, tree: u32, key: &[u8]) -> &Mutex<LockMap> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ tree as u64;
        for &b in key {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        &self.shards[(h % SHARDS as u64) as usize]
    }

    /// Locks `key` of `tree` for `txn`; true when newly locked.
    pub fn lock(&self, tree: u32, key: &[u8], txn: u64) -> Result<bool> {
        let mut m = self.shard(tree, key).lock().unwrap();
        match m.get(&(tree, key.to_vec())) {
            Some(&h) if h == txn => Ok(false),
            Some(&h) => Err(BufferError::Conflict { holder: h }),
            None => {
                m.insert((tree, key.to_vec()), txn);
                self.held.fetch_add(1, Ordering::AcqRel);
                Ok(true)
            }
        }
    }

    /// The transaction holding `key`, if any.
    pub fn holder(&self, tree: u32, key: &[u8]) -> Option<u64> {
        if self.held.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.shard(tree, key)
            .lock()
            .unwrap()
            .get(&(tree, key.to_vec()))
            .copied()
    }

    pub fn unlock_all(&self, locks: &[(u32, Vec<u8>)], txn: u64) {
        for (tree, key) in locks {
            let mut m = self.shard(*tree, key).lock().unwrap();
            if m.get(&(*tree, key.clone())) == Some(&txn) {
                m.remove(&(*tree, key.clone()));
                self.held.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}
