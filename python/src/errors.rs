//! The exception hierarchy: every Ferrite failure is a `ferrite.Error`.
//!
//! ```text
//! ferrite.Error
//!  ├── InUseError        the pool is open in another process
//!  ├── PoolFullError     no room left in the pool
//!  ├── TooLargeError     a key, value or transaction over the limits
//!  ├── WrongTypeError    the name belongs to another kind of object
//!  ├── FormatError       not a pool, or a pool / map from another version
//!  ├── CorruptError      persistent data failed validation
//!  ├── NotFoundError     no Elf table of that name
//!  ├── ExistsError       the name is taken
//!  ├── TransactionError  a write around one's own transaction, or a second map
//!  ├── ClosedError       the database was closed
//!  └── FileError         the pool file could not be opened or written
//! ```
//! Missing keys raise `KeyError` (dict semantics), keys of the wrong type
//! `TypeError`, bad arguments `ValueError`.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

create_exception!(
    ferrite,
    Error,
    PyException,
    "Base class of every Ferrite error."
);
create_exception!(
    ferrite,
    InUseError,
    Error,
    "The pool is open in another process."
);
create_exception!(ferrite, PoolFullError, Error, "The pool has no room left.");
create_exception!(
    ferrite,
    TooLargeError,
    Error,
    "A key, value or transaction over the limits."
);
create_exception!(
    ferrite,
    WrongTypeError,
    Error,
    "The name belongs to another kind of object."
);
create_exception!(
    ferrite,
    FormatError,
    Error,
    "Not a Ferrite pool, or written by another version."
);
create_exception!(
    ferrite,
    CorruptError,
    Error,
    "Persistent data failed validation."
);
create_exception!(ferrite, NotFoundError, Error, "No object of that name.");
create_exception!(
    ferrite,
    ExistsError,
    Error,
    "An object of that name exists."
);
create_exception!(
    ferrite,
    TransactionError,
    Error,
    "A transaction cannot do what was asked."
);
create_exception!(ferrite, ClosedError, Error, "The database was closed.");
create_exception!(
    ferrite,
    FileError,
    Error,
    "The pool file could not be opened or written."
);

/// A facade error as a Python exception.
pub(crate) fn err(e: ferrite::Error) -> PyErr {
    use ferrite::Error as E;
    let msg = e.to_string();
    match e {
        E::InUse { .. } => InUseError::new_err(msg),
        E::PoolFull { .. } => PoolFullError::new_err(msg),
        E::TooLarge { .. } | E::KeyTooLarge { .. } | E::ValueTooLarge { .. } => {
            TooLargeError::new_err(msg)
        }
        E::WrongType { .. } => WrongTypeError::new_err(msg),
        E::NewerFormat { .. } | E::OlderFormat { .. } | E::NotAPool(_) => FormatError::new_err(msg),
        E::Corrupt { .. } => CorruptError::new_err(msg),
        E::NotFound { .. } => NotFoundError::new_err(msg),
        E::Exists { .. } => ExistsError::new_err(msg),
        E::TransactionActive { .. } | E::NeedsReopen { .. } => TransactionError::new_err(msg),
        E::Invalid(_) => PyValueError::new_err(msg),
        E::Io { .. } => FileError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// The error of an object whose database was closed.
pub(crate) fn closed() -> PyErr {
    ClosedError::new_err("the database is closed")
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("InUseError", py.get_type::<InUseError>())?;
    m.add("PoolFullError", py.get_type::<PoolFullError>())?;
    m.add("TooLargeError", py.get_type::<TooLargeError>())?;
    m.add("WrongTypeError", py.get_type::<WrongTypeError>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    m.add("ExistsError", py.get_type::<ExistsError>())?;
    m.add("TransactionError", py.get_type::<TransactionError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("FileError", py.get_type::<FileError>())?;
    Ok(())
}
