//! Log records (byte layouts in docs/FORMAT.md). Every record starts with a
//! 32-byte header: kind, flags, page count, undo length, LSN, transaction id,
//! sequence number; little-endian throughout.

use crate::config::LINE;
use crate::error::{BufferError, Result};

pub const KIND_UPDATE: u8 = 1;
pub const KIND_COMMIT: u8 = 2;
pub const KIND_END: u8 = 3;
pub const KIND_CHECKPOINT: u8 = 4;

/// Update flag: the transaction commits with this record (single operations).
pub const F_COMMIT: u8 = 1;
/// Update flag: a compensation (CLR); `seq` is the operation it undid.
pub const F_CLR: u8 = 2;
/// Update flag: a structure change, not part of a transaction's undo.
pub const F_SYSTEM: u8 = 4;

/// Page-block flag: zero the page before applying the lines (a new page).
pub const P_ZERO_FIRST: u16 = 1;

pub const HEADER: usize = 32;
const OFF_LSN: usize = 8;

/// One operation's logical undo as the data structure encoded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoEntry {
    pub seq: u64,
    /// Which structure (its catalog id).
    pub tree: u32,
    pub payload: Vec<u8>,
}

/// The changed lines of one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageImage {
    pub pid: u64,
    pub zero_first: bool,
    pub lines: Vec<u16>,
    /// 64 bytes per entry of `lines`.
    pub data: Vec<u8>,
}

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Update {
        lsn: u64,
        txn: u64,
        seq: u64,
        flags: u8,
        pages: Vec<PageImage>,
        undo: Option<(u32, Vec<u8>)>,
    },
    Commit {
        lsn: u64,
        txn: u64,
    },
    End {
        lsn: u64,
        txn: u64,
    },
    Checkpoint {
        lsn: u64,
        next_txn: u64,
        txns: Vec<(u64, Vec<UndoEntry>)>,
    },
}

impl Record {
    pub fn lsn(&self) -> u64 {
        match self {
            Record::Update { lsn, .. }
            | Record::Commit { lsn, .. }
            | Record::End { lsn, .. }
            | Record::Checkpoint { lsn, .. } => *lsn,
        }
    }
}

fn put_header(
    out: &mut Vec<u8>,
    kind: u8,
    flags: u8,
    npages: u16,
    undo_len: u32,
    txn: u64,
    seq: u64,
) {
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&npages.to_le_bytes());
    out.extend_from_slice(&undo_len.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&txn.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
}

fn pad8(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(8) {
        out.push(0);
    }
}

/// Builds an update record page by page; the LSN is filled in at append.
pub struct UpdateBuilder {
    buf: Vec<u8>,
    npages: u16,
}

impl UpdateBuilder {
    pub fn new(flags: u8, txn: u64, seq: u64) -> UpdateBuilder {
        let mut buf = Vec::with_capacity(256);
        put_header(&mut buf, KIND_UPDATE, flags, 0, 0, txn, seq);
        UpdateBuilder { buf, npages: 0 }
    }

    /// Adds a page block: `lines` ascending; `fill(line, out)` writes each
    /// line's 64 bytes.
    pub fn page(
        &mut self,
        pid: u64,
        zero_first: bool,
        lines: &[u16],
        mut fill: impl FnMut(u16, &mut [u8]),
    ) {
        let b = &mut self.buf;
        b.extend_from_slice(&pid.to_le_bytes());
        b.extend_from_slice(&(lines.len() as u16).to_le_bytes());
        b.extend_from_slice(&(if zero_first { P_ZERO_FIRST } else { 0 }).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for l in lines {
            b.extend_from_slice(&l.to_le_bytes());
        }
        pad8(b);
        for &l in lines {
            let at = b.len();
            b.resize(at + LINE, 0);
            fill(l, &mut b[at..at + LINE]);
        }
        self.npages += 1;
    }

    pub fn pages(&self) -> u16 {
        self.npages
    }

    /// Finishes with an optional logical undo.
    pub fn finish(mut self, undo: Option<(u32, &[u8])>) -> Vec<u8> {
        self.buf[2..4].copy_from_slice(&self.npages.to_le_bytes());
        if let Some((tree, payload)) = undo {
            self.buf[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
            self.buf.extend_from_slice(&tree.to_le_bytes());
            self.buf.extend_from_slice(payload);
        }
        self.buf
    }
}

/// Bytes a page block of `lines` lines takes.
pub fn page_block_bytes(lines: usize) -> usize {
    16 + (2 * lines).div_ceil(8) * 8 + lines * LINE
}

pub fn commit(txn: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER);
    put_header(&mut b, KIND_COMMIT, 0, 0, 0, txn, 0);
    b
}

pub fn end(txn: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEADER);
    put_header(&mut b, KIND_END, 0, 0, 0, txn, 0);
    b
}

pub fn checkpoint(next_txn: u64, txns: &[(u64, Vec<UndoEntry>)]) -> Vec<u8> {
    let mut b = Vec::new();
    put_header(&mut b, KIND_CHECKPOINT, 0, 0, 0, next_txn, 0);
    b.extend_from_slice(&(txns.len() as u64).to_le_bytes());
    for (t, entries) in txns {
        b.extend_from_slice(&t.to_le_bytes());
        b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for e in entries {
            b.extend_from_slice(&e.seq.to_le_bytes());
            b.extend_from_slice(&e.tree.to_le_bytes());
            b.extend_from_slice(&(e.payload.len() as u32).to_le_bytes());
            b.extend_from_slice(&e.payload);
            pad8(&mut b);
        }
    }
    b
}

/// Writes the LSN into an encoded record.
pub fn set_lsn(rec: &mut [u8], lsn: u64) {
    rec[OFF_LSN..OFF_LSN + 8].copy_from_slice(&lsn.to_le_bytes());
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        let Some(end) = end else {
            return Err(BufferError::corrupt(
                "write-ahead log",
                format!(
                    "record truncated: {n} bytes wanted at {} of {}",
                    self.at,
                    self.b.len()
                ),
            ));
        };
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    fn align8(&mut self) -> Result<()> {
        let pad = (8 - self.at % 8) % 8;
        self.take(pad).map(|_| ())
    }
}

/// Decodes a record; malformed bytes are [`BufferError::Corrupt`].
pub fn decode(b: &[u8]) -> Result<Record> {
    let bad = |m: String| Err(BufferError::corrupt("write-ahead log", m));
    if b.len() < HEADER {
        return bad(format!(
            "record of {} bytes is shorter than its header",
            b.len()
        ));
    }
    let mut r = Reader { b, at: 0 };
    let h = r.take(8)?;
    let (kind, flags) = (h[0], h[1]);
    let npages = u16::from_le_bytes([h[2], h[3]]);
    let undo_len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
    let lsn = r.u64()?;
    let txn = r.u64()?;
    let seq = r.u64()?;
    match kind {
        KIND_UPDATE => {
            if flags & !(F_COMMIT | F_CLR | F_SYSTEM) != 0 {
                return bad(format!("unknown update flags {flags:#x}"));
            }
            let mut pages = Vec::with_capacity(npages as usize);
            for _ in 0..npages {
                let pid = r.u64()?;
                let n = r.u16()? as usize;
                let pf = r.u16()?;
                r.u32()?;
                let mut lines = Vec::with_capacity(n);
                for _ in 0..n {
                    lines.push(r.u16()?);
                }
                r.align8()?;
                let data = r.take(n * LINE)?.to_vec();
                pages.push(PageImage {
                    pid,
                    zero_first: pf & P_ZERO_FIRST != 0,
                    lines,
                    data,
                });
            }
            let undo = if undo_len > 0 || r.at < b.len() {
                let tree = r.u32()?;
                Some((tree, r.take(undo_len)?.to_vec()))
            } else {
                None
            };
            if r.at != b.len() {
                return bad(format!(
                    "{} trailing bytes after an update record",
                    b.len() - r.at
                ));
            }
            Ok(Record::Update {
                lsn,
                txn,
                seq,
                flags,
                pages,
                undo,
            })
        }
        KIND_COMMIT | KIND_END if b.len() == HEADER => Ok(if kind == KIND_COMMIT {
            Record::Commit { lsn, txn }
        } else {
            Record::End { lsn, txn }
        }),
        KIND_CHECKPOINT => {
            let n = r.u64()?;
            let mut txns = Vec::new();
            for _ in 0..n {
                let t = r.u64()?;
                let m = r.u64()?;
                let mut entries = Vec::new();
                for _ in 0..m {
                    let seq = r.u64()?;
                    let tree = r.u32()?;
                    let len = r.u32()? as usize;
                    let payload = r.take(len)?.to_vec();
                    r.align8()?;
                    entries.push(UndoEntry { seq, tree, payload });
                }
                txns.push((t, entries));
            }
            Ok(Record::Checkpoint {
                lsn,
                next_txn: txn,
                txns,
            })
        }
        k => bad(format!(
            "unknown record kind {k} (or a malformed record of it)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut u = UpdateBuilder::new(F_COMMIT, 7, 3);
        u.page(5, true, &[0, 3], |l, out| out.fill(l as u8 + 1));
        u.page(9, false, &[], |_, _| {});
        let mut rec = u.finish(Some((2, b"undo!")));
        set_lsn(&mut rec, 44);
        match decode(&rec).unwrap() {
            Record::Update {
                lsn,
                txn,
                seq,
                flags,
                pages,
                undo,
            } => {
                assert_eq!((lsn, txn, seq, flags), (44, 7, 3, F_COMMIT));
                assert_eq!(pages.len(), 2);
                assert_eq!(pages[0].lines, vec![0, 3]);
                assert!(pages[0].zero_first && !pages[1].zero_first);
                assert_eq!(&pages[0].data[64..128], &[4u8; 64][..]);
                assert_eq!(undo, Some((2, b"undo!".to_vec())));
            }
            other => panic!("{other:?}"),
        }
        let c = checkpoint(
            9,
            &[(
                3,
                vec![UndoEntry {
                    seq: 1,
                    tree: 4,
                    payload: b"abc".to_vec(),
                }],
            )],
        );
        assert!(
            matches!(decode(&c).unwrap(), Record::Checkpoint { next_txn: 9, ref txns, .. } if txns[0].1[0].payload == b"abc")
        );
        assert_eq!(
            decode(&commit(5)).unwrap(),
            Record::Commit { lsn: 0, txn: 5 }
        );
        assert_eq!(decode(&end(5)).unwrap(), Record::End { lsn: 0, txn: 5 });
    }

    #[test]
    fn malformed_records_are_corrupt_not_panics() {
        let mut u = UpdateBuilder::new(0, 1, 1);
        u.page(5, false, &[1, 2, 3], |_, o| o.fill(9));
        let rec = u.finish(None);
        for cut in 0..rec.len() {
            assert!(decode(&rec[..cut]).is_err());
        }
        let mut bad = rec.clone();
        bad[0] = 99;
        assert!(decode(&bad).unwrap_err().is_corrupt());
        let mut bad = rec;
        bad[2] = 200; // page count beyond the bytes
        assert!(decode(&bad).is_err());
    }
}
