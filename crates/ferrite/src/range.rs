//! [`Range`]: the double-ended iterator of [`Map::range`](crate::Map::range).
//! Forward steps read chunks of entries with one index scan each; backward
//! steps find the largest key below the last one returned. Both ends keep
//! their position as a key, so the iterator stays correct across concurrent
//! splits and merges of the index.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

use ferrite_index::OrderedKv;

use crate::error::{Error, Result};
use crate::map::Map;

/// Entries fetched per forward index scan.
const FORWARD_CHUNK: usize = 64;
/// Entries fetched per backward refill (one index search each).
const BACKWARD_CHUNK: usize = 16;

type Entry = (Vec<u8>, Vec<u8>);

/// The entries of a key range of a [`Map`], in key order; from both ends.
///
/// It reads live data, a chunk at a time: it returns every key that is
/// present during the whole iteration exactly once, in order, and never a
/// key twice (also when `next` and `next_back` meet); a key written or
/// removed while it runs may or may not appear. Each chunk sees write batches
/// and transactions whole; a consistent view of several chunks is what a
/// [`Transaction`](crate::Transaction) gives. An error ends the iteration.
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// let m = db.map("m")?;
/// for i in 0u8..10 {
///     m.insert([i], [i * 10])?;
/// }
/// let mut r = m.range([2u8]..[6u8]);
/// assert_eq!(r.next().transpose()?, Some((vec![2], vec![20])));
/// assert_eq!(r.next_back().transpose()?, Some((vec![5], vec![50])));
/// assert_eq!(r.map(|e| e.map(|(k, _)| k[0])).collect::<Result<Vec<_>, _>>()?, [3, 4]);
/// # Ok(())
/// # }
/// ```
pub struct Range {
    map: Map,
    /// Lower end: the next forward entry is above (or at, when included) it.
    lo: Bound<Vec<u8>>,
    /// Upper end: the next backward entry is below (or at) it.
    hi: Bound<Vec<u8>>,
    front: VecDeque<Entry>,
    back: VecDeque<Entry>,
    /// No forward scan is needed any more: the front buffer holds everything
    /// up to the upper end.
    front_done: bool,
    /// Likewise for the back.
    back_done: bool,
    /// Nothing more will be returned.
    done: bool,
}

fn owned(b: Bound<&impl AsRef<[u8]>>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// `key` is at or above the lower end.
fn above(lo: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match lo {
        Bound::Included(l) => key >= l.as_slice(),
        Bound::Excluded(l) => key > l.as_slice(),
        Bound::Unbounded => true,
    }
}

/// `key` is at or below the upper end.
fn below(hi: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match hi {
        Bound::Included(h) => key <= h.as_slice(),
        Bound::Excluded(h) => key < h.as_slice(),
        Bound::Unbounded => true,
    }
}

impl Range {
    pub(crate) fn new<K: AsRef<[u8]>>(map: Map, r: &impl RangeBounds<K>) -> Range {
        Range {
            map,
            lo: owned(r.start_bound()),
            hi: owned(r.end_bound()),
            front: VecDeque::new(),
            back: VecDeque::new(),
            front_done: false,
            back_done: false,
            done: false,
        }
    }

    /// Reads the next forward chunk into `front`.
    fn fill_front(&mut self) -> Result<()> {
        let idx = self.map.index();
        let (start, skip): (&[u8], Option<&[u8]>) = match &self.lo {
            Bound::Included(k) => (k, None),
            Bound::Excluded(k) => (k, Some(k)),
            Bound::Unbounded => (&[], None),
        };
        let mut got = 0;
        let mut past_end = false;
        let (front, hi) = (&mut self.front, &self.hi);
        idx.scan(start, FORWARD_CHUNK + 1, &mut |k, v| {
            got += 1;
            if past_end || skip == Some(k) {
                return;
            }
            if !below(hi, k) {
                past_end = true;
                return;
            }
            front.push_back((k.to_vec(), v.to_vec()));
        })?;
        if past_end || got < FORWARD_CHUNK + 1 {
            self.front_done = true;
        }
        Ok(())
    }

    /// Reads the next backward chunk into `back`.
    fn fill_back(&mut self) -> Result<()> {
        let idx = self.map.index();
        let mut bound = match &self.hi {
            Bound::Included(k) => {
                // The upper key itself, then what lies below it.
                if let Some(v) = idx.get(k)? {
                    if above(&self.lo, k) {
                        self.back.push_back((k.clone(), v));
                    } else {
                        self.back_done = true;
                        return Ok(());
                    }
                }
                Some(k.clone())
            }
            Bound::Excluded(k) => Some(k.clone()),
            Bound::Unbounded => None,
        };
        while self.back.len() < BACKWARD_CHUNK {
            match idx.last_below(bound.as_deref())? {
                Some((k, v)) if above(&self.lo, &k) => {
                    bound = Some(k.clone());
                    self.back.push_back((k, v));
                }
                _ => {
                    self.back_done = true;
                    break;
                }
            }
        }
        Ok(())
    }

    /// The rest of the range's length, consuming it.
    pub(crate) fn count_remaining(mut self) -> Result<usize> {
        let mut n = 0;
        while !self.done {
            if self.front.is_empty() {
                if self.front_done {
                    break;
                }
                self.fill_front()?;
            }
            while let Some((k, _)) = self.front.pop_front() {
                n += 1;
                if self.front.is_empty() {
                    self.lo = Bound::Excluded(k);
                }
            }
        }
        Ok(n)
    }

    fn fail(&mut self, e: Error) -> Option<Result<Entry>> {
        self.done = true;
        self.front.clear();
        self.back.clear();
        Some(Err(e))
    }
}

impl Iterator for Range {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        if self.front.is_empty() {
            if !self.front_done {
                if let Err(e) = self.fill_front() {
                    return self.fail(e);
                }
            }
            if self.front.is_empty() {
                // The back buffer may still hold entries the back has not
                // returned: they come next, smallest first.
                match self.back.pop_back() {
                    Some(e) if above(&self.lo, &e.0) => {
                        self.lo = Bound::Excluded(e.0.clone());
                        return Some(Ok(e));
                    }
                    _ => {
                        self.done = true;
                        return None;
                    }
                }
            }
        }
        let e = self.front.pop_front()?;
        if !below(&self.hi, &e.0) {
            // The back end already returned this key.
            self.done = true;
            return None;
        }
        self.lo = Bound::Excluded(e.0.clone());
        Some(Ok(e))
    }
}

impl DoubleEndedIterator for Range {
    fn next_back(&mut self) -> Option<Result<Entry>> {
        if self.done {
            return None;
        }
        if self.back.is_empty() {
            if !self.back_done {
                if let Err(e) = self.fill_back() {
                    return self.fail(e);
                }
            }
            if self.back.is_empty() {
                match self.front.pop_back() {
                    Some(e) if below(&self.hi, &e.0) => {
                        self.hi = Bound::Excluded(e.0.clone());
                        return Some(Ok(e));
                    }
                    _ => {
                        self.done = true;
                        return None;
                    }
                }
            }
        }
        let e = self.back.pop_front()?;
        if !above(&self.lo, &e.0) {
            self.done = true;
            return None;
        }
        self.hi = Bound::Excluded(e.0.clone());
        Some(Ok(e))
    }
}

impl std::iter::FusedIterator for Range {}

impl std::fmt::Debug for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Range")
            .field("map", &self.map.name())
            .field("lo", &self.lo)
            .field("hi", &self.hi)
            .finish()
    }
}
