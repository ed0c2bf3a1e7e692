//! Status codes, the thread's last error, and the guard every function runs
//! in (errors become codes and messages, panics become `FERRITE_ERR_PANIC`).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferrite::Error;

/// Success.
pub const FERRITE_OK: c_int = 0;
/// The key is absent (get, update, remove, contains; a no-op, not an error).
pub const FERRITE_NOT_FOUND: c_int = 1;
/// The key is present (insert did nothing).
pub const FERRITE_EXISTS: c_int = 2;
/// compare-and-swap found another value (nothing changed).
pub const FERRITE_CONFLICT: c_int = 3;
/// An iterator has no more entries.
pub const FERRITE_END: c_int = 4;

/// A bad argument: a NULL handle or pointer, a name that is not UTF-8, ...
pub const FERRITE_ERR_INVALID: c_int = -1;
/// The pool file could not be opened, created or written back.
pub const FERRITE_ERR_IO: c_int = -2;
/// Another process holds the pool open.
pub const FERRITE_ERR_IN_USE: c_int = -3;
/// The pool has no room left.
pub const FERRITE_ERR_POOL_FULL: c_int = -4;
/// One allocation larger than the pool's largest block (a huge transaction).
pub const FERRITE_ERR_TOO_LARGE: c_int = -5;
/// The key is longer than FERRITE_MAX_KEY bytes.
pub const FERRITE_ERR_KEY_TOO_LARGE: c_int = -6;
/// The value is longer than FERRITE_MAX_VALUE bytes.
pub const FERRITE_ERR_VALUE_TOO_LARGE: c_int = -7;
/// The name belongs to another kind of object.
pub const FERRITE_ERR_WRONG_TYPE: c_int = -8;
/// The pool or object was written by a newer Ferrite.
pub const FERRITE_ERR_NEWER_FORMAT: c_int = -9;
/// The pool or object was written in a format this build no longer reads.
pub const FERRITE_ERR_OLDER_FORMAT: c_int = -10;
/// The file is not a Ferrite pool.
pub const FERRITE_ERR_NOT_A_POOL: c_int = -11;
/// Persistent data failed validation.
pub const FERRITE_ERR_CORRUPT: c_int = -12;
/// No object of that name (an Elf table).
pub const FERRITE_ERR_NO_SUCH_OBJECT: c_int = -13;
/// An object of that name exists already.
pub const FERRITE_ERR_OBJECT_EXISTS: c_int = -14;
/// This thread holds a transaction on the map: write through it.
pub const FERRITE_ERR_TRANSACTION_ACTIVE: c_int = -15;
/// A committed transaction could not be applied: reopen the pool.
pub const FERRITE_ERR_NEEDS_REOPEN: c_int = -16;
/// ferrite_db_close: other handles keep the pool open until they are freed.
pub const FERRITE_ERR_STILL_OPEN: c_int = -17;
/// The caller's buffer is too small (the needed size was stored).
pub const FERRITE_ERR_BUFFER_TOO_SMALL: c_int = -18;
/// Out of memory in the library.
pub const FERRITE_ERR_NO_MEMORY: c_int = -19;
/// A bug: the library panicked (caught; the message says where).
pub const FERRITE_ERR_PANIC: c_int = -98;
/// Any other failure.
pub const FERRITE_ERR_OTHER: c_int = -99;

/// The longest key, in bytes.
pub const FERRITE_MAX_KEY: u32 = 1024;
/// The longest value, in bytes.
pub const FERRITE_MAX_VALUE: u32 = 65536;
// Literals for cbindgen, checked against the facade's limits.
const _: () = assert!(
    FERRITE_MAX_KEY as usize == ferrite::MAX_KEY
        && FERRITE_MAX_VALUE as usize == ferrite::MAX_VALUE
);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// A failure on its way to C: a code and a message.
pub(crate) struct Fail {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl Fail {
    pub(crate) fn new(code: c_int, message: impl Into<String>) -> Fail {
        Fail {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Fail {
        Fail::new(FERRITE_ERR_INVALID, message)
    }
}

/// The code of a facade error.
pub(crate) fn code_of(e: &Error) -> c_int {
    match e {
        Error::InUse { .. } => FERRITE_ERR_IN_USE,
        Error::PoolFull { .. } => FERRITE_ERR_POOL_FULL,
        Error::TooLarge { .. } => FERRITE_ERR_TOO_LARGE,
        Error::KeyTooLarge { .. } => FERRITE_ERR_KEY_TOO_LARGE,
        Error::ValueTooLarge { .. } => FERRITE_ERR_VALUE_TOO_LARGE,
        Error::WrongType { .. } => FERRITE_ERR_WRONG_TYPE,
        Error::NewerFormat { .. } => FERRITE_ERR_NEWER_FORMAT,
        Error::OlderFormat { .. } => FERRITE_ERR_OLDER_FORMAT,
        Error::NotAPool(_) => FERRITE_ERR_NOT_A_POOL,
        Error::Corrupt { .. } => FERRITE_ERR_CORRUPT,
        Error::NotFound { .. } => FERRITE_ERR_NO_SUCH_OBJECT,
        Error::Exists { .. } => FERRITE_ERR_OBJECT_EXISTS,
        Error::TransactionActive { .. } => FERRITE_ERR_TRANSACTION_ACTIVE,
        Error::NeedsReopen { .. } => FERRITE_ERR_NEEDS_REOPEN,
        Error::StillOpen { .. } => FERRITE_ERR_STILL_OPEN,
        Error::Invalid(_) => FERRITE_ERR_INVALID,
        Error::Io { .. } => FERRITE_ERR_IO,
        _ => FERRITE_ERR_OTHER,
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::new(code_of(&e), e.to_string())
    }
}

pub(crate) fn set_error(message: &str) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

/// Runs `f`: its result, or the failure's code with the message stored, or
/// `FERRITE_ERR_PANIC` for a panic (which must not unwind into C).
pub(crate) fn guard(f: impl FnOnce() -> Result<c_int, Fail>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(fail)) => {
            set_error(&fail.message);
            fail.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_error(&format!("internal error (a panic in ferrite): {what}"));
            FERRITE_ERR_PANIC
        }
    }
}

/// `len` bytes at `p` (NULL allowed for 0 bytes).
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes that outlive the use.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], Fail> {
    if p.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(Fail::invalid("NULL pointer with a non-zero length"))
        };
    }
    // SAFETY: the caller promises `len` readable bytes at `p`.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// An optional byte string: NULL means absent (an empty one is a non-NULL
/// pointer with length 0).
///
/// # Safety
/// As [`bytes`].
pub(crate) unsafe fn opt_bytes<'a>(p: *const u8, len: usize) -> Result<Option<&'a [u8]>, Fail> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded.
    unsafe { bytes(p, len) }.map(Some)
}

/// A NUL-terminated UTF-8 string.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
pub(crate) unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Fail::invalid(format!("{what} is not UTF-8")))
}

/// Stores `v` through `out`.
///
/// # Safety
/// `out` is NULL (an error) or writable.
pub(crate) unsafe fn put<T>(out: *mut T, v: T) -> Result<(), Fail> {
    if out.is_null() {
        return Err(Fail::invalid("NULL out-parameter"));
    }
    // SAFETY: non-NULL and writable per the caller.
    unsafe { out.write(v) };
    Ok(())
}

/// A copy of `data` in memory from `malloc` (free with `ferrite_free`).
pub(crate) fn malloc_copy(data: &[u8]) -> Result<*mut u8, Fail> {
    // SAFETY: malloc of at least one byte; checked for NULL.
    let p = unsafe { libc::malloc(data.len().max(1)) } as *mut u8;
    if p.is_null() {
        return Err(Fail::new(FERRITE_ERR_NO_MEMORY, "out of memory"));
    }
    // SAFETY: p has room for data.len() bytes and does not overlap data.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    Ok(p)
}

/// The message of the last error on the calling thread ("" before any).
/// Valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn ferrite_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// A status code's name ("FERRITE_OK", "FERRITE_ERR_IN_USE", ...); a static
/// string.
#[no_mangle]
pub extern "C" fn ferrite_status_name(status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        FERRITE_OK => c"FERRITE_OK",
        FERRITE_NOT_FOUND => c"FERRITE_NOT_FOUND",
        FERRITE_EXISTS => c"FERRITE_EXISTS",
        FERRITE_CONFLICT => c"FERRITE_CONFLICT",
        FERRITE_END => c"FERRITE_END",
        FERRITE_ERR_INVALID => c"FERRITE_ERR_INVALID",
        FERRITE_ERR_IO => c"FERRITE_ERR_IO",
        FERRITE_ERR_IN_USE => c"FERRITE_ERR_IN_USE",
        FERRITE_ERR_POOL_FULL => c"FERRITE_ERR_POOL_FULL",
        FERRITE_ERR_TOO_LARGE => c"FERRITE_ERR_TOO_LARGE",
        FERRITE_ERR_KEY_TOO_LARGE => c"FERRITE_ERR_KEY_TOO_LARGE",
        FERRITE_ERR_VALUE_TOO_LARGE => c"FERRITE_ERR_VALUE_TOO_LARGE",
        FERRITE_ERR_WRONG_TYPE => c"FERRITE_ERR_WRONG_TYPE",
        FERRITE_ERR_NEWER_FORMAT => c"FERRITE_ERR_NEWER_FORMAT",
        FERRITE_ERR_OLDER_FORMAT => c"FERRITE_ERR_OLDER_FORMAT",
        FERRITE_ERR_NOT_A_POOL => c"FERRITE_ERR_NOT_A_POOL",
        FERRITE_ERR_CORRUPT => c"FERRITE_ERR_CORRUPT",
        FERRITE_ERR_NO_SUCH_OBJECT => c"FERRITE_ERR_NO_SUCH_OBJECT",
        FERRITE_ERR_OBJECT_EXISTS => c"FERRITE_ERR_OBJECT_EXISTS",
        FERRITE_ERR_TRANSACTION_ACTIVE => c"FERRITE_ERR_TRANSACTION_ACTIVE",
        FERRITE_ERR_NEEDS_REOPEN => c"FERRITE_ERR_NEEDS_REOPEN",
        FERRITE_ERR_STILL_OPEN => c"FERRITE_ERR_STILL_OPEN",
        FERRITE_ERR_BUFFER_TOO_SMALL => c"FERRITE_ERR_BUFFER_TOO_SMALL",
        FERRITE_ERR_NO_MEMORY => c"FERRITE_ERR_NO_MEMORY",
        FERRITE_ERR_PANIC => c"FERRITE_ERR_PANIC",
        FERRITE_ERR_OTHER => c"FERRITE_ERR_OTHER",
        _ => c"FERRITE_UNKNOWN_STATUS",
    };
    s.as_ptr()
}

/// Frees a buffer the library allocated (`ferrite_map_get_alloc`,
/// `ferrite_elf_query`); NULL does nothing.
///
/// # Safety
/// `p` is NULL or a buffer from this library, not freed before.
#[no_mangle]
pub unsafe extern "C" fn ferrite_free(p: *mut core::ffi::c_void) {
    // SAFETY: p came from malloc in this library (contract) or is NULL.
    unsafe { libc::free(p) }
}

/// The library's version ("0.1.0"), a static string.
#[no_mangle]
pub extern "C" fn ferrite_version() -> *const c_char {
    static V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"",
        };
    V.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_a_code_and_a_message() {
        let code = guard(|| panic!("boom"));
        assert_eq!(code, FERRITE_ERR_PANIC);
        // SAFETY: ferrite_last_error returns a valid C string.
        let msg = unsafe { CStr::from_ptr(ferrite_last_error()) };
        assert!(msg.to_str().unwrap().contains("boom"));
    }

    #[test]
    fn every_code_has_a_name() {
        for c in [
            FERRITE_OK,
            FERRITE_NOT_FOUND,
            FERRITE_EXISTS,
            FERRITE_CONFLICT,
            FERRITE_END,
            FERRITE_ERR_PANIC,
            FERRITE_ERR_OTHER,
        ]
        .into_iter()
        .chain(-19..=-1)
        {
            // SAFETY: static C strings.
            let n = unsafe { CStr::from_ptr(ferrite_status_name(c)) };
            assert_ne!(n.to_str().unwrap(), "FERRITE_UNKNOWN_STATUS", "{c}");
        }
    }
}
