//! How the index reports errors: corruption is always
//! [`KvError::Corrupt`] (the one spelling of corruption, see `ferrite-kv`),
//! other PM-layer failures (a full pool, a busy heap, …) are
//! [`KvError::Storage`] wrapping the `PmError`.
//!
//! Recovery runs inside the heap's tracer, whose callback returns `PmError`, so
//! it reports corruption as `PmError::CorruptObject` ([`corrupt`]); every
//! PM-layer error crosses into a `KvError` through [`pm`], which maps that (and
//! the pool's own `BadPool`) to `KvError::Corrupt`.

use ferrite_kv::KvError;
use ferrite_pm::PmError;

/// Object name in corruption reports.
pub(crate) const OBJECT: &str = "ferrite index";

/// Corruption found by recovery, which runs inside the heap's tracer and so
/// reports in the PM layer's terms; [`pm`] turns it into [`KvError::Corrupt`].
pub(crate) fn corrupt(detail: String) -> PmError {
    PmError::CorruptObject {
        object: OBJECT.into(),
        detail,
    }
}

/// A PM-layer error as the index reports it: corruption (found by our
/// recovery, the heap's tracer or the pool) is [`KvError::Corrupt`], the one
/// spelling of corruption; everything else is [`KvError::Storage`].
pub(crate) fn pm(e: PmError) -> KvError {
    match e {
        PmError::CorruptObject { object, detail } => KvError::Corrupt { object, detail },
        PmError::BadPool(detail) => KvError::Corrupt {
            object: "pool".into(),
            detail,
        },
        e => KvError::storage(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pm_corruption_becomes_kv_corrupt_and_the_rest_storage() {
        let e = pm(corrupt("leaf 0x100: malformed entry".into()));
        assert!(e.is_corrupt());
        assert_eq!(
            e.to_string(),
            "object \"ferrite index\" is corrupt: leaf 0x100: malformed entry"
        );
        assert!(pm(PmError::BadPool("bad magic".into())).is_corrupt());
        let full = PmError::PoolFull {
            requested: 64,
            used: 1,
            total: 2,
        };
        let msg = full.to_string();
        let e = pm(full);
        assert!(!e.is_corrupt());
        assert_eq!(e.to_string(), msg);
        assert!(matches!(
            e.storage_error().and_then(|s| s.downcast_ref::<PmError>()),
            Some(PmError::PoolFull { .. })
        ));
    }
}
