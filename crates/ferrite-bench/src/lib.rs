//! Every benchmark of Ferrite, by part, behind `ferrite bench …`:
//!
//! * [`pm`]: the PM layer (`persist`, `alloc`, `memory`).
//! * [`pmio`]: the PM I/O primitives (`log`, `page`, `inplace`, `interleave`).
//! * [`index`]: the PiBench-methodology index benchmark (the default `ferrite
//!   bench`): workload generation, the load/run driver, the baselines, the
//!   named variants and the suite that builds the report.
//! * [`elf`]: the Elf papers' experiments (`elf`).
//! * [`raft`]: the replicated service (`raft`): cluster latency, recovery,
//!   start-up, the structures, group commit.
//! * [`facade`]: the `ferrite` facade's cost over the index, and the Python
//!   binding against dict, LMDB and sqlite3 (`facade`).
//! * [`buffer`]: the buffer manager's evaluation (`buffer`): YCSB, TPC-C, the
//!   five designs of the thesis, the outside anchors under a memory cgroup.
//! * [`env`](mod@env): the one `environment` record every report carries.
//!
//! The library crates depend on nothing here; this crate depends on them. The
//! `ferrite` command only parses arguments and prints.

pub mod buffer;
pub mod elf;
pub mod env;
pub mod facade;
pub mod index;
pub mod pm;
pub mod pmio;
pub mod raft;

// The index benchmark's modules under their earlier paths (the PiBench adapter
// and scripts use them).
pub use index::{baselines, runner, variants, workload};

pub use index::baselines::{BTreeMapKv, RedbKv, U64MapKv};
pub use index::runner::{load, run, LoadStats, Percentiles, RunSpec, RunStats};
pub use index::variants::{
    open_variant, variants, Instance, MemoryReport, RedbMode, VariantConfig, BASELINES,
};
pub use index::workload::{Distribution, IdGen, KeyCodec, Op, OpMix, Rng};

use ferrite_report::Report;

/// What a benchmark produced: the report, its main chart and the extra metrics
/// its table shows.
pub struct BenchOutput {
    pub report: Report,
    pub svg: String,
    pub extra_cols: Vec<&'static str>,
}

/// Errors of the benchmark harness.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid benchmark options: {0}")]
    Options(String),
    #[error("unknown index {0:?} (known: {known})", known = variants().join(", "))]
    UnknownVariant(String),
    #[error("index {name:?} is not available: {why}")]
    Unavailable { name: String, why: String },
    #[error(transparent)]
    Kv(#[from] ferrite_index::KvError),
    #[error(transparent)]
    Pm(#[from] ferrite_pm::PmError),
    #[error(transparent)]
    Pmio(#[from] ferrite_pmio::PmioError),
    #[error(transparent)]
    Elf(#[from] ferrite_elf::ElfError),
    #[error("I/O on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Check(String),
    /// What was being done when `source` happened (`opening index redb`, …).
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<BenchError>,
    },
}

/// Adds what was being done to an error, as `anyhow`'s `with_context` does.
pub trait Context<T> {
    fn context_with(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: Into<BenchError>> Context<T> for std::result::Result<T, E> {
    fn context_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| BenchError::Context {
            what: what(),
            source: Box::new(e.into()),
        })
    }
}

pub type Result<T> = std::result::Result<T, BenchError>;
