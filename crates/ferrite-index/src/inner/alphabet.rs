//! The keys' alphabet: which byte values the separators' first 8 bytes use,
//! so that a route's guess of where a key lies in a node ([`super::window`])
//! interpolates over the keys' own digits instead of raw byte values.
//!
//! Why: the guess spreads a node's separators evenly over its prefix range.
//! For binary keys that holds. For text keys it does not: a hex key's bytes
//! are `0`–`9` and `a`–`f`, so between `…3` and `…c` the raw values leave a
//! gap of 39 unused values, and the guess lands outside the window the reader
//! asked for. Measured on 10 M 64-byte hex keys: 1.2 of the 3 windowed
//! searches per lookup fell back to a search of the whole node.
//!
//! The alphabet maps each byte to its rank among the byte values seen (the
//! number of seen values below it), and a prefix to the number whose digits,
//! in radix `seen + 1`, are those ranks, from the first byte where the
//! node's fences differ. The map is monotone (non-decreasing), so keys keep
//! their order and the interpolation stays a guess of the right shape;
//! bytes never seen take the rank of the next seen one.
//!
//! Nothing here is trusted: the window is a hint that [`super::Node::bound_in`]
//! checks, and a torn read of the table (a writer widening the alphabet while a
//! reader maps a key) only makes one guess worse. With more than
//! [`MAX_SYMBOLS`] values seen (binary keys, after a few hundred separators)
//! the map is the identity and the guess is the raw one.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering as Mo};

/// Above this many distinct byte values the raw prefix is at most twice as
/// sparse as the alphabet's: the map is the identity.
const MAX_SYMBOLS: u32 = 128;
/// Digits of the map after the fences' common bytes: 4 digits of a 17-symbol
/// alphabet already place a key among 83,521 positions, for at most
/// [`super::KEYS`] separators.
const DEPTH: usize = 4;

pub(super) struct Alphabet {
    /// Byte values seen (writers only, under the structure mutex or before
    /// the tree is published).
    seen: [AtomicU64; 4],
    /// Rank of each byte value: seen values below it.
    rank: [AtomicU8; 256],
    /// Radix of the map (seen values plus one); 0: the identity.
    radix: AtomicU32,
}

impl Alphabet {
    pub(super) fn new() -> Alphabet {
        Alphabet {
            seen: std::array::from_fn(|_| AtomicU64::new(0)),
            rank: std::array::from_fn(|_| AtomicU8::new(0)),
            radix: AtomicU32::new(0),
        }
    }

    /// Adds the bytes of a separator's prefix (a writer: the structure mutex
    /// held, or the tree not yet published). Rebuilds the ranks when a byte
    /// value is new, which happens at most 256 times in a tree's life.
    pub(super) fn learn(&self, prefix: u64) {
        let mut grew = false;
        for b in prefix.to_be_bytes() {
            let (w, bit) = (&self.seen[usize::from(b >> 6)], 1u64 << (b & 63));
            if w.load(Mo::Relaxed) & bit == 0 {
                w.fetch_or(bit, Mo::Relaxed);
                grew = true;
            }
        }
        if !grew {
            return;
        }
        let mut below = 0u32;
        for v in 0..256usize {
            self.rank[v].store(below.min(255) as u8, Mo::Relaxed);
            below += (self.seen[v >> 6].load(Mo::Relaxed) >> (v & 63) & 1) as u32;
        }
        let radix = if (2..=MAX_SYMBOLS).contains(&below) {
            below + 1
        } else {
            0
        };
        self.radix.store(radix, Mo::Relaxed);
    }

    /// The byte values seen so far, in order.
    pub(super) fn symbols(&self) -> Vec<u8> {
        (0..=255u8)
            .filter(|&b| self.seen[usize::from(b >> 6)].load(Mo::Relaxed) >> (b & 63) & 1 == 1)
            .collect()
    }

    /// Where `kp` lies between the fences `lo < hi`, as a fraction in
    /// `[0, 1)` of the way (a guess; see the module documentation).
    #[inline]
    pub(super) fn frac(&self, kp: u64, lo: u64, hi: u64) -> f64 {
        let raw = || (kp.saturating_sub(lo) as f64 / ((hi - lo) as f64 + 1.0)).min(1.0);
        let radix = self.radix.load(Mo::Relaxed);
        if radix == 0 {
            return raw();
        }
        let r = f64::from(radix);
        // The first byte where the fences differ, and DEPTH digits from it.
        let first = ((lo ^ hi).leading_zeros() / 8) as usize;
        let end = (first + DEPTH).min(8);
        let map = |x: u64| {
            let b = x.to_be_bytes();
            b[first..end].iter().fold(0.0, |acc, &c| {
                acc * r + f64::from(self.rank[usize::from(c)].load(Mo::Relaxed))
            })
        };
        let (l, h) = (map(lo), map(hi));
        if h <= l {
            // The fences' differing bytes map to one rank (values never seen).
            return raw();
        }
        ((map(kp) - l) / (h - l + 1.0)).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(s: &[u8]) -> u64 {
        super::super::prefix_of(s)
    }

    /// Random lowercase hex strings of 16 digits, sorted.
    fn hex_keys(n: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut x = seed;
        let mut keys: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                format!("{x:016x}").into_bytes()
            })
            .collect();
        keys.sort();
        keys
    }

    /// Share of keys whose interpolated place among `seps` (evenly spread
    /// separators, as a node's are) is within 6 slots of their true place:
    /// the window a reader asks for.
    fn hits(a: &Alphabet, keys: &[Vec<u8>], stride: usize) -> f64 {
        let seps: Vec<u64> = keys.iter().step_by(stride).map(|k| prefix(k)).collect();
        let (lo, hi) = (seps[0], *seps.last().unwrap());
        let seps = &seps[1..seps.len() - 1];
        let count = seps.len() as f64;
        let mut ok = 0;
        let inside: Vec<&Vec<u8>> = keys
            .iter()
            .filter(|k| (lo..hi).contains(&prefix(k)))
            .collect();
        for k in &inside {
            let kp = prefix(k);
            let truth = seps.iter().filter(|&&s| s <= kp).count() as f64;
            let guess = a.frac(kp, lo, hi) * count;
            ok += usize::from((guess - truth).abs() <= 6.0);
        }
        ok as f64 / inside.len() as f64
    }

    /// Hex keys: the learned alphabet places nearly every key inside its
    /// window; the raw interpolation (what a broken or absent alphabet gives)
    /// misses many of them.
    #[test]
    fn hex_keys_land_in_their_window() {
        let keys = hex_keys(64 * 64, 7);
        let learned = Alphabet::new();
        for k in &keys {
            learned.learn(prefix(k));
        }
        assert_eq!(learned.radix.load(Mo::Relaxed), 17);
        let raw = Alphabet::new();
        // A node-sized stretch of the key space (64 separators).
        for part in keys.chunks(64 * 8).filter(|c| c.len() == 64 * 8) {
            let (good, bad) = (hits(&learned, part, 8), hits(&raw, part, 8));
            assert!(good >= 0.95, "learned alphabet: {good}");
            assert!(bad < good, "raw {bad} learned {good}");
        }
        // Over the whole space the raw guess is far off.
        assert!(hits(&raw, &keys, 64) < 0.8);
        assert!(hits(&learned, &keys, 64) >= 0.95);
    }

    /// Binary keys use every byte value: the map is the identity, the guess
    /// exactly the raw one.
    #[test]
    fn binary_keys_map_to_themselves() {
        let a = Alphabet::new();
        let mut x = 99u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            a.learn(x);
        }
        assert_eq!(a.radix.load(Mo::Relaxed), 0);
        let raw = (500u64 - 100) as f64 / ((1000u64 - 100) as f64 + 1.0);
        assert_eq!(a.frac(500, 100, 1000), raw);
    }

    /// Any fences and key, even out of order (torn reads), give a fraction
    /// in range.
    #[test]
    fn fractions_stay_in_range() {
        let a = Alphabet::new();
        for k in hex_keys(100, 3) {
            a.learn(prefix(&k));
        }
        for (kp, lo, hi) in [
            (5u64, 0u64, 10u64),
            (0, 0, u64::MAX),
            (u64::MAX, 0, u64::MAX),
            (50, 10, 20),
            (1, 10, 20),
            (
                prefix(b"zzzzzzzz"),
                prefix(b"00000000"),
                prefix(b"ffffffff"),
            ),
            (prefix(b"0a"), prefix(b"0:"), prefix(b"0;")),
        ] {
            let f = a.frac(kp, lo, hi);
            assert!((0.0..=1.0).contains(&f), "{kp:#x} {lo:#x} {hi:#x}: {f}");
        }
    }
}
