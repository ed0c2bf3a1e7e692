//! The page table: page id → DRAM frame and PM frame (thesis §4.3).
//!
//! *Combined* (the thesis's design): one hash map per shard whose entry holds
//! both locations, so a page that is not in DRAM is found in PM by the same
//! probe. *Separate*: a DRAM map and a PM map, probed in turn (two lookups for
//! a PM-resident page). Either way the map is split into 64 shards, each behind
//! a mutex; every change of a page's location happens under its shard's lock.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, MutexGuard};

use crate::frame::NO_FRAME;

/// A multiplicative hash for page ids.
#[derive(Default, Clone, Copy)]
pub(crate) struct PidHasher(u64);

impl Hasher for PidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (v ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

type Map<V> = HashMap<u64, V, BuildHasherDefault<PidHasher>>;

/// Where a page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub dram: u32,
    pub pm: u32,
    /// Its PM frame is being evicted: wait, then look again.
    pub evicting: bool,
}

impl Entry {
    pub const NONE: Entry = Entry {
        dram: NO_FRAME,
        pm: NO_FRAME,
        evicting: false,
    };
    pub fn dram(&self) -> Option<u32> {
        (self.dram != NO_FRAME).then_some(self.dram)
    }
    pub fn pm(&self) -> Option<u32> {
        (self.pm != NO_FRAME).then_some(self.pm)
    }
}

/// One shard.
pub(crate) struct Shard {
    combined: bool,
    both: Map<Entry>,
    dram: Map<u32>,
    pm: Map<(u32, bool)>,
}

impl Shard {
    /// Both locations (separate tables: both maps probed).
    pub fn get(&self, pid: u64) -> Entry {
        if self.combined {
            return self.both.get(&pid).copied().unwrap_or(Entry::NONE);
        }
        let dram = self.dram.get(&pid).copied().unwrap_or(NO_FRAME);
        let (pm, evicting) = self.pm.get(&pid).copied().unwrap_or((NO_FRAME, false));
        Entry { dram, pm, evicting }
    }

    /// The lookup of a fix: with separate tables the PM map is probed only
    /// when the DRAM map misses (the thesis's two lookups).
    #[inline]
    pub fn lookup(&self, pid: u64) -> Entry {
        if self.combined {
            return self.both.get(&pid).copied().unwrap_or(Entry::NONE);
        }
        if let Some(&d) = self.dram.get(&pid) {
            return Entry {
                dram: d,
                pm: NO_FRAME,
                evicting: false,
            };
        }
        let (pm, evicting) = self.pm.get(&pid).copied().unwrap_or((NO_FRAME, false));
        Entry {
            dram: NO_FRAME,
            pm,
            evicting,
        }
    }

    pub fn put(&mut self, pid: u64, e: Entry) {
        if self.combined {
            if e == Entry::NONE {
                self.both.remove(&pid);
            } else {
                self.both.insert(pid, e);
            }
            return;
        }
        if e.dram == NO_FRAME {
            self.dram.remove(&pid);
        } else {
            self.dram.insert(pid, e.dram);
        }
        if e.pm == NO_FRAME {
            self.pm.remove(&pid);
        } else {
            self.pm.insert(pid, (e.pm, e.evicting));
        }
    }

    pub fn len(&self) -> usize {
        if self.combined {
            self.both.len()
        } else {
            self.dram.len() + self.pm.len()
        }
    }
}

const SHARDS: usize = 64;

pub(crate) struct PageTable {
    shards: Box<[Mutex<Shard>]>,
}

impl PageTable {
    pub fn new(combined: bool) -> PageTable {
        PageTable {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        combined,
                        both: Map::default(),
                        dram: Map::default(),
                        pm: Map::default(),
                    })
                })
                .collect(),
        }
    }

    #[inline]
    pub fn shard(&self, pid: u64) -> MutexGuard<'_, Shard> {
        let i = (pid.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 58) as usize % SHARDS;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Entries (diagnostics).
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_and_separate_tables_agree() {
        for combined in [true, false] {
            let t = PageTable::new(combined);
            let e = Entry {
                dram: 3,
                pm: 9,
                evicting: false,
            };
            t.shard(77).put(77, e);
            assert_eq!(t.shard(77).get(77), e);
            assert_eq!(t.shard(77).lookup(77).dram, 3);
            t.shard(77).put(
                77,
                Entry {
                    dram: NO_FRAME,
                    ..e
                },
            );
            assert_eq!(t.shard(77).lookup(77).pm, 9);
            t.shard(77).put(77, Entry::NONE);
            assert_eq!(t.shard(77).get(77), Entry::NONE);
            assert_eq!(t.len(), 0);
        }
    }
}
