//! The reference the crash checker compares with: what openraft would see
//! after a sequence of storage operations, computed with plain DRAM maps and
//! the WAL baseline's apply semantics.

use std::collections::BTreeMap;

use openraft::EntryPayload;

use ferrite_raft::types::{Command, Cond, Entry, LogId, SnapshotMeta, StoredMembership, Vote};

/// Everything openraft or a client can observe of a store.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Logical {
    pub vote: Option<Vote>,
    pub last_log: Option<LogId>,
    pub purged: Option<LogId>,
    /// Entries after the purged one, in order.
    pub log: Vec<Entry>,
    pub applied: Option<LogId>,
    pub membership: StoredMembership,
    /// The state machine at the applied index.
    pub state: BTreeMap<Vec<u8>, Vec<u8>>,
    pub live_keys: u64,
}

/// The model store.
#[derive(Debug, Clone, Default)]
pub struct Model {
    pub vote: Option<Vote>,
    pub purged: Option<LogId>,
    pub log: BTreeMap<u64, Entry>,
    pub applied: Option<LogId>,
    pub membership: StoredMembership,
    pub state: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// Applies a command to a DRAM map (the baseline's semantics).
pub fn apply_cmd(map: &mut BTreeMap<Vec<u8>, Vec<u8>>, c: &Command) {
    match c {
        Command::Set { key, value, cond } => {
            let cur = map.get(key);
            let ok = match cond {
                Cond::Always => true,
                Cond::Nx => cur.is_none(),
                Cond::Xx => cur.is_some(),
                Cond::IfEq(e) => cur == Some(e),
            };
            if ok {
                map.insert(key.clone(), value.clone());
            }
        }
        Command::Del { keys } => {
            for k in keys {
                map.remove(k);
            }
        }
    }
}

impl Model {
    pub fn last_log(&self) -> Option<LogId> {
        self.log
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.purged)
    }

    pub fn next_index(&self) -> u64 {
        self.last_log().map_or(0, |l| l.index + 1)
    }

    pub fn applied_index(&self) -> Option<u64> {
        self.applied.map(|a| a.index)
    }

    pub fn append(&mut self, entries: &[Entry]) {
        for e in entries {
            self.log.split_off(&e.log_id.index);
            self.log.insert(e.log_id.index, e.clone());
        }
    }

    pub fn truncate(&mut self, from: u64) {
        self.log.split_off(&from);
    }

    pub fn purge(&mut self, upto: LogId) {
        self.log = self.log.split_off(&(upto.index + 1));
        if self.purged.is_none_or(|p| p.index < upto.index) {
            self.purged = Some(upto);
        }
    }

    /// The state after the log up to `upto` (from the applied state).
    pub fn state_at(&self, upto: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut s = self.state.clone();
        let from = self.applied_index().map_or(0, |a| a + 1);
        for (_, e) in self.log.range(from..=upto) {
            if let EntryPayload::Normal(c) = &e.payload {
                apply_cmd(&mut s, c);
            }
        }
        s
    }

    /// The newest value of `key` (after the whole log).
    pub fn newest(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.state_at(u64::MAX).get(key).cloned()
    }

    pub fn apply(&mut self, upto: u64) {
        let from = self.applied_index().map_or(0, |a| a + 1);
        let es: Vec<Entry> = self
            .log
            .range(from..=upto)
            .map(|(_, e)| e.clone())
            .collect();
        for e in es {
            match &e.payload {
                EntryPayload::Normal(c) => apply_cmd(&mut self.state, c),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(e.log_id), m.clone())
                }
                EntryPayload::Blank => {}
            }
            self.applied = Some(e.log_id);
        }
    }

    pub fn install(&mut self, meta: &SnapshotMeta, items: &BTreeMap<Vec<u8>, Vec<u8>>) {
        let s = meta.last_log_id.map_or(0, |l| l.index);
        self.log = self.log.split_off(&(s + 1));
        self.state = items.clone();
        self.applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.purged = meta.last_log_id;
    }

    pub fn logical(&self) -> Logical {
        Logical {
            vote: self.vote,
            last_log: self.last_log(),
            purged: self.purged,
            log: self.log.values().cloned().collect(),
            applied: self.applied,
            membership: self.membership.clone(),
            state: self.state.clone(),
            live_keys: self.state.len() as u64,
        }
    }
}
