//! The bucket table's map from a key's first 8 bytes to the number it is
//! bucketed and compared by ([`super::bucket`]), fixed when the table is
//! built.
//!
//! For binary keys the map is the identity and the table buckets by the top
//! 16 bits. Text keys use few byte values: 10 M hex keys fall in 256 of the
//! 65,536 buckets of the top 16 bits, each far over an entry's capacity, so
//! every entry was off and every lookup routed from the root. Over an
//! alphabet of `A` byte values (the separators' own, [`super::alphabet`]),
//! the map reads the 8 bytes as 8 digits in radix `A`: an order-preserving,
//! one-to-one map of the prefixes made of those bytes onto `0..A^8` (hex:
//! 32 bits), bucketed by its top [`MAPPED_BITS`] bits. A prefix with a byte
//! outside the alphabet has no image: a key with one routes another way,
//! and an entry whose range holds a separator with one is off.
//!
//! A bucket `b` covers the mapped values `b << shift ..` up to the next
//! bucket's; its range of raw prefixes is from [`KeyMap::unmap`] of its first
//! value to just below the next bucket's (the prefixes with bytes outside
//! the alphabet in between belong to the range too, which is why such a
//! separator turns the entry off).

/// Buckets of the identity map (binary keys): the top 16 bits.
pub(super) const IDENTITY_BITS: u32 = 16;
/// Buckets of a text alphabet: 2^18 of them. Text keys are mostly longer
/// than 8 bytes, and an entry of a key over 8 bytes takes two leaf slots:
/// 10 M 64-byte keys make 1.86 M leaves, 28 separators per bucket of 2^16
/// (an entry holds 17), 7 per bucket of 2^18.
pub(super) const MAPPED_BITS: u32 = 18;
/// Alphabets from this size to [`MAX_SYMBOLS`] are mapped (smaller ones
/// give fewer than 2^18 mapped values).
const MIN_SYMBOLS: usize = 5;
/// Larger alphabets use the identity (the raw prefix is then at most twice
/// as sparse).
const MAX_SYMBOLS: usize = 128;

const NONE: u8 = u8::MAX;

#[derive(Debug)]
pub(super) struct KeyMap {
    /// 0 for the identity; else the alphabet's size.
    radix: u64,
    /// Digit of each byte value ([`NONE`]: outside the alphabet).
    digit: [u8; 256],
    /// Byte value of each digit.
    sym: [u8; 256],
    /// Bits of the mapped values (64 for the identity).
    len: u32,
    /// Bits that select the bucket.
    pub(super) bits: u32,
    /// Bytes skipped: the separators' common prefix when the table was built
    /// (keys such as "user" and digits share one). Keys are mapped by the 8
    /// bytes after it; a key that does not start with it has no bucket, and
    /// sorts below or above every key that does ([`Place`]).
    skip: Box<[u8]>,
}

/// Where a key lies against the map's skipped prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// Below every key that starts with it.
    Below,
    /// Starts with it: the 8 bytes after it (zero-padded, big-endian).
    In(u64),
    /// Above every key that starts with it.
    Above,
}

impl KeyMap {
    pub(super) fn identity() -> KeyMap {
        KeyMap {
            radix: 0,
            digit: [0; 256],
            sym: [0; 256],
            len: 64,
            bits: IDENTITY_BITS,
            skip: Box::default(),
        }
    }

    /// The map for keys that start with `skip`, made of `symbols` after it
    /// (sorted, distinct byte values).
    pub(super) fn with_skip(symbols: &[u8], skip: &[u8]) -> KeyMap {
        let mut m = KeyMap::new(symbols);
        m.skip = skip.into();
        m
    }

    /// Bytes skipped before the mapped 8.
    pub(super) fn skip(&self) -> &[u8] {
        &self.skip
    }

    /// Where `key` lies against the skipped prefix.
    #[inline]
    pub(super) fn place(&self, key: &[u8]) -> Place {
        let c = self.skip.len();
        if c == 0 {
            return Place::In(super::prefix_of(key));
        }
        let head = &key[..key.len().min(c)];
        match head.cmp(&self.skip[..head.len()]) {
            std::cmp::Ordering::Less => Place::Below,
            std::cmp::Ordering::Greater => Place::Above,
            // A proper prefix of the skipped bytes sorts below them.
            std::cmp::Ordering::Equal if key.len() < c => Place::Below,
            std::cmp::Ordering::Equal => Place::In(super::prefix_of(&key[c..])),
        }
    }

    /// The largest mapped value.
    fn max_mapped(&self) -> u64 {
        if self.radix == 0 {
            u64::MAX
        } else {
            self.radix.pow(8) - 1
        }
    }

    /// A monotone map of every key into the mapped values ([`Self::mono`]
    /// after the skipped prefix; keys below it first, above it last).
    pub(super) fn mono_key(&self, key: &[u8]) -> u64 {
        match self.place(key) {
            Place::Below => 0,
            Place::In(w) => self.mono(w),
            Place::Above => self.max_mapped(),
        }
    }

    /// The map for keys made of `symbols` (sorted, distinct byte values).
    pub(super) fn new(symbols: &[u8]) -> KeyMap {
        if !(MIN_SYMBOLS..=MAX_SYMBOLS).contains(&symbols.len()) {
            return KeyMap::identity();
        }
        let mut m = KeyMap {
            radix: symbols.len() as u64,
            digit: [NONE; 256],
            sym: [0; 256],
            len: 0,
            bits: MAPPED_BITS,
            skip: Box::default(),
        };
        for (d, &b) in symbols.iter().enumerate() {
            m.digit[usize::from(b)] = d as u8;
            m.sym[d] = b;
        }
        let max = m.radix.pow(8) - 1;
        m.len = u64::BITS - max.leading_zeros();
        m
    }

    /// Right shift from a mapped value to its bucket.
    #[inline]
    pub(super) fn shift(&self) -> u32 {
        self.len - self.bits
    }

    /// The mapped value of a prefix; None when a byte is outside the
    /// alphabet.
    #[inline]
    pub(super) fn map(&self, p: u64) -> Option<u64> {
        if self.radix == 0 {
            return Some(p);
        }
        let mut t = 0u64;
        for b in p.to_be_bytes() {
            let d = self.digit[usize::from(b)];
            if d == NONE {
                return None;
            }
            t = t * self.radix + u64::from(d);
        }
        Some(t)
    }

    /// A monotone map of every prefix into the mapped values that agrees with
    /// [`Self::map`] where that has a value: a byte outside the alphabet
    /// becomes the next digit up with zeros after it, or, above the last
    /// digit, the last digit with the largest digits after it.
    fn mono(&self, p: u64) -> u64 {
        if self.radix == 0 {
            return p;
        }
        let bytes = p.to_be_bytes();
        let mut t = 0u64;
        for (i, &b) in bytes.iter().enumerate() {
            let d = self.digit[usize::from(b)];
            if d != NONE {
                t = t * self.radix + u64::from(d);
                continue;
            }
            let rest = self.radix.pow(7 - i as u32);
            let above = (0..self.radix as usize)
                .take_while(|&j| self.sym[j] < b)
                .count() as u64;
            return if above == self.radix {
                (t * self.radix + self.radix) * rest - 1
            } else {
                (t * self.radix + above) * rest
            };
        }
        t
    }

    /// The prefix whose mapped value is `t` (`t` below `radix^8`).
    pub(super) fn unmap(&self, t: u64) -> u64 {
        if self.radix == 0 {
            return t;
        }
        let mut b = [0u8; 8];
        let mut x = t;
        for i in (0..8).rev() {
            b[i] = self.sym[(x % self.radix) as usize];
            x /= self.radix;
        }
        u64::from_be_bytes(b)
    }

    /// Buckets in use (those past the last mapped value are never filled).
    pub(super) fn buckets(&self) -> u64 {
        if self.radix == 0 {
            return 1 << self.bits;
        }
        ((self.radix.pow(8) - 1) >> self.shift()) + 1
    }

    /// Bucket `b`'s raw prefixes, first and last (inclusive); None for a
    /// bucket past the last mapped value. The ranges tile the prefixes.
    pub(super) fn range(&self, b: u64) -> Option<(u64, u64)> {
        if b >= self.buckets() {
            return None;
        }
        let s = self.shift();
        // The first bucket also holds the prefixes below its first value.
        let start = if b == 0 { 0 } else { self.unmap(b << s) };
        let end = if b + 1 == self.buckets() {
            u64::MAX
        } else {
            self.unmap((b + 1) << s) - 1
        };
        Some((start, end))
    }

    /// The buckets whose ranges meet the raw prefixes `from..=to`.
    #[cfg(test)]
    pub(super) fn buckets_of(&self, from: u64, to: u64) -> std::ops::RangeInclusive<u64> {
        self.buckets_between(self.mono(from), self.mono(to))
    }

    /// The buckets whose ranges meet the keys whose [`Self::mono_key`] values
    /// lie in `a..=z`.
    pub(super) fn buckets_between(&self, a: u64, z: u64) -> std::ops::RangeInclusive<u64> {
        let s = self.shift();
        let last = self.buckets() - 1;
        if self.radix == 0 {
            return (a >> s)..=(z >> s);
        }
        // A prefix in bucket b's range maps (monotonely) into b or onto the
        // first value of b + 1.
        let a = (a >> s).saturating_sub(1);
        let z = (z >> s).min(last);
        a.min(last)..=z
    }

    /// Every bucket in use.
    pub(super) fn all_buckets(&self) -> std::ops::RangeInclusive<u64> {
        0..=self.buckets() - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex() -> KeyMap {
        KeyMap::new(b"0123456789abcdef")
    }

    fn p(s: &[u8]) -> u64 {
        super::super::prefix_of(s)
    }

    #[test]
    fn identity_is_the_top_bits() {
        let m = KeyMap::identity();
        assert_eq!(m.map(0x1234_5678_9abc_def0), Some(0x1234_5678_9abc_def0));
        assert_eq!(m.shift(), 48);
        assert_eq!(m.buckets(), 1 << 16);
        assert_eq!(m.range(0x1234), Some((0x1234 << 48, (0x1235 << 48) - 1)));
        assert_eq!(m.buckets_of(0x1234 << 48, 0x1236 << 48), 0x1234..=0x1236);
        // Too few or too many symbols: the identity.
        assert_eq!(KeyMap::new(b"01").radix, 0);
        assert_eq!(KeyMap::new(&(0..=200).collect::<Vec<u8>>()).radix, 0);
    }

    /// Hex prefixes map one to one and in order onto 32 bits, and back.
    #[test]
    fn hex_maps_in_order_and_back() {
        let m = hex();
        assert_eq!(m.len, 32);
        assert_eq!(m.buckets(), 1 << 18);
        assert_eq!(m.map(p(b"00000000")), Some(0));
        assert_eq!(m.map(p(b"ffffffff")), Some(u64::from(u32::MAX)));
        assert_eq!(m.map(p(b"0000000g")), None);
        let mut x = 5u64;
        let mut prev: Option<(u64, u64)> = None;
        let mut keys: Vec<u64> = (0..2000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p(format!("{x:016x}").as_bytes())
            })
            .collect();
        keys.sort();
        for k in keys {
            let t = m.map(k).unwrap();
            assert_eq!(m.unmap(t), k);
            assert_eq!(m.mono(k), t);
            if let Some((pk, pt)) = prev {
                assert_eq!(pk.cmp(&k), pt.cmp(&t));
            }
            prev = Some((k, t));
            // Its bucket's range holds it.
            let (a, z) = m.range(t >> m.shift()).unwrap();
            assert!(a <= k && k <= z);
        }
    }

    /// Bucket ranges tile the prefix space in order, and `buckets_of` of any
    /// raw range (bytes outside the alphabet included) covers every bucket
    /// whose range meets it.
    #[test]
    fn ranges_tile_and_buckets_of_covers_them() {
        let m = KeyMap::new(b"0123456789");
        let n = m.buckets();
        let mut next = 0u64;
        for b in 0..n {
            let (a, z) = m.range(b).unwrap();
            assert_eq!(a, next, "bucket {b}");
            assert!(a <= z);
            next = z.wrapping_add(1);
        }
        assert_eq!(next, 0, "the last bucket ends the space");
        assert_eq!(m.range(n), None);
        let mut x = 11u64;
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Raw values near the alphabet, some bytes outside it.
            let mut b = x.to_be_bytes();
            for c in &mut b {
                *c = b'.' + *c % 14;
            }
            let lo = u64::from_be_bytes(b);
            let hi = lo.saturating_add(x >> 40);
            let r = m.buckets_of(lo, hi);
            // Ranges are in order: the buckets just outside `r` miss it.
            if *r.start() > 0 {
                let (_, z) = m.range(r.start() - 1).unwrap();
                assert!(z < lo, "{lo:#x}..={hi:#x}: bucket before {r:?} meets it");
            }
            if let Some((a, _)) = m.range(r.end() + 1) {
                assert!(a > hi, "{lo:#x}..={hi:#x}: bucket after {r:?} meets it");
            }
            assert!(m.mono(lo) <= m.mono(hi));
        }
    }
}
