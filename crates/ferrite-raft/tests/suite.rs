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

fn pm_parts<M: PmMap>(map: M, policy: CommitPolicy) -> (PmLogStore<M>, PmStateMachine<M>) {
    let core = RaftCore::open(map).expect("open core");
    PmStore::new(core, policy, "volatile".into()).parts()
}

/// Groups of 10 committed by the background thread after 20 µs: the
/// deferred path the default (k = 1, inline) does not take.
fn deferred() -> CommitPolicy {
    CommitPolicy {
        every: 10,
        interval: std::time::Duration::from_micros(20),
    }
}

fn pool() -> Pool {
    Pool::create_volatile(64 << 20, &PoolOptions::default()).expect("volatile pool")
}

struct ListBuilder(CommitPolicy);

impl StoreBuilder<TypeConfig, PmLogStore<ListMap>, PmStateMachine<ListMap>> for ListBuilder {
    async fn build(
        &self,
    ) -> Result<((), PmLogStore<ListMap>, PmStateMachine<ListMap>), StorageError> {
        let map = ListMap::open_or_create(&pool(), "raft", &ListOptions::default()).expect("list");
        let (l, s) = pm_parts(map, self.0);
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
        let (l, s) = pm_parts(map, deferred());
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
    Suite::test_all(ListBuilder(CommitPolicy::default())).expect("openraft storage suite");
}

#[test]
fn list_store_with_deferred_group_commit_passes_openraft_suite() {
    Suite::test_all(ListBuilder(deferred())).expect("openraft storage suite");
}

#[test]
fn btree_store_passes_openraft_suite() {
    Suite::test_all(BTreeBuilder).expect("openraft storage suite");
}

#[test]
fn wal_store_passes_openraft_suite() {
    Suite::test_all(WalBuilder).expect("openraft storage suite");
}
