//! The root directory: named, typed objects with six atomic root words each.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{PmError, Result};
use crate::layout::{self, chunk_kind, ChunkEntry, DirEntry};

use super::header::bad;
use super::{ObjectId, ObjectInfo, Pool};

impl Pool {
    fn entry_ptr(&self, i: usize) -> *mut DirEntry {
        assert!(i < layout::DIR_ENTRIES);
        let off = self.inner.header.dir_off + (i as u64) * 128;
        // SAFETY: the directory lies inside the pool (validated geometry).
        unsafe { self.inner.base.add(off as usize) as *mut DirEntry }
    }

    fn entry_copy(&self, i: usize) -> DirEntry {
        // SAFETY: entry_ptr is in bounds and aligned; DirEntry is plain data. Root
        // words may change concurrently; a torn copy of them is only used for
        // display (readers use `root`).
        unsafe { std::ptr::read_volatile(self.entry_ptr(i)) }
    }

    fn state_word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: `state` is the first, 8-byte aligned field of an in-bounds entry;
        // the reference lives no longer than the pool.
        unsafe { &*(self.entry_ptr(i) as *const AtomicU64) }
    }

    /// Root word `i` of an object, as an atomic in PM.
    pub fn root_word(&self, id: ObjectId, i: usize) -> &AtomicU64 {
        assert!(i < layout::ROOT_WORDS);
        // SAFETY: roots[i] is an 8-byte aligned u64 inside an in-bounds entry.
        unsafe { &*((self.entry_ptr(id.index()) as *const u64).add(1 + i) as *const AtomicU64) }
    }

    /// Reads root word `i` of an object.
    pub fn root(&self, id: ObjectId, i: usize) -> u64 {
        self.root_word(id, i).load(Ordering::Acquire)
    }

    /// Atomically replaces root word `i` and persists it (one barrier).
    pub fn set_root(&self, id: ObjectId, i: usize, value: u64) -> Result<()> {
        self.writable()?;
        let w = self.root_word(id, i);
        w.store(value, Ordering::Release);
        self.persist(w as *const AtomicU64 as *const u8, 8)
    }
    /// All objects of the root directory.
    pub fn objects(&self) -> Vec<ObjectInfo> {
        (0..layout::DIR_ENTRIES)
            .filter_map(|i| {
                let e = self.entry_copy(i);
                (e.state == layout::ENTRY_VALID).then(|| ObjectInfo {
                    id: ObjectId(i as u16 + 1),
                    name: e.name_str(),
                    type_name: e.type_str(),
                    roots: e.roots,
                })
            })
            .collect()
    }

    /// Finds an object by name and checks its type.
    pub fn object(&self, name: &str, type_name: &str) -> Result<ObjectId> {
        let o = self
            .objects()
            .into_iter()
            .find(|o| o.name == name)
            .ok_or_else(|| PmError::NoSuchObject(name.into()))?;
        if o.type_name != type_name {
            return Err(PmError::WrongType {
                name: name.into(),
                found: o.type_name,
                expected: type_name.into(),
            });
        }
        Ok(o.id)
    }

    /// Creates an object with all root words zero. Crash-atomic: the entry becomes
    /// visible only when its state word is persisted.
    pub fn create_object(&self, name: &str, type_name: &str) -> Result<ObjectId> {
        self.writable()?;
        if name.is_empty() || name.len() > layout::MAX_NAME {
            return Err(PmError::Invalid(format!(
                "object names are 1 to {} bytes",
                layout::MAX_NAME
            )));
        }
        if type_name.is_empty() || type_name.len() > layout::MAX_TYPE_NAME {
            return Err(PmError::Invalid(format!(
                "type names are 1 to {} bytes",
                layout::MAX_TYPE_NAME
            )));
        }
        let _g = self.inner.dir_lock.lock().unwrap();
        let objs = self.objects();
        if objs.iter().any(|o| o.name == name) {
            return Err(PmError::ObjectExists(name.into()));
        }
        let i = (0..layout::DIR_ENTRIES)
            .find(|&i| self.state_word(i).load(Ordering::Acquire) == 0)
            .ok_or(PmError::DirectoryFull(layout::DIR_ENTRIES))?;
        let mut e = DirEntry {
            state: 0,
            roots: [0; layout::ROOT_WORDS],
            type_len: type_name.len() as u8,
            name_len: name.len() as u8,
            _pad: [0; 2],
            crc: 0,
            type_name: [0; layout::MAX_TYPE_NAME],
            name: [0; layout::MAX_NAME],
        };
        e.type_name[..type_name.len()].copy_from_slice(type_name.as_bytes());
        e.name[..name.len()].copy_from_slice(name.as_bytes());
        e.crc = e.compute_crc();
        let p = self.entry_ptr(i);
        // SAFETY: in-bounds, aligned entry that no one else uses (state 0, and the
        // directory lock is held).
        unsafe { p.write(e) };
        if crate::tripwire::armed(crate::tripwire::Tripwire::DirectoryStateFirst) {
            // Broken on purpose: the state word goes out with the entry.
            self.state_word(i)
                .store(layout::ENTRY_VALID, Ordering::Release);
        }
        self.persist(p as *const u8, 128)?;
        self.state_word(i)
            .store(layout::ENTRY_VALID, Ordering::Release);
        self.persist(p as *const u8, 8)?;
        Ok(ObjectId(i as u16 + 1))
    }

    /// Finds the object or creates it; `true` when it was created.
    pub fn open_or_create_object(&self, name: &str, type_name: &str) -> Result<(ObjectId, bool)> {
        match self.object(name, type_name) {
            Ok(id) => Ok((id, false)),
            Err(PmError::NoSuchObject(_)) => Ok((self.create_object(name, type_name)?, true)),
            Err(e) => Err(e),
        }
    }

    /// Deletes an object and frees its chunks. Its heap must not be open.
    pub fn delete_object(&self, name: &str) -> Result<()> {
        self.writable()?;
        let _g = self.inner.dir_lock.lock().unwrap();
        let o = self
            .objects()
            .into_iter()
            .find(|o| o.name == name)
            .ok_or_else(|| PmError::NoSuchObject(name.into()))?;
        if self.inner.open_heaps.lock().unwrap().contains(&o.id.0) {
            return Err(PmError::HeapBusy(name.into()));
        }
        let i = o.id.index();
        self.state_word(i).store(0, Ordering::Release);
        self.persist(self.entry_ptr(i) as *const u8, 8)?;
        // The entry is gone durably; its chunks are now orphans. Free them now
        // (a crash here leaves orphans that the next open frees).
        let mut free = self.inner.free_chunks.lock().unwrap();
        for c in 0..self.inner.header.chunk_count as usize {
            let w = self.chunk_word(c);
            let e = ChunkEntry::decode(w.load(Ordering::Acquire));
            if e.kind != chunk_kind::FREE && e.owner == o.id.0 {
                w.store(0, Ordering::Release);
                self.flush(w as *const AtomicU64 as *const u8, 8);
                free.insert(c as u32);
            }
        }
        drop(free);
        self.fence()
    }

    /// Validates every directory entry; returns which entries hold an object.
    pub(super) fn validate_directory(&self) -> Result<[bool; layout::DIR_ENTRIES]> {
        let mut valid = [false; layout::DIR_ENTRIES];
        let mut names = HashSet::new();
        for (i, slot) in valid.iter_mut().enumerate() {
            let e = self.entry_copy(i);
            match e.state {
                0 => {}
                layout::ENTRY_VALID => {
                    if e.crc != e.compute_crc()
                        || e.type_len as usize > layout::MAX_TYPE_NAME
                        || e.name_len as usize > layout::MAX_NAME
                    {
                        return Err(bad(format!(
                            "root directory entry {i} is corrupt (checksum mismatch)"
                        )));
                    }
                    if !names.insert(e.name_str()) {
                        return Err(bad(format!(
                            "root directory holds the name {:?} twice",
                            e.name_str()
                        )));
                    }
                    *slot = true;
                }
                s => {
                    return Err(bad(format!(
                        "root directory entry {i} has an invalid state word {s:#x}"
                    )))
                }
            }
        }
        Ok(valid)
    }
}
