//! PiBench's workload model: records are numbered ids, ids are scrambled by a
//! bijective hash into keys (so the load order is random in key space while every
//! key stays unique), operations pick ids from a distribution over the loaded
//! range, and inserts take fresh ids above it.

use crate::BenchError;

/// Key popularity, PiBench's `--distribution`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    Uniform,
    /// Zipfian with exponent θ (`--skew`, PiBench default 0.99).
    Zipfian(f64),
    /// Self-similar with skew h: a fraction 1-h of accesses hit a fraction h of
    /// the keys (`--skew 0.2` = 80/20).
    SelfSimilar(f64),
}

impl Distribution {
    /// Parses PiBench's spelling (`UNIFORM`, `ZIPFIAN`, `SELFSIMILAR`, any case).
    pub fn parse(name: &str, skew: f64) -> Result<Distribution, BenchError> {
        match name.to_ascii_uppercase().as_str() {
            "UNIFORM" => Ok(Distribution::Uniform),
            "ZIPFIAN" => {
                if !(skew > 0.0 && skew.is_finite() && skew != 1.0) {
                    return Err(BenchError::Options(format!(
                        "zipfian skew must be > 0 and != 1, got {skew}"
                    )));
                }
                Ok(Distribution::Zipfian(skew))
            }
            "SELFSIMILAR" => {
                if !(skew > 0.0 && skew < 1.0) {
                    return Err(BenchError::Options(format!(
                        "selfsimilar skew must be in (0, 1), got {skew}"
                    )));
                }
                Ok(Distribution::SelfSimilar(skew))
            }
            other => Err(BenchError::Options(format!(
                "unknown distribution {other:?} (UNIFORM, ZIPFIAN or SELFSIMILAR)"
            ))),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Distribution::Uniform => "uniform".into(),
            Distribution::Zipfian(t) => format!("zipfian({t})"),
            Distribution::SelfSimilar(h) => format!("selfsimilar({h})"),
        }
    }
}

/// A small fast generator, one per worker thread: the PM layer's SplitMix64
/// stream, plus the float and range draws the distributions need.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut s = ferrite_pm::rng::SplitMix(self.0);
        let v = s.next();
        self.0 = s.0;
        v
    }
    /// Uniform in [0, 1).
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in [0, n); n > 0.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Draws ids in [0, n) from a [`Distribution`]. Id 0 is the most popular under
/// the skewed distributions; the key hash scatters popular ids over key space.
#[derive(Debug, Clone)]
pub struct IdGen {
    n: u64,
    dist: Distribution,
    // Zipfian constants (Gray et al., as in YCSB).
    alpha: f64,
    zetan: f64,
    eta: f64,
    half_pow_theta: f64,
    // Self-similar exponent ln(h)/ln(1-h).
    ss_exp: f64,
}

fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl IdGen {
    /// Precomputes the distribution's constants (zipfian sums n terms once).
    pub fn new(n: u64, dist: Distribution) -> IdGen {
        let n = n.max(1);
        let mut g = IdGen {
            n,
            dist,
            alpha: 0.0,
            zetan: 0.0,
            eta: 0.0,
            half_pow_theta: 0.0,
            ss_exp: 0.0,
        };
        match dist {
            Distribution::Uniform => {}
            Distribution::Zipfian(theta) => {
                let zeta2 = zeta(2, theta);
                g.zetan = zeta(n, theta);
                g.alpha = 1.0 / (1.0 - theta);
                g.eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / g.zetan);
                g.half_pow_theta = 1.0 + 0.5f64.powf(theta);
            }
            Distribution::SelfSimilar(h) => g.ss_exp = h.ln() / (1.0 - h).ln(),
        }
        g
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self.dist {
            Distribution::Uniform => rng.below(self.n),
            Distribution::Zipfian(_) => {
                let u = rng.unit();
                let uz = u * self.zetan;
                if uz < 1.0 {
                    return 0;
                }
                if uz < self.half_pow_theta {
                    return 1.min(self.n - 1);
                }
                let v = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
                v.min(self.n - 1)
            }
            Distribution::SelfSimilar(_) => {
                let v = (self.n as f64 * rng.unit().powf(self.ss_exp)) as u64;
                v.min(self.n - 1)
            }
        }
    }
}

/// A bijection on u64 (multiplication by an odd constant, then an xor-shift
/// that is its own kind of bijection) that maps 0 to 0: PiBench's first key is 0,
/// and every index must treat it as an ordinary key.
#[inline]
pub fn scramble(id: u64) -> u64 {
    let x = id.wrapping_mul(0xD6E8_FEB8_6659_FD93);
    x ^ (x >> 32)
}

/// The multiplicative inverse of `scramble`'s odd constant modulo 2^64
/// (Newton's iteration: each step doubles the correct low bits).
const SCRAMBLE_INV: u64 = {
    let c: u64 = 0xD6E8_FEB8_6659_FD93;
    let mut x = c; // correct to 3 bits for an odd c
    let mut i = 0;
    while i < 6 {
        x = x.wrapping_mul(2u64.wrapping_sub(c.wrapping_mul(x)));
        i += 1;
    }
    x
};

/// The inverse of [`scramble`]: the id whose key hash is `h`.
#[inline]
pub fn unscramble(h: u64) -> u64 {
    // x ^ (x >> 32) is its own inverse (the shift is at least half the width).
    let x = h ^ (h >> 32);
    x.wrapping_mul(SCRAMBLE_INV)
}

/// Turns ids into keys and values of the configured sizes.
///
/// Keys: the prefix (`-f`), then for `-k 8` the scrambled id as 8 big-endian
/// bytes (so byte order is numeric order); for `-k` < 8 its low bytes (as PiBench,
/// collisions possible); for 8 < `-k` < 16 the 8 bytes followed by filler; for
/// `-k` >= 16 a string key: 16 lowercase hex digits then letters derived from the
/// id. Every key of one size has the same length.
#[derive(Debug, Clone)]
pub struct KeyCodec {
    pub key_size: usize,
    pub value_size: usize,
    pub prefix: Vec<u8>,
}

impl KeyCodec {
    pub fn new(key_size: usize, value_size: usize, prefix: &str) -> Result<KeyCodec, BenchError> {
        if key_size == 0 {
            return Err(BenchError::Options(
                "key size (-k) must be at least 1".into(),
            ));
        }
        let total = key_size + prefix.len();
        if total > ferrite_index::MAX_KEY {
            return Err(BenchError::Options(format!(
                "key of {total} bytes (prefix + -k) exceeds the index limit of {} bytes",
                ferrite_index::MAX_KEY
            )));
        }
        if value_size > ferrite_index::MAX_VALUE {
            return Err(BenchError::Options(format!(
                "value size {value_size} exceeds the index limit of {} bytes",
                ferrite_index::MAX_VALUE
            )));
        }
        Ok(KeyCodec {
            key_size,
            value_size,
            prefix: prefix.as_bytes().to_vec(),
        })
    }

    /// Full key length in bytes (prefix included).
    pub fn key_len(&self) -> usize {
        self.prefix.len() + self.key_size
    }

    /// Writes the key of `id` into `out` (cleared first).
    #[inline]
    pub fn key(&self, id: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.prefix);
        let h = scramble(id);
        let be = h.to_be_bytes();
        let k = self.key_size;
        if k <= 8 {
            out.extend_from_slice(&be[8 - k..]);
        } else if k < 16 {
            out.extend_from_slice(&be);
            filler(id, k - 8, out);
        } else {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            for i in (0..16).rev() {
                out.push(HEX[((h >> (i * 4)) & 15) as usize]);
            }
            filler(id, k - 16, out);
        }
    }

    /// Writes a value for `id`: its first 8 bytes (little-endian) are id + 1
    /// in the low 56 bits and a version tag in the top 8, so a reader can
    /// check it got the value of its key. Never zero: two published wrappers
    /// (FPTree, PACTree) take a zero value for "not found".
    #[inline]
    pub fn value(&self, id: u64, version: u8, out: &mut Vec<u8>) {
        out.clear();
        let tag = (id.wrapping_add(1) & VALUE_ID_MASK) ^ ((version as u64) << 56);
        let b = tag.to_le_bytes();
        let n = self.value_size.min(8);
        out.extend_from_slice(&b[..n]);
        out.resize(self.value_size, version);
    }
}

impl KeyCodec {
    /// Whether the harness can decode its keys back to ids (keys of at least
    /// 8 bytes; shorter ones are truncated and may collide).
    pub fn decodable(&self) -> bool {
        self.key_size >= 8
    }

    /// The key hash ([`scramble`] of the id) of a key this codec made; None
    /// for anything else (wrong length or prefix, bad digits, wrong filler).
    #[inline]
    pub fn decode(&self, key: &[u8]) -> Option<u64> {
        if self.key_size == 8 && self.prefix.is_empty() {
            // The common case, decoded in the measured time of every scan
            // record (so inlined there): the key is the hash.
            return <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes);
        }
        self.decode_general(key)
    }

    fn decode_general(&self, key: &[u8]) -> Option<u64> {
        if key.len() != self.key_len()
            || (!self.prefix.is_empty() && !key.starts_with(&self.prefix))
            || self.key_size < 8
        {
            return None;
        }
        let body = &key[self.prefix.len()..];
        let h = if self.key_size < 16 {
            u64::from_be_bytes(body[..8].try_into().ok()?)
        } else {
            let mut h = 0u64;
            for &c in &body[..16] {
                let d = match c {
                    b'0'..=b'9' => c - b'0',
                    b'a'..=b'f' => c - b'a' + 10,
                    _ => return None,
                };
                h = (h << 4) | d as u64;
            }
            h
        };
        if self.key_size != 8 {
            // The filler must be the id's.
            let mut again = Vec::with_capacity(key.len());
            self.key(unscramble(h), &mut again);
            if again != key {
                return None;
            }
        }
        Some(h)
    }

    /// Whether `value` is a value [`KeyCodec::value`] wrote for `id` (any
    /// version). Values shorter than 8 bytes cannot tell and always match.
    #[inline]
    pub fn value_matches(&self, id: u64, value: &[u8]) -> bool {
        self.word_matches(id, value_word(value))
    }

    /// [`KeyCodec::value_matches`] on the word [`value_word`] took of the
    /// value, so a scan can keep each record's value as one word in the
    /// measured time and check it afterwards.
    #[inline]
    pub fn word_matches(&self, id: u64, w: u64) -> bool {
        self.value_size < 8 || w == id.wrapping_add(1) & VALUE_ID_MASK
    }
}

/// What [`KeyCodec::word_matches`] needs of a value: the id bits of its
/// first 8 bytes, or `SHORT_VALUE` when it has fewer.
#[inline]
pub fn value_word(value: &[u8]) -> u64 {
    match value.first_chunk::<8>() {
        Some(b) => u64::from_le_bytes(*b) & VALUE_ID_MASK,
        None => SHORT_VALUE,
    }
}

/// The word of a value shorter than 8 bytes: outside the id bits, so it
/// matches no id.
const SHORT_VALUE: u64 = 1 << 63;

/// The id bits of a value's tag.
const VALUE_ID_MASK: u64 = (1 << 56) - 1;

fn filler(id: u64, n: usize, out: &mut Vec<u8>) {
    let mut r = Rng(id ^ 0x5DEE_CE66_D1CE_4E5B);
    let mut left = n;
    while left > 0 {
        let x = r.next_u64();
        for i in 0..8.min(left) {
            out.push(b'a' + ((x >> (i * 8)) as u8 % 26));
        }
        left -= 8.min(left);
    }
}

/// One kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Insert,
    Update,
    Remove,
    Scan,
}

/// Operation ratios (`-r -i -u -d -s`), which must add up to 1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpMix {
    pub read: f64,
    pub insert: f64,
    pub update: f64,
    pub remove: f64,
    pub scan: f64,
}

impl OpMix {
    pub fn only(op: Op) -> OpMix {
        let mut m = OpMix {
            read: 0.0,
            insert: 0.0,
            update: 0.0,
            remove: 0.0,
            scan: 0.0,
        };
        match op {
            Op::Read => m.read = 1.0,
            Op::Insert => m.insert = 1.0,
            Op::Update => m.update = 1.0,
            Op::Remove => m.remove = 1.0,
            Op::Scan => m.scan = 1.0,
        }
        m
    }

    pub fn validate(&self) -> Result<(), BenchError> {
        let parts = [self.read, self.insert, self.update, self.remove, self.scan];
        if parts.iter().any(|r| !(0.0..=1.0).contains(r)) {
            return Err(BenchError::Options(
                "every ratio (-r -i -u -d -s) must be between 0 and 1".into(),
            ));
        }
        let sum: f64 = parts.iter().sum();
        if (sum - 1.0).abs() > 1e-6 {
            return Err(BenchError::Options(format!(
                "ratios -r -i -u -d -s must add up to 1 (they add up to {sum})"
            )));
        }
        Ok(())
    }

    /// Picks an operation from a uniform draw in [0, 1).
    #[inline]
    pub fn pick(&self, u: f64) -> Op {
        let mut acc = self.read;
        if u < acc {
            return Op::Read;
        }
        acc += self.insert;
        if u < acc {
            return Op::Insert;
        }
        acc += self.update;
        if u < acc {
            return Op::Update;
        }
        acc += self.remove;
        if u < acc {
            return Op::Remove;
        }
        if self.scan > 0.0 {
            Op::Scan
        } else {
            // Rounding left a sliver above the last non-zero ratio.
            [
                (self.remove, Op::Remove),
                (self.update, Op::Update),
                (self.insert, Op::Insert),
                (self.read, Op::Read),
            ]
            .into_iter()
            .find(|(r, _)| *r > 0.0)
            .map_or(Op::Read, |(_, o)| o)
        }
    }

    /// The single operation this mix is made of, if it is one.
    pub fn single(&self) -> Option<Op> {
        let v = [
            (self.read, Op::Read),
            (self.insert, Op::Insert),
            (self.update, Op::Update),
            (self.remove, Op::Remove),
            (self.scan, Op::Scan),
        ];
        v.iter().find(|(r, _)| *r >= 1.0 - 1e-9).map(|(_, o)| *o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn scramble_is_injective_and_keeps_zero() {
        assert_eq!(scramble(0), 0);
        let s: HashSet<u64> = (0..100_000).map(scramble).collect();
        assert_eq!(s.len(), 100_000);
    }

    #[test]
    fn keys_have_the_requested_length_and_are_unique() {
        for k in [8usize, 12, 16, 64] {
            let c = KeyCodec::new(k, 8, "pre").unwrap();
            let mut seen = HashSet::new();
            let mut buf = Vec::new();
            for id in 0..5000 {
                c.key(id, &mut buf);
                assert_eq!(buf.len(), k + 3);
                assert!(buf.starts_with(b"pre"));
                assert!(seen.insert(buf.clone()));
            }
        }
    }

    #[test]
    fn eight_byte_keys_sort_like_their_scrambled_ids() {
        let c = KeyCodec::new(8, 8, "").unwrap();
        let mut a = Vec::new();
        let mut b = Vec::new();
        for id in 0..1000u64 {
            c.key(id, &mut a);
            c.key(id + 1, &mut b);
            assert_eq!(a.cmp(&b), scramble(id).cmp(&scramble(id + 1)));
        }
        c.key(0, &mut a);
        assert_eq!(a, vec![0u8; 8]);
    }

    #[test]
    fn keys_decode_back_to_their_hash_and_values_to_their_id() {
        for id in [0u64, 1, 77, 1 << 40, u64::MAX / 3] {
            assert_eq!(unscramble(scramble(id)), id);
        }
        for (k, prefix) in [(8usize, ""), (8, "p"), (12, "p"), (16, "p"), (40, "")] {
            let c = KeyCodec::new(k, 8, prefix).unwrap();
            let mut key = Vec::new();
            let mut v = Vec::new();
            for id in [0u64, 5, 123_456_789] {
                c.key(id, &mut key);
                assert_eq!(c.decode(&key), Some(scramble(id)), "k={k}");
                c.value(id, 0, &mut v);
                assert!(c.value_matches(id, &v));
                assert_ne!(v, vec![0u8; 8], "values are never zero");
                c.value(id, 200, &mut v);
                assert!(c.value_matches(id, &v));
                assert!(!c.value_matches(id + 1, &v));
                // A key with another filler or a bad digit is not ours.
                let mut bad = key.clone();
                let last = bad.len() - 1;
                bad[last] ^= 1;
                match k {
                    8 => assert_eq!(c.decode(&bad), Some(scramble(id) ^ 1)),
                    // 16 hex digits and nothing else: another id's key.
                    16 => assert_ne!(c.decode(&bad), Some(scramble(id))),
                    _ => assert_eq!(c.decode(&bad), None, "k={k}"),
                }
            }
            assert_eq!(c.decode(b"short"), None);
            // One byte too long: not ours either.
            key.push(b'0');
            assert_eq!(c.decode(&key), None, "k={k} prefix={prefix:?}");
            // A value cut short matches no id.
            v.truncate(7);
            assert!(!c.value_matches(123_456_789, &v));
        }
        assert!(!KeyCodec::new(4, 8, "").unwrap().decodable());
    }

    #[test]
    fn oversized_keys_are_errors() {
        assert!(KeyCodec::new(ferrite_index::MAX_KEY + 1, 8, "").is_err());
        assert!(KeyCodec::new(0, 8, "").is_err());
        assert!(KeyCodec::new(8, ferrite_index::MAX_VALUE + 1, "").is_err());
    }

    #[test]
    fn selfsimilar_puts_eighty_percent_on_twenty_percent() {
        let g = IdGen::new(10_000, Distribution::SelfSimilar(0.2));
        let mut r = Rng(1);
        let hot = (0..100_000).filter(|_| g.next(&mut r) < 2000).count();
        assert!((78_000..82_000).contains(&hot), "{hot}");
    }

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let g = IdGen::new(10_000, Distribution::Zipfian(0.99));
        let mut r = Rng(2);
        let mut zero = 0;
        for _ in 0..100_000 {
            let v = g.next(&mut r);
            assert!(v < 10_000);
            zero += (v == 0) as usize;
        }
        // P(0) = 1/zeta(10000, 0.99) ≈ 0.10.
        assert!((8_000..12_000).contains(&zero), "{zero}");
    }

    #[test]
    fn uniform_covers_the_range() {
        let g = IdGen::new(10, Distribution::Uniform);
        let mut r = Rng(3);
        let s: HashSet<u64> = (0..1000).map(|_| g.next(&mut r)).collect();
        assert_eq!(s.len(), 10);
    }

    #[test]
    fn ratios_must_add_up_to_one() {
        let mut m = OpMix::only(Op::Read);
        assert!(m.validate().is_ok());
        m.update = 0.5;
        assert!(m.validate().is_err());
        m.read = 0.5;
        assert!(m.validate().is_ok());
        assert_eq!(m.pick(0.25), Op::Read);
        assert_eq!(m.pick(0.75), Op::Update);
        assert_eq!(m.pick(0.999_999_999), Op::Update);
        assert_eq!(m.single(), None);
        assert_eq!(OpMix::only(Op::Scan).single(), Some(Op::Scan));
    }

    #[test]
    fn distribution_names_parse() {
        assert_eq!(
            Distribution::parse("uniform", 0.2).unwrap(),
            Distribution::Uniform
        );
        assert!(Distribution::parse("SELFSIMILAR", 1.5).is_err());
        assert!(Distribution::parse("zipfian", 0.0).is_err());
        assert!(Distribution::parse("gauss", 0.2).is_err());
    }
}
