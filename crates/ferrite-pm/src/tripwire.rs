//! Tripwires: test-only switches that deliberately break one crash-consistency
//! step of one structure (drop a fence, skip a flush, publish too early), so
//! that each structure's crash test can show it catches the breakage. A crash
//! checker that stopped checking would then fail CI instead of passing quietly.
//!
//! Switches are per thread (the crash simulator runs a workload on one thread,
//! and tests run in parallel in one process), off unless a test turns one on
//! with [`arm`]; checking one is a thread-local read. They are compiled into
//! every build so that `ferrite crash-test TARGET --tripwire NAME` can show a
//! user the checker at work.

use std::cell::Cell;

/// Every tripwire Ferrite has. Names are `structure.what-breaks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Tripwire {
    /// The allocator hands out a freed block before the freeing thread's next
    /// fence (its unlink may not be durable yet).
    HeapNoLimbo,
    /// A new directory entry's state word is written before the entry itself
    /// is persisted.
    DirectoryStateFirst,
    /// Logs: the commit (footer, size or validity) is not separated from the
    /// payload by a barrier / the payload is not written back.
    LogSkipPayloadFlush,
    /// Page store, copy-on-write: the new copy's header is published without
    /// the barrier that makes its data durable first.
    PageCowNoDataFence,
    /// In-place updates: the new value is not written back before the update
    /// returns.
    InplaceSkipFlush,
    /// Elf: the new generation's root is published before its data is durable.
    ElfPublishBeforeFence,
    /// Index: an inserted entry's line is not written back.
    IndexSkipInsertFlush,
    /// Index: a single-key write that overlapped a write batch is acknowledged
    /// without waiting for the batch's log to be retired.
    IndexBatchNoWait,
    /// Index: an inserted long entry's line header is stored before the
    /// entry's third key word (bytes 16..24 of the key).
    IndexLongHeaderFirst,
    /// Raft list store: a group commit publishes the tail without writing
    /// the group's records back.
    RaftListSkipFlush,
    /// Raft list store: the tail is published before the fence that makes
    /// the group's records durable.
    RaftListPublishBeforeFence,
    /// Raft list store: the clean-up pass moves the head past a page before
    /// the copies of its live records are durable.
    RaftListCleanBeforeCommit,
    /// Raft list store: a snapshot's records are copied into the staging
    /// pages with plain stores (not written back) instead of non-temporal
    /// ones.
    RaftListRecordsNoWriteBack,
    /// Raft B+-tree store: a group commit publishes the root without writing
    /// the new nodes back.
    RaftBtreeSkipFlush,
    /// Raft B+-tree store: the root is published before the fence that makes
    /// the new nodes durable.
    RaftBtreePublishBeforeFence,
    /// Buffer manager: a commit returns without forcing the log.
    BufferSkipCommitForce,
    /// Buffer manager: a page is written to PM or SSD before the log records
    /// that changed it are durable (the write-ahead rule broken).
    BufferSkipWalRule,
    /// Buffer manager: PM eviction clears a frame before the page it wrote to
    /// SSD is synced.
    BufferInvalidateBeforeSync,
    /// Buffer manager: `write_pm_to_ssd` marks PM frames clean before the
    /// pages it wrote to SSD are synced.
    BufferCleanBeforeSync,
    /// Buffer manager: restart does not undo loser transactions.
    BufferSkipUndo,
    /// Facade transactions: a commit applies its writes one by one instead of
    /// through the index's logged write batch.
    TxnUnbatchedCommit,
}

impl Tripwire {
    pub const ALL: [Tripwire; 21] = [
        Tripwire::HeapNoLimbo,
        Tripwire::DirectoryStateFirst,
        Tripwire::LogSkipPayloadFlush,
        Tripwire::PageCowNoDataFence,
        Tripwire::InplaceSkipFlush,
        Tripwire::ElfPublishBeforeFence,
        Tripwire::IndexSkipInsertFlush,
        Tripwire::IndexBatchNoWait,
        Tripwire::IndexLongHeaderFirst,
        Tripwire::RaftListSkipFlush,
        Tripwire::RaftListPublishBeforeFence,
        Tripwire::RaftListCleanBeforeCommit,
        Tripwire::RaftListRecordsNoWriteBack,
        Tripwire::RaftBtreeSkipFlush,
        Tripwire::RaftBtreePublishBeforeFence,
        Tripwire::BufferSkipCommitForce,
        Tripwire::BufferSkipWalRule,
        Tripwire::BufferInvalidateBeforeSync,
        Tripwire::BufferCleanBeforeSync,
        Tripwire::BufferSkipUndo,
        Tripwire::TxnUnbatchedCommit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Tripwire::HeapNoLimbo => "heap.no-limbo",
            Tripwire::DirectoryStateFirst => "directory.state-first",
            Tripwire::LogSkipPayloadFlush => "log.skip-payload-flush",
            Tripwire::PageCowNoDataFence => "page.cow-no-data-fence",
            Tripwire::InplaceSkipFlush => "inplace.skip-flush",
            Tripwire::ElfPublishBeforeFence => "elf.publish-before-fence",
            Tripwire::IndexSkipInsertFlush => "index.skip-insert-flush",
            Tripwire::IndexBatchNoWait => "index.batch-no-wait",
            Tripwire::IndexLongHeaderFirst => "index.long-header-first",
            Tripwire::RaftListSkipFlush => "raft-list.skip-flush",
            Tripwire::RaftListPublishBeforeFence => "raft-list.publish-before-fence",
            Tripwire::RaftListCleanBeforeCommit => "raft-list.clean-before-commit",
            Tripwire::RaftListRecordsNoWriteBack => "raft-list.records-no-write-back",
            Tripwire::RaftBtreeSkipFlush => "raft-btree.skip-flush",
            Tripwire::RaftBtreePublishBeforeFence => "raft-btree.publish-before-fence",
            Tripwire::BufferSkipCommitForce => "buffer.skip-commit-force",
            Tripwire::BufferSkipWalRule => "buffer.skip-wal-rule",
            Tripwire::BufferInvalidateBeforeSync => "buffer.invalidate-before-sync",
            Tripwire::BufferCleanBeforeSync => "buffer.clean-before-sync",
            Tripwire::BufferSkipUndo => "buffer.skip-undo",
            Tripwire::TxnUnbatchedCommit => "txn.unbatched-commit",
        }
    }

    pub fn parse(s: &str) -> Option<Tripwire> {
        Tripwire::ALL.into_iter().find(|t| t.name() == s)
    }

    fn bit(self) -> u64 {
        1 << Tripwire::ALL
            .iter()
            .position(|&t| t == self)
            .expect("listed")
    }
}

thread_local! {
    static ARMED: Cell<u64> = const { Cell::new(0) };
}

/// Turns `t` on or off for the current thread.
pub fn arm(t: Tripwire, on: bool) {
    ARMED.with(|a| {
        let b = t.bit();
        a.set(if on { a.get() | b } else { a.get() & !b });
    });
}

/// Whether `t` is on for the current thread.
#[inline]
pub fn armed(t: Tripwire) -> bool {
    ARMED.with(|a| a.get() & t.bit() != 0)
}

/// Runs `f` with `t` armed on this thread, disarming it afterwards (also on
/// panic).
pub fn with<R>(t: Tripwire, f: impl FnOnce() -> R) -> R {
    struct Disarm(Tripwire);
    impl Drop for Disarm {
        fn drop(&mut self) {
            arm(self.0, false);
        }
    }
    arm(t, true);
    let _d = Disarm(t);
    f()
}
