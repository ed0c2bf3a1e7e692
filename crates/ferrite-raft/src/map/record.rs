//! The record layout of the PM list, which is also the layout of a snapshot
//! stream between PM replicas (the list itself is the snapshot: a leader
//! copies its records as they are in PM, a follower copies them into its
//! pages as they arrive; see `docs/FORMAT.md`, "Raft list").
//!
//! A record is `klen` (u32 LE), `vlen` (u32 LE), `kind` (u8: [`KIND_PUT`],
//! [`KIND_DEL`]), 7 reserved bytes, the key, the value, and padding to a
//! multiple of 8 bytes.

/// Bytes of a record header.
pub const HDR: u64 = 16;
/// A record that sets its key to its value.
pub const KIND_PUT: u8 = 1;
/// A record that removes its key (no value).
pub const KIND_DEL: u8 = 2;

/// Bytes of a record with a `klen`-byte key and a `vlen`-byte value.
pub fn size(klen: usize, vlen: usize) -> u64 {
    HDR + (klen as u64 + vlen as u64).div_ceil(8) * 8
}

/// The header of a record.
pub fn header(kind: u8, klen: usize, vlen: usize) -> [u8; HDR as usize] {
    let mut h = [0u8; HDR as usize];
    h[0..4].copy_from_slice(&(klen as u32).to_le_bytes());
    h[4..8].copy_from_slice(&(vlen as u32).to_le_bytes());
    h[8] = kind;
    h
}

/// Appends a put record of `key` and `value` to `out` (zero padding).
pub fn push(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&header(KIND_PUT, key.len(), value.len()));
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out.resize(start + size(key.len(), value.len()) as usize, 0);
}

/// The put records of a stream, checked: each header and its key, value and
/// padding inside the stream, the kind a put. Yields `(offset, key, value)`;
/// a malformed record yields an error (and ends the iteration).
pub fn puts(bytes: &[u8]) -> Puts<'_> {
    Puts { bytes, at: 0 }
}

/// See [`puts`].
pub struct Puts<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Puts<'a> {
    type Item = Result<(usize, &'a [u8], &'a [u8]), String>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.bytes;
        let at = self.at;
        if at >= b.len() {
            return None;
        }
        let fail = |d: String| {
            Some(Err(format!(
                "snapshot record at byte {at} of {}: {d}",
                b.len()
            )))
        };
        if b.len() - at < HDR as usize {
            self.at = b.len();
            return fail("header cut short".into());
        }
        let klen = u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes")) as usize;
        let vlen = u32::from_le_bytes(b[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
        let kind = b[at + 8];
        let sz = size(klen, vlen);
        if kind != KIND_PUT {
            self.at = b.len();
            return fail(format!("kind {kind}, a snapshot holds puts only"));
        }
        if sz > (b.len() - at) as u64 {
            self.at = b.len();
            return fail(format!(
                "{klen}-byte key and {vlen}-byte value run past the end"
            ));
        }
        let k = at + HDR as usize;
        self.at = at + sz as usize;
        Some(Ok((at, &b[k..k + klen], &b[k + klen..k + klen + vlen])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushed_records_read_back_and_bad_ones_are_refused() {
        let mut s = Vec::new();
        push(&mut s, b"k", b"value");
        push(&mut s, b"", b"");
        push(&mut s, b"key-2", &[7u8; 300]);
        assert_eq!(s.len() as u64, size(1, 5) + size(0, 0) + size(5, 300));
        let got: Vec<_> = puts(&s).map(|r| r.unwrap()).collect();
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].1, got[0].2), (&b"k"[..], &b"value"[..]));
        assert_eq!(got[1].0 as u64, size(1, 5));
        assert_eq!((got[2].1, got[2].2.len()), (&b"key-2"[..], 300));
        // Cut anywhere inside the last record: an error, never a panic.
        for cut in (got[2].0 + 1)..s.len() {
            let r: Vec<_> = puts(&s[..cut]).collect();
            assert!(r.last().unwrap().is_err(), "cut at {cut}");
        }
        // A delete record, and a length that overflows the stream.
        let mut d = s.clone();
        d[8] = KIND_DEL;
        assert!(puts(&d).next().unwrap().is_err());
        let mut o = s.clone();
        o[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(puts(&o).next().unwrap().is_err());
    }
}
