//! Recovery after a clean close and after `kill -9` of a child process that
//! writes to a pool in /dev/shm and acknowledges each operation on stdout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use ferrite_index::{FerriteIndex, OrderedKv, WriteBatch};
use ferrite_pm::{Pool, PoolOptions};

mod common;
use common::temp_pool;

fn val(i: u64) -> Vec<u8> {
    if i & 3 == 0 {
        format!("value-{i}-out-of-line").into_bytes()
    } else {
        (i * 3).to_le_bytes().to_vec()
    }
}

#[test]
fn clean_close_and_reopen() {
    let tp = temp_pool("reopen");
    let n = 50_000u64;
    {
        let pool = Pool::create(&tp.0, 64 << 20, &PoolOptions::default()).unwrap();
        let idx = FerriteIndex::open_or_create(&pool, "idx").unwrap();
        for i in 0..n {
            assert!(idx
                .insert(&(i * 7 % n).to_be_bytes(), &val(i * 7 % n))
                .unwrap());
        }
        for i in (0..n).step_by(3) {
            assert!(idx.remove(&i.to_be_bytes()).unwrap());
        }
        // Remove a whole range so that leaves empty and are unlinked.
        for i in 10_000..20_000u64 {
            idx.remove(&i.to_be_bytes()).unwrap();
        }
        let mut b = WriteBatch::new();
        b.put(b"batch-a", b"1")
            .put(b"batch-b", b"2")
            .delete(&1u64.to_be_bytes());
        idx.write_batch(&b).unwrap();
    }
    let pool = Pool::open(&tp.0, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "idx").unwrap();
    let st = idx.rebuild_stats();
    let mut expect = 0;
    for i in 0..n {
        let present = i % 3 != 0 && !(10_000..20_000).contains(&i) && i != 1;
        expect += present as usize;
        let got = idx.get(&i.to_be_bytes()).unwrap();
        assert_eq!(got, present.then(|| val(i)), "key {i}");
    }
    assert_eq!(idx.get(b"batch-a").unwrap().unwrap(), b"1");
    assert_eq!(idx.count(), expect + 2);
    assert_eq!(st.keys as usize, expect + 2);
    assert!(st.leaves > 1000, "{st:?}");
    idx.check_structure().unwrap();
    idx.exhaust_and_account().unwrap();
}

const CHILD_ENV: &str = "FERRITE_INDEX_KILL9_POOL";

/// Child role: writes until killed, acknowledging each operation.
fn child(path: &str) {
    let pool = Pool::open(path, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "idx").unwrap();
    let out = std::io::stdout();
    let mut out = out.lock();
    for i in 0u64.. {
        idx.upsert(&i.to_be_bytes(), &val(i)).unwrap();
        writeln!(out, "ack put {i}").unwrap();
        if i % 10 == 9 {
            idx.remove(&(i - 5).to_be_bytes()).unwrap();
            writeln!(out, "ack del {}", i - 5).unwrap();
        }
        if i % 100 == 50 {
            let mut b = WriteBatch::new();
            b.put(&(1_000_000 + i).to_be_bytes(), b"b1")
                .put(&(2_000_000 + i).to_be_bytes(), b"b2");
            idx.write_batch(&b).unwrap();
            writeln!(out, "ack batch {i}").unwrap();
        }
        out.flush().unwrap();
    }
}

#[test]
fn kill_9_recovery() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
        return;
    }
    let tp = temp_pool("kill9");
    {
        let pool = Pool::create(&tp.0, 64 << 20, &PoolOptions::default()).unwrap();
        FerriteIndex::open_or_create(&pool, "idx").unwrap();
    }
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "kill_9_recovery",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &tp.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut puts = std::collections::BTreeSet::new();
    let mut dels = std::collections::BTreeSet::new();
    let mut batches = Vec::new();
    let mut acks = 0;
    let stdout = c.stdout.take().unwrap();
    let mut killed = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        let mut w = line.split_whitespace();
        if w.next() != Some("ack") {
            continue;
        }
        let kind = w.next().unwrap().to_string();
        let i: u64 = w.next().unwrap().parse().unwrap();
        match kind.as_str() {
            "put" => {
                puts.insert(i);
            }
            "del" => {
                dels.insert(i);
            }
            _ => batches.push(i),
        }
        acks += 1;
        if acks >= 20_000 && !killed {
            // SIGKILL; the acknowledgements already in the pipe are still read.
            c.kill().unwrap();
            killed = true;
        }
    }
    c.wait().unwrap();
    assert!(killed, "the child stopped before it was killed");
    // The one operation after the last acknowledgement may or may not be done:
    // after `put i` with i % 10 == 9 it is the removal of i - 5.
    let last = *puts.iter().next_back().unwrap();
    let in_flight_del = (last % 10 == 9 && !dels.contains(&(last - 5))).then(|| last - 5);
    let pool = Pool::open(&tp.0, &PoolOptions::default()).unwrap();
    let idx = FerriteIndex::open_or_create(&pool, "idx").unwrap();
    for &i in &puts {
        let got = idx.get(&i.to_be_bytes()).unwrap();
        if dels.contains(&i) {
            assert_eq!(got, None, "acknowledged removal of {i} lost");
        } else if Some(i) != in_flight_del || got.is_some() {
            assert_eq!(got, Some(val(i)), "acknowledged put {i} lost");
        }
    }
    for &i in &batches {
        assert_eq!(
            idx.get(&(1_000_000 + i).to_be_bytes()).unwrap().unwrap(),
            b"b1"
        );
        assert_eq!(
            idx.get(&(2_000_000 + i).to_be_bytes()).unwrap().unwrap(),
            b"b2"
        );
    }
    idx.check_structure().unwrap();
    idx.exhaust_and_account().unwrap();
}

/// Opening an image with corrupted leaves or blocks gives an error or a usable
/// index, never a panic.
#[test]
fn corrupt_images_do_not_panic() {
    use ferrite_pm::rng::SplitMix;
    let opts = PoolOptions {
        chunk_size: 16 * 1024,
        ..PoolOptions::default()
    };
    let pool = Pool::create_volatile(1 << 20, &opts).unwrap();
    let live = {
        let idx = FerriteIndex::open_or_create(&pool, "idx").unwrap();
        for i in 0..600u64 {
            let k = if i % 3 == 0 {
                format!("a-long-key-for-the-wide-format-{i:06}").into_bytes()
            } else {
                (i * 977).to_be_bytes().to_vec()
            };
            idx.insert(&k, &val(i)).unwrap();
        }
        idx.check_structure().unwrap()
    };
    let image = pool.snapshot();
    let mut rng = SplitMix(7);
    let (mut errors, mut opened) = (0, 0);
    for round in 0..300 {
        let mut img = ferrite_pm::AlignedBuf::from_slice(image.as_slice());
        let bytes = img.as_mut_slice();
        // Flip bits inside live leaves and blocks.
        for _ in 0..1 + round % 4 {
            let (off, size) = live[rng.below(live.len() as u64) as usize];
            let at = off as usize + rng.below(size) as usize;
            bytes[at] ^= 1 << rng.below(8);
        }
        let Ok(p) = Pool::open_image(img, &PoolOptions::default()) else {
            continue;
        };
        match FerriteIndex::open_or_create(&p, "idx") {
            Err(_) => errors += 1,
            Ok(idx) => {
                opened += 1;
                let mut n = 0;
                idx.scan(&[], usize::MAX, &mut |_, _| n += 1).unwrap();
                let _ = idx.get(&977u64.to_be_bytes()).unwrap();
                let _ = idx.insert(b"after-corruption", b"x");
            }
        }
    }
    assert!(opened > 0);
    eprintln!("corrupt images: {errors} rejected, {opened} opened");
}

/// Issue 9, defect 8: a corrupt leaf pointer that names another object's leaf
/// (a block with a valid leaf magic) must be refused before recovery writes
/// anything through it: the other index's bytes stay exactly as they were.
#[test]
fn recovery_never_writes_into_another_object() {
    let opts = PoolOptions {
        chunk_size: 16 * 1024,
        ..PoolOptions::default()
    };
    let pool = Pool::create_volatile(1 << 20, &opts).unwrap();
    {
        let a = FerriteIndex::open_or_create(&pool, "a").unwrap();
        let b = FerriteIndex::open_or_create(&pool, "b").unwrap();
        for i in 0..40u64 {
            a.insert(&i.to_be_bytes(), &val(i)).unwrap();
            // Updates bump the version words of b's leaves, so a recovery that
            // "resets" them in the wrong object shows.
            b.upsert(&i.to_be_bytes(), &val(i)).unwrap();
            b.upsert(&i.to_be_bytes(), &val(i + 1)).unwrap();
        }
    }
    let root = |p: &Pool, name: &str| {
        let id = p.object(name, ferrite_index::INDEX_TYPE).unwrap();
        p.root(id, 0)
    };
    let (a_head, b_head) = (root(&pool, "a"), root(&pool, "b"));
    let mut img = pool.snapshot();
    let b_chunk = {
        let h = pool.header();
        let c = (b_head - h.heap_off) / h.chunk_size;
        let start = (h.heap_off + c * h.chunk_size) as usize;
        start..start + h.chunk_size as usize
    };
    // a's head leaf now claims b's head leaf as its successor.
    let next = a_head as usize + 7 * 8;
    img.as_mut_slice()[next..next + 8].copy_from_slice(&b_head.to_le_bytes());
    let before = img.as_slice()[b_chunk.clone()].to_vec();
    let p = Pool::open_image(img, &PoolOptions::default()).unwrap();
    let r = FerriteIndex::open_or_create(&p, "a");
    let err = r
        .err()
        .expect("a leaf chain into another object must not open");
    assert!(err.is_corrupt(), "{err}");
    assert_eq!(
        p.snapshot().as_slice()[b_chunk].to_vec(),
        before,
        "recovery of a wrote into b's leaves"
    );
}
