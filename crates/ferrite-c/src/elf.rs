//! `ferrite_elf`: Elf tables (build, open, query for row ids, insert).

use std::ffi::{c_char, c_int};

use ferrite::{ElfQuery, ElfTable};

use crate::db::{db_ref, FerriteDb};
use crate::status::*;

/// An Elf table (opaque). Thread-safe.
pub struct FerriteElf {
    table: ElfTable,
}

/// One bound of an Elf query: `lo <= column value <= hi`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FerriteElfBound {
    pub column: usize,
    pub lo: u32,
    pub hi: u32,
}

/// # Safety
/// `t` NULL or live.
unsafe fn elf_ref<'a>(t: *const FerriteElf) -> Result<&'a ElfTable, Fail> {
    // SAFETY: per the contract.
    unsafe { t.as_ref() }
        .map(|t| &t.table)
        .ok_or_else(|| Fail::invalid("NULL Elf handle"))
}

/// Opens the Elf table `name` (FERRITE_ERR_NO_SUCH_OBJECT when absent); free
/// it with `ferrite_elf_free`.
///
/// # Safety
/// `db` live; `name` NUL-terminated; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_elf(
    db: *mut FerriteDb,
    name: *const c_char,
    out: *mut *mut FerriteElf,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (db, name) = unsafe { (db_ref(db)?, text(name, "name")?) };
        let table = db.elf(name)?;
        // SAFETY: per this function's contract.
        unsafe { put(out, Box::into_raw(Box::new(FerriteElf { table })))? };
        Ok(FERRITE_OK)
    })
}

/// Builds the Elf table `name` from `ncols` columns of `nrows` values each
/// (`columns[c][r]`; row `r` gets id `r`) and publishes it atomically;
/// FERRITE_ERR_OBJECT_EXISTS when the name is taken.
///
/// # Safety
/// `db` live; `name` NUL-terminated; `columns` holds `ncols` pointers to
/// `nrows` readable values each; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_db_create_elf(
    db: *mut FerriteDb,
    name: *const c_char,
    columns: *const *const u32,
    ncols: usize,
    nrows: usize,
    out: *mut *mut FerriteElf,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (db, name) = unsafe { (db_ref(db)?, text(name, "name")?) };
        if columns.is_null() && ncols > 0 {
            return Err(Fail::invalid("NULL columns"));
        }
        let mut cols: Vec<&[u32]> = Vec::with_capacity(ncols);
        for c in 0..ncols {
            // SAFETY: columns holds ncols pointers (contract).
            let p = unsafe { *columns.add(c) };
            if p.is_null() && nrows > 0 {
                return Err(Fail::invalid(format!("column {c} is NULL")));
            }
            cols.push(if nrows == 0 {
                &[]
            } else {
                // SAFETY: each column has nrows readable values (contract).
                unsafe { std::slice::from_raw_parts(p, nrows) }
            });
        }
        let table = db.create_elf(name, &cols)?;
        // SAFETY: per this function's contract.
        unsafe { put(out, Box::into_raw(Box::new(FerriteElf { table })))? };
        Ok(FERRITE_OK)
    })
}

/// # Safety
/// `bounds` holds `n` readable bounds (or is NULL with `n` 0).
unsafe fn query(bounds: *const FerriteElfBound, n: usize) -> Result<ElfQuery, Fail> {
    if bounds.is_null() && n > 0 {
        return Err(Fail::invalid("NULL bounds"));
    }
    let b = if n == 0 {
        &[][..]
    } else {
        // SAFETY: n readable bounds (contract).
        unsafe { std::slice::from_raw_parts(bounds, n) }
    };
    Ok(b.iter()
        .fold(ElfQuery::new(), |q, b| q.range(b.column, b.lo..=b.hi)))
}

/// The ids of the rows matching every bound, ascending, in a new buffer
/// (`*ids`, `*count`; free it with `ferrite_free`).
///
/// # Safety
/// `t` live; `bounds` holds `n` bounds; `ids` and `count` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_elf_query(
    t: *const FerriteElf,
    bounds: *const FerriteElfBound,
    n: usize,
    ids: *mut *mut u32,
    count: *mut usize,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (t, q) = unsafe { (elf_ref(t)?, query(bounds, n)?) };
        if ids.is_null() || count.is_null() {
            return Err(Fail::invalid("NULL out-parameter"));
        }
        let found = t.query(&q)?;
        // SAFETY: u32 has no padding; the byte view covers the vector.
        let raw =
            unsafe { std::slice::from_raw_parts(found.as_ptr() as *const u8, found.len() * 4) };
        let p = malloc_copy(raw)? as *mut u32;
        // SAFETY: both writable (checked non-NULL).
        unsafe {
            ids.write(p);
            count.write(found.len());
        }
        Ok(FERRITE_OK)
    })
}

/// The number of rows matching every bound.
///
/// # Safety
/// `t` live; `bounds` holds `n` bounds; `count` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_elf_count(
    t: *const FerriteElf,
    bounds: *const FerriteElfBound,
    n: usize,
    count: *mut u64,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let (t, q) = unsafe { (elf_ref(t)?, query(bounds, n)?) };
        let c = t.count(&q)?;
        // SAFETY: per this function's contract.
        unsafe { put(count, c)? };
        Ok(FERRITE_OK)
    })
}

/// Appends a row of `n` values (one per column); its id goes to `*id`.
///
/// # Safety
/// `t` live; `row` holds `n` values; `id` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_elf_insert(
    t: *const FerriteElf,
    row: *const u32,
    n: usize,
    id: *mut u32,
) -> c_int {
    guard(|| {
        // SAFETY: per this function's contract.
        let t = unsafe { elf_ref(t)? };
        if row.is_null() {
            return Err(Fail::invalid("NULL row"));
        }
        // SAFETY: n readable values (contract).
        let r = unsafe { std::slice::from_raw_parts(row, n) };
        let got = t.insert(r)?;
        // SAFETY: per this function's contract.
        unsafe { put(id, got)? };
        Ok(FERRITE_OK)
    })
}

/// Number of rows (0 for NULL).
///
/// # Safety
/// `t` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_elf_rows(t: *const FerriteElf) -> u64 {
    // SAFETY: per this function's contract.
    unsafe { elf_ref(t) }.map_or(0, |t| t.rows())
}

/// Number of columns (0 for NULL).
///
/// # Safety
/// `t` NULL or live.
#[no_mangle]
pub unsafe extern "C" fn ferrite_elf_columns(t: *const FerriteElf) -> usize {
    // SAFETY: per this function's contract.
    unsafe { elf_ref(t) }.map_or(0, |t| t.columns())
}

/// Frees a table handle; NULL does nothing.
///
/// # Safety
/// `t` NULL or live, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ferrite_elf_free(t: *mut FerriteElf) {
    if !t.is_null() {
        // SAFETY: t came from Box::into_raw and is freed once.
        let b = unsafe { Box::from_raw(t) };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(b)));
    }
}
