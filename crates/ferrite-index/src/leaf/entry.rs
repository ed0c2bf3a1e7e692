//! Entries in a leaf's slots and their out-of-line blocks (part of the format).
//!
//! A *narrow* entry (key of at most 8 bytes) takes one slot: key word (the key's
//! bytes, big-endian, zero-padded) and value word. A *wide* entry (longer key)
//! takes two adjacent slots of one line: the first holds the key's bytes 0..8
//! and bytes 8..16 (or, for keys longer than 16 bytes, the offset of an
//! out-of-line copy of the whole key), the second (a continuation) the key
//! length and the value word. A *long* entry (format version 2: a key of 17 to
//! 24 bytes) takes all three slots of a line, the third holding the key's bytes
//! 16..24, so such keys need no block. A value of at most 8 bytes is stored in
//! its word ([`pack_inline`]), a longer one in an out-of-line block whose
//! offset the word holds. An out-of-line block is an 8-byte length followed by
//! the bytes.
//!
//! Invariants relied on: an entry's words are written before the header bits
//! that validate it, and both lie in one cache line ([`write_entry`] leaves the
//! header store to the caller); a block is written back (and fenced by the
//! caller) before an entry publishes it, and is immutable while reachable;
//! readers decode entries optimistically, so [`read_raw`] and [`ool_bytes`]
//! reject anything implausible instead of trusting it.

use ferrite_kv::KvResult;
use ferrite_pm::{Heap, Pool};

use super::layout::*;
use crate::error::pm;
use crate::inner::prefix_of;

/// An encoded value: the slot word and its length code.
#[derive(Clone, Copy)]
pub(crate) struct Enc {
    pub(crate) word: u64,
    pub(crate) code: u8,
}

impl Enc {
    pub(crate) fn ool(&self) -> bool {
        self.code == CODE_OOL
    }
}

/// An entry as stored: narrow (key of at most 8 bytes, one slot), wide (two
/// adjacent slots of one line, see [`KCODE_WIDE`]) or long (a whole line, see
/// [`KCODE_LONG`]).
#[derive(Clone, Copy)]
pub(crate) struct Raw {
    /// First slot.
    pub(crate) slot: usize,
    /// Descriptor of the first slot (key code, value code).
    pub(crate) d: u8,
    pub(crate) fp: u8,
    /// Key bytes 0..8, big-endian, zero-padded.
    pub(crate) kw: u64,
    /// Wide and long keys: bytes 8..16; for a wide key longer than 16 bytes,
    /// the offset of the whole key.
    pub(crate) k2: u64,
    /// Long keys: bytes 16..24 (0 otherwise).
    pub(crate) k3: u64,
    pub(crate) klen: u32,
    pub(crate) vw: u64,
}

impl Raw {
    /// Key longer than 8 bytes (a wide or long entry).
    #[inline]
    pub(crate) fn wide(&self) -> bool {
        kcode(self.d) as usize > INLINE_MAX
    }
    /// Slots the entry takes ([`span_of`]).
    #[inline]
    pub(crate) fn span(&self) -> usize {
        span_of(self.d)
    }
    /// The key is in an out-of-line block (`k2` is its offset).
    #[inline]
    pub(crate) fn key_ool(&self) -> bool {
        kcode(self.d) == KCODE_WIDE && self.klen as usize > WIDE_INLINE_MAX
    }
    /// Whether the entry's key is `key`, given that its first word and length
    /// match; None when only the out-of-line copy can tell.
    #[inline]
    pub(crate) fn rest_eq(&self, key: &[u8]) -> Option<bool> {
        if !self.wide() {
            Some(true)
        } else if kcode(self.d) == KCODE_LONG {
            Some(self.k2 == suffix_of(key) && self.k3 == third_of(key))
        } else if !self.key_ool() {
            Some(self.k2 == suffix_of(key))
        } else {
            None
        }
    }
    /// The key's bytes when it is inline (`buf` holds them); None for an
    /// out-of-line key.
    #[inline]
    pub(crate) fn inline_key<'a>(&self, buf: &'a mut KeyBuf) -> Option<&'a [u8]> {
        if self.key_ool() || self.klen as usize > LONG_INLINE_MAX {
            return None;
        }
        buf[..8].copy_from_slice(&self.kw.to_be_bytes());
        buf[8..16].copy_from_slice(&self.k2.to_be_bytes());
        buf[16..].copy_from_slice(&self.k3.to_be_bytes());
        Some(&buf[..self.klen as usize])
    }
    #[inline]
    pub(crate) fn val_ool(&self) -> bool {
        vcode(self.d) == CODE_OOL
    }
    /// Slot holding the value word (the second of a wide or long entry).
    #[inline]
    pub(crate) fn vslot(&self) -> usize {
        if self.wide() {
            self.slot + 1
        } else {
            self.slot
        }
    }
    /// Comparison words: (bytes 0..8, bytes 8..16, length); equal words and both
    /// lengths above 16 need the full keys.
    #[inline]
    pub(crate) fn sort_words(&self, second: u64) -> (u64, u64, u32) {
        (self.kw, second, self.klen)
    }
}

/// A buffer for an inline key's bytes ([`Raw::inline_key`]).
pub(crate) type KeyBuf = [u8; LONG_INLINE_MAX];

/// The entry whose first slot is `slot` under headers `h`; None for a
/// continuation slot, a torn optimistic read or corruption. Always inlined:
/// the lookup's loop over fingerprint hits runs it (when the compiler chose
/// a call, a lookup took 30 more instructions, `callgrind`).
#[inline(always)]
pub(crate) fn read_raw(lf: Leaf, h: &[u64; LINES], slot: usize) -> Option<Raw> {
    let (l, s) = (slot / PER_LINE, slot % PER_LINE);
    let d = hdr_desc(h[l], s);
    let (kc, vc) = (kcode(d), vcode(d));
    if vc as usize > INLINE_MAX && vc != CODE_OOL {
        return None;
    }
    let fp = hdr_fp(h[l], s);
    if kc as usize <= INLINE_MAX {
        return Some(Raw {
            slot,
            d,
            fp,
            kw: lf.key_word(slot),
            k2: 0,
            k3: 0,
            klen: kc as u32,
            vw: lf.val_word(slot),
        });
    }
    if kc == KCODE_LONG {
        return read_long(lf, h[l], slot, d, fp);
    }
    if kc != KCODE_WIDE
        || s + 1 >= PER_LINE
        || hdr_valid(h[l]) & (2 << s) == 0
        || hdr_desc(h[l], s + 1) != DESC_CONT
    {
        return None;
    }
    read_multi(lf, slot, d, fp, (INLINE_MAX, MAX_KEY), 0)
}

/// The entry of a wide or long entry whose slots were checked, if its length
/// (the second slot's key word) is above `lens.0` and at most `lens.1`; `k3`:
/// the third slot's key word of a long entry.
#[inline(always)]
fn read_multi(lf: Leaf, slot: usize, d: u8, fp: u8, lens: (usize, usize), k3: u64) -> Option<Raw> {
    let klen = lf.key_word(slot + 1);
    if klen <= lens.0 as u64 || klen > lens.1 as u64 {
        return None;
    }
    Some(Raw {
        slot,
        d,
        fp,
        kw: lf.key_word(slot),
        k2: lf.val_word(slot),
        k3,
        klen: klen as u32,
        vw: lf.val_word(slot + 1),
    })
}

/// [`read_raw`] for a long entry (`d`: its descriptor, `hl` its line's
/// header): all three slots of the line, a length of 17 to 24.
#[inline]
fn read_long(lf: Leaf, hl: u64, slot: usize, d: u8, fp: u8) -> Option<Raw> {
    if !slot.is_multiple_of(PER_LINE)
        || hdr_valid(hl) != 7
        || hdr_desc(hl, 1) != DESC_CONT
        || hdr_desc(hl, 2) != DESC_CONT
    {
        return None;
    }
    let k3 = lf.key_word(slot + 2);
    read_multi(lf, slot, d, fp, (WIDE_INLINE_MAX, LONG_INLINE_MAX), k3)
}

/// Writes entry `r` at `slot` (its words, then its header bits into `h`; the
/// caller stores the header afterwards, so the line never shows the bits
/// without the words).
pub(crate) fn write_entry(lf: Leaf, h: &mut [u64; LINES], slot: usize, r: &Raw) {
    let (l, s) = (slot / PER_LINE, slot % PER_LINE);
    lf.set_key_word(slot, r.kw);
    let span = r.span();
    if span == 1 {
        lf.set_val_word(slot, r.vw);
        h[l] = hdr_set(h[l], s, r.d, r.fp);
        return;
    }
    lf.set_val_word(slot, r.k2);
    lf.set_key_word(slot + 1, r.klen as u64);
    lf.set_val_word(slot + 1, r.vw);
    if span == 3 {
        lf.set_key_word(slot + 2, r.k3);
        lf.set_val_word(slot + 2, 0);
    }
    h[l] = hdr_set(h[l], s, r.d, r.fp);
    for i in 1..span {
        h[l] = hdr_set(h[l], s + i, DESC_CONT, r.fp);
    }
}

/// True when valid slot `slot` starts an entry (is not a continuation).
#[inline]
pub(crate) fn is_primary(h: &[u64; LINES], slot: usize) -> bool {
    let (l, s) = (slot / PER_LINE, slot % PER_LINE);
    hdr_valid(h[l]) & (1 << s) != 0 && hdr_desc(h[l], s) != DESC_CONT
}

/// Byte order of two keys given by their comparison words; `fa`, `fb` are the
/// full keys, read only when both are longer than 16 bytes (the bytes of a
/// long entry's key, or an out-of-line key).
#[inline]
pub(crate) fn cmp_words(
    a: (u64, u64, u32),
    b: (u64, u64, u32),
    fa: &[u8],
    fb: &[u8],
) -> std::cmp::Ordering {
    (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| {
        if a.2 as usize > WIDE_INLINE_MAX && b.2 as usize > WIDE_INLINE_MAX {
            fa.get(16..).unwrap_or(&[]).cmp(fb.get(16..).unwrap_or(&[]))
        } else {
            a.2.cmp(&b.2)
        }
    })
}

#[inline]
pub(crate) fn key_words(k: &[u8]) -> (u64, u64, u32) {
    (prefix_of(k), suffix_of(k), k.len() as u32)
}

pub(crate) fn ool_bytes(pool: &Pool, off: u64) -> Option<&[u8]> {
    if off & 7 != 0 || !pool.contains(off, 8) {
        return None;
    }
    // SAFETY: in bounds and aligned (checked).
    let len = unsafe { std::ptr::read(pool.at(off, 8) as *const u64) };
    if len > MAX_VALUE.max(MAX_KEY) as u64 || !pool.contains(off + 8, len as usize) {
        return None;
    }
    // SAFETY: in bounds (checked); blocks are immutable while reachable, and the
    // epoch keeps retired ones intact while a reader can still see them.
    Some(unsafe { std::slice::from_raw_parts(pool.at(off + 8, len as usize), len as usize) })
}

/// Where the index's out-of-line blocks come from: its pool and heap, and
/// whether blocks are written back (not in volatile mode).
#[derive(Clone, Copy)]
pub(crate) struct Blocks<'a> {
    pub(crate) pool: &'a Pool,
    pub(crate) heap: &'a Heap,
    pub(crate) durable: bool,
}

impl Blocks<'_> {
    #[inline]
    fn flush(&self, p: *const u8, len: usize) {
        if self.durable {
            self.pool.flush(p, len);
        }
    }

    /// Writes `bytes` to a new out-of-line block and flushes it (no fence).
    pub(crate) fn write_block(&self, bytes: &[u8]) -> KvResult<u64> {
        let off = crate::tree::reserve::alloc(self.heap, 8 + bytes.len()).map_err(pm)?;
        let p = self.pool.at(off, 8 + bytes.len());
        // SAFETY: p..p+8+len is the freshly allocated block, unreachable by others.
        unsafe {
            std::ptr::write(p as *mut u64, bytes.len() as u64);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p.add(8), bytes.len());
        }
        self.flush(p, 8 + bytes.len());
        Ok(off)
    }

    pub(crate) fn encode_value(&self, v: &[u8]) -> KvResult<Enc> {
        if v.len() <= INLINE_MAX {
            Ok(Enc {
                word: pack_inline(v),
                code: v.len() as u8,
            })
        } else {
            Ok(Enc {
                word: self.write_block(v)?,
                code: CODE_OOL,
            })
        }
    }

    /// A new entry for `key` and `value` (blocks written and flushed, not fenced).
    pub(crate) fn encode_entry(&self, key: &[u8], value: &[u8], fp: u8) -> KvResult<Raw> {
        let (kw, klen) = (prefix_of(key), key.len() as u32);
        let (kcode_, k2, k3) = if key.len() <= INLINE_MAX {
            (key.len() as u8, 0, 0)
        } else if key.len() <= WIDE_INLINE_MAX {
            (KCODE_WIDE, suffix_of(key), 0)
        } else if key.len() <= LONG_INLINE_MAX {
            (KCODE_LONG, suffix_of(key), third_of(key))
        } else {
            (KCODE_WIDE, self.write_block(key)?, 0)
        };
        let ve = match self.encode_value(value) {
            Ok(v) => v,
            Err(e) => {
                if key.len() > LONG_INLINE_MAX {
                    self.discard(&[k2]);
                }
                return Err(e);
            }
        };
        Ok(Raw {
            slot: usize::MAX,
            d: desc(kcode_, ve.code),
            fp,
            kw,
            k2,
            k3,
            klen,
            vw: ve.word,
        })
    }

    /// Frees blocks of an entry that was never published.
    pub(crate) fn discard_entry(&self, r: &Raw) {
        if r.key_ool() {
            self.discard(&[r.k2]);
        }
        if r.val_ool() {
            self.discard(&[r.vw]);
        }
    }

    /// Frees blocks that were never published.
    pub(crate) fn discard(&self, offs: &[u64]) {
        for &o in offs {
            let _ = self.heap.free(o);
        }
    }
}
