//! The PM leaf layout (format version [`FORMAT_VERSION`]); `docs/FORMAT.md`
//! describes the same bytes.
//!
//! A leaf is [`LINES`] cache lines ([`LEAF_SIZE`] bytes, 256-byte aligned).
//! Every line is self-contained: an 8-byte line header (validity bits, per-slot
//! length codes and 1-byte fingerprints of its three slots), three 16-byte
//! slots (key word, value word) and one extra word. Because an entry and the
//! header word that validates it share a cache line, and x86 makes stores
//! visible in program order, any image of that line that shows the new header
//! also shows the new entry: an insert or delete persists with one write-back
//! and one barrier, in whatever line has room (LB+-Tree's entry moving
//! generalised to every line). What goes into the slots is [`super::entry`].
//!
//! Extra words: line 0 holds the next-leaf offset, line 1 the volatile version
//! lock (reset on open), line 2 the pending-move word of the rare cross-line
//! update, the last line the leaf magic.
//!
//! Invariants relied on: a [`Leaf`] is only built from the offset of a
//! [`LEAF_SIZE`] block of the index (allocated by it, or validated by recovery:
//! alignment, bounds, magic), so every word access is in bounds and aligned;
//! the fingerprint function and every constant here are part of the format.

use std::sync::atomic::{AtomicU64, Ordering};

/// On-PM format version of index leaves and the batch log that this build
/// writes. Version 2 added *long* entries (key code 11, `docs/FORMAT.md`): keys
/// of 17 to 24 bytes inline in a whole line; everything else is
/// as in version 1, which this build also reads (see [`FORMAT_TAG_V1`]).
pub const FORMAT_VERSION: u64 = 2;
/// Root word 2 of an index object: identifies the format.
pub const FORMAT_TAG: u64 = 0x4645_4958_0000_0000 | FORMAT_VERSION; // "FEIX" + version
/// The tag of a version-1 index. This build opens it as it is and rewrites the
/// tag to [`FORMAT_TAG`] before it writes the first long entry, so a build
/// that reads only version 1 refuses the pool from then on instead of
/// misreading it.
pub const FORMAT_TAG_V1: u64 = 0x4645_4958_0000_0001;

/// Longest key the index accepts, in bytes. Part of the format: recovery and
/// the batch log's decoder reject longer lengths as corrupt.
pub const MAX_KEY: usize = 1024;
/// Longest value the index accepts, in bytes (format, as [`MAX_KEY`]).
pub const MAX_VALUE: usize = 64 * 1024;

/// Cache lines per leaf.
pub const LINES: usize = 8;
/// Slots per line.
pub const PER_LINE: usize = 3;
/// Slots per leaf.
pub const SLOTS: usize = LINES * PER_LINE;
/// Bytes per leaf.
pub const LEAF_SIZE: usize = LINES * 64;
/// Words per line.
pub const LINE_WORDS: usize = 8;
/// Last word of the last line: identifies a leaf.
/// Unchanged since version 1 (version 2 leaves differ only in the entries they
/// may hold).
pub const LEAF_MAGIC: u64 = 0x4C46_4145_4C45_0001; // "..ELEAF" + 1

/// Word index of the next-leaf offset.
pub const W_NEXT: usize = 7;
/// Word index of the version lock (volatile).
pub const W_LOCK: usize = LINE_WORDS + 7;
/// Word index of the pending-move word.
pub const W_PENDING: usize = 2 * LINE_WORDS + 7;
/// Word indexes of the scan-order hint (volatile, see [`encode_order`]):
/// the extra words of lines 3 and 4.
pub const W_ORDER: [usize; 2] = [3 * LINE_WORDS + 7, 4 * LINE_WORDS + 7];
/// Word index of the magic.
pub const W_MAGIC: usize = (LINES - 1) * LINE_WORDS + 7;

/// Length code of an inline key/value (0..=8 is the length).
pub const INLINE_MAX: usize = 8;
/// Value length code of an out-of-line value: the word is a block offset.
pub const CODE_OOL: u8 = 15;
/// Key code of a *wide* entry (key longer than 8 bytes), which occupies two
/// adjacent slots of one line: the first holds the key's bytes 0..8 (key word)
/// and bytes 8..16 (value word; or, for keys longer than 16 bytes, the offset of
/// an out-of-line copy of the whole key), the second ("continuation") holds the
/// key length (key word) and the value word.
pub const KCODE_WIDE: u8 = 9;
/// Descriptor of a continuation slot.
pub const DESC_CONT: u8 = 10;
/// Wide keys up to this length are stored entirely inline.
pub const WIDE_INLINE_MAX: usize = 16;
/// Key code of a *long* entry (format version 2): a key of 17 to
/// [`LONG_INLINE_MAX`] bytes held entirely inline in all three slots of one
/// line. Slot 0 holds the key's bytes 0..8 (key word) and 8..16 (value word),
/// slot 1 (continuation) the key length (key word) and the value word, slot 2
/// (continuation) the key's bytes 16..24 (key word, big-endian, zero-padded)
/// and 0. The three validity bits are set and cleared by one header store, as
/// a wide entry's two.
pub const KCODE_LONG: u8 = 11;
/// Longest key a long entry holds; longer keys are wide entries with an
/// out-of-line copy.
pub const LONG_INLINE_MAX: usize = 24;

/// Slots an entry whose first slot has descriptor `d` takes: 1 (narrow), 2
/// (wide) or 3 (long).
#[inline]
pub fn span_of(d: u8) -> usize {
    match kcode(d) {
        KCODE_WIDE => 2,
        KCODE_LONG => 3,
        _ => 1,
    }
}

/// Pending-move word: bit 63 set, old slot in bits 0..8, new slot in bits 8..16.
pub const PENDING_MARK: u64 = 1 << 63;

/// The on-PM leaf, for size and alignment checks (code accesses words).
#[repr(C, align(256))]
pub struct LeafLayout {
    pub lines: [[u64; LINE_WORDS]; LINES],
}

const _: () = assert!(std::mem::size_of::<LeafLayout>() == LEAF_SIZE);
const _: () = assert!(std::mem::align_of::<LeafLayout>() == 256);
const _: () = assert!(LINES >= 4 && LINES & 1 == 0 && LEAF_SIZE & 255 == 0);
const _: () = assert!(SLOTS <= 32);

/// Header word of slot `s` of a line: bit `s` valid, byte `1+s` length codes
/// (key low nibble, value high nibble), byte `4+s` fingerprint.
#[inline]
pub fn hdr_valid(h: u64) -> u32 {
    (h & 7) as u32
}

#[inline]
pub fn hdr_desc(h: u64, s: usize) -> u8 {
    (h >> (8 + 8 * s)) as u8
}

#[inline]
pub fn hdr_fp(h: u64, s: usize) -> u8 {
    (h >> (32 + 8 * s)) as u8
}

/// Header `h` with slot `s` set valid with `desc` and `fp`.
#[inline]
pub fn hdr_set(h: u64, s: usize, desc: u8, fp: u8) -> u64 {
    let clear = !((1u64 << s) | (0xff << (8 + 8 * s)) | (0xff << (32 + 8 * s)));
    (h & clear) | (1 << s) | (desc as u64) << (8 + 8 * s) | (fp as u64) << (32 + 8 * s)
}

/// Header `h` with slot `s` invalid.
#[inline]
pub fn hdr_clear(h: u64, s: usize) -> u64 {
    h & !(1u64 << s)
}

#[inline]
pub fn desc(kcode: u8, vcode: u8) -> u8 {
    kcode | vcode << 4
}

#[inline]
pub fn kcode(d: u8) -> u8 {
    d & 15
}

#[inline]
pub fn vcode(d: u8) -> u8 {
    d >> 4
}

/// Slots of a line whose fingerprint equals `fp` and that are valid: the three
/// fingerprint bytes are compared at once (SWAR: SIMD within a 64-bit register).
#[inline]
#[cfg_attr(target_arch = "x86_64", allow(dead_code))] // x86-64 uses SSE2 (and tests this)
pub fn match_fp(h: u64, fp: u8) -> u32 {
    let x = ((h >> 32) as u32) ^ (fp as u32 * 0x0001_0101);
    let t = !(((x & 0x007f_7f7f) + 0x007f_7f7f) | x | 0x007f_7f7f) & 0x0080_8080;
    let bits = ((t >> 7) & 1) | ((t >> 14) & 2) | ((t >> 21) & 4);
    bits & hdr_valid(h)
}

/// Slots of the whole leaf (bit `line * 3 + s`) whose fingerprint equals `fp`
/// and that are valid, given the line headers. SSE2 (part of the x86-64
/// baseline, so no run-time detection): two headers per 16-byte vector, one
/// `pcmpeqb` + `pmovmskb` per pair; elsewhere the SWAR [`match_fp`].
#[inline]
pub fn match_leaf(h: &[u64; LINES], fp: u8) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8, _mm_set1_epi8, _mm_set_epi64x};
        let mut out = 0u32;
        // SAFETY: SSE2 is part of the x86-64 baseline; these intrinsics only
        // operate on registers.
        unsafe {
            let b = _mm_set1_epi8(fp as i8);
            for p in 0..LINES / 2 {
                let (lo, hi) = (h[2 * p], h[2 * p + 1]);
                let v = _mm_set_epi64x(hi as i64, lo as i64);
                let m = _mm_movemask_epi8(_mm_cmpeq_epi8(v, b)) as u32;
                let ml = ((m >> 4) & 7) & hdr_valid(lo);
                let mh = ((m >> 12) & 7) & hdr_valid(hi);
                out |= (ml | mh << 3) << (6 * p);
            }
        }
        out
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut out = 0u32;
        for (l, &x) in h.iter().enumerate() {
            out |= match_fp(x, fp) << (PER_LINE * l);
        }
        out
    }
}

/// The scan-order hint of a leaf: its valid slots in key order (5 bits per
/// slot, 12 per word), so that a scan need not sort the leaf on every visit.
/// It is volatile and never trusted: whoever reads it checks it against the
/// entries it read ([`order_by_hint`]), so a stale, torn or garbage hint (a
/// crash image, an old pool, two scans storing it at once) costs a sort,
/// never a wrong answer. Scans store it, with plain stores, after sorting a
/// leaf whose hint did not fit; nothing writes it back.
pub fn encode_order(sorted: &[u128]) -> [u64; 2] {
    let mut h = [0u64; 2];
    for (i, &w) in sorted.iter().take(SLOTS).enumerate() {
        h[i / 12] |= u64::from(w as u8 & 31) << (5 * (i % 12));
    }
    h
}

/// A scan-order hint's 24 slot codes as one 120-bit run: slot `i` of the
/// order at bits `5i` (the inverse of [`encode_order`]).
#[inline]
pub fn hint_codes(h: [u64; 2]) -> u128 {
    u128::from(h[0] & ((1 << 60) - 1)) | u128::from(h[1]) << 60
}

/// Writes the sort words `words[s]` of the slots in `mask` to `out` in the
/// order the hint `h` gives, and returns true, if that order is the key
/// order: the hint's first `n = popcount(mask)` entries name each slot of
/// `mask` once, and their keys strictly increase. That order is then the
/// sorted one whatever wrote the hint (n distinct slots of n, keys increasing).
/// Returns false otherwise (`out` then holds garbage).
#[inline]
pub fn order_by_hint(
    words: &[u128; SLOTS],
    mask: u32,
    h: [u64; 2],
    out: &mut [u128; SLOTS],
) -> bool {
    let n = mask.count_ones() as usize;
    let mut left = mask;
    let mut prev = 0u128;
    let mut codes = hint_codes(h);
    for (i, o) in out.iter_mut().enumerate().take(n) {
        let s = (codes & 31) as usize;
        codes >>= 5;
        if s >= SLOTS || left & (1 << s) == 0 {
            return false;
        }
        left &= !(1 << s);
        let w = words[s];
        if i > 0 && w >> 16 <= prev {
            return false;
        }
        prev = w >> 16;
        *o = w;
    }
    true
}

/// 1-byte fingerprint of a key (part of the persistent format: stable).
#[inline]
pub fn fingerprint(key: &[u8]) -> u8 {
    const M: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (key.len() as u64).wrapping_mul(M) ^ 0x5bd1_e995;
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(M);
        h ^= h >> 29;
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(M);
        h ^= h >> 29;
    }
    (h.wrapping_mul(M) >> 56) as u8
}

/// Bytes `8 * i .. 8 * i + 8` of a key as a big-endian integer, zero-padded.
#[inline]
fn word_of(key: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    if key.len() > 8 * i {
        let n = (key.len() - 8 * i).min(8);
        b[..n].copy_from_slice(&key[8 * i..8 * i + n]);
    }
    u64::from_be_bytes(b)
}

/// Bytes 8..16 of a key as a big-endian integer, zero-padded (the second
/// comparison word of a wide key).
#[inline]
pub fn suffix_of(key: &[u8]) -> u64 {
    word_of(key, 1)
}

/// Bytes 16..24 of a key as a big-endian integer, zero-padded (the third word
/// of a long entry).
#[inline]
pub fn third_of(key: &[u8]) -> u64 {
    word_of(key, 2)
}

/// A free place for an entry of `span` slots ([`span_of`]) in headers `h`: any
/// free slot for a narrow entry, two adjacent free slots of one line for a
/// wide one, a free line for a long one.
#[inline]
pub fn find_space(h: &[u64; LINES], span: usize) -> Option<usize> {
    let want = (1u32 << span) - 1;
    for (l, &x) in h.iter().enumerate() {
        let free = !hdr_valid(x) & 7;
        if span == 1 {
            if free != 0 {
                return Some(l * PER_LINE + free.trailing_zeros() as usize);
            }
            continue;
        }
        for s in 0..=PER_LINE - span {
            if free & (want << s) == want << s {
                return Some(l * PER_LINE + s);
            }
        }
    }
    None
}

/// Headers `h` with the entry of `span` slots at `slot` invalid.
#[inline]
pub fn clear_entry(h: &mut [u64; LINES], slot: usize, span: usize) {
    let (l, s) = (slot / PER_LINE, slot % PER_LINE);
    for x in s..s + span {
        h[l] = hdr_clear(h[l], x);
    }
}

/// Packs an inline value (<= 8 bytes).
#[inline]
pub fn pack_inline(v: &[u8]) -> u64 {
    if let Ok(b) = <[u8; 8]>::try_from(v) {
        return u64::from_le_bytes(b);
    }
    let mut b = [0u8; 8];
    b[..v.len()].copy_from_slice(v);
    u64::from_le_bytes(b)
}

/// A view of one leaf's words.
#[derive(Clone, Copy)]
pub struct Leaf {
    pub base: *mut u8,
    pub off: u64,
}

impl Leaf {
    /// Word `i` of the leaf.
    #[inline]
    pub fn w(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < LINES * LINE_WORDS);
        // SAFETY: `off` is a LEAF_SIZE block of the pool (the index only builds
        // `Leaf` from offsets it allocated or validated), 256-byte aligned, so
        // word i is in bounds and 8-byte aligned; AtomicU64 has u64's layout.
        unsafe { &*(self.base.add(self.off as usize + 8 * i) as *const AtomicU64) }
    }

    #[inline]
    pub fn hdr(&self, line: usize) -> u64 {
        self.w(line * LINE_WORDS).load(Ordering::Acquire)
    }

    #[inline]
    pub fn key_word(&self, slot: usize) -> u64 {
        let (l, s) = (slot / PER_LINE, slot % PER_LINE);
        self.w(l * LINE_WORDS + 1 + 2 * s).load(Ordering::Acquire)
    }

    #[inline]
    pub fn val_word(&self, slot: usize) -> u64 {
        let (l, s) = (slot / PER_LINE, slot % PER_LINE);
        self.w(l * LINE_WORDS + 2 + 2 * s).load(Ordering::Acquire)
    }

    #[inline]
    pub fn set_key_word(&self, slot: usize, v: u64) {
        let (l, s) = (slot / PER_LINE, slot % PER_LINE);
        self.store(l * LINE_WORDS + 1 + 2 * s, v);
    }

    #[inline]
    pub fn set_val_word(&self, slot: usize, v: u64) {
        let (l, s) = (slot / PER_LINE, slot % PER_LINE);
        self.store(l * LINE_WORDS + 2 + 2 * s, v);
    }

    #[inline]
    pub fn set_hdr(&self, line: usize, h: u64) {
        self.store(line * LINE_WORDS, h);
    }

    /// Stores word `i` of the leaf. Every persistent store goes through here:
    /// entries before the header word that validates them in the same line is
    /// the order the one-barrier insert relies on (x86-TSO within a line), and
    /// the crash simulator records it to produce only images that order allows.
    #[inline]
    pub fn store(&self, i: usize, v: u64) {
        ferrite_pm::store_u64(self.w(i), v, Ordering::Release);
    }

    #[inline]
    pub fn next(&self) -> u64 {
        self.w(W_NEXT).load(Ordering::Acquire)
    }

    #[inline]
    pub fn lock_word(&self) -> &AtomicU64 {
        self.w(W_LOCK)
    }

    /// Address of line `l` (for write-back).
    #[inline]
    pub fn line_ptr(&self, l: usize) -> *const u8 {
        // SAFETY: in bounds (see `w`).
        unsafe { self.base.add(self.off as usize + 64 * l) }
    }

    /// Asks the CPU to start loading every line of the leaf (scans call it for
    /// the next leaf while they sort the current one).
    #[inline]
    pub fn prefetch(&self) {
        crate::prefetch::lines(self.line_ptr(0) as usize, LEAF_SIZE);
    }

    /// The scan-order hint (see [`encode_order`]); read inside a version
    /// window like any word, and checked before use.
    #[inline]
    pub fn order_hint(&self) -> [u64; 2] {
        [
            self.w(W_ORDER[0]).load(Ordering::Relaxed),
            self.w(W_ORDER[1]).load(Ordering::Relaxed),
        ]
    }

    /// Stores the scan-order hint: plain stores, not written back, by a
    /// reader that does not hold the lock (the hint is checked by every use).
    #[inline]
    pub fn set_order_hint(&self, h: [u64; 2]) {
        self.w(W_ORDER[0]).store(h[0], Ordering::Relaxed);
        self.w(W_ORDER[1]).store(h[1], Ordering::Relaxed);
    }

    /// All line headers (independent loads, so their misses overlap).
    #[inline]
    pub fn hdrs(&self) -> [u64; LINES] {
        std::array::from_fn(|l| self.hdr(l))
    }

    /// Valid slots as a bitmask over all lines.
    pub fn valid_mask(&self) -> u64 {
        let mut m = 0u64;
        for l in 0..LINES {
            m |= (hdr_valid(self.hdr(l)) as u64) << (l * PER_LINE);
        }
        m
    }
}

/// Zeroes a fresh leaf and sets its next pointer and magic (not written back).
pub fn init_leaf(lf: Leaf, next: u64) {
    for i in 0..LINES * LINE_WORDS {
        lf.w(i).store(0, Ordering::Relaxed);
    }
    lf.w(W_NEXT).store(next, Ordering::Relaxed);
    lf.w(W_MAGIC).store(LEAF_MAGIC, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bits_round_trip() {
        let mut h = 0;
        for s in 0..3 {
            h = hdr_set(h, s, desc(8, 15), 0x10 + s as u8);
        }
        for s in 0..3 {
            assert_eq!(hdr_desc(h, s), desc(8, 15));
            assert_eq!(hdr_fp(h, s), 0x10 + s as u8);
            assert_eq!(match_fp(h, 0x10 + s as u8), 1 << s);
        }
        assert_eq!(match_fp(h, 0x99), 0);
        h = hdr_clear(h, 1);
        assert_eq!(match_fp(h, 0x11), 0);
        assert_eq!(hdr_valid(h), 0b101);
        // Zero fingerprints on valid slots still match.
        let h = hdr_set(0, 2, 0, 0);
        assert_eq!(match_fp(h, 0), 0b100);
        let mut hs = [0u64; LINES];
        hs[1] = hdr_set(hdr_set(0, 0, 1, 7), 2, 1, 7);
        hs[LINES - 1] = hdr_set(hdr_clear(hdr_set(0, 1, 1, 7), 1), 2, 1, 7);
        assert_eq!(match_leaf(&hs, 7), 0b101 << 3 | 0b100 << (3 * (LINES - 1)));
        assert_eq!(match_leaf(&hs, 8), 0);
        for fp in 0..=255u8 {
            let h = hdr_set(hdr_set(hdr_set(0, 0, 1, fp), 1, 2, fp ^ 1), 2, 3, fp ^ 0x80);
            assert_eq!(match_fp(h, fp), 1);
        }
    }
}

#[cfg(test)]
mod order_hint_tests {
    use super::*;

    fn word(kw: u64, slot: usize) -> u128 {
        u128::from(kw) << 64 | 8 << 16 | 8 << 8 | slot as u128
    }

    #[test]
    fn a_sorted_leafs_hint_orders_its_entries() {
        let slots = [5usize, 0, 23, 7, 12];
        let keys = [50u64, 10, 30, 20, 40];
        let words: Vec<u128> = slots.iter().zip(keys).map(|(&s, k)| word(k, s)).collect();
        let mut sorted = words.clone();
        sorted.sort_unstable();
        let h = encode_order(&sorted);
        let (mut by_slot, mut mask) = ([0u128; SLOTS], 0u32);
        for &w in &words {
            by_slot[w as u8 as usize] = w;
            mask |= 1 << (w as u8);
        }
        let mut out = [0u128; SLOTS];
        assert!(order_by_hint(&by_slot, mask, h, &mut out));
        assert_eq!(&out[..sorted.len()], &sorted[..]);
    }

    /// Every way a hint can be wrong for the entries read is refused.
    #[test]
    fn a_hint_that_does_not_fit_is_refused() {
        let (mut words, mut mask) = ([0u128; SLOTS], 0u32);
        for (s, k) in [(3usize, 10u64), (9, 20), (20, 30)] {
            words[s] = u128::from(k) << 64 | 8 << 16 | 8 << 8 | s as u128;
            mask |= 1 << s;
        }
        let hint = |slots: &[u64]| {
            let mut h = [0u64; 2];
            for (i, &s) in slots.iter().enumerate() {
                h[i / 12] |= s << (5 * (i % 12));
            }
            h
        };
        let mut out = [0u128; SLOTS];
        assert!(order_by_hint(&words, mask, hint(&[3, 9, 20]), &mut out));
        assert_eq!(
            out[..3].iter().map(|w| *w as u8).collect::<Vec<_>>(),
            [3, 9, 20]
        );
        for bad in [
            &[9u64, 3, 20][..],
            &[3, 3, 20],
            &[3, 9, 21],
            &[3, 9, 31],
            &[3, 9],
        ] {
            assert!(!order_by_hint(&words, mask, hint(bad), &mut out), "{bad:?}");
        }
    }
}
