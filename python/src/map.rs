//! `ferrite.Map` (dict-like, ordered) and its range iterator.

use std::borrow::Cow;
use std::ops::Bound as End;
use std::sync::Arc;

use pyo3::exceptions::{PyKeyError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyString, PyTuple};

use crate::errors::{closed, err};
use crate::{DbState, Slot};

/// Key or value bytes of a Python argument: `bytes` and `bytearray` as they
/// are, `str` as its UTF-8 encoding.
pub(crate) fn arg<'a>(o: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = o.downcast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(s) = o.downcast::<PyString>() {
        return Ok(Cow::Borrowed(s.to_str()?.as_bytes()));
    }
    if let Ok(b) = o.downcast::<PyByteArray>() {
        return Ok(Cow::Owned(b.to_vec()));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes or str (str is stored as UTF-8), not {}",
        o.get_type().name()?
    )))
}

/// A key range as Rust bounds.
pub(crate) type KeyRange = (End<Vec<u8>>, End<Vec<u8>>);

/// Bounds of `range(lo, hi)`: `lo` included, `hi` excluded unless said
/// otherwise; None is open.
pub(crate) fn bounds(
    lo: Option<&Bound<'_, PyAny>>,
    hi: Option<&Bound<'_, PyAny>>,
    lo_inclusive: bool,
    hi_inclusive: bool,
) -> PyResult<KeyRange> {
    let lo = match lo {
        None => End::Unbounded,
        Some(k) if lo_inclusive => End::Included(arg(k, "lo")?.into_owned()),
        Some(k) => End::Excluded(arg(k, "lo")?.into_owned()),
    };
    let hi = match hi {
        None => End::Unbounded,
        Some(k) if hi_inclusive => End::Included(arg(k, "hi")?.into_owned()),
        Some(k) => End::Excluded(arg(k, "hi")?.into_owned()),
    };
    Ok((lo, hi))
}

/// An ordered map of byte strings in the pool (`db.map(name)`), used like a
/// dict: `m[k] = v`, `m[k]`, `del m[k]`, `k in m`, `len(m)`; iteration and
/// `range` are in key order.
#[pyclass(module = "ferrite._ferrite", name = "Map")]
pub struct PyMap {
    pub(crate) state: Arc<DbState>,
    pub(crate) slot: Slot<ferrite::Map>,
}

impl PyMap {
    pub(crate) fn new(state: &Arc<DbState>, m: ferrite::Map) -> PyMap {
        PyMap {
            state: state.clone(),
            slot: state.register(m),
        }
    }

    /// Runs `f` on the open map, with the GIL released.
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&ferrite::Map) -> ferrite::Result<R> + Send,
    ) -> PyResult<R> {
        let g = self.slot.read_recursive();
        let m = g.as_ref().ok_or_else(closed)?;
        py.allow_threads(|| f(m)).map_err(err)
    }

    pub(crate) fn map(&self) -> PyResult<ferrite::Map> {
        self.slot.read_recursive().clone().ok_or_else(closed)
    }

    fn iterator(&self, r: KeyRange, reverse: bool, what: Yield) -> PyResult<PyRange> {
        let range = self.map()?.range(r);
        Ok(PyRange {
            slot: self.state.register(range),
            reverse,
            what,
        })
    }
}

#[pymethods]
impl PyMap {
    /// The map's name.
    #[getter]
    fn name(&self) -> PyResult<String> {
        Ok(self.map()?.name().to_string())
    }

    /// What an acknowledged write survives (see `Db.durability`).
    #[getter]
    fn durability(&self) -> PyResult<&'static str> {
        Ok(self.map()?.durability().name())
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let k = arg(key, "key")?;
        match self.run(py, |m| m.get(&k))? {
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
        self.run(py, |m| m.upsert(&k, &v)).map(|_| ())
    }

    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = arg(key, "key")?;
        if self.run(py, |m| m.remove(&k))? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = arg(key, "key")?;
        self.run(py, |m| m.contains(&k))
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.map()?.len())
    }

    fn __iter__(&self) -> PyResult<PyRange> {
        self.iterator((End::Unbounded, End::Unbounded), false, Yield::Keys)
    }

    fn __repr__(&self) -> String {
        match &*self.slot.read_recursive() {
            Some(m) => format!("<ferrite.Map {:?}: {} keys>", m.name(), m.len()),
            None => "<ferrite.Map closed>".into(),
        }
    }

    /// The value of `key`, or `default`.
    #[pyo3(signature = (key, default = None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<PyObject>,
    ) -> PyResult<PyObject> {
        let k = arg(key, "key")?;
        Ok(match self.run(py, |m| m.get(&k))? {
            Some(v) => PyBytes::new(py, &v).into_any().unbind(),
            None => default.unwrap_or_else(|| py.None()),
        })
    }

    /// Inserts `key` if absent: True, or False (nothing changed).
    fn insert(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (k, v) = (arg(key, "key")?, arg(value, "value")?);
        self.run(py, |m| m.insert(&k, &v))
    }

    /// Replaces the value of `key` if present: True, or False.
    fn replace(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (k, v) = (arg(key, "key")?, arg(value, "value")?);
        self.run(py, |m| m.update(&k, &v))
    }

    /// Removes `key`: True when it was present.
    fn remove(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = arg(key, "key")?;
        self.run(py, |m| m.remove(&k))
    }

    /// Removes `key` and returns its value (or `default`; KeyError without).
    #[pyo3(signature = (key, *default))]
    fn pop(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: &Bound<'_, PyTuple>,
    ) -> PyResult<PyObject> {
        if default.len() > 1 {
            return Err(PyTypeError::new_err("pop expected at most 2 arguments"));
        }
        let default = default.get_item(0).ok().map(Bound::unbind);
        let k = arg(key, "key")?;
        let got = self.run(py, |m| {
            let mut old = None;
            m.update_with(&k, |v| {
                old = v.map(<[u8]>::to_vec);
                None
            })?;
            Ok(old)
        })?;
        match (got, default) {
            (Some(v), _) => Ok(PyBytes::new(py, &v).into_any().unbind()),
            (None, Some(d)) => Ok(d),
            (None, None) => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    /// Sets every key of `items` (a dict or an iterable of pairs) at once,
    /// all-or-nothing (a write batch).
    fn update(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<()> {
        let mut b = ferrite::Batch::new();
        let pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = match items.downcast::<PyDict>() {
            Ok(d) => d.iter().collect(),
            Err(_) => items
                .try_iter()?
                .map(|p| p.and_then(|p| p.extract()))
                .collect::<PyResult<_>>()?,
        };
        for (k, v) in &pairs {
            b.put(arg(k, "key")?, arg(v, "value")?);
        }
        self.run(py, |m| m.apply(&b))
    }

    /// Writes a batch all-or-nothing: `puts` (a dict) set, `removes` (keys)
    /// removed, removals last.
    #[pyo3(signature = (puts = None, removes = None))]
    fn batch(
        &self,
        py: Python<'_>,
        puts: Option<&Bound<'_, PyDict>>,
        removes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut b = ferrite::Batch::new();
        if let Some(p) = puts {
            for (k, v) in p.iter() {
                b.put(arg(&k, "key")?, arg(&v, "value")?);
            }
        }
        if let Some(r) = removes {
            for k in r.try_iter()? {
                b.remove(arg(&k?, "key")?);
            }
        }
        self.run(py, |m| m.apply(&b))
    }

    /// Sets `key` to `new` (None removes it) only if its value is `expected`
    /// (None: absent), atomically. True when it swapped.
    #[pyo3(signature = (key, expected, new))]
    fn compare_and_swap(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expected: Option<&Bound<'_, PyAny>>,
        new: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let k = arg(key, "key")?;
        let e = expected.map(|e| arg(e, "expected")).transpose()?;
        let n = new.map(|n| arg(n, "new")).transpose()?;
        self.run(py, |m| m.compare_and_swap(&k, e.as_deref(), n.as_deref()))
            .map(|r| r.is_ok())
    }

    /// Atomic read-modify-write: calls `fn(old)` (bytes or None) once and
    /// stores what it returns (bytes or str; None removes the key), with no
    /// other write of `key` in between. Returns the new value.
    fn update_with(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        f: PyObject,
    ) -> PyResult<PyObject> {
        let k = arg(key, "key")?;
        let mut failure: Option<PyErr> = None;
        let new = self.run(py, |m| {
            m.update_with(&k, |old| {
                Python::with_gil(|py| {
                    let old = old.map(|o| PyBytes::new(py, o));
                    let r = f.call1(py, (old.clone(),)).and_then(|r| {
                        let r = r.bind(py);
                        if r.is_none() {
                            Ok(None)
                        } else {
                            arg(r, "the new value").map(|b| Some(b.into_owned()))
                        }
                    });
                    match r {
                        Ok(v) => v,
                        Err(e) => {
                            // Keep the old value; raise the callback's error.
                            failure = Some(e);
                            old.map(|o| o.as_bytes().to_vec())
                        }
                    }
                })
            })
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(match new {
            Some(v) => PyBytes::new(py, &v).into_any().unbind(),
            None => py.None(),
        })
    }

    /// `(key, value)` pairs with `lo <= key < hi` in key order (largest first
    /// with `reverse=True`); None leaves an end open.
    #[pyo3(signature = (lo = None, hi = None, reverse = false, *, lo_inclusive = true, hi_inclusive = false))]
    fn range(
        &self,
        lo: Option<&Bound<'_, PyAny>>,
        hi: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        lo_inclusive: bool,
        hi_inclusive: bool,
    ) -> PyResult<PyRange> {
        self.iterator(
            bounds(lo, hi, lo_inclusive, hi_inclusive)?,
            reverse,
            Yield::Items,
        )
    }

    /// Every key, in order.
    fn keys(&self) -> PyResult<PyRange> {
        self.iterator((End::Unbounded, End::Unbounded), false, Yield::Keys)
    }

    /// Every value, in key order.
    fn values(&self) -> PyResult<PyRange> {
        self.iterator((End::Unbounded, End::Unbounded), false, Yield::Values)
    }

    /// Every `(key, value)`, in key order.
    fn items(&self) -> PyResult<PyRange> {
        self.iterator((End::Unbounded, End::Unbounded), false, Yield::Items)
    }

    /// Number of keys with `lo <= key < hi`.
    #[pyo3(signature = (lo = None, hi = None))]
    fn count_range(
        &self,
        py: Python<'_>,
        lo: Option<&Bound<'_, PyAny>>,
        hi: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let r = bounds(lo, hi, true, false)?;
        self.run(py, |m| m.count_range(r))
    }

    /// A transaction on this map (a context manager that commits on success).
    fn transaction(&self, py: Python<'_>) -> PyResult<crate::txn::PyTxn> {
        crate::txn::PyTxn::begin(py, &self.state, self.map()?)
    }

    /// A persist barrier.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |m| m.flush())
    }
}

/// What an iterator yields.
#[derive(Clone, Copy)]
pub(crate) enum Yield {
    Keys,
    Values,
    Items,
}

/// An iterator over a key range of a map (`Map.range`, iteration).
#[pyclass(module = "ferrite._ferrite", name = "Range")]
pub struct PyRange {
    slot: Slot<ferrite::Range>,
    reverse: bool,
    what: Yield,
}

#[pymethods]
impl PyRange {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let mut g = self.slot.write();
        let r = g.as_mut().ok_or_else(closed)?;
        let reverse = self.reverse;
        let next = py.allow_threads(|| if reverse { r.next_back() } else { r.next() });
        let Some(e) = next else {
            return Ok(None);
        };
        let (k, v) = e.map_err(err)?;
        Ok(Some(match self.what {
            Yield::Keys => PyBytes::new(py, &k).into_any().unbind(),
            Yield::Values => PyBytes::new(py, &v).into_any().unbind(),
            Yield::Items => (PyBytes::new(py, &k), PyBytes::new(py, &v))
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        }))
    }
}
