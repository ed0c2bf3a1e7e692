//! The index's cursor: positioned by key, each move a short forward scan or a
//! "largest key below" search on live data (no snapshot isolation).
//!
//! Invariant relied on: every move runs under the batch isolation of
//! `FerriteIndex::isolated`, so a move sees a write batch whole or not at all;
//! the position is a key, so moves stay correct across concurrent splits and
//! merges.

use ferrite_kv::{check_sizes, KvCursor, KvResult};

use super::FerriteIndex;
use crate::{MAX_KEY, MAX_VALUE};

enum Pos {
    Unpositioned,
    At(Vec<u8>),
    BeforeFirst,
    AfterLast,
}

/// A cursor over live data: each move reads the index as it is at that moment
/// (no snapshot isolation); it never returns a key twice in one direction.
pub(super) struct Cursor<'a> {
    idx: &'a FerriteIndex,
    pos: Pos,
}

type Entry = Option<(Vec<u8>, Vec<u8>)>;

impl Cursor<'_> {
    /// An unpositioned cursor over `idx`.
    pub(super) fn new(idx: &FerriteIndex) -> Cursor<'_> {
        Cursor {
            idx,
            pos: Pos::Unpositioned,
        }
    }

    fn forward(&mut self, start: &[u8], inclusive: bool) -> KvResult<Entry> {
        let mut got = None;
        self.idx.isolated(|| {
            got = None;
            self.idx
                .scan_impl(start, inclusive, 1, &mut |k: &[u8], v: &[u8]| {
                    got = Some((k.to_vec(), v.to_vec()))
                })
        })?;
        self.pos = match &got {
            Some((k, _)) => Pos::At(k.clone()),
            None => Pos::AfterLast,
        };
        Ok(got)
    }

    fn backward(&mut self, bound: Option<&[u8]>) -> KvResult<Entry> {
        let got = self.idx.isolated(|| self.idx.prev_entry(bound))?;
        self.pos = match &got {
            Some((k, _)) => Pos::At(k.clone()),
            None => Pos::BeforeFirst,
        };
        Ok(got)
    }
}

impl KvCursor for Cursor<'_> {
    fn seek(&mut self, key: &[u8]) -> KvResult<Entry> {
        check_sizes(key, None, MAX_KEY, MAX_VALUE)?;
        self.forward(key, true)
    }

    fn first(&mut self) -> KvResult<Entry> {
        self.forward(&[], true)
    }

    fn last(&mut self) -> KvResult<Entry> {
        self.backward(None)
    }

    fn next(&mut self) -> KvResult<Entry> {
        match std::mem::replace(&mut self.pos, Pos::Unpositioned) {
            Pos::At(k) => self.forward(&k, false),
            Pos::Unpositioned | Pos::BeforeFirst => self.first(),
            Pos::AfterLast => {
                self.pos = Pos::AfterLast;
                Ok(None)
            }
        }
    }

    fn prev(&mut self) -> KvResult<Entry> {
        match std::mem::replace(&mut self.pos, Pos::Unpositioned) {
            Pos::At(k) => self.backward(Some(&k)),
            Pos::Unpositioned | Pos::AfterLast => self.last(),
            Pos::BeforeFirst => {
                self.pos = Pos::BeforeFirst;
                Ok(None)
            }
        }
    }
}
