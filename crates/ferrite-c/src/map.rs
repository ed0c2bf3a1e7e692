//! `ferrite_map` (reads, writes, compare-and-swap, scans, counts) and
//! `ferrite_iter` (double-ended range iteration).

use std::ffi::{c_char, c_int, c_void};
use std::ops::Bound;

use ferrite::{Map, Range};

use crate::db::durability_name;
use crate::status::*;

/// An ordered map (opaque). Thread-safe.
pub struct FerriteMap {
    pub(crate) map: Map,
}

impl FerriteMap {
    pub(crate) fn boxed(map: Map) -> *mut FerriteMap {
        Box::into_raw(Box::new(FerriteMap { map }))
    }
}

/// # Safety
/// `m` is NULL or a live handle.
pub(crate) unsafe fn map_ref<'a>(m: *const FerriteMap) -> Result<&'a Map, Fail> {
    // SAFETY: per the contract.
    unsafe { m.as_ref() }
        .map(|m| &m.map)
        .ok_or_else(|| Fail::invalid("NULL map handle"))
}

/// Called with a value lent for the duration of the call (see
/// `ferrite_map_get_with`).
pub type FerriteValueFn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, value: *const u8, len: usize)>;

/// Called with each entry of a scan, lent for the duration of the call.
pub type FerriteEntryFn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        key: *const u8,
        key_len: usize,
        value: *const u8,
        value_len: usize,
    ),
>;

/// Frees a map handle (the map itself stays in the pool); NULL does nothing.
///
/// # Safety
/// `m` is NULL or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_free(m: *mut FerriteMap) {
    if !m.is_null() {
        // SAFETY: m came from Box::into_raw and is freed once.
        let b = unsafe { Box::from_raw(m) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(b)));
    }
}

/// Copies the value of `key` into `buf` (`cap` bytes) and stores its length
/// in `*len`. FERRITE_OK; FERRITE_NOT_FOUND (nothing stored);
/// FERRITE_ERR_BUFFER_TOO_SMALL (`*len` holds the size needed, nothing
/// copied).
///
/// # Safety
/// `m` live; `key` readable for `key_len`; `buf` writable for `cap`; `len`
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_get(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, k) = unsafe { (map_ref(m)?, bytes(key, key_len)?) };
        if len.is_null() {
            return Err(Fail::invalid("NULL length out-parameter"));
        }
        let mut need = 0;
        let got = m.get_with(k, |v| {
            need = v.len();
            if v.len() > cap {
                return false;
            }
            if !v.is_empty() {
                // SAFETY: buf is writable for cap >= v.len() bytes and does
                // not overlap the pool.
                unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf, v.len()) };
            }
            true
        })?;
        if got.is_some() {
            // SAFETY: len is writable (checked non-NULL).
            unsafe { len.write(need) };
        }
        match got {
            None => Ok(FERRITE_NOT_FOUND),
            Some(true) => Ok(FERRITE_OK),
            Some(false) => Err(Fail::new(
                FERRITE_ERR_BUFFER_TOO_SMALL,
                format!("the value needs a buffer of {need} bytes, {cap} given"),
            )),
        }
    })
}

/// The value of `key` in a new buffer: `*value` (free it with
/// `ferrite_free`) and `*len`. FERRITE_OK or FERRITE_NOT_FOUND.
///
/// # Safety
/// `m` live; `key` readable for `key_len`; `value` and `len` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_get_alloc(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    value: *mut *mut u8,
    len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, k) = unsafe { (map_ref(m)?, bytes(key, key_len)?) };
        if value.is_null() || len.is_null() {
            return Err(Fail::invalid("NULL out-parameter"));
        }
        let got = m.get_with(k, |v| malloc_copy(v).map(|p| (p, v.len())))?;
        match got {
            None => Ok(FERRITE_NOT_FOUND),
            Some(r) => {
                let (p, n) = r?;
                // SAFETY: both writable (checked non-NULL).
                unsafe {
                    value.write(p);
                    len.write(n);
                }
                Ok(FERRITE_OK)
            }
        }
    })
}

/// Zero-copy read: calls `f(ctx, value, len)` with the value of `key`, lent
/// from the pool for the duration of the call (copy what you keep; `f` must
/// not unwind, and while it runs memory freed by writers is held back).
/// FERRITE_OK (f was called) or FERRITE_NOT_FOUND (it was not).
///
/// # Safety
/// `m` live; `key` readable for `key_len`; `f` callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_get_with(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    f: FerriteValueFn,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, k) = unsafe { (map_ref(m)?, bytes(key, key_len)?) };
        let f = f.ok_or_else(|| Fail::invalid("NULL callback"))?;
        // SAFETY: f is the caller's function; the value is valid for the call.
        let got = m.get_with(k, |v| unsafe { f(ctx, v.as_ptr(), v.len()) })?;
        Ok(if got.is_some() {
            FERRITE_OK
        } else {
            FERRITE_NOT_FOUND
        })
    })
}

/// FERRITE_OK when `key` is present, FERRITE_NOT_FOUND when not.
///
/// # Safety
/// `m` live; `key` readable for `key_len`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_contains(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, k) = unsafe { (map_ref(m)?, bytes(key, key_len)?) };
        Ok(if m.contains(k)? {
            FERRITE_OK
        } else {
            FERRITE_NOT_FOUND
        })
    })
}

/// The body of the key+value writes: `yes` when the facade said true, `no`
/// when false.
///
/// # Safety
/// `m` live; `key`/`value` readable for their lengths.
unsafe fn write(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    (yes, no): (c_int, c_int),
    op: impl FnOnce(&Map, &[u8], &[u8]) -> ferrite::Result<bool>,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, k, v) = unsafe { (map_ref(m)?, bytes(key, key_len)?, bytes(value, value_len)?) };
        Ok(if op(m, k, v)? { yes } else { no })
    })
}

/// Inserts `key` if absent: FERRITE_OK, or FERRITE_EXISTS (nothing changed).
///
/// # Safety
/// `m` live; `key`/`value` readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_insert(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        write(
            m,
            key,
            key_len,
            value,
            value_len,
            (FERRITE_OK, FERRITE_EXISTS),
            |m, k, v| m.insert(k, v),
        )
    }
}

/// Replaces the value of `key` if present: FERRITE_OK, or FERRITE_NOT_FOUND.
///
/// # Safety
/// `m` live; `key`/`value` readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_update(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        write(
            m,
            key,
            key_len,
            value,
            value_len,
            (FERRITE_OK, FERRITE_NOT_FOUND),
            |m, k, v| m.update(k, v),
        )
    }
}

/// Sets `key` to `value` (insert or replace): FERRITE_OK when the key was
/// new, FERRITE_EXISTS when its value was replaced.
///
/// # Safety
/// `m` live; `key`/`value` readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_upsert(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        write(
            m,
            key,
            key_len,
            value,
            value_len,
            (FERRITE_OK, FERRITE_EXISTS),
            |m, k, v| m.upsert(k, v),
        )
    }
}

/// Removes `key`: FERRITE_OK, or FERRITE_NOT_FOUND.
///
/// # Safety
/// `m` live; `key` readable for `key_len`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_remove(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, k) = unsafe { (map_ref(m)?, bytes(key, key_len)?) };
        Ok(if m.remove(k)? {
            FERRITE_OK
        } else {
            FERRITE_NOT_FOUND
        })
    })
}

/// Sets `key` to `new_value` if and only if its value is `expected`, as one
/// atomic step. A NULL `expected` means "absent"; a NULL `new_value` removes
/// the key (an empty value is a non-NULL pointer with length 0).
/// FERRITE_OK (swapped) or FERRITE_CONFLICT (the value differed; nothing
/// changed).
///
/// # Safety
/// `m` live; the byte strings readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_compare_and_swap(
    m: *const FerriteMap,
    key: *const u8,
    key_len: usize,
    expected: *const u8,
    expected_len: usize,
    new_value: *const u8,
    new_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, k, e, n) = unsafe {
            (
                map_ref(m)?,
                bytes(key, key_len)?,
                opt_bytes(expected, expected_len)?,
                opt_bytes(new_value, new_len)?,
            )
        };
        Ok(match m.compare_and_swap(k, e, n)? {
            Ok(()) => FERRITE_OK,
            Err(_) => FERRITE_CONFLICT,
        })
    })
}

/// Number of keys (0 for NULL).
///
/// # Safety
/// `m` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_len(m: *const FerriteMap) -> u64 {
    // SAFETY: per this function's contract.
    match unsafe { map_ref(m) } {
        Ok(m) => {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m.len() as u64)).unwrap_or(0)
        }
        Err(_) => 0,
    }
}

/// A key range as Rust bounds.
type KeyRange = (Bound<Vec<u8>>, Bound<Vec<u8>>);

/// Bounds of a C range: `lo` NULL = from the first key, `hi` NULL = to the
/// last; `flags` FERRITE_LO_EXCLUDED / FERRITE_HI_INCLUDED.
///
/// # Safety
/// The byte strings readable for their lengths.
unsafe fn bounds(
    lo: *const u8,
    lo_len: usize,
    hi: *const u8,
    hi_len: usize,
    flags: u32,
) -> Result<KeyRange, Fail> {
    // SAFETY: per this function's contract.
    let (lo, hi) = unsafe { (opt_bytes(lo, lo_len)?, opt_bytes(hi, hi_len)?) };
    let lo = match lo {
        None => Bound::Unbounded,
        Some(k) if flags & FERRITE_LO_EXCLUDED != 0 => Bound::Excluded(k.to_vec()),
        Some(k) => Bound::Included(k.to_vec()),
    };
    let hi = match hi {
        None => Bound::Unbounded,
        Some(k) if flags & FERRITE_HI_INCLUDED != 0 => Bound::Included(k.to_vec()),
        Some(k) => Bound::Excluded(k.to_vec()),
    };
    Ok((lo, hi))
}

/// Range flag: the lower bound itself is not part of the range.
pub const FERRITE_LO_EXCLUDED: u32 = 1;
/// Range flag: the upper bound itself is part of the range.
pub const FERRITE_HI_INCLUDED: u32 = 2;

/// Stores in `*count` the number of keys in the range (see
/// `ferrite_map_range` for the bounds); it visits them.
///
/// # Safety
/// `m` live; the bounds readable for their lengths; `count` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_count_range(
    m: *const FerriteMap,
    lo: *const u8,
    lo_len: usize,
    hi: *const u8,
    hi_len: usize,
    flags: u32,
    count: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, r) = unsafe { (map_ref(m)?, bounds(lo, lo_len, hi, hi_len, flags)?) };
        let n = m.count_range(r)? as u64;
        // SAFETY: per this function's contract.
        unsafe { put(count, n)? };
        Ok(FERRITE_OK)
    })
}

/// Calls `f(ctx, key, key_len, value, value_len)` for up to `limit` entries
/// with keys at or after `start`, in key order, read as one consistent view
/// (a batch or transaction whole or not at all); the entries are lent for the
/// duration of each call. Stores how many in `*visited` (NULL: not stored).
///
/// # Safety
/// `m` live; `start` readable for `start_len`; `f` callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_scan(
    m: *const FerriteMap,
    start: *const u8,
    start_len: usize,
    limit: usize,
    f: FerriteEntryFn,
    ctx: *mut c_void,
    visited: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, s) = unsafe { (map_ref(m)?, bytes(start, start_len)?) };
        let f = f.ok_or_else(|| Fail::invalid("NULL callback"))?;
        // SAFETY: f is the caller's function; the entry is valid for the call.
        let n = m.scan(s, limit, |k, v| unsafe {
            f(ctx, k.as_ptr(), k.len(), v.as_ptr(), v.len())
        })?;
        if !visited.is_null() {
            // SAFETY: non-NULL and writable per the contract.
            unsafe { visited.write(n) };
        }
        Ok(FERRITE_OK)
    })
}

/// A persist barrier: reports a failed write-back (msync mode).
///
/// # Safety
/// `m` live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_flush(m: *const FerriteMap) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { map_ref(m)? }.flush()?;
        Ok(FERRITE_OK)
    })
}

/// What an acknowledged write of this map survives (a static name, see
/// `ferrite_db_durability`); "" for NULL.
///
/// # Safety
/// `m` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_durability(m: *const FerriteMap) -> *const c_char {
    // SAFETY: per this function's contract.
    match unsafe { map_ref(m) } {
        Ok(m) => durability_name(m.durability()),
        Err(_) => c"".as_ptr(),
    }
}

/// A double-ended iterator over a key range (opaque; one thread at a time).
pub struct FerriteIter {
    range: Range,
    cur: Option<(Vec<u8>, Vec<u8>)>,
}

/// An iterator over the keys from `lo` (NULL: the first key) to `hi` (NULL:
/// the last), `lo` included and `hi` excluded unless `flags` says otherwise
/// (FERRITE_LO_EXCLUDED, FERRITE_HI_INCLUDED). Free it with
/// `ferrite_iter_free`. It reads live data a chunk at a time (every key
/// present throughout is returned once, in order).
///
/// # Safety
/// `m` live; the bounds readable for their lengths; `out` writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ferrite_map_range(
    m: *const FerriteMap,
    lo: *const u8,
    lo_len: usize,
    hi: *const u8,
    hi_len: usize,
    flags: u32,
    out: *mut *mut FerriteIter,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, r) = unsafe { (map_ref(m)?, bounds(lo, lo_len, hi, hi_len, flags)?) };
        let it = Box::new(FerriteIter {
            range: m.range(r),
            cur: None,
        });
        // SAFETY: per this function's contract.
        unsafe { put(out, Box::into_raw(it))? };
        Ok(FERRITE_OK)
    })
}

/// # Safety
/// `it` live; the out-parameters writable (any may be NULL: not stored).
unsafe fn step(
    it: *mut FerriteIter,
    back: bool,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let it = unsafe { it.as_mut() }.ok_or_else(|| Fail::invalid("NULL iterator"))?;
        let next = if back {
            it.range.next_back()
        } else {
            it.range.next()
        };
        it.cur = match next {
            None => return Ok(FERRITE_END),
            Some(r) => Some(r?),
        };
        let (k, v) = it.cur.as_ref().expect("just set");
        // SAFETY: each is NULL or writable per the contract.
        unsafe {
            if !key.is_null() {
                key.write(k.as_ptr());
            }
            if !key_len.is_null() {
                key_len.write(k.len());
            }
            if !value.is_null() {
                value.write(v.as_ptr());
            }
            if !value_len.is_null() {
                value_len.write(v.len());
            }
        }
        Ok(FERRITE_OK)
    })
}

/// The next entry from the front: FERRITE_OK with the key and value lent
/// until the next call on this iterator (or its free), or FERRITE_END.
///
/// # Safety
/// `it` live; the out-parameters writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn ferrite_iter_next(
    it: *mut FerriteIter,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { step(it, false, key, key_len, value, value_len) }
}

/// The next entry from the back (largest key first), as `ferrite_iter_next`.
/// The two ends never return one entry twice.
///
/// # Safety
/// `it` live; the out-parameters writable or NULL.
#[no_mangle]
pub unsafe extern "C" fn ferrite_iter_prev(
    it: *mut FerriteIter,
    key: *mut *const u8,
    key_len: *mut usize,
    value: *mut *const u8,
    value_len: *mut usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { step(it, true, key, key_len, value, value_len) }
}

/// Frees an iterator; NULL does nothing.
///
/// # Safety
/// `it` is NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_iter_free(it: *mut FerriteIter) {
    if !it.is_null() {
        // SAFETY: it came from Box::into_raw and is freed once.
        let b = unsafe { Box::from_raw(it) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(b)));
    }
}
