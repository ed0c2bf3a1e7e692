//! The B+-tree's node format: encoding, decoding and zero-copy search.
//!
//! Header (8 bytes): kind (u8: 1 leaf, 2 inner), n (u8: entries or
//! children), 2 reserved bytes, len (u32: encoded bytes including the header).
//!
//! * Leaf: `n` entries of `klen` (u32), `vinfo` (u32: bit 31 set when the
//!   value is out of line, low 31 bits the value length), the key padded to 8
//!   bytes, then either the value padded to 8 bytes (at most
//!   [`INLINE_MAX`] bytes) or the u64 offset of a value block (`len` u64, bytes).
//! * Inner: `n` child offsets (u64), then `n - 1` separators: `klen` (u32),
//!   4 reserved bytes, the key padded to 8. Child `i` holds the keys `k` with
//!   `sep[i-1] <= k < sep[i]`.

pub const KIND_LEAF: u8 = 1;
pub const KIND_INNER: u8 = 2;
pub const HDR: usize = 8;
/// Values up to this size are stored in the leaf.
pub const INLINE_MAX: usize = 32;
const OUT_OF_LINE: u32 = 1 << 31;

fn pad8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// A leaf entry's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Val {
    Inline(Vec<u8>),
    /// A value block at this offset holding `len` bytes.
    Block(u64, u32),
}

/// A decoded node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Leaf(Vec<(Vec<u8>, Val)>),
    Inner {
        children: Vec<u64>,
        seps: Vec<Vec<u8>>,
    },
}

impl Node {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        match self {
            Node::Leaf(e) => e.len(),
            Node::Inner { children, .. } => children.len(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; HDR];
        match self {
            Node::Leaf(entries) => {
                out[0] = KIND_LEAF;
                out[1] = entries.len() as u8;
                for (k, v) in entries {
                    out.extend_from_slice(&(k.len() as u32).to_le_bytes());
                    let vinfo = match v {
                        Val::Inline(b) => b.len() as u32,
                        Val::Block(_, len) => OUT_OF_LINE | *len,
                    };
                    out.extend_from_slice(&vinfo.to_le_bytes());
                    out.extend_from_slice(k);
                    out.resize(pad8(out.len()), 0);
                    match v {
                        Val::Inline(b) => {
                            out.extend_from_slice(b);
                            out.resize(pad8(out.len()), 0);
                        }
                        Val::Block(off, _) => out.extend_from_slice(&off.to_le_bytes()),
                    }
                }
            }
            Node::Inner { children, seps } => {
                out[0] = KIND_INNER;
                out[1] = children.len() as u8;
                for c in children {
                    out.extend_from_slice(&c.to_le_bytes());
                }
                for s in seps {
                    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
                    out.extend_from_slice(&[0; 4]);
                    out.extend_from_slice(s);
                    out.resize(pad8(out.len()), 0);
                }
            }
        }
        let len = out.len() as u32;
        out[4..8].copy_from_slice(&len.to_le_bytes());
        out
    }

    /// Decodes `b` (a whole encoded node); errors describe what is wrong.
    pub fn decode(b: &[u8]) -> Result<Node, String> {
        let v = View::new(b)?;
        if v.is_leaf() {
            let mut e = Vec::with_capacity(v.n());
            let mut it = v.leaf_iter();
            while let Some(r) = it.next_entry()? {
                e.push((r.0.to_vec(), r.1));
            }
            Ok(Node::Leaf(e))
        } else {
            let n = v.n();
            let children = (0..n).map(|i| v.child(i)).collect::<Result<_, _>>()?;
            let mut seps = Vec::with_capacity(n.saturating_sub(1));
            let mut it = v.sep_iter();
            while let Some(s) = it.next_sep()? {
                seps.push(s.to_vec());
            }
            if seps.len() + 1 != n {
                return Err(format!("{} separators for {n} children", seps.len()));
            }
            Ok(Node::Inner { children, seps })
        }
    }
}

/// A read-only view of an encoded node (no allocation).
#[derive(Clone, Copy)]
pub struct View<'a> {
    b: &'a [u8],
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("truncated at byte {at}"))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| format!("truncated at byte {at}"))
}

impl<'a> View<'a> {
    pub fn new(b: &'a [u8]) -> Result<View<'a>, String> {
        if b.len() < HDR {
            return Err("node shorter than its header".into());
        }
        let len = u32_at(b, 4)? as usize;
        if len < HDR || len > b.len() {
            return Err(format!("node length {len} outside {HDR}..{}", b.len()));
        }
        if b[0] != KIND_LEAF && b[0] != KIND_INNER {
            return Err(format!("node kind {}", b[0]));
        }
        if b[0] == KIND_INNER && b[1] == 0 {
            return Err("inner node without children".into());
        }
        Ok(View { b: &b[..len] })
    }

    /// Encoded length of the node at the start of `b` (header only checked).
    pub fn encoded_len(b: &[u8]) -> Result<usize, String> {
        Ok(u32_at(b, 4)? as usize)
    }

    pub fn is_leaf(&self) -> bool {
        self.b[0] == KIND_LEAF
    }

    pub fn n(&self) -> usize {
        self.b[1] as usize
    }

    pub fn child(&self, i: usize) -> Result<u64, String> {
        u64_at(self.b, HDR + 8 * i)
    }

    pub fn leaf_iter(&self) -> LeafIter<'a> {
        LeafIter {
            b: self.b,
            at: HDR,
            left: self.n(),
        }
    }

    pub fn sep_iter(&self) -> SepIter<'a> {
        SepIter {
            b: self.b,
            at: HDR + 8 * self.n(),
            left: self.n().saturating_sub(1),
        }
    }

    /// The child of an inner node that holds `key`.
    pub fn route(&self, key: &[u8]) -> Result<(usize, u64), String> {
        let mut it = self.sep_iter();
        let mut i = 0;
        while let Some(s) = it.next_sep()? {
            if key < s {
                break;
            }
            i += 1;
        }
        Ok((i, self.child(i)?))
    }
}

pub struct LeafIter<'a> {
    b: &'a [u8],
    at: usize,
    left: usize,
}

impl<'a> LeafIter<'a> {
    pub fn next_entry(&mut self) -> Result<Option<(&'a [u8], Val)>, String> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let klen = u32_at(self.b, self.at)? as usize;
        let vinfo = u32_at(self.b, self.at + 4)?;
        let kstart = self.at + 8;
        let key = self
            .b
            .get(kstart..kstart + klen)
            .ok_or("key beyond the node")?;
        let vstart = kstart + pad8(klen);
        let val = if vinfo & OUT_OF_LINE != 0 {
            self.at = vstart + 8;
            Val::Block(u64_at(self.b, vstart)?, vinfo & !OUT_OF_LINE)
        } else {
            let vlen = vinfo as usize;
            if vlen > INLINE_MAX {
                return Err(format!("inline value of {vlen} bytes"));
            }
            self.at = vstart + pad8(vlen);
            Val::Inline(
                self.b
                    .get(vstart..vstart + vlen)
                    .ok_or("value beyond the node")?
                    .to_vec(),
            )
        };
        if self.at > self.b.len() {
            return Err("entry beyond the node".into());
        }
        Ok(Some((key, val)))
    }
}

pub struct SepIter<'a> {
    b: &'a [u8],
    at: usize,
    left: usize,
}

impl<'a> SepIter<'a> {
    pub fn next_sep(&mut self) -> Result<Option<&'a [u8]>, String> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        let klen = u32_at(self.b, self.at)? as usize;
        let s = self
            .b
            .get(self.at + 8..self.at + 8 + klen)
            .ok_or("separator beyond the node")?;
        self.at += 8 + pad8(klen);
        Ok(Some(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_round_trip() {
        let leaf = Node::Leaf(vec![
            (b"".to_vec(), Val::Inline(vec![])),
            (b"abc".to_vec(), Val::Inline(b"0123456789".to_vec())),
            (vec![7; 40], Val::Block(4096, 100_000)),
        ]);
        assert_eq!(Node::decode(&leaf.encode()).unwrap(), leaf);
        let inner = Node::Inner {
            children: vec![64, 128, 192],
            seps: vec![b"b".to_vec(), b"dd".to_vec()],
        };
        let enc = inner.encode();
        assert_eq!(Node::decode(&enc).unwrap(), inner);
        let v = View::new(&enc).unwrap();
        assert_eq!(v.route(b"a").unwrap(), (0, 64));
        assert_eq!(v.route(b"b").unwrap(), (1, 128));
        assert_eq!(v.route(b"dd").unwrap(), (2, 192));
        assert_eq!(v.route(b"z").unwrap(), (2, 192));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let enc = Node::Leaf(vec![(b"k".to_vec(), Val::Inline(b"v".to_vec()))]).encode();
        for cut in 0..enc.len() {
            let _ = Node::decode(&enc[..cut]);
        }
        let mut bad = enc.clone();
        bad[8] = 0xff; // key length
        assert!(Node::decode(&bad).is_err());
        let mut bad = enc;
        bad[0] = 9;
        assert!(Node::decode(&bad).is_err());
    }
}
