//! `ferrite_batch` (all-or-nothing write batches) and `ferrite_txn`
//! (serializable multi-key transactions on one map).

use std::ffi::c_int;

use ferrite::{Batch, Transaction};

use crate::map::{map_ref, FerriteMap};
use crate::status::*;

/// A write batch being built (opaque; one thread at a time).
pub struct FerriteBatch {
    batch: Batch,
}

/// A new, empty write batch; free it with `ferrite_batch_free` (NULL when out
/// of memory).
#[no_mangle]
pub extern "C" fn ferrite_batch_new() -> *mut FerriteBatch {
    std::panic::catch_unwind(|| {
        Box::into_raw(Box::new(FerriteBatch {
            batch: Batch::new(),
        }))
    })
    .unwrap_or(std::ptr::null_mut())
}

/// # Safety
/// `b` is NULL or live.
unsafe fn batch_mut<'a>(b: *mut FerriteBatch) -> Result<&'a mut Batch, Fail> {
    // SAFETY: per the contract.
    unsafe { b.as_mut() }
        .map(|b| &mut b.batch)
        .ok_or_else(|| Fail::invalid("NULL batch"))
}

/// Adds "set `key` to `value`" to the batch.
///
/// # Safety
/// `b` live; `key`/`value` readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_batch_put(
    b: *mut FerriteBatch,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (b, k, v) = unsafe {
            (
                batch_mut(b)?,
                bytes(key, key_len)?,
                bytes(value, value_len)?,
            )
        };
        b.put(k, v);
        Ok(FERRITE_OK)
    })
}

/// Adds "remove `key`" to the batch.
///
/// # Safety
/// `b` live; `key` readable for `key_len`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_batch_remove(
    b: *mut FerriteBatch,
    key: *const u8,
    key_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (b, k) = unsafe { (batch_mut(b)?, bytes(key, key_len)?) };
        b.remove(k);
        Ok(FERRITE_OK)
    })
}

/// Applies every write of the batch, in order, all-or-nothing (for readers
/// and across a crash). The batch is left as it was (apply it again, or free
/// it).
///
/// # Safety
/// `m` and `b` live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_apply(m: *const FerriteMap, b: *mut FerriteBatch) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (m, b) = unsafe { (map_ref(m)?, batch_mut(b)?) };
        m.apply(b)?;
        Ok(FERRITE_OK)
    })
}

/// Frees a batch; NULL does nothing.
///
/// # Safety
/// `b` is NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_batch_free(b: *mut FerriteBatch) {
    if !b.is_null() {
        // SAFETY: b came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(b) });
    }
}

/// A transaction on one map (opaque; one thread at a time).
pub struct FerriteTxn {
    tx: Transaction,
}

/// Begins a serializable transaction on `m`: it waits for the map's other
/// writers and keeps them out until `ferrite_txn_commit` or
/// `ferrite_txn_rollback` (readers go on). One of those two frees it.
///
/// # Safety
/// `m` live; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_map_begin(
    m: *const FerriteMap,
    out: *mut *mut FerriteTxn,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let m = unsafe { map_ref(m)? };
        if out.is_null() {
            return Err(Fail::invalid("NULL out-parameter"));
        }
        let tx = m.transaction()?;
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { put(out, Box::into_raw(Box::new(FerriteTxn { tx })))? };
        Ok(FERRITE_OK)
    })
}

/// # Safety
/// `t` is NULL or live.
unsafe fn txn_mut<'a>(t: *mut FerriteTxn) -> Result<&'a mut Transaction, Fail> {
    // SAFETY: per the contract.
    unsafe { t.as_mut() }
        .map(|t| &mut t.tx)
        .ok_or_else(|| Fail::invalid("NULL transaction"))
}

/// `ferrite_map_get` in the transaction's view (its own writes included).
///
/// # Safety
/// As `ferrite_map_get`, with `t` live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_txn_get(
    t: *mut FerriteTxn,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    cap: usize,
    len: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (t, k) = unsafe { (txn_mut(t)?, bytes(key, key_len)?) };
        if len.is_null() {
            return Err(Fail::invalid("NULL length out-parameter"));
        }
        let Some(v) = t.get(k)? else {
            return Ok(FERRITE_NOT_FOUND);
        };
        // SAFETY: len is writable (checked non-NULL).
        unsafe { len.write(v.len()) };
        if v.len() > cap {
            return Err(Fail::new(
                FERRITE_ERR_BUFFER_TOO_SMALL,
                format!("the value needs a buffer of {} bytes, {cap} given", v.len()),
            ));
        }
        if !v.is_empty() {
            // SAFETY: buf is writable for cap >= v.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), buf, v.len()) };
        }
        Ok(FERRITE_OK)
    })
}

/// # Safety
/// `t` live; `key`/`value` readable for their lengths.
unsafe fn txn_write(
    t: *mut FerriteTxn,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    (yes, no): (c_int, c_int),
    op: impl FnOnce(&mut Transaction, &[u8], &[u8]) -> ferrite::Result<bool>,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (t, k, v) = unsafe { (txn_mut(t)?, bytes(key, key_len)?, bytes(value, value_len)?) };
        Ok(if op(t, k, v)? { yes } else { no })
    })
}

/// `ferrite_map_insert` inside the transaction.
///
/// # Safety
/// `t` live; `key`/`value` readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_txn_insert(
    t: *mut FerriteTxn,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        txn_write(
            t,
            key,
            key_len,
            value,
            value_len,
            (FERRITE_OK, FERRITE_EXISTS),
            |t, k, v| t.insert(k, v),
        )
    }
}

/// `ferrite_map_update` inside the transaction.
///
/// # Safety
/// `t` live; `key`/`value` readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_txn_update(
    t: *mut FerriteTxn,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        txn_write(
            t,
            key,
            key_len,
            value,
            value_len,
            (FERRITE_OK, FERRITE_NOT_FOUND),
            |t, k, v| t.update(k, v),
        )
    }
}

/// `ferrite_map_upsert` inside the transaction.
///
/// # Safety
/// `t` live; `key`/`value` readable for their lengths.
#[no_mangle]
pub unsafe extern "C" fn ferrite_txn_upsert(
    t: *mut FerriteTxn,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        txn_write(
            t,
            key,
            key_len,
            value,
            value_len,
            (FERRITE_OK, FERRITE_EXISTS),
            |t, k, v| t.upsert(k, v),
        )
    }
}

/// `ferrite_map_remove` inside the transaction.
///
/// # Safety
/// `t` live; `key` readable for `key_len`.
#[no_mangle]
pub unsafe extern "C" fn ferrite_txn_remove(
    t: *mut FerriteTxn,
    key: *const u8,
    key_len: usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (t, k) = unsafe { (txn_mut(t)?, bytes(key, key_len)?) };
        Ok(if t.remove(k)? {
            FERRITE_OK
        } else {
            FERRITE_NOT_FOUND
        })
    })
}

/// Applies the transaction's writes at once (all-or-nothing, for readers and
/// across a crash) and frees it, whatever it returns. NULL is an error.
///
/// # Safety
/// `t` live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_txn_commit(t: *mut FerriteTxn) -> c_int {
    guard(|| {
        if t.is_null() {
            return Err(Fail::invalid("NULL transaction"));
        }
        // SAFETY: t came from Box::into_raw and is freed once.
        let b = unsafe { Box::from_raw(t) };
        b.tx.commit()?;
        Ok(FERRITE_OK)
    })
}

/// Drops the transaction's writes and frees it; NULL does nothing.
///
/// # Safety
/// `t` is NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_txn_rollback(t: *mut FerriteTxn) {
    if !t.is_null() {
        // SAFETY: t came from Box::into_raw and is freed once.
        let b = unsafe { Box::from_raw(t) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || b.tx.rollback()));
    }
}
