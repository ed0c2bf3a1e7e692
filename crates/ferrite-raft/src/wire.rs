//! Byte strings on the wire and in the logs, encoded as byte strings.
//!
//! serde encodes a `Vec<u8>` as a sequence of `u8`s, one call per byte on both
//! sides. postcard writes such a sequence exactly as it writes a byte string
//! (a varint length, then the bytes), so these helpers — which serialise
//! through `serialize_bytes` and deserialise into a `ByteBuf` (one copy) —
//! change no byte of any frame, log record or snapshot file; they only make
//! the encoding a copy instead of a loop. The test below pins that.
//!
//! Use with `#[serde(with = "crate::wire::…")]`; `Vec<u8>` fields use
//! `serde_bytes` directly.

use serde::{Deserialize, Deserializer, Serializer};
use serde_bytes::{ByteBuf, Bytes};

use crate::snapshot::Items;

/// `Vec<(Vec<u8>, Vec<u8>)>`: snapshot items.
pub mod pairs {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[(Vec<u8>, Vec<u8>)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|(k, x)| (Bytes::new(k), Bytes::new(x))))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Items, D::Error> {
        let v = Vec::<(ByteBuf, ByteBuf)>::deserialize(d)?;
        Ok(v.into_iter()
            .map(|(k, x)| (k.into_vec(), x.into_vec()))
            .collect())
    }
}

/// `Vec<Vec<u8>>`: lists of keys.
pub mod list {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|k| Bytes::new(k)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let v = Vec::<ByteBuf>::deserialize(d)?;
        Ok(v.into_iter().map(ByteBuf::into_vec).collect())
    }
}

/// `Vec<Option<Vec<u8>>>`: lists of values that may be absent.
pub mod opt_list {
    use super::*;

    pub fn serialize<S: Serializer>(v: &[Option<Vec<u8>>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|k| k.as_deref().map(Bytes::new)))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Option<Vec<u8>>>, D::Error> {
        let v = Vec::<Option<ByteBuf>>::deserialize(d)?;
        Ok(v.into_iter().map(|o| o.map(ByteBuf::into_vec)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Command, Cond};
    use serde::Serialize;

    #[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
    struct Plain {
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        list: Vec<Vec<u8>>,
        opt: Vec<Option<Vec<u8>>>,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
    struct Fast {
        #[serde(with = "pairs")]
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        #[serde(with = "list")]
        list: Vec<Vec<u8>>,
        #[serde(with = "opt_list")]
        opt: Vec<Option<Vec<u8>>>,
    }

    /// The byte-string encodings write and read exactly what the plain
    /// derive did, so frames, WAL records and snapshot files stay compatible.
    #[test]
    fn byte_string_encoding_is_the_plain_encoding() {
        let big = vec![0xabu8; 300]; // a length that needs a two-byte varint
        let plain = Plain {
            pairs: vec![(b"k".to_vec(), big.clone()), (Vec::new(), b"v".to_vec())],
            list: vec![b"a".to_vec(), Vec::new(), big.clone()],
            opt: vec![None, Some(big.clone()), Some(Vec::new())],
        };
        let fast = Fast {
            pairs: plain.pairs.clone(),
            list: plain.list.clone(),
            opt: plain.opt.clone(),
        };
        let a = postcard::to_stdvec(&plain).unwrap();
        let b = postcard::to_stdvec(&fast).unwrap();
        assert_eq!(a, b);
        assert_eq!(postcard::from_bytes::<Fast>(&a).unwrap(), fast);
        assert_eq!(postcard::from_bytes::<Plain>(&b).unwrap(), plain);
    }

    /// A `Command` encodes as before the change: the bytes are pinned.
    #[test]
    fn command_encoding_is_pinned() {
        let c = Command::Set {
            key: b"k".to_vec(),
            value: b"vv".to_vec(),
            cond: Cond::IfEq(b"w".to_vec()),
        };
        // variant 0 (Set), key [1, 'k'], value [2, 'v', 'v'], cond variant 3 (IfEq) [1, 'w']
        let want = [0, 1, b'k', 2, b'v', b'v', 3, 1, b'w'];
        assert_eq!(postcard::to_stdvec(&c).unwrap(), want);
        assert_eq!(postcard::from_bytes::<Command>(&want).unwrap(), c);
        let d = Command::Del {
            keys: vec![b"a".to_vec(), b"bc".to_vec()],
        };
        let want = [1, 2, 1, b'a', 2, b'b', b'c'];
        assert_eq!(postcard::to_stdvec(&d).unwrap(), want);
        assert_eq!(postcard::from_bytes::<Command>(&want).unwrap(), d);
    }
}
