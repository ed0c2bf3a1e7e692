//! `ferrite._ferrite`: the Python binding of the `ferrite` facade (PyO3).
//!
//! Every call that touches the pool runs with the GIL released. Keys and
//! values are `bytes` (also `bytearray`), or `str`, stored as its UTF-8
//! bytes; values come back as `bytes`. `Db.close()` invalidates every object
//! made from the database (maps, iterators, transactions, tables): using one
//! afterwards raises `ClosedError`, and the pool's file lock is released.

mod elf;
mod errors;
mod map;
mod txn;

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};
use pyo3::prelude::*;

use crate::errors::{closed, err};

/// Something `Db.close()` must invalidate.
pub(crate) trait Closable: Send + Sync {
    fn close(&self);
}

/// A value a Python object holds until its database closes.
pub(crate) type Slot<T> = Arc<RwLock<Option<T>>>;

impl<T: Send + Sync> Closable for RwLock<Option<T>> {
    fn close(&self) {
        *self.write() = None;
    }
}

/// The database and everything made from it.
pub(crate) struct DbState {
    pub(crate) db: RwLock<Option<ferrite::Db>>,
    handles: Mutex<Vec<Weak<dyn Closable>>>,
}

impl DbState {
    /// A slot for `v`, closed with the database.
    pub(crate) fn register<T: Send + Sync + 'static>(&self, v: T) -> Slot<T> {
        let slot = Arc::new(RwLock::new(Some(v)));
        let weak: Weak<dyn Closable> = Arc::downgrade(&slot) as Weak<dyn Closable>;
        let mut h = self.handles.lock();
        h.retain(|w| w.strong_count() > 0);
        h.push(weak);
        slot
    }

    /// Runs `f` on the open database.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&ferrite::Db) -> PyResult<R>) -> PyResult<R> {
        let g = self.db.read_recursive();
        f(g.as_ref().ok_or_else(closed)?)
    }
}

/// A Ferrite database: one pool file and the named maps and Elf tables in it.
/// Use `ferrite.open(path, size)`; a context manager that closes on exit.
#[pyclass(module = "ferrite._ferrite", name = "Db")]
pub struct PyDb {
    pub(crate) state: Arc<DbState>,
}

fn wrap(db: ferrite::Db) -> PyDb {
    PyDb {
        state: Arc::new(DbState {
            db: RwLock::new(Some(db)),
            handles: Mutex::new(Vec::new()),
        }),
    }
}

/// Opens the pool at `path`, creating one of `size` bytes when there is none.
#[pyfunction]
#[pyo3(signature = (path, size = 1 << 30))]
fn open(py: Python<'_>, path: PathBuf, size: u64) -> PyResult<PyDb> {
    let db = py
        .allow_threads(|| ferrite::Db::open_or_create(&path, size))
        .map_err(err)?;
    Ok(wrap(db))
}

/// A database in this process's memory (nothing survives the process).
#[pyfunction]
#[pyo3(signature = (size = 64 << 20))]
fn volatile(py: Python<'_>, size: u64) -> PyResult<PyDb> {
    let db = py
        .allow_threads(|| ferrite::Db::volatile(size))
        .map_err(err)?;
    Ok(wrap(db))
}

#[pymethods]
impl PyDb {
    /// The ordered map `name` (created empty if absent).
    fn map(&self, py: Python<'_>, name: &str) -> PyResult<map::PyMap> {
        let m = self
            .state
            .with(|db| py.allow_threads(|| db.map(name)).map_err(err))?;
        Ok(map::PyMap::new(&self.state, m))
    }

    /// A new, empty map in DRAM (nothing of it survives the process).
    fn volatile_map(&self, py: Python<'_>) -> PyResult<map::PyMap> {
        let m = self
            .state
            .with(|db| py.allow_threads(|| db.volatile_map()).map_err(err))?;
        Ok(map::PyMap::new(&self.state, m))
    }

    /// Opens the Elf table `name` (NotFoundError when there is none).
    fn elf(&self, py: Python<'_>, name: &str) -> PyResult<elf::PyElf> {
        let t = self
            .state
            .with(|db| py.allow_threads(|| db.elf(name)).map_err(err))?;
        Ok(elf::PyElf::new(&self.state, t))
    }

    /// Builds the Elf table `name` from columns of non-negative integers
    /// (all of one length; row i gets id i).
    fn create_elf(
        &self,
        py: Python<'_>,
        name: &str,
        columns: Vec<Vec<u32>>,
    ) -> PyResult<elf::PyElf> {
        let t = self.state.with(|db| {
            py.allow_threads(|| {
                let cols: Vec<&[u32]> = columns.iter().map(Vec::as_slice).collect();
                db.create_elf(name, &cols)
            })
            .map_err(err)
        })?;
        Ok(elf::PyElf::new(&self.state, t))
    }

    /// A transaction: `with db.transaction() as t: t["users"][k] = v`. It
    /// covers one map: the first one named (or `map`).
    #[pyo3(signature = (map = None))]
    fn transaction(&self, py: Python<'_>, map: Option<&str>) -> PyResult<txn::PyDbTxn> {
        txn::PyDbTxn::new(py, &self.state, map)
    }

    /// What an acknowledged write survives, as a short name: "pm",
    /// "emulated-pm-tmpfs", "emulated-pm-file", "file-msync", "volatile".
    #[getter]
    fn durability(&self) -> PyResult<&'static str> {
        self.state.with(|db| Ok(db.durability().name()))
    }

    /// The same, in words.
    #[getter]
    fn durability_description(&self) -> PyResult<&'static str> {
        self.state.with(|db| Ok(db.durability().describe()))
    }

    /// The pool file (None for `ferrite.volatile()`).
    #[getter]
    fn path(&self) -> PyResult<Option<PathBuf>> {
        self.state.with(|db| Ok(db.path().map(PathBuf::from)))
    }

    /// True after `close()`.
    #[getter]
    fn closed(&self) -> bool {
        self.state.db.read_recursive().is_none()
    }

    /// A persist barrier (reports a failed write-back in msync mode).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.state
            .with(|db| py.allow_threads(|| db.flush()).map_err(err))
    }

    /// Closes the pool and releases its lock. Every map, iterator,
    /// transaction and table made from it is closed too (an open transaction
    /// is rolled back). Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let state = self.state.clone();
        py.allow_threads(move || {
            let handles: Vec<_> = state.handles.lock().drain(..).collect();
            for h in handles.iter().rev() {
                if let Some(h) = h.upgrade() {
                    h.close();
                }
            }
            match state.db.write().take() {
                Some(db) => db.close().map_err(err),
                None => Ok(()),
            }
        })
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match &*self.state.db.read_recursive() {
            Some(db) => format!(
                "<ferrite.Db {} ({})>",
                db.path()
                    .map_or_else(|| "in memory".to_string(), |p| p.display().to_string()),
                db.durability().name()
            ),
            None => "<ferrite.Db closed>".into(),
        }
    }
}

#[pymodule]
fn _ferrite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(volatile, m)?)?;
    m.add_class::<PyDb>()?;
    m.add_class::<map::PyMap>()?;
    m.add_class::<map::PyRange>()?;
    m.add_class::<txn::PyTxn>()?;
    m.add_class::<txn::PyDbTxn>()?;
    m.add_class::<elf::PyElf>()?;
    errors::register(m)?;
    m.add("MAX_KEY", ferrite::MAX_KEY)?;
    m.add("MAX_VALUE", ferrite::MAX_VALUE)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
