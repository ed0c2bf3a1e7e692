//! Zipf-distributed ranks for any exponent, including the thesis's z = 1
//! (which the YCSB/Gray formula of [`crate::index::workload::IdGen`] cannot
//! take: its α = 1/(1-θ) is infinite at θ = 1), and a bijection on 32-bit ids
//! that scatters the popular ones over key space ("non clustered popular
//! keys", thesis §5.2).
//!
//! The sampler is rejection-inversion (W. Hörmann and G. Derflinger,
//! "Rejection-inversion to generate variates from monotone discrete
//! distributions", 1996): O(1) per draw, no table, exact for every n.

use crate::index::workload::Rng;

/// Draws ranks in `[0, n)`, rank `r` with probability proportional to
/// `1 / (r + 1)^s`.
#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    s: f64,
    h_x1: f64,
    h_n: f64,
    shift: f64,
}

fn helper1(x: f64) -> f64 {
    // ln(1 + x) / x, accurate near 0.
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

fn helper2(x: f64) -> f64 {
    // (e^x - 1) / x, accurate near 0.
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

impl Zipf {
    /// `n` ≥ 1 ranks, exponent `s` > 0 (the thesis: 1).
    pub fn new(n: u64, s: f64) -> Zipf {
        assert!(n >= 1, "a Zipf distribution needs at least one rank");
        assert!(s > 0.0 && s.is_finite(), "the Zipf exponent must be > 0");
        let mut z = Zipf {
            n,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            shift: 0.0,
        };
        z.h_x1 = z.h_integral(1.5) - 1.0;
        z.h_n = z.h_integral(n as f64 + 0.5);
        z.shift = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        z
    }

    pub fn n(&self) -> u64 {
        self.n
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }

    fn h_integral_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// A rank in `[0, n)`; 0 is the most popular.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.unit() * (self.h_x1 - self.h_n);
            let x = self.h_integral_inv(u);
            let k = ((x + 0.5) as u64).clamp(1, self.n);
            let kf = k as f64;
            if kf - x <= self.shift || u >= self.h_integral(kf + 0.5) - self.h(kf) {
                return k - 1;
            }
        }
    }
}

/// A bijection on `[0, 2^32)` (an odd multiplier and xor-shifts, each
/// invertible) mapping ids to 4-byte keys: consecutive (and popular) ids land
/// far apart in key order.
#[inline]
pub fn scatter32(id: u32) -> u32 {
    let mut x = id.wrapping_mul(0x9E37_79B1);
    x ^= x >> 15;
    x = x.wrapping_mul(0x85EB_CA77);
    x ^= x >> 13;
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pmf(n: u64, s: f64) -> Vec<f64> {
        let w: Vec<f64> = (1..=n).map(|k| 1.0 / (k as f64).powf(s)).collect();
        let sum: f64 = w.iter().sum();
        w.into_iter().map(|x| x / sum).collect()
    }

    /// Pearson's χ² of `draws` samples against the exact pmf.
    fn chi2(n: u64, s: f64, draws: usize, seed: u64) -> f64 {
        let z = Zipf::new(n, s);
        let mut rng = Rng(seed);
        let mut seen = vec![0u64; n as usize];
        for _ in 0..draws {
            let r = z.sample(&mut rng);
            assert!(r < n);
            seen[r as usize] += 1;
        }
        pmf(n, s)
            .iter()
            .zip(&seen)
            .map(|(p, &o)| {
                let e = p * draws as f64;
                (o as f64 - e).powi(2) / e
            })
            .sum()
    }

    #[test]
    fn ranks_follow_the_exact_zipf_law_at_z_1() {
        // 50 ranks: 49 degrees of freedom; the 99.9% quantile of χ²(49) is 85.4.
        let c = chi2(50, 1.0, 200_000, 7);
        assert!(c < 85.4, "chi2 {c}");
        // Other exponents too (the sampler is not special-cased for 1).
        assert!(chi2(50, 0.5, 200_000, 8) < 85.4);
        assert!(chi2(50, 1.5, 200_000, 9) < 85.4);
    }

    #[test]
    fn a_wrong_exponent_is_detected() {
        // The check above can fail: samples of z = 1.2 against the law of z = 1.
        let z = Zipf::new(50, 1.2);
        let mut rng = Rng(3);
        let mut seen = vec![0u64; 50];
        for _ in 0..200_000 {
            seen[z.sample(&mut rng) as usize] += 1;
        }
        let c: f64 = pmf(50, 1.0)
            .iter()
            .zip(&seen)
            .map(|(p, &o)| (o as f64 - p * 200_000.0).powi(2) / (p * 200_000.0))
            .sum();
        assert!(c > 85.4, "chi2 {c}");
    }

    #[test]
    fn one_rank_and_huge_ranges_work() {
        let mut rng = Rng(1);
        assert_eq!(Zipf::new(1, 1.0).sample(&mut rng), 0);
        let z = Zipf::new(1 << 40, 1.0);
        for _ in 0..1000 {
            assert!(z.sample(&mut rng) < 1 << 40);
        }
    }

    #[test]
    fn scatter_is_a_bijection_that_spreads_neighbours() {
        let mut seen = std::collections::HashSet::new();
        for id in 0..100_000u32 {
            assert!(seen.insert(scatter32(id)));
        }
        // Rank 0 and 1 are not neighbours in key order.
        assert!(scatter32(1).abs_diff(scatter32(0)) > 1 << 20);
    }
}
