//! `ferrite.ElfTable`: conjunctive queries that return row ids, as a numpy
//! array when numpy is installed (else a list).

use std::sync::Arc;

use pyo3::exceptions::{PyImportError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{closed, err};
use crate::{DbState, Slot};

/// An Elf table: rows of non-negative integer columns, indexed for
/// conjunctive equality and range queries.
#[pyclass(module = "ferrite._ferrite", name = "ElfTable")]
pub struct PyElf {
    slot: Slot<ferrite::ElfTable>,
}

impl PyElf {
    pub(crate) fn new(state: &Arc<DbState>, t: ferrite::ElfTable) -> PyElf {
        PyElf {
            slot: state.register(t),
        }
    }

    fn table(&self) -> PyResult<ferrite::ElfTable> {
        self.slot.read_recursive().clone().ok_or_else(closed)
    }
}

/// `{column: value}` or `{column: (lo, hi)}` (inclusive) as a query.
fn query(bounds: Option<&Bound<'_, PyDict>>) -> PyResult<ferrite::ElfQuery> {
    let mut q = ferrite::ElfQuery::new();
    if let Some(b) = bounds {
        for (col, v) in b.iter() {
            let col: usize = col.extract()?;
            if let Ok(x) = v.extract::<u32>() {
                q = q.eq(col, x);
            } else if let Ok((lo, hi)) = v.extract::<(u32, u32)>() {
                q = q.range(col, lo..=hi);
            } else {
                return Err(PyTypeError::new_err(format!(
                    "column {col}: a bound is a value or a (lo, hi) pair of non-negative integers"
                )));
            }
        }
    }
    Ok(q)
}

#[pymethods]
impl PyElf {
    /// Ids of the rows matching every bound (`{column: value}` or
    /// `{column: (lo, hi)}`), ascending: a numpy uint32 array when numpy is
    /// installed (`numpy=None`), a list with `numpy=False`; `numpy=True`
    /// insists on numpy.
    #[pyo3(signature = (bounds = None, *, numpy = None))]
    fn query(
        &self,
        py: Python<'_>,
        bounds: Option<&Bound<'_, PyDict>>,
        numpy: Option<bool>,
    ) -> PyResult<PyObject> {
        let q = query(bounds)?;
        let t = self.table()?;
        let ids = py.allow_threads(|| t.query(&q)).map_err(err)?;
        let np = match numpy {
            Some(false) => None,
            Some(true) => Some(py.import("numpy").map_err(|e| {
                PyImportError::new_err(format!("numpy=True but numpy cannot be imported: {e}"))
            })?),
            None => py.import("numpy").ok(),
        };
        match np {
            Some(np) => {
                let raw: Vec<u8> = ids.iter().flat_map(|i| i.to_ne_bytes()).collect();
                let arr = np.call_method1("frombuffer", (PyBytes::new(py, &raw), "uint32"))?;
                // A writable copy the caller owns.
                Ok(arr.call_method0("copy")?.unbind())
            }
            None => Ok(ids.into_pyobject(py)?.into_any().unbind()),
        }
    }

    /// Number of rows matching every bound.
    #[pyo3(signature = (bounds = None))]
    fn count(&self, py: Python<'_>, bounds: Option<&Bound<'_, PyDict>>) -> PyResult<u64> {
        let q = query(bounds)?;
        let t = self.table()?;
        py.allow_threads(|| t.count(&q)).map_err(err)
    }

    /// Appends a row (one value per column); returns its id.
    fn insert(&self, py: Python<'_>, row: Vec<u32>) -> PyResult<u32> {
        let t = self.table()?;
        py.allow_threads(|| t.insert(&row)).map_err(err)
    }

    /// Number of rows.
    #[getter]
    fn rows(&self) -> PyResult<u64> {
        Ok(self.table()?.rows())
    }

    /// Number of columns.
    #[getter]
    fn columns(&self) -> PyResult<usize> {
        Ok(self.table()?.columns())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.table()?.rows() as usize)
    }

    fn __repr__(&self) -> String {
        match &*self.slot.read_recursive() {
            Some(t) => format!(
                "<ferrite.ElfTable {:?}: {} rows x {} columns>",
                t.name(),
                t.rows(),
                t.columns()
            ),
            None => "<ferrite.ElfTable closed>".into(),
        }
    }
}
