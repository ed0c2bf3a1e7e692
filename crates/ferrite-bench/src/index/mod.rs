//! The index benchmark (`ferrite bench`): PiBench's workload model
//! ([`workload`]), the load/run driver ([`runner`]), the baselines measured
//! beside Ferrite ([`baselines`]), the named variants ([`variants`]) and the
//! suite that runs them and builds the report and charts ([`suite`]).

pub mod baselines;
pub mod expected;
pub mod isolate;
pub mod peers;
pub mod runner;
pub mod suite;
pub mod variants;
pub mod workload;
