//! Readers against structure modifications: lookups, scans and cursors look for
//! keys that are present for the whole run while writers churn the keys around
//! them, so leaves holding those keys split constantly (moving them to new
//! right siblings, and splitting inner nodes) and leaves thinned out by churn
//! deletes merge with a neighbour (moving keys into it) or, in the waves that
//! run with merging off, empty and are unlinked. Every read of a present key must find it: a reader whose route
//! went stale while it read a leaf (the split race that the level-0 validation
//! in `inner::Route::still_valid` closes) would miss it, or, for a scan, start
//! in the wrong leaf and emit keys below its start.
//!
//! Removing that validation from the lookup, scan or cursor path makes the
//! respective check below fail (within the first run, usually the first
//! second).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use ferrite_index::{FerriteIndex, OrderedKv};
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{Pool, PoolOptions};

/// One key in `GAP` (the middle one, [`present`]) is present throughout; the
/// others are churn. A gap is wider than a leaf, so when its churn keys are
/// deleted the leaves holding only churn keys are unlinked (their ranges fold
/// into the leaf holding the present key), and the next wave splits that leaf
/// again, moving the present key whenever it lands in the upper half.
const GAP: u64 = 64;
const PRESENT: u64 = 500;
const WRITERS: u64 = 2;
const READERS: u64 = 2;
const WAVES: u64 = 50;

fn present(i: u64) -> u64 {
    i * GAP + GAP / 2
}

fn is_present(k: u64) -> bool {
    k % GAP == GAP / 2
}

/// How key numbers become keys.
#[derive(Clone, Copy)]
enum Keys {
    /// 8 bytes big-endian: small numbers, all in the level-0 directory's
    /// first bucket, so every route starts at the root.
    Short,
    /// 40 bytes that share their first 8, so inner nodes keep whole
    /// separators out of line (their append-only buffers are appended to,
    /// compacted and split while readers compare against them).
    Long,
    /// 8 bytes, the number times [`SPREAD`]: spread over the whole prefix
    /// space, so routes go through the level-0 directory, whose slots the
    /// splits keep making stale.
    Spread,
    /// [`Keys::Spread`]'s numbers as 16 hex digits and a tail, 24 bytes:
    /// text keys, which the bucket table maps over their alphabet.
    Text,
    /// [`Keys::Text`] after "user" (YCSB's keys): the bucket table skips the
    /// common prefix and maps the bytes after it.
    Prefixed,
}

const SPREAD: u64 = u64::MAX / (PRESENT * GAP + GAP);

/// Key `k` (see [`Keys`]).
fn key(k: u64, keys: Keys) -> Vec<u8> {
    match keys {
        Keys::Short => k.to_be_bytes().to_vec(),
        Keys::Long => [&b"longkey:"[..], &k.to_be_bytes(), &[b'.'; 24]].concat(),
        Keys::Spread => (k * SPREAD).to_be_bytes().to_vec(),
        Keys::Text => format!("{:016x}-text-key", k * SPREAD).into_bytes(),
        Keys::Prefixed => format!("user{:016x}-text-key", k * SPREAD).into_bytes(),
    }
}

fn val(k: u64) -> Vec<u8> {
    // Long enough to go out of line for some keys (exercises block reads).
    if k.is_multiple_of(3) {
        k.to_le_bytes().repeat(2)
    } else {
        k.to_le_bytes().to_vec()
    }
}

fn kn(k: &[u8], keys: Keys) -> u64 {
    if let Keys::Text | Keys::Prefixed = keys {
        let k = k.strip_prefix(b"user").unwrap_or(k);
        let hex = std::str::from_utf8(&k[..16]).expect("hex digits");
        return u64::from_str_radix(hex, 16).expect("hex digits") / SPREAD;
    }
    let b = if k.len() == 8 { k } else { &k[8..16] };
    let x = u64::from_be_bytes(b.try_into().expect("8-byte key number"));
    match keys {
        Keys::Spread => x / SPREAD,
        _ => x,
    }
}

/// Checks one reader operation; returns a description of a violation.
/// Half of the reads go to the gap a writer just inserted into, where the
/// splits are happening (`hot`: the writers' latest keys).
fn read_once(
    idx: &FerriteIndex,
    rng: &mut SplitMix,
    hot: &[AtomicU64],
    keys: Keys,
) -> Result<(), String> {
    let key = |k| key(k, keys);
    let p = if rng.below(2) == 0 {
        present(rng.below(PRESENT))
    } else {
        present(hot[rng.below(WRITERS) as usize].load(Ordering::Relaxed) / GAP)
    };
    match rng.below(4) {
        0 | 1 => match idx.get(&key(p)).map_err(|e| e.to_string())? {
            Some(v) if v == val(p) => Ok(()),
            Some(_) => Err(format!("get({p}): wrong value")),
            None => Err(format!("get({p}): present key missed")),
        },
        2 => {
            // A scan from a present key starts with it, is sorted and includes
            // every present key up to where it stopped.
            let mut got = Vec::new();
            idx.scan(&key(p), 24, &mut |k, v| {
                got.push(kn(k, keys));
                assert_eq!(v, val(kn(k, keys)), "scan: value of another key");
            })
            .map_err(|e| e.to_string())?;
            if got.first() != Some(&p) {
                return Err(format!("scan({p}) started at {:?}", got.first()));
            }
            if got.windows(2).any(|w| w[0] >= w[1]) {
                return Err(format!("scan({p}) out of order: {got:?}"));
            }
            let last = *got.last().expect("non-empty");
            let seen = got.iter().filter(|&&k| is_present(k)).count() as u64;
            if seen != (last - p) / GAP + 1 {
                return Err(format!("scan({p}) skipped a present key: {got:?}"));
            }
            Ok(())
        }
        _ => {
            // Cursor: seek lands on the next present key (in another leaf, most
            // of the time: a gap is wider than a leaf), and the step back from
            // it lands in this gap, at or after the present key, through the
            // "largest key below" search and the leaves' low keys.
            let p2 = p + GAP;
            if p2 > present(PRESENT - 1) {
                return Ok(());
            }
            let mut c = idx.cursor().map_err(|e| e.to_string())?;
            match c.seek(&key(p2)).map_err(|e| e.to_string())? {
                Some((k, _)) if kn(&k, keys) == p2 => {}
                other => {
                    return Err(format!(
                        "seek({p2}) returned {:?}",
                        other.map(|(k, _)| kn(&k, keys))
                    ))
                }
            }
            match c.prev().map_err(|e| e.to_string())? {
                Some((k, _)) if (p..p2).contains(&kn(&k, keys)) => Ok(()),
                other => Err(format!(
                    "prev below {p2}: {:?}, want a key in {p}..{p2}",
                    other.map(|(k, _)| kn(&k, keys))
                )),
            }
        }
    }
}

fn race(idx: &FerriteIndex, keys: Keys) {
    let key = |k| key(k, keys);
    for i in 0..PRESENT {
        assert!(idx.insert(&key(present(i)), &val(present(i))).unwrap());
    }
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let hot: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
    let barrier = Barrier::new((WRITERS + READERS) as usize);
    let deadline = Instant::now() + Duration::from_secs(20);
    let (splits0, unlinks0, merges0) = idx.structure_stats();
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|t| {
                let (stop, reads, barrier, hot) = (&stop, &reads, &barrier, &hot);
                s.spawn(move || {
                    barrier.wait();
                    let mut rng = SplitMix(1000 + t);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if let Err(e) = read_once(idx, &mut rng, hot, keys) {
                            stop.store(true, Ordering::Relaxed);
                            panic!("after {n} reads: {e}");
                        }
                        n += 1;
                    }
                    reads.fetch_add(n, Ordering::Relaxed);
                })
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let (stop, barrier, hot, key) = (&stop, &barrier, &hot, &key);
                s.spawn(move || {
                    barrier.wait();
                    // Writer t owns the churn keys j*GAP + o with o % WRITERS == t.
                    let mut mine: Vec<u64> = (0..PRESENT * GAP)
                        .filter(|&k| !is_present(k) && (k % GAP) % WRITERS == t)
                        .collect();
                    let mut rng = SplitMix(t + 7);
                    for wave in 0..WAVES {
                        if t == 0 {
                            // Alternate merges and plain empty-leaf unlinks.
                            idx.set_leaf_merging(wave % 2 == 0);
                        }
                        // Random order: splits land everywhere, and a leaf's
                        // present keys end up in its upper half as often as not.
                        for i in (1..mine.len()).rev() {
                            mine.swap(i, rng.below(i as u64 + 1) as usize);
                        }
                        // At the deadline (a slow or loaded machine) the wave
                        // stops inserting but still removes what it inserted,
                        // so only the present keys remain at the end.
                        let mut inserted = 0;
                        for &k in &mine {
                            if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                                break;
                            }
                            hot[t as usize].store(k, Ordering::Relaxed);
                            assert!(idx.insert(&key(k), &val(k)).unwrap());
                            inserted += 1;
                        }
                        for &k in &mine[..inserted] {
                            assert!(idx.remove(&key(k)).unwrap());
                        }
                        if inserted < mine.len() {
                            return;
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().unwrap();
        }
    });
    let (splits, unlinks, merges) = idx.structure_stats();
    let reads = reads.load(Ordering::Relaxed);
    eprintln!(
        "split race: {reads} reads against {} splits, {} unlinks and {} merges",
        splits - splits0,
        unlinks - unlinks0,
        merges - merges0
    );
    assert!(splits - splits0 > 1000 && reads > 1000);
    assert!(unlinks - unlinks0 > 100 && merges - merges0 > 100);
    for i in 0..PRESENT {
        assert_eq!(idx.get(&key(present(i))).unwrap(), Some(val(present(i))));
    }
    idx.check_structure().unwrap();
}

/// The race on a pool-backed index, then every block accounted for.
fn race_on_pool(pool_bytes: u64, keys: Keys) {
    let pool = Pool::create_volatile(pool_bytes, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "race").unwrap();
    race(&idx, keys);
    assert_eq!(idx.count() as u64, PRESENT);
    idx.exhaust_and_account().unwrap();
}

#[test]
fn readers_never_miss_keys_during_splits_and_unlinks() {
    race_on_pool(256 << 20, Keys::Short);
}

#[test]
fn readers_never_miss_long_keys_during_splits_and_unlinks() {
    race_on_pool(512 << 20, Keys::Long);
}

#[test]
fn readers_never_miss_keys_volatile_mode() {
    let idx = FerriteIndex::volatile(256 << 20).unwrap();
    race(&idx, Keys::Short);
}

/// The same race with keys spread over the whole prefix space: reads route
/// through the level-0 directory while splits keep making its slots stale.
#[test]
fn readers_never_miss_keys_routed_through_the_directory() {
    race_on_pool(256 << 20, Keys::Spread);
}

/// The race with the bucket table on from 16 leaves; `table` is the DRAM
/// the table takes, which the index must report (the table was built). It
/// is exact too: `race` ends with the structure check, which compares every
/// entry with the tree.
fn race_through_the_table(keys: Keys, table: u64) {
    let pool = Pool::create_volatile(256 << 20, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "race").unwrap();
    idx.set_bucket_table_min_leaves(16);
    race(&idx, keys);
    assert!(idx.memory_usage().dram_bytes > table);
    idx.exhaust_and_account().unwrap();
}

/// The same race with the bucket table on from the start (it routes reads
/// and writes straight to their leaves; every split and removal rewrites the
/// entries it changes before the leaf is unlocked): without those rewrites,
/// or with one too few, reads miss present keys.
#[test]
fn readers_never_miss_keys_routed_through_the_bucket_table() {
    // 2^16 entries of 192 bytes.
    race_through_the_table(Keys::Spread, 12 << 20);
}

/// The same race with text keys: the table maps them over their alphabet
/// (2^18 entries of 192 bytes) and every split's rewrite goes through that
/// map; a wrong map, range or rewrite makes reads miss present keys.
#[test]
fn readers_never_miss_text_keys_routed_through_the_mapped_bucket_table() {
    race_through_the_table(Keys::Text, 48 << 20);
}

/// The same race with keys that share a prefix: the table skips it, and
/// every split's rewrite finds its buckets by the bytes after it (and by the
/// next separator's, up to the ancestors' fences); a wrong span makes reads
/// miss present keys.
#[test]
fn readers_never_miss_prefixed_keys_routed_through_the_bucket_table() {
    race_through_the_table(Keys::Prefixed, 48 << 20);
}
