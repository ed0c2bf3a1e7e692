//! Errors of the Elf crate.

use ferrite_pm::PmError;

/// Everything that can go wrong building, opening, querying or loading an Elf.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElfError {
    #[error(transparent)]
    Pm(#[from] PmError),
    #[error("invalid table: {0}")]
    InvalidTable(String),
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    #[error("corrupt Elf in the pool: {0}")]
    Corrupt(String),
    #[error("the pool holds no Elf named {0:?} (build one with `ferrite elf build`)")]
    NoElf(String),
    #[error("{path}: line {line}: {msg}")]
    Csv {
        path: String,
        line: u64,
        msg: String,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("the Elf is too large: {0}")]
    TooLarge(String),
}

pub type Result<T, E = ElfError> = std::result::Result<T, E>;
