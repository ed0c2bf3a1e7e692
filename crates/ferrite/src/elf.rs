//! [`ElfTable`]: an Elf multi-dimensional index in the pool, queried with
//! [`ElfQuery`] for the ids of matching rows.

use std::ops::RangeInclusive;
use std::sync::Arc;

use ferrite_elf::store::CreateOptions;
use ferrite_elf::{ElfStore, Query, Variant};
use ferrite_pm::{Durability, Pool};

use crate::error::{Error, Result};

/// The largest value a column of an Elf table holds (values are 31-bit).
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(16 << 20)?;
/// assert!(db.create_elf("t", &[&[ferrite::ELF_MAX_VALUE + 1]]).is_err());
/// # Ok(())
/// # }
/// ```
pub const ELF_MAX_VALUE: u32 = ferrite_elf::layout::MAX_VALUE;

/// A table of `u32` columns indexed by Elf, a prefix tree over the columns
/// that answers conjunctive equality and range queries with the ids of the
/// matching rows ([`Db::elf`](crate::Db::elf),
/// [`Db::create_elf`](crate::Db::create_elf)).
///
/// Durability: the table is built, published and extended atomically; what
/// an acknowledged [`insert`](ElfTable::insert) survives is the pool's
/// [`durability`](ElfTable::durability). Queries read a consistent snapshot
/// and never wait for inserts. Cheap to clone and share between threads.
///
/// ```
/// # fn main() -> Result<(), ferrite::Error> {
/// let db = ferrite::Db::volatile(64 << 20)?;
/// // lineitem(shipdate, quantity): rows 0..4
/// let t = db.create_elf("lineitem", &[&[10, 10, 11, 12], &[5, 40, 7, 5]])?;
/// let q = ferrite::ElfQuery::new().range(0, 10..=11).range(1, 0..=9);
/// assert_eq!(t.query(&q)?, [0, 2]);
/// assert_eq!(t.count(&q)?, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct ElfTable {
    store: Arc<ElfStore>,
    name: Arc<str>,
}

/// A conjunctive query on an [`ElfTable`]: a bound per constrained column;
/// unconstrained columns match everything.
///
/// ```
/// let q = ferrite::ElfQuery::new().eq(0, 3).range(2, 10..=20);
/// assert_eq!(q.constraints(), 2);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfQuery {
    bounds: Vec<(usize, u32, u32)>,
}

impl ElfQuery {
    /// A query that matches every row.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let t = db.create_elf("t", &[&[1, 2]])?;
    /// assert_eq!(t.count(&ferrite::ElfQuery::new())?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new() -> ElfQuery {
        ElfQuery::default()
    }

    /// Column `col` equals `value`.
    ///
    /// ```
    /// let q = ferrite::ElfQuery::new().eq(1, 42);
    /// assert_eq!(q.constraints(), 1);
    /// ```
    pub fn eq(self, col: usize, value: u32) -> ElfQuery {
        self.range(col, value..=value)
    }

    /// Column `col` lies in `values` (inclusive). Several bounds on one
    /// column intersect.
    ///
    /// ```
    /// let q = ferrite::ElfQuery::new().range(0, 10..=20).range(0, 15..=30);
    /// assert_eq!(q.constraints(), 2); // column 0 within 15..=20
    /// ```
    pub fn range(mut self, col: usize, values: RangeInclusive<u32>) -> ElfQuery {
        self.bounds.push((col, *values.start(), *values.end()));
        self
    }

    /// Number of bounds given.
    ///
    /// ```
    /// assert_eq!(ferrite::ElfQuery::new().constraints(), 0);
    /// ```
    pub fn constraints(&self) -> usize {
        self.bounds.len()
    }

    /// The per-column bounds for a table of `ncols` columns.
    fn resolve(&self, ncols: usize) -> Result<Query> {
        let mut b = vec![(0, ELF_MAX_VALUE); ncols];
        for &(col, lo, hi) in &self.bounds {
            let Some(c) = b.get_mut(col) else {
                return Err(Error::Invalid(format!(
                    "query: column {col} of a table with {ncols} columns"
                )));
            };
            c.0 = c.0.max(lo);
            c.1 = c.1.min(hi);
        }
        Ok(Query::range(b))
    }
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl ElfTable {
    pub(crate) fn open(pool: &Pool, name: &str) -> Result<ElfTable> {
        let store = ElfStore::open(pool, name, Variant::Pm, false)?;
        Ok(ElfTable {
            store: Arc::new(store),
            name: name.into(),
        })
    }

    pub(crate) fn create(pool: &Pool, name: &str, columns: &[&[u32]]) -> Result<ElfTable> {
        let built = ferrite_elf::build::build(columns)?;
        let store = ElfStore::create(
            pool,
            name,
            &built,
            None,
            &CreateOptions::default(),
            Variant::Pm,
        )?;
        Ok(ElfTable {
            store: Arc::new(store),
            name: name.into(),
        })
    }

    /// Live handles of this table.
    pub(crate) fn handles(&self) -> usize {
        Arc::strong_count(&self.store)
    }

    /// The table's name.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert_eq!(db.create_elf("t", &[&[1]])?.name(), "t");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of columns.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// assert_eq!(db.create_elf("t", &[&[1], &[2], &[3]])?.columns(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn columns(&self) -> usize {
        self.store.ncols()
    }

    /// Number of rows (built and inserted).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let t = db.create_elf("t", &[&[1, 2]])?;
    /// t.insert(&[3])?;
    /// assert_eq!(t.rows(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn rows(&self) -> u64 {
        self.store.rows()
    }

    /// What an acknowledged insert survives (the pool's durability).
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let t = db.create_elf("t", &[&[1]])?;
    /// assert_eq!(t.durability(), db.durability());
    /// # Ok(())
    /// # }
    /// ```
    pub fn durability(&self) -> Durability {
        self.store.pool().durability()
    }

    /// The ids of the rows that match `q`, ascending.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let t = db.create_elf("t", &[&[3, 1, 3, 2]])?;
    /// assert_eq!(t.query(&ferrite::ElfQuery::new().eq(0, 3))?, [0, 2]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn query(&self, q: &ElfQuery) -> Result<Vec<u32>> {
        let q = q.resolve(self.columns())?;
        let mut ids = self.store.collect(&q, threads())?;
        ids.sort_unstable();
        Ok(ids)
    }

    /// The number of rows that match `q`.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let t = db.create_elf("t", &[&[3, 1, 3, 2]])?;
    /// assert_eq!(t.count(&ferrite::ElfQuery::new().range(0, 2..=3))?, 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn count(&self, q: &ElfQuery) -> Result<u64> {
        let q = q.resolve(self.columns())?;
        Ok(self.store.count(&q, threads())?)
    }

    /// Appends a row (one value per column) and returns its id; durable when
    /// it returns. Inserted rows go to a delta that is merged into the
    /// table in the background of later inserts.
    ///
    /// ```
    /// # fn main() -> Result<(), ferrite::Error> {
    /// let db = ferrite::Db::volatile(16 << 20)?;
    /// let t = db.create_elf("t", &[&[1, 2], &[10, 20]])?;
    /// let id = t.insert(&[1, 30])?;
    /// assert_eq!(id, 2);
    /// assert_eq!(t.query(&ferrite::ElfQuery::new().eq(0, 1))?, [0, 2]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn insert(&self, row: &[u32]) -> Result<u32> {
        if row.len() != self.columns() {
            return Err(Error::Invalid(format!(
                "a row of {} values for a table of {} columns",
                row.len(),
                self.columns()
            )));
        }
        Ok(self.store.insert(row)?)
    }
}

impl std::fmt::Debug for ElfTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfTable")
            .field("name", &self.name)
            .field("columns", &self.columns())
            .field("rows", &self.rows())
            .finish()
    }
}
