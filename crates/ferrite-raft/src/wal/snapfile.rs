//! The baseline's snapshot files.
//!
//! `FRWALSNP` (8 bytes), version (u32 LE = 1), meta length (u32 LE), the
//! metadata (postcard), then pairs `klen` (u32 LE), key, `vlen` (u32 LE),
//! value, then `0xFFFF_FFFF` and the CRC-32 of everything before it. A file
//! is written as `<name>.tmp`, synced, renamed into place and the directory
//! synced, so a crash leaves the old snapshot or the new one.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Result, StoreError};
use crate::snapshot::{Items, SnapshotSink, SnapshotSource};
use crate::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"FRWALSNP";
const VERSION: u32 = 1;
const END: u32 = u32::MAX;
/// Largest key or value accepted when reading.
const MAX_ITEM: u32 = 64 << 20;

fn io(path: &Path, what: &str, e: std::io::Error) -> StoreError {
    StoreError::io(format!("{what} {}", path.display()), e)
}

/// Writes a snapshot file incrementally.
pub struct SnapWriter {
    tmp: PathBuf,
    dest: PathBuf,
    w: BufWriter<File>,
    crc: crc32fast::Hasher,
    items: u64,
}

impl SnapWriter {
    pub fn create(dest: &Path, meta: &SnapshotMeta) -> Result<SnapWriter> {
        let tmp = dest.with_extension("tmp");
        let f = File::create(&tmp).map_err(|e| io(&tmp, "create", e))?;
        let mut w = SnapWriter {
            tmp,
            dest: dest.to_path_buf(),
            w: BufWriter::with_capacity(1 << 20, f),
            crc: crc32fast::Hasher::new(),
            items: 0,
        };
        let m = postcard::to_stdvec(meta).expect("snapshot metadata serialises");
        w.put(MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        w.put(&(m.len() as u32).to_le_bytes())?;
        w.put(&m)?;
        Ok(w)
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.crc.update(b);
        self.w.write_all(b).map_err(|e| io(&self.tmp, "write", e))
    }

    pub fn item(&mut self, k: &[u8], v: &[u8]) -> Result<()> {
        self.put(&(k.len() as u32).to_le_bytes())?;
        self.put(k)?;
        self.put(&(v.len() as u32).to_le_bytes())?;
        self.put(v)?;
        self.items += 1;
        Ok(())
    }

    /// Ends the file, syncs it and renames it into place.
    pub fn finish(mut self) -> Result<(PathBuf, u64)> {
        self.put(&END.to_le_bytes())?;
        let crc = self.crc.clone().finalize();
        self.w
            .write_all(&crc.to_le_bytes())
            .map_err(|e| io(&self.tmp, "write", e))?;
        let f = self
            .w
            .into_inner()
            .map_err(|e| io(&self.tmp, "write", e.into_error()))?;
        f.sync_all().map_err(|e| io(&self.tmp, "fsync", e))?;
        std::fs::rename(&self.tmp, &self.dest).map_err(|e| io(&self.dest, "rename to", e))?;
        let dir = self.dest.parent().unwrap_or(Path::new("."));
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(dir, "fsync", e))?;
        Ok((self.dest, self.items))
    }
}

/// Reads a snapshot file.
pub struct SnapReader {
    path: PathBuf,
    r: BufReader<File>,
    crc: crc32fast::Hasher,
    pub meta: SnapshotMeta,
    done: bool,
}

impl SnapReader {
    pub fn open(path: &Path) -> Result<SnapReader> {
        let f = File::open(path).map_err(|e| io(path, "open", e))?;
        let mut r = SnapReader {
            path: path.to_path_buf(),
            r: BufReader::with_capacity(1 << 20, f),
            crc: crc32fast::Hasher::new(),
            meta: SnapshotMeta::default(),
            done: false,
        };
        let mut magic = [0u8; 8];
        r.take(&mut magic)?;
        if &magic != MAGIC {
            return Err(r.bad("not a Ferrite snapshot file"));
        }
        let v = r.u32()?;
        if v != VERSION {
            return Err(r.bad(&format!(
                "snapshot format version {v}, this build reads {VERSION}"
            )));
        }
        let n = r.u32()?;
        if n > MAX_ITEM {
            return Err(r.bad("metadata length"));
        }
        let mut m = vec![0u8; n as usize];
        r.take(&mut m)?;
        r.meta = postcard::from_bytes(&m).map_err(|e| r.bad(&format!("metadata: {e}")))?;
        Ok(r)
    }

    fn bad(&self, d: &str) -> StoreError {
        StoreError::corrupt(&self.path.display().to_string(), d.to_string())
    }

    fn take(&mut self, buf: &mut [u8]) -> Result<()> {
        self.r.read_exact(buf).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.bad("truncated")
            } else {
                io(&self.path, "read", e)
            }
        })?;
        self.crc.update(buf);
        Ok(())
    }

    fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.take(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// The next pair (None at the end, after checking the checksum).
    pub fn next_item(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        if self.done {
            return Ok(None);
        }
        let kl = self.u32()?;
        if kl == END {
            let expect = self.crc.clone().finalize();
            let mut b = [0u8; 4];
            self.r
                .read_exact(&mut b)
                .map_err(|_| self.bad("truncated checksum"))?;
            if u32::from_le_bytes(b) != expect {
                return Err(self.bad("checksum mismatch"));
            }
            self.done = true;
            return Ok(None);
        }
        if kl > MAX_ITEM {
            return Err(self.bad("key length"));
        }
        let mut k = vec![0u8; kl as usize];
        self.take(&mut k)?;
        let vl = self.u32()?;
        if vl > MAX_ITEM {
            return Err(self.bad("value length"));
        }
        let mut v = vec![0u8; vl as usize];
        self.take(&mut v)?;
        Ok(Some((k, v)))
    }
}

impl SnapshotSource for SnapReader {
    fn next_batch(&mut self, max_bytes: usize) -> Result<Option<Items>> {
        let mut out = Vec::new();
        let mut bytes = 0;
        while bytes < max_bytes {
            match self.next_item()? {
                Some((k, v)) => {
                    bytes += k.len() + v.len() + 8;
                    out.push((k, v));
                }
                None => break,
            }
        }
        Ok((!out.is_empty()).then_some(out))
    }
}

/// A received snapshot file, staged for installation.
pub struct StagedFile {
    pub path: PathBuf,
    pub items: u64,
}

/// Writes a received snapshot to `<dir>/snapshot.recv`.
pub struct FileSink {
    pub(crate) w: Option<SnapWriter>,
    /// The snapshot's index.
    pub(crate) at: u64,
}

impl SnapshotSink for FileSink {
    fn at(&self) -> u64 {
        self.at
    }

    fn push(&mut self, items: Items) -> Result<()> {
        let w = self.w.as_mut().expect("not finished");
        for (k, v) in items {
            w.item(&k, &v)?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<crate::snapshot::SnapshotData> {
        let (path, items) = self.w.take().expect("finished once").finish()?;
        Ok(crate::snapshot::SnapshotData::staged(StagedFile {
            path,
            items,
        }))
    }
}
