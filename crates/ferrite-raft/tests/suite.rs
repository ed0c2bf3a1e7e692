//! openraft's own storage conformance suite, on every store.

use std::path::PathBuf;

use ferrite_pm::{Pool, PoolOptions};
use ferrite_raft::core::RaftCore;
use ferrite_raft::pm_store::{PmLogStore, PmStateMachine};
use ferrite_raft::types::StorageError;
use ferrite_raft::wal::{WalLogStore, WalStateMachine};
use ferrite_raft::{
    BTreeMap, BTreeOptions, CommitPolicy, ListMap, ListOptions, PmMap, PmStore, TypeConfig,
    WalStore,
};
use openraft::testing::{StoreBuilder, Suite};

fn pm_parts<M: PmMap>(map: M) -> (PmLogStore<M>, PmStateMachine<M>) {
    let core = RaftCore::open(map).expect("open core");
    PmStore::new(core, CommitPolicy::default(), "volatile".into()).parts()
}

fn pool() -> Pool {
    Pool::create_volatile(64 << 20, &PoolOptions::default()).expect("volatile pool")
}

struct ListBuilder;

impl StoreBuilder<TypeConfig, PmLogStore<ListMap>, PmStateMachine<ListMap>> for ListBuilder {
    async fn build(
        &self,
    ) -> Result<((), PmLogStore<ListMap>, PmStateMachine<ListMap>), StorageError> {
        let map = ListMap::open_or_create(&pool(), "raft", &ListOptions::default()).expect("list");
        let (l, s) = pm_parts(map);
        Ok(((), l, s))
    }
}

struct BTreeBuilder;

impl StoreBuilder<TypeConfig, PmLogStore<BTreeMap>, PmStateMachine<BTreeMap>> for BTreeBuilder {
    async fn build(
        &self,
    ) -> Result<((), PmLogStore<BTreeMap>, PmStateMachine<BTreeMap>), StorageError> {
        let map =
            BTreeMap::open_or_create(&pool(), "raft", &BTreeOptions::default()).expect("btree");
        let (l, s) = pm_parts(map);
        Ok(((), l, s))
    }
}

/// A directory on the real disk, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct WalBuilder;

impl StoreBuilder<TypeConfig, WalLogStore, WalStateMachine, TempDir> for WalBuilder {
    async fn build(&self) -> Result<(TempDir, WalLogStore, WalStateMachine), StorageError> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ferrite-wal-suite-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = WalStore::open(&dir).expect("wal");
        let (l, s) = store.parts();
        Ok((TempDir(dir), l, s))
    }
}

#[test]
fn list_store_passes_openraft_suite() {
    Suite::test_all(ListBuilder).expect("openraft storage suite");
}

#[test]
fn btree_store_passes_openraft_suite() {
    Suite::test_all(BTreeBuilder).expect("openraft storage suite");
}

#[test]
fn wal_store_passes_openraft_suite() {
    Suite::test_all(WalBuilder).expect("openraft storage suite");
}
