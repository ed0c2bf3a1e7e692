//! PiBench-methodology benchmarking for Ferrite's ordered key-value indexes:
//! workload generation ([`workload`]), the load/run driver ([`runner`]), the
//! baselines measured beside Ferrite ([`baselines`]) and the named variants
//! `ferrite bench` compares ([`variants`]).

pub mod baselines;
pub mod runner;
pub mod variants;
pub mod workload;

pub use baselines::{BTreeMapKv, RedbKv};
pub use runner::{load, run, LoadStats, Percentiles, RunSpec, RunStats};
pub use variants::{open_variant, Instance, MemoryReport, RedbMode, VariantConfig, VARIANTS};
pub use workload::{Distribution, IdGen, KeyCodec, Op, OpMix, Rng};

/// Errors of the benchmark harness.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("invalid benchmark options: {0}")]
    Options(String),
    #[error("unknown index {0:?} (known: {known})", known = VARIANTS.join(", "))]
    UnknownVariant(String),
    #[error("index {name:?} is not available: {why}")]
    Unavailable { name: String, why: String },
    #[error(transparent)]
    Kv(#[from] ferrite_index::KvError),
    #[error(transparent)]
    Pm(#[from] ferrite_pm::PmError),
    #[error("I/O on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Check(String),
}

pub type Result<T> = std::result::Result<T, BenchError>;
