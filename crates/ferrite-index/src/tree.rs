//! Placeholder of the persistent index API (replaced by the real tree).

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Duration;

use ferrite_pm::Pool;

use crate::kv::{
    check_sizes, BatchOp, KvCursor, KvResult, OrderedKv, WriteBatch, MAX_KEY, MAX_VALUE,
};

/// Tuning knobs (reserved).
#[derive(Debug, Clone, Default)]
pub struct IndexOptions {}

/// What the last open rebuilt.
#[derive(Debug, Clone, Copy, Default)]
pub struct RebuildStats {
    pub leaves: u64,
    pub keys: u64,
    pub duration: Duration,
}

/// Bytes in use.
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryUsage {
    pub dram_bytes: u64,
    pub pm_bytes: u64,
}

/// The index.
pub struct FerriteIndex {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
    durable: bool,
}

impl FerriteIndex {
    pub fn open_or_create(_pool: &Pool, _name: &str) -> KvResult<FerriteIndex> {
        Ok(FerriteIndex {
            map: RwLock::new(BTreeMap::new()),
            durable: true,
        })
    }
    pub fn volatile(_capacity: u64) -> KvResult<FerriteIndex> {
        Ok(FerriteIndex {
            map: RwLock::new(BTreeMap::new()),
            durable: false,
        })
    }
    pub fn rebuild_stats(&self) -> RebuildStats {
        RebuildStats::default()
    }
    pub fn memory_usage(&self) -> MemoryUsage {
        MemoryUsage::default()
    }
}

impl OrderedKv for FerriteIndex {
    fn name(&self) -> &str {
        if self.durable {
            "ferrite"
        } else {
            "ferrite-dram"
        }
    }
    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        out.clear();
        match self.map.read().unwrap().get(key) {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        let mut m = self.map.write().unwrap();
        if m.contains_key(key) {
            return Ok(false);
        }
        m.insert(key.to_vec(), value.to_vec());
        Ok(true)
    }
    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        match self.map.write().unwrap().get_mut(key) {
            Some(v) => {
                *v = value.to_vec();
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        check_sizes(key, Some(value), MAX_KEY, MAX_VALUE)?;
        Ok(self
            .map
            .write()
            .unwrap()
            .insert(key.to_vec(), value.to_vec())
            .is_none())
    }
    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        Ok(self.map.write().unwrap().remove(key).is_some())
    }
    fn count(&self) -> usize {
        self.map.read().unwrap().len()
    }
    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        let m = self.map.read().unwrap();
        let mut c = 0;
        for (k, v) in m.range(start.to_vec()..).take(n) {
            f(k, v);
            c += 1;
        }
        Ok(c)
    }
    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        let mut m = self.map.write().unwrap();
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => {
                    m.insert(key.clone(), value.clone());
                }
                BatchOp::Delete { key } => {
                    m.remove(key);
                }
            }
        }
        Ok(())
    }
    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Err(crate::KvError::Backend(
            "cursor: not yet implemented".into(),
        ))
    }
}
