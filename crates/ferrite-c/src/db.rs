//! `ferrite_db`: opening, closing and naming the collections of a pool.

use std::ffi::{c_char, c_int, CStr};

use ferrite::{Db, Durability};

use crate::map::FerriteMap;
use crate::status::*;

/// An open pool (opaque). Thread-safe.
pub struct FerriteDb {
    pub(crate) db: Option<Db>,
}

/// # Safety
/// `db` is NULL or a live handle.
pub(crate) unsafe fn db_ref<'a>(db: *const FerriteDb) -> Result<&'a Db, Fail> {
    // SAFETY: per the contract.
    unsafe { db.as_ref() }
        .and_then(|d| d.db.as_ref())
        .ok_or_else(|| Fail::invalid("NULL database handle"))
}

fn boxed(db: Db) -> *mut FerriteDb {
    Box::into_raw(Box::new(FerriteDb { db: Some(db) }))
}

/// Creates a pool file of `size` bytes at `path` (fails if it exists) and
/// stores its handle in `*out`.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_create(
    path: *const c_char,
    size: u64,
    out: *mut *mut FerriteDb,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let path = unsafe { text(path, "path")? };
        let db = Db::create(path, size)?;
        // SAFETY: per this function's contract.
        unsafe { put(out, boxed(db))? };
        Ok(FERRITE_OK)
    })
}

/// Opens the existing pool at `path` (FERRITE_ERR_IN_USE when another process
/// has it open).
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_open(path: *const c_char, out: *mut *mut FerriteDb) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let path = unsafe { text(path, "path")? };
        let db = Db::open(path)?;
        // SAFETY: per this function's contract.
        unsafe { put(out, boxed(db))? };
        Ok(FERRITE_OK)
    })
}

/// Opens the pool at `path`, creating one of `size` bytes when there is no
/// file.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_open_or_create(
    path: *const c_char,
    size: u64,
    out: *mut *mut FerriteDb,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let path = unsafe { text(path, "path")? };
        let db = Db::open_or_create(path, size)?;
        // SAFETY: per this function's contract.
        unsafe { put(out, boxed(db))? };
        Ok(FERRITE_OK)
    })
}

/// A database in this process's memory (nothing survives the process).
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_volatile(size: u64, out: *mut *mut FerriteDb) -> c_int {
    guard(|| {
        let db = Db::volatile(size)?;
        // SAFETY: per this function's contract.
        unsafe { put(out, boxed(db))? };
        Ok(FERRITE_OK)
    })
}

/// Flushes and frees the handle (always, whatever it returns). FERRITE_OK:
/// the pool is closed and its lock released. FERRITE_ERR_STILL_OPEN: other
/// handles (maps, iterators, tables, transactions) keep it open until they
/// are freed. NULL does nothing.
///
/// # Safety
/// `db` is NULL or a live handle, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_close(db: *mut FerriteDb) -> c_int {
    if db.is_null() {
        return FERRITE_OK;
    }
    guard(|| {
        // SAFETY: db came from Box::into_raw here and is freed once.
        let mut b = unsafe { Box::from_raw(db) };
        match b.db.take() {
            Some(d) => d.close()?,
            None => return Err(Fail::invalid("closed twice")),
        }
        Ok(FERRITE_OK)
    })
}

/// A persist barrier: reports a failed write-back (msync mode).
///
/// # Safety
/// `db` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_flush(db: *mut FerriteDb) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        unsafe { db_ref(db)? }.flush()?;
        Ok(FERRITE_OK)
    })
}

pub(crate) fn durability_name(d: Durability) -> *const c_char {
    let s: &'static CStr = match d {
        Durability::Pm => c"pm",
        Durability::PmEadrAssumed => c"pm-eadr-assumed",
        Durability::EmulatedShm => c"emulated-pm-tmpfs",
        Durability::EmulatedFile => c"emulated-pm-file",
        Durability::FileMsync => c"file-msync",
        Durability::Volatile => c"volatile",
        Durability::Simulated => c"simulated",
    };
    s.as_ptr()
}

/// What an acknowledged write survives, as a short static name:
/// "pm" (power loss), "emulated-pm-tmpfs" / "emulated-pm-file" (a process
/// crash, not power loss), "file-msync" (power loss), "volatile" (nothing),
/// ...; "" for NULL.
///
/// # Safety
/// `db` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_durability(db: *const FerriteDb) -> *const c_char {
    // SAFETY: per this function's contract.
    match unsafe { db_ref(db) } {
        Ok(d) => durability_name(d.durability()),
        Err(_) => c"".as_ptr(),
    }
}

/// The ordered map named `name` (created empty if absent); free it with
/// `ferrite_map_free`. FERRITE_ERR_WRONG_TYPE when `name` is another kind of
/// object.
///
/// # Safety
/// `db` is a live handle; `name` a NUL-terminated string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_map(
    db: *mut FerriteDb,
    name: *const c_char,
    out: *mut *mut FerriteMap,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (db, name) = unsafe { (db_ref(db)?, text(name, "name")?) };
        let m = db.map(name)?;
        // SAFETY: per this function's contract.
        unsafe { put(out, FerriteMap::boxed(m))? };
        Ok(FERRITE_OK)
    })
}

/// A new, empty map in DRAM (nothing of it survives the process); free it
/// with `ferrite_map_free`.
///
/// # Safety
/// `db` is a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_volatile_map(
    db: *mut FerriteDb,
    out: *mut *mut FerriteMap,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let m = unsafe { db_ref(db)? }.volatile_map()?;
        // SAFETY: per this function's contract.
        unsafe { put(out, FerriteMap::boxed(m))? };
        Ok(FERRITE_OK)
    })
}
