//! TPC-C's random functions (spec 2.1.6 and 4.3.2): NURand, random strings,
//! customer last names from syllables.

use crate::index::workload::Rng;

/// NURand's run-time constants C for A = 255, 1023, 8191 (spec 2.1.6). The
/// load uses `C_LAST_LOAD` for last names; the run's C for last names differs
/// from it by 66 (within the spec's allowed 65..=119, not 96 or 112).
pub const C_LAST_LOAD: u64 = 157;
pub const C_LAST_RUN: u64 = 223;
pub const C_ID: u64 = 259;
pub const C_OL_I_ID: u64 = 7911;

const SYLLABLES: [&str; 10] = [
    "BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
];

/// Random numbers and strings with TPC-C's distributions.
pub struct Gen {
    pub rng: Rng,
    pool: Vec<u8>,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        let mut rng = Rng(seed ^ 0x7470_6363);
        // Random alphanumeric characters to cut strings from (cheaper than a
        // draw per character; still different strings at random offsets).
        let alnum = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let pool = (0..8192)
            .map(|_| alnum[rng.below(alnum.len() as u64) as usize])
            .collect();
        Gen { rng, pool }
    }

    /// Uniform in `lo..=hi`.
    pub fn uniform(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.rng.below(hi - lo + 1)
    }

    /// NURand(A, x, y) with constant `c`.
    pub fn nurand(&mut self, a: u64, c: u64, x: u64, y: u64) -> u64 {
        (((self.uniform(0, a) | self.uniform(x, y)) + c) % (y - x + 1)) + x
    }

    /// A random alphanumeric string of `lo..=hi` characters.
    pub fn astring(&mut self, lo: usize, hi: usize) -> Vec<u8> {
        let n = self.uniform(lo as u64, hi as u64) as usize;
        let at = self.rng.below((self.pool.len() - n) as u64) as usize;
        self.pool[at..at + n].to_vec()
    }

    /// A random numeric string of `n` digits.
    pub fn nstring(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| b'0' + self.rng.below(10) as u8).collect()
    }

    /// A zip code: 4 random digits and `11111`.
    pub fn zip(&mut self) -> Vec<u8> {
        let mut z = self.nstring(4);
        z.extend_from_slice(b"11111");
        z
    }

    /// A data string of `lo..=hi` characters containing `ORIGINAL` at a random
    /// place in 10% of the cases (ITEM and STOCK data).
    pub fn data_with_original(&mut self, lo: usize, hi: usize) -> Vec<u8> {
        let mut s = self.astring(lo, hi);
        if self.rng.below(10) == 0 {
            let at = self.rng.below((s.len() - 8) as u64) as usize;
            s[at..at + 8].copy_from_slice(b"ORIGINAL");
        }
        s
    }

    /// A customer id for the run: NURand(1023, 1, 3000).
    pub fn customer_id(&mut self) -> u32 {
        self.nurand(1023, C_ID, 1, 3000) as u32
    }

    /// An item id for the run: NURand(8191, 1, 100000).
    pub fn item_id(&mut self) -> u32 {
        self.nurand(8191, C_OL_I_ID, 1, 100_000) as u32
    }

    /// A last name for the run: NURand(255, 0, 999) with the run's C.
    pub fn run_last_name(&mut self) -> Vec<u8> {
        last_name(self.nurand(255, C_LAST_RUN, 0, 999) as u32)
    }
}

/// The last name of number `n` (0..=999): three syllables by its digits.
pub fn last_name(n: u32) -> Vec<u8> {
    let mut s = Vec::with_capacity(16);
    for d in [n / 100, n / 10 % 10, n % 10] {
        s.extend_from_slice(SYLLABLES[d as usize].as_bytes());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_names_are_built_from_syllables() {
        assert_eq!(last_name(0), b"BARBARBAR");
        assert_eq!(last_name(371), b"PRICALLYOUGHT");
        assert_eq!(last_name(999), b"EINGEINGEING");
    }

    #[test]
    fn nurand_stays_in_range_and_is_skewed() {
        let mut g = Gen::new(1);
        let mut hits = vec![0u32; 3001];
        for _ in 0..300_000 {
            let c = g.customer_id();
            assert!((1..=3000).contains(&c));
            hits[c as usize] += 1;
        }
        let max = *hits.iter().max().unwrap();
        // Uniform would put about 100 on each id; NURand concentrates.
        assert!(max > 300, "{max}");
        for _ in 0..10_000 {
            assert!((1..=100_000).contains(&g.item_id()));
            assert!(g.run_last_name().len() >= 9);
        }
    }

    #[test]
    fn strings_have_their_lengths_and_original_marks() {
        let mut g = Gen::new(2);
        let mut orig = 0;
        for _ in 0..10_000 {
            let s = g.astring(26, 50);
            assert!((26..=50).contains(&s.len()));
            let d = g.data_with_original(26, 50);
            orig += d.windows(8).any(|w| w == b"ORIGINAL") as u32;
        }
        assert!((800..1200).contains(&orig), "{orig}");
        assert_eq!(g.zip().len(), 9);
    }
}
