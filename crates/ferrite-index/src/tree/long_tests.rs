//! Long entries (format version 2: keys of 17 to 24 bytes inline in a whole
//! line) beside the version-1 encoding of the same keys (a wide entry with an
//! out-of-line copy), which pools written before version 2 hold.

use std::collections::BTreeMap;

use ferrite_kv::OrderedKv;
use ferrite_pm::{Pool, PoolOptions};

use super::*;
use crate::ebr as epoch;
use crate::inner::{prefix_of, SearchKey};

struct TempPool(std::path::PathBuf);

impl Drop for TempPool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn temp_pool(tag: &str) -> TempPool {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    TempPool(dir.join(format!(
        "ferrite-index-long-{tag}-{}.pool",
        std::process::id()
    )))
}

const NAME: &str = "long";

/// Inserts `key` (17 to 24 bytes) as a version-1 build did: a wide entry
/// whose second word is the offset of an out-of-line copy of the key.
fn put_v1(idx: &FerriteIndex, key: &[u8], value: &[u8]) {
    assert!((WIDE_INLINE_MAX + 1..=LONG_INLINE_MAX).contains(&key.len()));
    let g = epoch::pin();
    let sk = SearchKey::new(key);
    let fp = fingerprint(key);
    let mut lk = idx.lock_for(&sk, &g);
    assert!(
        idx.find_locked(lk.lf, &sk, fp).is_none(),
        "{key:x?} present"
    );
    let b = idx.blocks();
    let e = Raw {
        slot: usize::MAX,
        d: desc(KCODE_WIDE, b.encode_value(value).unwrap().code),
        fp,
        kw: prefix_of(key),
        k2: b.write_block(key).unwrap(),
        k3: 0,
        klen: key.len() as u32,
        vw: b.encode_value(value).unwrap().word,
    };
    idx.fence().unwrap();
    idx.count_add(1);
    idx.insert_entry(&mut lk, &e, &g).unwrap();
}

fn key(i: u64, width: usize) -> Vec<u8> {
    format!("0123456789abcdef{i:0width$}").into_bytes()
}

fn check_all(idx: &FerriteIndex, m: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (k, v) in m {
        assert_eq!(idx.get(k).unwrap().as_deref(), Some(&v[..]), "{k:x?}");
    }
    let mut got = Vec::new();
    idx.scan(b"", usize::MAX, &mut |k, v| {
        got.push((k.to_vec(), v.to_vec()))
    })
    .unwrap();
    let want: Vec<_> = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got, want);
    assert_eq!(idx.count(), m.len());
    idx.check_structure().unwrap();
}

/// An index tagged version 1 holding version-1 entries of 17 to 24-byte keys
/// reads them, keeps its tag until it is given such a key, then holds both
/// encodings side by side (keys that tie on their first 16 bytes, so leaves
/// sort one against the other), through splits, updates that move entries,
/// deletes and a reopen. Fails if a long entry is taken for an out-of-line
/// one (or the reverse), if the two are ordered by their first words only, or
/// if the tag is not rewritten before the first long entry.
#[test]
fn version_1_entries_and_long_entries_side_by_side() {
    let tp = temp_pool("mixed");
    let mut m = BTreeMap::new();
    {
        let pool = Pool::create(&tp.0, 64 << 20, &PoolOptions::default()).unwrap();
        drop(FerriteIndex::open_or_create(&pool, NAME).unwrap());
        let id = pool.object(NAME, INDEX_TYPE).unwrap();
        pool.set_root(id, R_FORMAT, FORMAT_TAG_V1).unwrap();
        let idx = FerriteIndex::open_or_create(&pool, NAME).unwrap();
        // Version-1 entries (widths 1..=8: 17 to 24 bytes) and 8-byte keys.
        for i in 0..600u64 {
            let k = key(i * 7, 1 + (i % 8) as usize);
            let v = i.to_le_bytes()[..(i % 9) as usize].to_vec();
            put_v1(&idx, &k, &v);
            m.insert(k, v);
            let k = (i * 0x9E37_79B9).to_be_bytes().to_vec();
            idx.insert(&k, b"eight").unwrap();
            m.insert(k, b"eight".to_vec());
        }
        check_all(&idx, &m);
        assert_eq!(pool.root(id, R_FORMAT), FORMAT_TAG_V1, "no long entry yet");
        // Long entries of the same shape, tying with those on two words;
        // in descending order, so that slot order is not key order.
        // And a range of long entries only, whose leaves sort them among
        // themselves (ties on the first two words and the length).
        for i in (0..600u64).rev() {
            let k = key(i * 7 + 3, 1 + (i % 8) as usize);
            assert!(idx.insert(&k, &i.to_be_bytes()).unwrap());
            m.insert(k, i.to_be_bytes().to_vec());
            let k = format!("fedcba9876543210{i:08}").into_bytes();
            assert!(idx.insert(&k, &i.to_be_bytes()).unwrap());
            m.insert(k, i.to_be_bytes().to_vec());
        }
        assert_eq!(pool.root(id, R_FORMAT), FORMAT_TAG, "retagged");
        // Updates that change the value's length move entries of both kinds
        // (long ones need a free line), and deletes free version-1 blocks.
        for (n, (k, v)) in m.iter_mut().enumerate() {
            if n % 3 == 0 {
                *v = vec![n as u8; [0, 5, 8, 40][n % 4]];
                assert!(idx.update(k, v).unwrap());
            }
        }
        let gone: Vec<_> = m.keys().step_by(4).cloned().collect();
        for k in &gone {
            assert!(idx.remove(k).unwrap());
            m.remove(k);
        }
        check_all(&idx, &m);
        assert!(idx.structure_stats().0 > 50, "the leaves split");
    }
    let pool = Pool::open(&tp.0, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, NAME).unwrap();
    check_all(&idx, &m);
    idx.exhaust_and_account().unwrap();
}

/// A key of up to 24 bytes takes no block (the head leaf is all the index
/// allocates for seven of them, one per line); a 25-byte key takes one.
#[test]
fn keys_of_up_to_24_bytes_take_no_block() {
    let idx = FerriteIndex::volatile(16 << 20).unwrap();
    for len in 18..=24 {
        idx.insert(&vec![b'k'; len], b"v").unwrap();
    }
    let blocks = idx.check_structure().unwrap();
    assert_eq!(blocks.len(), 1, "{blocks:x?}");
    idx.insert(&[b'k'; 25], b"v").unwrap();
    let blocks = idx.check_structure().unwrap();
    assert_eq!(blocks.len(), 2, "{blocks:x?}");
}

/// A long entry is read only when its three slots agree: a third slot that is
/// not a valid continuation, or a length outside 17..=24, is refused by the
/// decoder (and so reported as corruption by recovery).
#[test]
fn a_malformed_long_entry_is_refused() {
    let idx = FerriteIndex::volatile(16 << 20).unwrap();
    let k = key(42, 4);
    idx.insert(&k, b"value").unwrap();
    let lf = idx.leaf(idx.head);
    let h = lf.hdrs();
    let slot = (0..SLOTS).find(|&s| is_primary(&h, s)).unwrap();
    let r = read_raw(lf, &h, slot).unwrap();
    assert_eq!((r.span(), r.klen, r.k3), (3, 20, third_of(&k)));
    let l = slot / PER_LINE;
    let mut bad = h;
    bad[l] = hdr_clear(h[l], 2);
    assert!(read_raw(lf, &bad, slot).is_none(), "third slot invalid");
    bad[l] = hdr_set(h[l], 2, desc(8, 8), r.fp);
    assert!(
        read_raw(lf, &bad, slot).is_none(),
        "third slot not a continuation"
    );
    for len in [16u64, 25] {
        lf.set_key_word(slot + 1, len);
        assert!(read_raw(lf, &h, slot).is_none(), "length {len}");
    }
    lf.set_key_word(slot + 1, 20);
    assert!(read_raw(lf, &h, slot).is_some());
}
