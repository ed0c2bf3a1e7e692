//! `ferrite.Transaction` (one map, dict-like, serializable) and the
//! `db.transaction()` context that binds to the first map it is asked for.

use std::sync::Arc;

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors::{closed, err, TransactionError};
use crate::map::{arg, bounds, KeyRange};
use crate::{DbState, Slot};

/// A transaction on one map: reads see the map as of its start plus its own
/// writes; other writers of the map wait until it ends (readers do not).
/// `with m.transaction() as t: ...` commits when the block ends normally and
/// rolls back when it raises.
#[pyclass(module = "ferrite._ferrite", name = "Transaction")]
pub struct PyTxn {
    slot: Slot<ferrite::Transaction>,
}

impl PyTxn {
    pub(crate) fn begin(py: Python<'_>, state: &Arc<DbState>, m: ferrite::Map) -> PyResult<PyTxn> {
        // Waiting for the map's writers must not hold the GIL.
        let tx = py.allow_threads(|| m.transaction()).map_err(err)?;
        Ok(PyTxn {
            slot: state.register(tx),
        })
    }

    fn with_tx<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ferrite::Transaction) -> ferrite::Result<R> + Send,
    ) -> PyResult<R> {
        let mut g = self.slot.write();
        let tx = g.as_mut().ok_or_else(|| {
            TransactionError::new_err("the transaction has ended (or its database closed)")
        })?;
        py.allow_threads(|| f(tx)).map_err(err)
    }

    fn end(&self, py: Python<'_>, commit: bool) -> PyResult<()> {
        let tx = self.slot.write().take();
        match tx {
            Some(tx) if commit => py.allow_threads(|| tx.commit()).map_err(err),
            Some(tx) => {
                tx.rollback();
                Ok(())
            }
            None => Err(TransactionError::new_err(
                "the transaction has ended (or its database closed)",
            )),
        }
    }
}

#[pymethods]
impl PyTxn {
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = arg(key, "key")?;
        match self.with_tx(py, |t| t.get(&k))? {
            Some(v) => Ok(PyBytes::new(py, &v)),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (k, v) = (arg(key, "key")?, arg(value, "value")?);
        self.with_tx(py, |t| t.upsert(&k, &v)).map(|_| ())
    }

    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = arg(key, "key")?;
        if self.with_tx(py, |t| t.remove(&k))? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = arg(key, "key")?;
        self.with_tx(py, |t| t.contains(&k))
    }

    /// The value of `key` in the transaction's view, or `default`.
    #[pyo3(signature = (key, default = None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<PyObject>,
    ) -> PyResult<PyObject> {
        let k = arg(key, "key")?;
        Ok(match self.with_tx(py, |t| t.get(&k))? {
            Some(v) => PyBytes::new(py, &v).into_any().unbind(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    /// Inserts `key` if absent: True, or False.
    fn insert(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (k, v) = (arg(key, "key")?, arg(value, "value")?);
        self.with_tx(py, |t| t.insert(&k, &v))
    }

    /// Replaces the value of `key` if present: True, or False.
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (k, v) = (arg(key, "key")?, arg(value, "value")?);
        self.with_tx(py, |t| t.update(&k, &v))
    }

    /// Removes `key`: True when it was present.
    fn remove(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = arg(key, "key")?;
        self.with_tx(py, |t| t.remove(&k))
    }

    /// The `(key, value)` pairs of `lo <= key < hi` in the transaction's view,
    /// as a list (largest first with `reverse=True`).
    #[pyo3(signature = (lo = None, hi = None, reverse = false, *, lo_inclusive = true, hi_inclusive = false))]
    fn range(
        &self,
        py: Python<'_>,
        lo: Option<&Bound<'_, PyAny>>,
        hi: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        lo_inclusive: bool,
        hi_inclusive: bool,
    ) -> PyResult<Vec<(Py<PyBytes>, Py<PyBytes>)>> {
        let r: KeyRange = bounds(lo, hi, lo_inclusive, hi_inclusive)?;
        let entries = self.with_tx(py, |t| {
            if reverse {
                t.range(r).rev().collect::<ferrite::Result<Vec<_>>>()
            } else {
                t.range(r).collect::<ferrite::Result<Vec<_>>>()
            }
        })?;
        Ok(entries
            .into_iter()
            .map(|(k, v)| (PyBytes::new(py, &k).unbind(), PyBytes::new(py, &v).unbind()))
            .collect())
    }

    /// Applies the writes at once (all-or-nothing) and ends the transaction.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, true)
    }

    /// Ends the transaction without applying its writes.
    fn rollback(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py, false)
    }

    /// True until commit, rollback or the database's close.
    #[getter]
    fn active(&self) -> bool {
        self.slot.read_recursive().is_some()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc = None, _tb = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let failed = exc_type.is_some_and(|t| !t.is_none());
        if self.slot.read_recursive().is_some() {
            self.end(py, !failed)?;
        }
        Ok(false)
    }
}

/// `db.transaction()`: a transaction on the first map named through it
/// (`t["users"]` or `t.map("users")`); naming a second map raises
/// TransactionError (a transaction covers one map).
#[pyclass(module = "ferrite._ferrite", name = "DbTransaction")]
pub struct PyDbTxn {
    state: Arc<DbState>,
    bound: parking_lot::Mutex<Option<(String, Py<PyTxn>)>>,
}

impl PyDbTxn {
    pub(crate) fn new(
        py: Python<'_>,
        state: &Arc<DbState>,
        map: Option<&str>,
    ) -> PyResult<PyDbTxn> {
        let t = PyDbTxn {
            state: state.clone(),
            bound: parking_lot::Mutex::new(None),
        };
        if let Some(name) = map {
            t.bind(py, name)?;
        }
        Ok(t)
    }

    fn bind(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyTxn>> {
        let mut b = self.bound.lock();
        if let Some((n, t)) = &*b {
            if n == name {
                return Ok(t.clone_ref(py));
            }
            return Err(TransactionError::new_err(format!(
                "this transaction covers map {n:?}; a transaction covers one map, not also {name:?}"
            )));
        }
        let m = self
            .state
            .with(|db| py.allow_threads(|| db.map(name)).map_err(err))?;
        let t = Py::new(py, PyTxn::begin(py, &self.state, m)?)?;
        *b = Some((name.to_string(), t.clone_ref(py)));
        Ok(t)
    }

    fn bound_txn(&self, py: Python<'_>) -> Option<Py<PyTxn>> {
        self.bound.lock().as_ref().map(|(_, t)| t.clone_ref(py))
    }
}

#[pymethods]
impl PyDbTxn {
    /// The transaction's view of map `name` (the first name binds it).
    fn map(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyTxn>> {
        if self.state.db.read_recursive().is_none() {
            return Err(closed());
        }
        self.bind(py, name)
    }

    fn __getitem__(&self, py: Python<'_>, name: &str) -> PyResult<Py<PyTxn>> {
        self.map(py, name)
    }

    /// Commits (nothing to do when no map was named).
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        match self.bound_txn(py) {
            Some(t) => t.borrow(py).commit(py),
            None => Ok(()),
        }
    }

    /// Rolls back.
    fn rollback(&self, py: Python<'_>) -> PyResult<()> {
        match self.bound_txn(py) {
            Some(t) => t.borrow(py).rollback(py),
            None => Ok(()),
        }
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*args))]
    fn __exit__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        match self.bound_txn(py) {
            Some(t) => {
                let t = t.bind(py);
                t.call_method1("__exit__", args)?;
                Ok(false)
            }
            None => Ok(false),
        }
    }
}
