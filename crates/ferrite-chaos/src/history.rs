//! Checks on recorded histories that need no model checker: every
//! acknowledged write is still there at the end, or was superseded by a write
//! that came after it.

use std::collections::{BTreeMap, HashMap};

use crate::{Record, Status};

/// A write as the lost-write check sees it.
#[derive(Debug, Clone)]
struct Write {
    value: String,
    call: u64,
    ret: u64,
    acked: bool,
}

/// A write that was acknowledged and then lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostWrite {
    pub key: String,
    /// The acknowledged value that should have been there (or superseded).
    pub acknowledged: String,
    /// What the key held at the end (`None`: absent).
    pub found: Option<String>,
}

/// For each key, the final value (read after the faults healed) must come
/// from a write that no acknowledged write followed in real time: if write
/// `w` returned before an acknowledged write `w'` to the same key was invoked,
/// `w'` superseded it, so ending on `w`'s value (or on none) means `w'` was
/// lost. Every written value must be unique (the harness's clients make them
/// so). `final_values`: key → value at the end.
pub fn lost_writes(
    records: &[Record],
    final_values: &BTreeMap<String, Option<String>>,
) -> Vec<LostWrite> {
    let mut writes: HashMap<&str, Vec<Write>> = HashMap::new();
    for r in records {
        let effective = match (r.op.as_str(), r.status) {
            (_, Status::Fail) => false,
            ("set", _) => true,
            // A CAS writes only when it applied (or may have, if unknown).
            ("cas", Status::Ok) => r.applied,
            ("cas", Status::Unknown) => true,
            _ => false,
        };
        if !effective {
            continue;
        }
        if let Some(v) = &r.value {
            writes.entry(&r.key).or_default().push(Write {
                value: v.clone(),
                call: r.call,
                ret: if r.status == Status::Unknown {
                    u64::MAX
                } else {
                    r.ret
                },
                acked: r.status == Status::Ok,
            });
        }
    }
    let mut lost = Vec::new();
    for (key, ws) in &writes {
        let Some(last_acked) = ws.iter().filter(|w| w.acked).max_by_key(|w| w.call) else {
            continue;
        };
        let found = final_values.get(*key).cloned().flatten();
        let ok = match &found {
            None => false,
            Some(v) => ws.iter().any(|w| {
                &w.value == v
                    // w is not strictly before some acknowledged write.
                    && !ws.iter().any(|a| a.acked && w.ret < a.call)
            }),
        };
        if !ok {
            lost.push(LostWrite {
                key: key.to_string(),
                acknowledged: last_acked.value.clone(),
                found,
            });
        }
    }
    lost.sort_by(|a, b| a.key.cmp(&b.key));
    lost
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(key: &str, v: &str, call: u64, ret: u64, status: Status) -> Record {
        Record {
            client: 0,
            op: "set".into(),
            key: key.into(),
            value: Some(v.into()),
            expected: None,
            call,
            ret,
            status,
            found: false,
            applied: false,
        }
    }

    fn finals(kv: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.map(Into::into)))
            .collect()
    }

    #[test]
    fn the_last_acknowledged_write_or_a_concurrent_one_may_win() {
        let h = [
            w("a", "1", 0, 10, Status::Ok),
            w("a", "2", 20, 30, Status::Ok),
            // Concurrent with "2": either may be last.
            w("a", "3", 25, 35, Status::Ok),
            // Never answered: may have happened after everything.
            w("b", "x", 0, 10, Status::Ok),
            w("b", "y", 20, 0, Status::Unknown),
        ];
        for a in ["2", "3"] {
            for b in ["x", "y"] {
                assert!(lost_writes(&h, &finals(&[("a", Some(a)), ("b", Some(b))])).is_empty());
            }
        }
    }

    #[test]
    fn a_superseded_value_or_a_missing_key_is_a_lost_write() {
        let h = [
            w("a", "1", 0, 10, Status::Ok),
            w("a", "2", 20, 30, Status::Ok),
        ];
        let lost = lost_writes(&h, &finals(&[("a", Some("1"))]));
        assert_eq!(
            lost,
            vec![LostWrite {
                key: "a".into(),
                acknowledged: "2".into(),
                found: Some("1".into())
            }]
        );
        assert_eq!(lost_writes(&h, &finals(&[("a", None)])).len(), 1);
        // A failed write (no effect) cannot be the final value either.
        let h2 = [
            w("a", "1", 0, 10, Status::Ok),
            w("a", "bad", 20, 30, Status::Fail),
        ];
        assert_eq!(lost_writes(&h2, &finals(&[("a", Some("bad"))])).len(), 1);
    }
}
