//! [`KvError`], the errors of every [`OrderedKv`](crate::OrderedKv)
//! implementation, and the size check implementations share. The design
//! (no storage layer's concrete error; one variant for corruption) is in the
//! crate documentation.

use std::error::Error;

/// Errors of key-value operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    /// Persistent state failed validation: the one way every implementation
    /// reports corruption (see the crate documentation).
    #[error("object {object:?} is corrupt: {detail}")]
    Corrupt { object: String, detail: String },
    /// An error of the storage layer underneath (for Ferrite's PM index a
    /// `ferrite_pm::PmError`), displayed as itself; other than corruption,
    /// which is [`KvError::Corrupt`]. See [`KvError::storage_error`].
    #[error(transparent)]
    Storage(Box<dyn Error + Send + Sync + 'static>),
    /// Any other failure of an implementation, as text.
    #[error("{0}")]
    Backend(String),
}

impl KvError {
    /// [`KvError::Corrupt`].
    pub fn corrupt(object: impl Into<String>, detail: impl Into<String>) -> KvError {
        KvError::Corrupt {
            object: object.into(),
            detail: detail.into(),
        }
    }

    /// [`KvError::Storage`] wrapping `e`. Storage layers with a corruption
    /// variant of their own map it to [`KvError::corrupt`] instead.
    pub fn storage<E: Error + Send + Sync + 'static>(e: E) -> KvError {
        KvError::Storage(Box::new(e))
    }

    /// True for [`KvError::Corrupt`].
    pub fn is_corrupt(&self) -> bool {
        matches!(self, KvError::Corrupt { .. })
    }

    /// The storage layer's error of a [`KvError::Storage`], for downcasting
    /// (`e.storage_error().and_then(|s| s.downcast_ref::<PmError>())`).
    pub fn storage_error(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        match self {
            KvError::Storage(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

pub type KvResult<T> = Result<T, KvError>;

/// Checks key and value sizes against limits (helper for implementations).
pub fn check_sizes(
    key: &[u8],
    value: Option<&[u8]>,
    max_key: usize,
    max_value: usize,
) -> KvResult<()> {
    if key.len() > max_key {
        return Err(KvError::KeyTooLarge {
            len: key.len(),
            max: max_key,
        });
    }
    if let Some(v) = value {
        if v.len() > max_value {
            return Err(KvError::ValueTooLarge {
                len: v.len(),
                max: max_value,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("disk on fire")]
    struct Fire;

    #[test]
    fn storage_errors_display_as_themselves_and_downcast() {
        let e = KvError::storage(Fire);
        assert_eq!(e.to_string(), "disk on fire");
        assert!(e.storage_error().unwrap().downcast_ref::<Fire>().is_some());
        assert!(!e.is_corrupt());
    }

    #[test]
    fn corruption_has_one_spelling() {
        let e = KvError::corrupt("ferrite index", "leaf 0x100: malformed entry");
        assert!(e.is_corrupt());
        assert_eq!(
            e.to_string(),
            "object \"ferrite index\" is corrupt: leaf 0x100: malformed entry"
        );
    }

    #[test]
    fn sizes_are_checked_against_the_given_limits() {
        assert!(check_sizes(&[0; 4], Some(&[0; 8]), 4, 8).is_ok());
        assert!(matches!(
            check_sizes(&[0; 5], None, 4, 8),
            Err(KvError::KeyTooLarge { len: 5, max: 4 })
        ));
        assert!(matches!(
            check_sizes(&[0; 4], Some(&[0; 9]), 4, 8),
            Err(KvError::ValueTooLarge { len: 9, max: 8 })
        ));
    }
}
