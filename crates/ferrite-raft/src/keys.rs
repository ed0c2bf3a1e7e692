//! How the replicated state machine lays its log and state out in one
//! ordered map (the thesis's multi-version design; `docs/FORMAT.md`).
//!
//! | key | value |
//! | --- | --- |
//! | `00` name | metadata: `vote`, `applied`, `committed`, `purged`, `snapshot` |
//! | `01` klen(u32 BE) key index(u64 BE) | a version: `01` value, or `00` (deleted) |
//! | `02` index(u64 BE) | the log (rollback) record of entry `index` |
//!
//! Versions of one key are contiguous and ordered by Raft index, so `get(key)`
//! at the applied index `a` is the greatest key `<= (key, a)` with the key's
//! prefix. The log record of an entry names what the entry wrote, so a
//! truncated suffix is undone by deleting those versions, and it is the Raft
//! log entry (the values are read back from the versions).

use serde::{Deserialize, Serialize};

use crate::types::{Command, Cond, Entry, LogId, Membership, Reply};

pub const META: u8 = 0;
pub const DATA: u8 = 1;
pub const LOG: u8 = 2;

/// Log record format version.
const LOG_RECORD_V1: u8 = 1;

pub fn meta_key(name: &str) -> Vec<u8> {
    let mut k = vec![META];
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn data_prefix(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(13 + key.len());
    k.push(DATA);
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k
}

pub fn data_key(key: &[u8], index: u64) -> Vec<u8> {
    let mut k = data_prefix(key);
    k.extend_from_slice(&index.to_be_bytes());
    k
}

/// The user key and index of a version's key.
pub fn parse_data_key(k: &[u8]) -> Option<(&[u8], u64)> {
    if k.len() < 13 || k[0] != DATA {
        return None;
    }
    let len = u32::from_be_bytes(k[1..5].try_into().unwrap()) as usize;
    if k.len() != 13 + len {
        return None;
    }
    let idx = u64::from_be_bytes(k[5 + len..].try_into().unwrap());
    Some((&k[5..5 + len], idx))
}

/// Just past every version of `key` (the start of the next user key's).
pub fn after_versions(key: &[u8]) -> Vec<u8> {
    let mut k = data_key(key, u64::MAX);
    k.push(0);
    k
}

pub fn log_key(index: u64) -> Vec<u8> {
    let mut k = vec![LOG];
    k.extend_from_slice(&index.to_be_bytes());
    k
}

pub fn parse_log_key(k: &[u8]) -> Option<u64> {
    (k.len() == 9 && k[0] == LOG).then(|| u64::from_be_bytes(k[1..].try_into().unwrap()))
}

/// Start and end (exclusive) of the data key space.
pub fn data_space() -> (Vec<u8>, Vec<u8>) {
    (vec![DATA], vec![DATA + 1])
}

/// Start and end (exclusive) of the log key space.
pub fn log_space() -> (Vec<u8>, Vec<u8>) {
    (vec![LOG], vec![LOG + 1])
}

pub const TOMBSTONE: &[u8] = &[0];

pub fn version_value(value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(1 + value.len());
    v.push(1);
    v.extend_from_slice(value);
    v
}

/// The value a version holds (None: deleted).
pub fn parse_version(v: &[u8]) -> Result<Option<&[u8]>, String> {
    match v.first() {
        Some(1) => Ok(Some(&v[1..])),
        Some(0) if v.len() == 1 => Ok(None),
        _ => Err(format!("version value starts with {:?}", v.first())),
    }
}

/// What a normal entry did, decided against the newest versions when it was
/// appended (the log before it) and stored in its log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    Set {
        key: Vec<u8>,
        cond: Cond,
        /// The condition held and version `(key, index)` holds the value.
        applied: bool,
        /// The key existed before (for the live-key count).
        existed: bool,
        /// The value, when it was not written as a version.
        value: Option<Vec<u8>>,
    },
    Del {
        /// Each key and whether it existed (and got a deletion version).
        keys: Vec<(Vec<u8>, bool)>,
    },
}

impl Effect {
    pub fn reply(&self) -> Reply {
        match self {
            Effect::Set { applied, .. } => Reply::Set { applied: *applied },
            Effect::Del { keys } => Reply::Del {
                removed: keys.iter().filter(|k| k.1).count() as u64,
            },
        }
    }

    /// Change of the number of live keys when the entry is applied.
    pub fn live_delta(&self) -> i64 {
        match self {
            Effect::Set {
                applied, existed, ..
            } => (*applied && !*existed) as i64,
            Effect::Del { keys } => -(keys.iter().filter(|k| k.1).count() as i64),
        }
    }

    /// Keys that got a version at this entry's index.
    pub fn written(&self) -> Vec<&[u8]> {
        match self {
            Effect::Set {
                key, applied: true, ..
            } => vec![key.as_slice()],
            Effect::Set { .. } => vec![],
            Effect::Del { keys } => keys
                .iter()
                .filter(|k| k.1)
                .map(|k| k.0.as_slice())
                .collect(),
        }
    }
}

/// A decoded log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub term: u64,
    pub node: u64,
    pub payload: RecPayload,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecPayload {
    Blank,
    Normal(Effect),
    Membership(Membership),
}

impl LogRecord {
    pub fn log_id(&self, index: u64) -> LogId {
        LogId::new(
            openraft::CommittedLeaderId::new(self.term, self.node),
            index,
        )
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Rd<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self
            .b
            .get(self.at..self.at.checked_add(n).ok_or("length overflow")?)
            .ok_or_else(|| format!("log record truncated at byte {}", self.at))?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }
    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
}

pub fn encode_record(r: &LogRecord) -> Vec<u8> {
    let mut out = vec![LOG_RECORD_V1];
    out.extend_from_slice(&r.term.to_le_bytes());
    out.extend_from_slice(&r.node.to_le_bytes());
    match &r.payload {
        RecPayload::Blank => out.push(0),
        RecPayload::Normal(Effect::Set {
            key,
            cond,
            applied,
            existed,
            value,
        }) => {
            out.push(1);
            out.push(1);
            out.push(match cond {
                Cond::Always => 0,
                Cond::Nx => 1,
                Cond::Xx => 2,
                Cond::IfEq(_) => 3,
            });
            out.push(*applied as u8 | (*existed as u8) << 1);
            put_bytes(&mut out, key);
            if let Cond::IfEq(e) = cond {
                put_bytes(&mut out, e);
            }
            if let Some(v) = value {
                put_bytes(&mut out, v);
            }
        }
        RecPayload::Normal(Effect::Del { keys }) => {
            out.push(1);
            out.push(2);
            out.extend_from_slice(&(keys.len() as u32).to_le_bytes());
            for (k, removed) in keys {
                out.push(*removed as u8);
                put_bytes(&mut out, k);
            }
        }
        RecPayload::Membership(m) => {
            out.push(2);
            out.extend_from_slice(&postcard::to_stdvec(m).expect("memberships serialise"));
        }
    }
    out
}

pub fn decode_record(b: &[u8]) -> Result<LogRecord, String> {
    let mut r = Rd { b, at: 0 };
    let v = r.u8()?;
    if v != LOG_RECORD_V1 {
        return Err(format!("log record version {v}"));
    }
    let term = r.u64()?;
    let node = r.u64()?;
    let payload = match r.u8()? {
        0 => RecPayload::Blank,
        1 => match r.u8()? {
            1 => {
                let c = r.u8()?;
                let flags = r.u8()?;
                let key = r.bytes()?.to_vec();
                let cond = match c {
                    0 => Cond::Always,
                    1 => Cond::Nx,
                    2 => Cond::Xx,
                    3 => Cond::IfEq(r.bytes()?.to_vec()),
                    x => return Err(format!("condition {x}")),
                };
                let applied = flags & 1 != 0;
                let value = if applied {
                    None
                } else {
                    Some(r.bytes()?.to_vec())
                };
                RecPayload::Normal(Effect::Set {
                    key,
                    cond,
                    applied,
                    existed: flags & 2 != 0,
                    value,
                })
            }
            2 => {
                let n = r.u32()? as usize;
                if n > b.len() {
                    return Err(format!("{n} keys in a {}-byte record", b.len()));
                }
                let mut keys = Vec::with_capacity(n);
                for _ in 0..n {
                    let removed = r.u8()? != 0;
                    keys.push((r.bytes()?.to_vec(), removed));
                }
                RecPayload::Normal(Effect::Del { keys })
            }
            x => return Err(format!("command {x}")),
        },
        2 => RecPayload::Membership(
            postcard::from_bytes(&b[r.at..]).map_err(|e| format!("membership: {e}"))?,
        ),
        x => return Err(format!("payload kind {x}")),
    };
    if !matches!(payload, RecPayload::Membership(_)) && r.at != b.len() {
        return Err(format!("{} trailing bytes in a log record", b.len() - r.at));
    }
    Ok(LogRecord {
        term,
        node,
        payload,
    })
}

/// Rebuilds the Raft entry of a record; `version` reads the value a SET
/// wrote at this index.
pub fn entry_of(
    index: u64,
    rec: &LogRecord,
    version: impl FnOnce(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<Entry, String> {
    let payload = match &rec.payload {
        RecPayload::Blank => openraft::EntryPayload::Blank,
        RecPayload::Membership(m) => openraft::EntryPayload::Membership(m.clone()),
        RecPayload::Normal(Effect::Set {
            key, cond, value, ..
        }) => {
            let value = match value {
                Some(v) => v.clone(),
                None => version(key)?,
            };
            openraft::EntryPayload::Normal(Command::Set {
                key: key.clone(),
                value,
                cond: cond.clone(),
            })
        }
        RecPayload::Normal(Effect::Del { keys }) => openraft::EntryPayload::Normal(Command::Del {
            keys: keys.iter().map(|k| k.0.clone()).collect(),
        }),
    };
    Ok(Entry {
        log_id: rec.log_id(index),
        payload,
    })
}

/// The state machine's applied position, persisted as `applied`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedMeta {
    pub applied: Option<LogId>,
    pub membership: crate::types::StoredMembership,
    pub live_keys: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_a_key_are_contiguous_and_ordered() {
        let mut ks = [
            data_key(b"a", 5),
            data_key(b"ab", 1),
            data_key(b"a", 1),
            data_key(b"b", 0),
            data_key(b"a", u64::MAX),
        ];
        ks.sort();
        assert_eq!(parse_data_key(&ks[0]).unwrap(), (&b"a"[..], 1));
        assert_eq!(parse_data_key(&ks[2]).unwrap(), (&b"a"[..], u64::MAX));
        assert!(after_versions(b"a") > ks[2]);
        for k in &ks[3..] {
            assert!(after_versions(b"a") < *k);
        }
    }

    #[test]
    fn records_round_trip_and_garbage_fails_cleanly() {
        let recs = [
            LogRecord {
                term: 3,
                node: 2,
                payload: RecPayload::Blank,
            },
            LogRecord {
                term: 3,
                node: 2,
                payload: RecPayload::Normal(Effect::Set {
                    key: b"k".to_vec(),
                    cond: Cond::IfEq(b"old".to_vec()),
                    applied: false,
                    existed: true,
                    value: Some(b"new".to_vec()),
                }),
            },
            LogRecord {
                term: 1,
                node: 1,
                payload: RecPayload::Normal(Effect::Del {
                    keys: vec![(b"a".to_vec(), true), (b"b".to_vec(), false)],
                }),
            },
        ];
        for r in &recs {
            let b = encode_record(r);
            assert_eq!(&decode_record(&b).unwrap(), r);
            for cut in 0..b.len() {
                assert!(decode_record(&b[..cut]).is_err());
            }
        }
    }
}
