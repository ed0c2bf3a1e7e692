//! Failure-atomic in-place updates of small values (thesis §3.4, Appendix A).
//!
//! An [`InplaceArray`] holds `count` values of `value_size` bytes (a multiple of 4
//! from 8 to 64), each aligned to a cache line as in the thesis's experiment, and
//! updates them with one of three methods:
//!
//! * **CoW**: an active flag word and two copies; write the inactive copy
//!   (barrier 1), flip the flag (barrier 2).
//! * **Log**: append `(index, new value)` to a padded PopLog (barrier 1), write
//!   in place (barrier 2); recovery redoes the last logged update (idempotent).
//! * **FAM** (Failure-Atomic Memory): the value is split into 31-bit chunks, one
//!   per 8-byte word (FAMB) holding a 2-bit version, the old and the new chunk;
//!   word 0 holds the chunks' top bits. Every word is rewritten in one go and
//!   persisted with one barrier. Recovery rolls words whose version is one ahead
//!   of the others back to their old chunk; a rolled-back word matches the rest,
//!   so recovery is idempotent.

use ferrite_pm::{Heap, ObjectId, Pool};

use crate::error::{corrupt, PmioError, Result};
use crate::log::{Log, LogConfig, LogKind, PmLog};
use crate::region::{open_object, rd, round_up, wr};

/// Type name of in-place arrays in the root directory.
pub const INPLACE_TYPE: &str = "ferrite.pmio.inplace";
/// On-PM format version of the array region.
pub const INPLACE_FORMAT_VERSION: u32 = 1;
const INPLACE_MAGIC: u64 = 0x4645_5249_4E50_4C01;
const M31: u64 = (1 << 31) - 1;

/// Update method of an [`InplaceArray`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InplaceMethod {
    Cow,
    Log,
    Fam,
}

impl InplaceMethod {
    pub const ALL: [InplaceMethod; 3] =
        [InplaceMethod::Cow, InplaceMethod::Log, InplaceMethod::Fam];

    pub fn name(self) -> &'static str {
        match self {
            InplaceMethod::Cow => "cow",
            InplaceMethod::Log => "log",
            InplaceMethod::Fam => "fam",
        }
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(c: u8) -> Option<InplaceMethod> {
        InplaceMethod::ALL
            .get((c as usize).wrapping_sub(1))
            .copied()
    }

    /// Bytes one element occupies (before cache-line alignment).
    pub fn element_bytes(self, value_size: usize) -> usize {
        match self {
            InplaceMethod::Cow => 8 + 2 * value_size,
            InplaceMethod::Log => value_size,
            InplaceMethod::Fam => 8 * fambs(value_size),
        }
    }
}

fn fambs(value_size: usize) -> usize {
    let ints = value_size / 4;
    ints + ints.div_ceil(31)
}

/// How an array is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InplaceConfig {
    pub method: InplaceMethod,
    pub value_size: usize,
    pub count: usize,
    /// Segment size of the log (log-based method only).
    pub log_bytes: usize,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct ArrayHeader {
    magic: u64,
    version: u32,
    method: u8,
    _r: [u8; 3],
    value_size: u64,
    count: u64,
    stride: u64,
    _pad: [u64; 3],
}
const _: () = assert!(std::mem::size_of::<ArrayHeader>() == 64);
impl crate::region::RegionHeader for ArrayHeader {}

/// Fixed-size values in PM, each updatable in place failure-atomically.
pub struct InplaceArray {
    pool: Pool,
    _heap: Heap,
    _id: ObjectId,
    method: InplaceMethod,
    value_size: usize,
    count: usize,
    stride: usize,
    data: *mut u8,
    log: Option<PmLog>,
    scratch: Vec<u8>,
}

// SAFETY: `data` points into the mapping `pool` keeps alive; writes need `&mut self`.
unsafe impl Send for InplaceArray {}

impl InplaceArray {
    /// Opens an existing array with the configuration it was created with
    /// (for tools such as `ferrite check`); runs recovery.
    pub fn open(pool: &Pool, name: &str) -> Result<InplaceArray> {
        let id = pool.object(name, INPLACE_TYPE)?;
        let region = pool.root(id, 0);
        if region == 0 {
            // Creation crashed before publishing the region: no array.
            return Err(ferrite_pm::PmError::NoSuchObject(name.into()).into());
        }
        let hdr = pool.slice(region, 64)?;
        let method_code = (hdr.read_u64(8)? >> 32) as u8;
        let method = InplaceMethod::from_code(method_code)
            .ok_or_else(|| corrupt(name, "unknown update method"))?;
        let cfg = InplaceConfig {
            method,
            value_size: hdr.read_u64(16)? as usize,
            count: hdr.read_u64(24)? as usize,
            log_bytes: 4096,
        };
        Self::open_or_create(pool, name, cfg)
    }

    /// Opens array `name`, creating it with `cfg` if absent; runs recovery.
    pub fn open_or_create(pool: &Pool, name: &str, cfg: InplaceConfig) -> Result<InplaceArray> {
        let vs = cfg.value_size;
        if !(8..=64).contains(&vs) || !vs.is_multiple_of(4) {
            return Err(PmioError::Invalid(format!(
                "value size {vs} is not a multiple of 4 from 8 to 64"
            )));
        }
        if cfg.count == 0 {
            return Err(PmioError::Invalid(
                "an array needs at least one value".into(),
            ));
        }
        let (id, heap) = open_object(pool, name, INPLACE_TYPE, None)?;
        let mut region = pool.root(id, 0);
        if region == 0 {
            let stride = round_up(cfg.method.element_bytes(vs), 64);
            let total = cfg
                .count
                .checked_mul(stride)
                .and_then(|t| t.checked_add(64))
                .ok_or_else(|| PmioError::Invalid("array too large".into()))?;
            let off = heap.alloc_zeroed(total)?;
            let h = ArrayHeader {
                magic: INPLACE_MAGIC,
                version: INPLACE_FORMAT_VERSION,
                method: cfg.method.code(),
                _r: [0; 3],
                value_size: vs as u64,
                count: cfg.count as u64,
                stride: stride as u64,
                _pad: [0; 3],
            };
            crate::region::write_header(pool, off, h)?;
            pool.set_root(id, 0, off)?;
            region = off;
        }
        let (h, size): (ArrayHeader, usize) =
            crate::region::read_header(pool, &heap, region, name)?;
        if h.magic != INPLACE_MAGIC || h.version != INPLACE_FORMAT_VERSION {
            return Err(corrupt(name, "bad array magic or version"));
        }
        let method = InplaceMethod::from_code(h.method)
            .ok_or_else(|| corrupt(name, "unknown update method"))?;
        let (value_size, count, stride) =
            (h.value_size as usize, h.count as usize, h.stride as usize);
        if method != cfg.method || value_size != vs {
            return Err(PmioError::Mismatch {
                object: name.into(),
                found: format!("{} with {value_size}-byte values", method.name()),
                expected: format!("{} with {vs}-byte values", cfg.method.name()),
            });
        }
        if stride != round_up(method.element_bytes(vs), 64)
            || count
                .checked_mul(stride)
                .and_then(|t| t.checked_add(64))
                .is_none_or(|t| t > size)
        {
            return Err(corrupt(name, "bad array geometry"));
        }
        // SAFETY: the data follows the header line inside the block.
        let data = unsafe { pool.at(region, 64 + count * stride).add(64) };
        let log = if method == InplaceMethod::Log {
            Some(PmLog::open_or_create(
                pool,
                &format!("{name}.log"),
                LogConfig {
                    kind: LogKind::PopLog,
                    padded: true,
                    segment_bytes: cfg.log_bytes.max(4096),
                },
            )?)
        } else {
            None
        };
        let mut a = InplaceArray {
            pool: pool.clone(),
            _heap: heap,
            _id: id,
            method,
            value_size,
            count,
            stride,
            data,
            log,
            scratch: Vec::with_capacity(8 + value_size),
        };
        a.recover(name)?;
        Ok(a)
    }

    pub fn method(&self) -> InplaceMethod {
        self.method
    }

    pub fn value_size(&self) -> usize {
        self.value_size
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn elem(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.count);
        // SAFETY: i < count keeps the element inside the region.
        unsafe { self.data.add(i * self.stride) }
    }

    fn check(&self, i: usize, len: usize) -> Result<()> {
        if i >= self.count {
            return Err(PmioError::Invalid(format!(
                "index {i} out of range (0..{})",
                self.count
            )));
        }
        if len != self.value_size {
            return Err(PmioError::Invalid(format!(
                "value of {len} bytes for a {}-byte array",
                self.value_size
            )));
        }
        Ok(())
    }

    fn recover(&mut self, name: &str) -> Result<()> {
        match self.method {
            InplaceMethod::Cow => Ok(()),
            InplaceMethod::Log => {
                let log = self.log.as_ref().expect("log-based arrays have a log");
                if log.is_empty() {
                    return Ok(());
                }
                let e = log.read(log.next_lsn() - 1)?;
                if e.len() != 8 + self.value_size {
                    return Err(corrupt(name, "log entry of the wrong size"));
                }
                let i = u64::from_le_bytes(e[..8].try_into().expect("8 bytes")) as usize;
                if i >= self.count {
                    return Err(corrupt(name, "logged index out of range"));
                }
                let p = self.elem(i);
                // SAFETY: element i holds value_size bytes.
                unsafe { std::ptr::copy_nonoverlapping(e[8..].as_ptr(), p, self.value_size) };
                self.pool.persist(p, self.value_size)?;
                Ok(())
            }
            InplaceMethod::Fam => {
                let n = fambs(self.value_size);
                let mut dirty = false;
                for i in 0..self.count {
                    let p = self.elem(i);
                    // SAFETY: n words of element i.
                    let v0 = unsafe { rd(p) } >> 62;
                    let mut ahead = None;
                    for j in 1..n {
                        // SAFETY: as above.
                        let v = unsafe { rd(p.add(8 * j)) } >> 62;
                        if v != v0 {
                            ahead = Some(if v == (v0 + 1) & 3 {
                                v
                            } else if v0 == (v + 1) & 3 {
                                v0
                            } else {
                                return Err(corrupt(
                                    name,
                                    format!("value {i}: FAM versions {v0} and {v}"),
                                ));
                            });
                            break;
                        }
                    }
                    let Some(ahead) = ahead else { continue };
                    for j in 0..n {
                        // SAFETY: as above.
                        let q = unsafe { p.add(8 * j) };
                        // SAFETY: as above.
                        let w = unsafe { rd(q) };
                        if w >> 62 == ahead {
                            let old = (w >> 31) & M31;
                            // SAFETY: as above.
                            unsafe { wr(q, ((ahead + 3) & 3) << 62 | old << 31 | old) };
                        } else if w >> 62 != (ahead + 3) & 3 {
                            return Err(corrupt(name, format!("value {i}: three FAM versions")));
                        }
                    }
                    self.pool.flush(p, 8 * n);
                    dirty = true;
                }
                if dirty {
                    self.pool.fence()?;
                }
                Ok(())
            }
        }
    }

    /// Empties the log of a log-based array (every logged update is already in
    /// place, so this is a checkpoint); a no-op for the other methods.
    pub fn reset_log(&mut self) -> Result<()> {
        match self.log.as_mut() {
            Some(l) => l.reset(),
            None => Ok(()),
        }
    }

    /// Replaces value `i` failure-atomically (durable on return).
    pub fn update(&mut self, i: usize, v: &[u8]) -> Result<()> {
        self.check(i, v.len())?;
        let p = self.elem(i);
        let vs = self.value_size;
        match self.method {
            InplaceMethod::Cow => {
                // SAFETY: the flag word and both copies lie in element i.
                unsafe {
                    let flag = rd(p);
                    let target = p.add(8 + vs * (1 - (flag & 1) as usize));
                    std::ptr::copy_nonoverlapping(v.as_ptr(), target, vs);
                    if !ferrite_pm::tripwire::armed(
                        ferrite_pm::tripwire::Tripwire::InplaceSkipFlush,
                    ) {
                        self.pool.flush(target, vs);
                        self.pool.fence()?;
                    }
                    wr(p, flag ^ 1);
                }
                self.pool.persist(p, 8)?;
            }
            InplaceMethod::Log => {
                self.scratch.clear();
                self.scratch.extend_from_slice(&(i as u64).to_le_bytes());
                self.scratch.extend_from_slice(v);
                let log = self.log.as_mut().expect("log-based arrays have a log");
                match log.append(&self.scratch) {
                    Err(PmioError::LogFull { .. }) => {
                        log.reset()?;
                        log.append(&self.scratch)?;
                    }
                    r => {
                        r?;
                    }
                }
                // SAFETY: element i holds vs bytes.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, vs) };
                self.pool.persist(p, vs)?;
            }
            InplaceMethod::Fam => {
                fam_store(p, v);
                if !ferrite_pm::tripwire::armed(ferrite_pm::tripwire::Tripwire::InplaceSkipFlush) {
                    self.pool.persist(p, 8 * fambs(vs))?;
                }
            }
        }
        Ok(())
    }

    /// Copies value `i` into `out`.
    pub fn read(&self, i: usize, out: &mut [u8]) -> Result<()> {
        self.check(i, out.len())?;
        let p = self.elem(i);
        let vs = self.value_size;
        match self.method {
            InplaceMethod::Cow => {
                // SAFETY: flag and copies lie in element i.
                unsafe {
                    let flag = rd(p);
                    let src = p.add(8 + vs * (flag & 1) as usize);
                    std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), vs);
                }
            }
            InplaceMethod::Log => {
                // SAFETY: element i holds vs bytes.
                unsafe { std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), vs) };
            }
            InplaceMethod::Fam => fam_load(p, out),
        }
        Ok(())
    }
}

/// Writes `v` into the FAM words at `p` (no flush). The 16-byte case uses the
/// thesis's AVX2 formulation when the CPU has AVX2.
fn fam_store(p: *mut u8, v: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        if v.len().is_multiple_of(16) && std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present; p holds 1 + len/4 words (checked by callers).
            unsafe { fam_store_avx2(p, v) };
            return;
        }
    }
    fam_store_scalar(p, v)
}

fn fam_store_scalar(p: *mut u8, v: &[u8]) {
    let mut msbs = 0u64;
    for (k, c) in v.chunks_exact(4).enumerate() {
        let x = u32::from_le_bytes(c.try_into().expect("4 bytes")) as u64;
        msbs |= (x >> 31) << k;
        // SAFETY: word k+1 of the element (callers size it with `fambs`).
        unsafe { fam_word(p.add(8 * (k + 1)), x & M31) };
    }
    // SAFETY: word 0 of the element.
    unsafe { fam_word(p, msbs) };
}

/// # Safety
/// `p` must be an 8-aligned FAM word of PM.
#[inline(always)]
unsafe fn fam_word(p: *mut u8, val: u64) {
    // SAFETY: caller guarantee. The word is built in a register and stored once,
    // so no intermediate state reaches memory.
    unsafe {
        let l = rd(p);
        let ver = ((l >> 62) + 1) & 3;
        wr(p, ver << 62 | (l & M31) << 31 | val);
    }
}

/// AVX2 FAM update of 16-byte blocks (thesis Listing 2), 4 chunk words per step.
///
/// # Safety
/// The CPU must support AVX2 and `p` must hold `1 + v.len()/4` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fam_store_avx2(p: *mut u8, v: &[u8]) {
    use std::arch::x86_64::*;
    let add = _mm256_set1_epi64x(0x4000_0000_0000_0000);
    let and1 = _mm256_set1_epi64x(0xC000_0000_0000_0000u64 as i64);
    let and2 = _mm256_set1_epi64x(0x3FFF_FFFF_FFFF_FFFF);
    let and3 = _mm_set1_epi32(0x7FFF_FFFF);
    let mut msbs = 0u64;
    for (blk, c) in v.chunks_exact(16).enumerate() {
        // SAFETY: c has 16 bytes; the destination words 1+4*blk..5+4*blk exist.
        unsafe {
            let raw = _mm_loadu_si128(c.as_ptr() as *const __m128i);
            msbs |= (_mm_movemask_ps(_mm_castsi128_ps(raw)) as u64) << (4 * blk);
            let input64 = _mm256_cvtepu32_epi64(_mm_and_si128(raw, and3));
            let dst = p.add(8 + 32 * blk) as *mut __m256i;
            let fambs = _mm256_loadu_si256(dst);
            let version = _mm256_and_si256(_mm256_add_epi64(fambs, add), and1);
            let shifted = _mm256_and_si256(_mm256_slli_epi64(fambs, 31), and2);
            let both = _mm256_or_si256(version, _mm256_or_si256(shifted, input64));
            // One 32-byte store; each 8-byte lane is written whole, which is what
            // failure atomicity needs (the lanes are independent FAMBs).
            _mm256_storeu_si256(dst, both);
        }
    }
    // SAFETY: word 0 of the element.
    unsafe { fam_word(p, msbs) };
}

fn fam_load(p: *const u8, out: &mut [u8]) {
    // SAFETY: word 0 and one word per 4 output bytes (callers size the element).
    let msbs = unsafe { rd(p) } & M31;
    for (k, c) in out.chunks_exact_mut(4).enumerate() {
        // SAFETY: as above.
        let w = unsafe { rd(p.add(8 * (k + 1))) } & M31;
        let x = w | ((msbs >> k) & 1) << 31;
        c.copy_from_slice(&(x as u32).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_pm::PoolOptions;
    use proptest::prelude::*;

    fn pool() -> Pool {
        Pool::create_volatile(4 << 20, &PoolOptions::default()).unwrap()
    }

    #[test]
    fn fam_simd_and_scalar_agree() {
        for len in [16usize, 32, 48, 64] {
            let mut a = vec![0u64; 17];
            let mut b = vec![0u64; 17];
            for round in 0..20u32 {
                let v: Vec<u8> = (0..len)
                    .map(|i| (i as u32 * 77 + round * 131) as u8)
                    .collect();
                fam_store(a.as_mut_ptr() as *mut u8, &v);
                fam_store_scalar(b.as_mut_ptr() as *mut u8, &v);
                assert_eq!(a, b, "len {len} round {round}");
                let mut out = vec![0u8; len];
                fam_load(a.as_ptr() as *const u8, &mut out);
                assert_eq!(out, v);
            }
        }
    }

    #[test]
    fn fam_recovery_rolls_back_partial_updates_idempotently() {
        let pool = pool();
        let cfg = InplaceConfig {
            method: InplaceMethod::Fam,
            value_size: 16,
            count: 4,
            log_bytes: 0,
        };
        let mut a = InplaceArray::open_or_create(&pool, "f", cfg).unwrap();
        let old = [7u8; 16];
        a.update(2, &old).unwrap();
        let p = a.elem(2);
        // SAFETY: test pokes element 2's five words.
        let before: Vec<u64> = (0..5).map(|j| unsafe { rd(p.add(8 * j)) }).collect();
        a.update(2, &[0xF0u8; 16]).unwrap();
        // Tear: words 0 and 3 keep the new state, the others go back.
        for j in [1usize, 2, 4] {
            // SAFETY: as above.
            unsafe { wr(p.add(8 * j), before[j]) };
        }
        drop(a);
        for _ in 0..2 {
            let a = InplaceArray::open_or_create(&pool, "f", cfg).unwrap();
            let mut out = [0u8; 16];
            a.read(2, &mut out).unwrap();
            assert_eq!(out, old);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn array_matches_a_vec(m in 0usize..3, vs in prop::sample::select(vec![8usize, 12, 16, 32, 64]),
                               ops in proptest::collection::vec((0usize..10, any::<u8>(), 0u8..10), 1..100)) {
            let pool = pool();
            let cfg = InplaceConfig { method: InplaceMethod::ALL[m], value_size: vs, count: 10, log_bytes: 4096 };
            let mut a = InplaceArray::open_or_create(&pool, "a", cfg).unwrap();
            let mut model = vec![vec![0u8; vs]; 10];
            for (i, seed, r) in ops {
                if r == 0 {
                    drop(a);
                    a = InplaceArray::open_or_create(&pool, "a", cfg).unwrap();
                    continue;
                }
                let v: Vec<u8> = (0..vs).map(|j| seed.wrapping_mul(j as u8 + 1) ^ 0xA5).collect();
                a.update(i, &v).unwrap();
                model[i] = v;
            }
            let mut out = vec![0u8; vs];
            for (i, want) in model.iter().enumerate() {
                a.read(i, &mut out).unwrap();
                prop_assert_eq!(&out, want);
            }
            prop_assert!(a.update(10, &out).is_err());
            prop_assert!(a.update(0, &out[1..]).is_err());
        }
    }
}
