//! Sorting one leaf's entries for a scan. A leaf's entries sit in hash order
//! (their home lines), so every scan sorts each leaf it visits: at most
//! [`SLOTS`](crate::leaf::SLOTS) entries with distinct keys. A comparison sort
//! of ~17 random entries mispredicts a branch on most steps; here each entry's
//! rank (how many keys are smaller) is counted branch-free with AVX2 where the
//! CPU has it, and the entry is stored at its rank.

/// Sorts `v` (at most 32 entries) by the first field; entries whose sort words'
/// top halves tie (keys that differ only in length) take the general sort.
pub fn sort_packed(v: &mut [(u128, u64)]) {
    #[cfg(target_arch = "x86_64")]
    if v.len() <= 32 && std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked just above).
        if unsafe { rank_sort_avx2(v) } {
            return;
        }
    }
    v.sort_unstable_by_key(|e| e.0);
}

/// Places every entry at its rank by the top 64 bits of its sort word; false
/// (nothing changed) when two entries tie there.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rank_sort_avx2(v: &mut [(u128, u64)]) -> bool {
    use std::arch::x86_64::*;
    let n = v.len();
    if n <= 1 {
        return true;
    }
    // Unsigned order through the signed 64-bit compare: flip the sign bits.
    // Padding is the largest value, so it is never below a real key.
    const FLIP: u64 = 1 << 63;
    let mut k = [i64::MAX; 32];
    for (x, e) in k.iter_mut().zip(v.iter()) {
        *x = (((e.0 >> 64) as u64) ^ FLIP) as i64;
    }
    let regs = n.div_ceil(4);
    // SAFETY (for the loads): `k` holds 32 i64s, and `regs * 4 <= 32`.
    let r: [__m256i; 8] = std::array::from_fn(|j| {
        if j < regs {
            // SAFETY: see above; unaligned loads.
            unsafe { _mm256_loadu_si256(k.as_ptr().add(4 * j) as *const __m256i) }
        } else {
            _mm256_set1_epi64x(i64::MAX)
        }
    });
    let mut out = [(0u128, 0u64); 32];
    let mut seen = 0u64;
    for i in 0..n {
        let b = _mm256_set1_epi64x(k[i]);
        let mut rank = 0;
        for reg in r.iter().take(regs) {
            // Lanes where the other key is below this one.
            let lt = _mm256_cmpgt_epi64(b, *reg);
            rank += (_mm256_movemask_pd(_mm256_castsi256_pd(lt)) as u32).count_ones();
        }
        seen |= 1 << rank;
        out[rank as usize] = v[i];
    }
    if seen != (1u64 << n) - 1 {
        return false;
    }
    v.copy_from_slice(&out[..n]);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pm::rng::SplitMix;

    #[test]
    fn sorts_like_the_standard_sort_ties_included() {
        let mut rng = SplitMix(5);
        for n in 0..=32 {
            for round in 0..200 {
                let mut v: Vec<(u128, u64)> = (0..n)
                    .map(|i| {
                        // Some rounds draw top halves from a tiny range (ties:
                        // keys differing only in length), some include the
                        // extremes of the unsigned order.
                        let hi = match round % 4 {
                            0 => rng.below(4),
                            1 => {
                                [0, u64::MAX, 1 << 63, (1 << 63) - 1][rng.below(4) as usize]
                                    ^ rng.below(2)
                            }
                            _ => rng.next(),
                        };
                        ((hi as u128) << 64 | i as u128, rng.next())
                    })
                    .collect();
                let mut want = v.clone();
                want.sort_unstable_by_key(|e| e.0);
                sort_packed(&mut v);
                assert_eq!(v, want, "n {n} round {round}");
            }
        }
    }
}
