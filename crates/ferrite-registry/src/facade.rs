//! The `ferrite` facade's [`Map`] as an [`OrderedKv`], through the facade's own
//! API (its writer gate included), so that the benchmarks measure what an
//! embedding program gets.

use std::ops::Bound;

use ferrite::{Batch, Error, Map};
use ferrite_kv::{BatchOp, KvCursor, KvError, KvResult, OrderedKv, WriteBatch};

/// A facade error in the key-value interface's terms.
fn kv(e: Error) -> KvError {
    match e {
        Error::KeyTooLarge { len, max } => KvError::KeyTooLarge { len, max },
        Error::ValueTooLarge { len, max } => KvError::ValueTooLarge { len, max },
        Error::Corrupt { object, detail } => KvError::Corrupt { object, detail },
        e => KvError::storage(e),
    }
}

/// A facade map behind the [`OrderedKv`] interface.
pub struct FacadeKv(pub Map);

impl OrderedKv for FacadeKv {
    fn name(&self) -> &str {
        "ferrite-facade"
    }
    fn limits(&self) -> (usize, usize) {
        (ferrite::MAX_KEY, ferrite::MAX_VALUE)
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        self.0.get_into(key, out).map_err(kv)
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.0.insert(key, value).map_err(kv)
    }
    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.0.update(key, value).map_err(kv)
    }
    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.0.upsert(key, value).map_err(kv)
    }
    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        self.0.remove(key).map_err(kv)
    }
    fn count(&self) -> usize {
        self.0.len()
    }
    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        self.0.scan(start, n, f).map_err(kv)
    }
    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        let mut b = Batch::new();
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => b.put(key, value),
                BatchOp::Delete { key } => b.remove(key),
            };
        }
        self.0.apply(&b).map_err(kv)
    }
    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Ok(Box::new(FacadeCursor {
            map: &self.0,
            pos: Pos::Unpositioned,
        }))
    }
}

enum Pos {
    Unpositioned,
    At(Vec<u8>),
    BeforeFirst,
    AfterLast,
}

type Entry = Option<(Vec<u8>, Vec<u8>)>;

/// A cursor of one-step facade ranges over live data.
struct FacadeCursor<'a> {
    map: &'a Map,
    pos: Pos,
}

impl FacadeCursor<'_> {
    fn forward(&mut self, from: Bound<Vec<u8>>) -> KvResult<Entry> {
        let got = self
            .map
            .range((from, Bound::Unbounded))
            .next()
            .transpose()
            .map_err(kv)?;
        self.pos = got
            .as_ref()
            .map_or(Pos::AfterLast, |e| Pos::At(e.0.clone()));
        Ok(got)
    }
    fn backward(&mut self, below: Bound<Vec<u8>>) -> KvResult<Entry> {
        let got = self
            .map
            .range((Bound::Unbounded, below))
            .next_back()
            .transpose()
            .map_err(kv)?;
        self.pos = got
            .as_ref()
            .map_or(Pos::BeforeFirst, |e| Pos::At(e.0.clone()));
        Ok(got)
    }
}

impl KvCursor for FacadeCursor<'_> {
    fn seek(&mut self, key: &[u8]) -> KvResult<Entry> {
        ferrite_kv::check_sizes(key, None, ferrite::MAX_KEY, ferrite::MAX_VALUE)?;
        self.forward(Bound::Included(key.to_vec()))
    }
    fn first(&mut self) -> KvResult<Entry> {
        self.forward(Bound::Unbounded)
    }
    fn last(&mut self) -> KvResult<Entry> {
        self.backward(Bound::Unbounded)
    }
    fn next(&mut self) -> KvResult<Entry> {
        match std::mem::replace(&mut self.pos, Pos::Unpositioned) {
            Pos::At(k) => self.forward(Bound::Excluded(k)),
            Pos::Unpositioned | Pos::BeforeFirst => self.first(),
            Pos::AfterLast => {
                self.pos = Pos::AfterLast;
                Ok(None)
            }
        }
    }
    fn prev(&mut self) -> KvResult<Entry> {
        match std::mem::replace(&mut self.pos, Pos::Unpositioned) {
            Pos::At(k) => self.backward(Bound::Excluded(k)),
            Pos::Unpositioned | Pos::AfterLast => self.last(),
            Pos::BeforeFirst => {
                self.pos = Pos::BeforeFirst;
                Ok(None)
            }
        }
    }
}
