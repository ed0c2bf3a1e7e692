//! A crash-recovery oracle for any [`OrderedKv`]: after a crash and recovery,
//! the store must hold exactly the effect of the acknowledged operations, plus
//! the operation that was in flight at the crash either completely or not at
//! all (a write batch included: never part of it).
//!
//! Only `std` is needed: the crash itself (images, journals, points) is the
//! business of a crash simulator such as `ferrite_pm::explore`; this module
//! turns its journal into expected contents and compares a recovered store
//! with them. What differs between implementations (how to open a crash image,
//! which structural and space invariants to check) comes in through
//! [`Recovery`].
//!
//! A workload journals each operation by its *effect* ([`Op`]): an insert of an
//! existing key or an update of an absent one is an [`Op::Nop`], so the oracle
//! needs no knowledge of the store's semantics beyond "put" and "delete".
//!
//! The check, in order ([`check_recovered`], which returns the recovered
//! contents so that a crash simulator can compare two recoveries): the store opens; a full scan
//! equals the acknowledged contents, or those plus the in-flight operation;
//! every scanned key reads back its value with `get`; `count` equals the number
//! of scanned keys; then [`Recovery::check_structure`] and
//! [`Recovery::check_space`].

use std::collections::BTreeMap;

use crate::{BatchOp, KvResult, OrderedKv};

/// An operation as the oracle sees it: its effect on the contents.
#[derive(Debug, Clone)]
pub enum Op {
    /// Creating or opening the store (no effect on the contents).
    Setup,
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    /// A write batch: all of it or none of it.
    Batch(Vec<BatchOp>),
    /// An operation that must not change anything (insert of an existing key,
    /// update or removal of an absent one).
    Nop,
}

/// Contents of a store: key to value.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Applies the effect of `op` to `m`.
pub fn apply(m: &mut Model, op: &Op) {
    match op {
        Op::Setup | Op::Nop => {}
        Op::Put(k, v) => {
            m.insert(k.clone(), v.clone());
        }
        Op::Del(k) => {
            m.remove(k);
        }
        Op::Batch(ops) => {
            for o in ops {
                match o {
                    BatchOp::Put { key, value } => {
                        m.insert(key.clone(), value.clone());
                    }
                    BatchOp::Delete { key } => {
                        m.remove(key);
                    }
                }
            }
        }
    }
}

/// The contents a recovered store may have: `before` (the acknowledged
/// operations) or `after` (those plus the operation in flight, if any).
#[derive(Debug, Clone)]
pub struct Expected {
    pub before: Model,
    pub after: Option<Model>,
}

impl Expected {
    /// The contents allowed after `acked` operations, with `in_flight` cut
    /// somewhere.
    pub fn new(acked: &[Op], in_flight: Option<&Op>) -> Expected {
        let mut before = Model::new();
        for op in acked {
            apply(&mut before, op);
        }
        let after = in_flight.map(|op| {
            let mut a = before.clone();
            apply(&mut a, op);
            a
        });
        Expected { before, after }
    }

    /// Whether `got` is one of the allowed contents.
    pub fn admits(&self, got: &Model) -> bool {
        *got == self.before || self.after.as_ref() == Some(got)
    }
}

/// The first difference between recovered contents `got` and the acknowledged
/// contents `want`, in words.
pub fn describe(got: &Model, want: &Model) -> String {
    for (k, v) in want {
        match got.get(k) {
            None => return format!("acknowledged key {k:?} is missing"),
            Some(g) if g != v => return format!("key {k:?} has value {g:?}, acknowledged {v:?}"),
            _ => {}
        }
    }
    for k in got.keys() {
        if !want.contains_key(k) {
            return format!("key {k:?} is present but was never acknowledged");
        }
    }
    "contents differ".into()
}

/// The implementation-specific part of a recovery check.
pub trait Recovery {
    /// The recovered store.
    type Store: OrderedKv;

    /// Opens the store on the crash image, which runs its recovery.
    fn open(&mut self) -> KvResult<Self::Store>;

    /// Structural invariants beyond the contents (e.g. a sorted leaf chain
    /// that matches the inner nodes). None by default.
    fn check_structure(&mut self, _store: &Self::Store) -> Result<(), String> {
        Ok(())
    }

    /// Space accounting: nothing leaked, nothing used twice. Runs last, so it
    /// may leave the store unusable. None by default.
    fn check_space(&mut self, _store: &Self::Store) -> Result<(), String> {
        Ok(())
    }
}

/// Checks a store recovered from a crash against the journal: `acked` are the
/// operations acknowledged before the crash, in order, `in_flight` the one that
/// had begun and not returned. Returns the first violation found.
pub fn check_recovered<R: Recovery>(
    mut r: R,
    acked: &[Op],
    in_flight: Option<&Op>,
) -> Result<Model, String> {
    let want = Expected::new(acked, in_flight);
    let kv = r.open().map_err(|e| format!("reopen failed: {e}"))?;
    let mut got = Model::new();
    kv.scan(&[], usize::MAX, &mut |k, v| {
        got.insert(k.to_vec(), v.to_vec());
    })
    .map_err(|e| e.to_string())?;
    if !want.admits(&got) {
        let msg = describe(&got, &want.before);
        return Err(match in_flight {
            Some(op) => format!("{msg} (in flight: {op:?})"),
            None => msg,
        });
    }
    for (k, v) in &got {
        match kv.get(k) {
            Ok(Some(x)) if &x == v => {}
            other => return Err(format!("get({k:?}) = {other:?}, scan saw {v:?}")),
        }
    }
    if kv.count() != got.len() {
        return Err(format!("count {} != {} keys", kv.count(), got.len()));
    }
    r.check_structure(&kv)?;
    r.check_space(&kv)?;
    Ok(got)
}

#[cfg(test)]
mod tests {
    use std::sync::RwLock;

    use super::*;
    use crate::{KvCursor, KvError, WriteBatch};

    /// A map, optionally lying about its count.
    #[derive(Default)]
    struct MapKv {
        m: RwLock<Model>,
        count_bias: usize,
    }

    impl OrderedKv for MapKv {
        fn name(&self) -> &str {
            "map"
        }
        fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
            out.clear();
            let m = self.m.read().unwrap();
            Ok(m.get(key).map(|v| out.extend_from_slice(v)).is_some())
        }
        fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
            let mut m = self.m.write().unwrap();
            if m.contains_key(key) {
                return Ok(false);
            }
            m.insert(key.to_vec(), value.to_vec());
            Ok(true)
        }
        fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
            let mut m = self.m.write().unwrap();
            Ok(m.get_mut(key).map(|v| *v = value.to_vec()).is_some())
        }
        fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
            Ok(self
                .m
                .write()
                .unwrap()
                .insert(key.to_vec(), value.to_vec())
                .is_none())
        }
        fn remove(&self, key: &[u8]) -> KvResult<bool> {
            Ok(self.m.write().unwrap().remove(key).is_some())
        }
        fn count(&self) -> usize {
            self.m.read().unwrap().len() + self.count_bias
        }
        fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
            let m = self.m.read().unwrap();
            let mut done = 0;
            for (k, v) in m.range(start.to_vec()..).take(n) {
                f(k, v);
                done += 1;
            }
            Ok(done)
        }
        fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
            let mut m = self.m.write().unwrap();
            for op in &batch.ops {
                apply(&mut m, &Op::Batch(vec![op.clone()]));
            }
            Ok(())
        }
        fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
            Err(KvError::Backend("no cursor".into()))
        }
    }

    /// Hooks that hand out a prepared store and count their calls.
    struct Given {
        store: Option<Model>,
        count_bias: usize,
        space: Result<(), String>,
        calls: Vec<&'static str>,
    }

    impl Given {
        fn new(m: Model) -> Given {
            Given {
                store: Some(m),
                count_bias: 0,
                space: Ok(()),
                calls: Vec::new(),
            }
        }
    }

    impl Recovery for &mut Given {
        type Store = MapKv;
        fn open(&mut self) -> KvResult<MapKv> {
            self.calls.push("open");
            let m = self
                .store
                .take()
                .ok_or_else(|| KvError::corrupt("map", "gone"))?;
            Ok(MapKv {
                m: RwLock::new(m),
                count_bias: self.count_bias,
            })
        }
        fn check_structure(&mut self, _: &MapKv) -> Result<(), String> {
            self.calls.push("structure");
            Ok(())
        }
        fn check_space(&mut self, _: &MapKv) -> Result<(), String> {
            self.calls.push("space");
            self.space.clone()
        }
    }

    fn kv(pairs: &[(&str, &str)]) -> Model {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn put(k: &str, v: &str) -> Op {
        Op::Put(k.into(), v.into())
    }

    fn journal() -> Vec<Op> {
        vec![
            Op::Setup,
            put("a", "1"),
            put("b", "2"),
            Op::Del("a".into()),
            Op::Nop,
        ]
    }

    fn batch() -> Op {
        Op::Batch(vec![
            BatchOp::Put {
                key: "c".into(),
                value: "3".into(),
            },
            BatchOp::Delete { key: "b".into() },
        ])
    }

    #[test]
    fn acknowledged_contents_pass_and_every_hook_runs_in_order() {
        let mut g = Given::new(kv(&[("b", "2")]));
        assert!(check_recovered(&mut g, &journal(), None).is_ok());
        assert_eq!(g.calls, ["open", "structure", "space"]);
    }

    #[test]
    fn the_in_flight_operation_is_all_or_nothing() {
        let j = journal();
        let b = batch();
        for ok in [kv(&[("b", "2")]), kv(&[("c", "3")])] {
            assert!(check_recovered(&mut Given::new(ok), &j, Some(&b)).is_ok());
        }
        // Half a batch.
        let half = kv(&[("b", "2"), ("c", "3")]);
        let e = check_recovered(&mut Given::new(half), &j, Some(&b)).unwrap_err();
        assert!(
            e.contains("never acknowledged") && e.contains("in flight"),
            "{e}"
        );
    }

    #[test]
    fn missing_wrong_and_extra_keys_are_violations() {
        let j = journal();
        let cases = [
            (kv(&[]), "acknowledged key [98] is missing"),
            (
                kv(&[("b", "9")]),
                "key [98] has value [57], acknowledged [50]",
            ),
            (
                kv(&[("a", "1"), ("b", "2")]),
                "key [97] is present but was never acknowledged",
            ),
        ];
        for (m, want) in cases {
            assert_eq!(
                check_recovered(&mut Given::new(m), &j, None),
                Err(want.into())
            );
        }
    }

    #[test]
    fn count_open_and_space_failures_are_reported() {
        let j = journal();
        let mut g = Given::new(kv(&[("b", "2")]));
        g.count_bias = 1;
        assert_eq!(
            check_recovered(&mut g, &j, None),
            Err("count 2 != 1 keys".into())
        );
        let mut g = Given::new(kv(&[("b", "2")]));
        g.store = None;
        let e = check_recovered(&mut g, &j, None).unwrap_err();
        assert!(e.starts_with("reopen failed: "), "{e}");
        let mut g = Given::new(kv(&[("b", "2")]));
        g.space = Err("leak".into());
        assert_eq!(check_recovered(&mut g, &j, None), Err("leak".into()));
    }
}
