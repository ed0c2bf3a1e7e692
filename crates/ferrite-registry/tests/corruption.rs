//! Corrupted pools, for every structure type: bytes flipped, words replaced by
//! plausible offsets, lines zeroed — anywhere in the file (header, directory,
//! chunk table, the structure's chunks, free space), not only the first pages.
//! Each image is opened, recovered, read in full and written to, and must end
//! in a clear error (corruption detected) or a working structure (the damage
//! was harmless: it verifies, reads and accepts a write) — never a panic, a
//! crash or a hang. Harmless includes damage to data that carries no checksum
//! (index values, page-store pages): it reads back damaged, which
//! docs/DURABILITY.md states. Damage to each structure's vital metadata is
//! also applied directly and must be detected. A second object (a slot table, the "sentinel") shares each
//! pool: when only the structure's own chunks were damaged, recovery and the
//! writes that follow must never change a byte of the sentinel's chunks.

use std::sync::mpsc;
use std::time::Duration;

use ferrite_kv::{OrderedKv, WriteBatch};
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{AlignedBuf, Pool, PoolOptions};
use ferrite_testkit::SlotTable;

const POOL: u64 = 2 << 20;
const ROUNDS: usize = 400;

fn opts() -> PoolOptions {
    PoolOptions {
        chunk_size: 16 * 1024,
        ..PoolOptions::default()
    }
}

/// What one structure needs: how to fill a pool, and what to do with a
/// recovered one (open, read everything, write once).
struct Subject {
    name: &'static str,
    object: &'static str,
    fill: fn(&Pool),
    exercise: fn(&Pool) -> Result<(), String>,
    /// A word of the structure's own metadata (found from its root word 0)
    /// whose damage must be detected.
    vital: fn(&Pool) -> u64,
}

/// Root word 0 of the subject: its region, descriptor or head leaf.
fn root0(p: &Pool) -> u64 {
    let id = p
        .objects()
        .into_iter()
        .find(|o| o.name == "subject")
        .unwrap()
        .id;
    p.root(id, 0)
}

/// The head leaf's magic (the last word of the 512-byte leaf).
fn leaf_magic(p: &Pool) -> u64 {
    root0(p) + 512 - 8
}

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

fn fill_index(p: &Pool) {
    let idx = ferrite_index::FerriteIndex::open_or_create(p, "subject").unwrap();
    for i in 0..700u64 {
        let k = if i % 4 == 0 {
            format!("key-long-enough-to-go-out-of-line-{i:06}").into_bytes()
        } else {
            (i * 7919).to_be_bytes().to_vec()
        };
        let v = if i % 5 == 0 {
            vec![i as u8; 40]
        } else {
            i.to_le_bytes().to_vec()
        };
        idx.insert(&k, &v).unwrap();
    }
    let mut b = WriteBatch::new();
    b.put(b"batch-a", b"1").put(b"batch-b", b"2");
    idx.write_batch(&b).unwrap();
}

fn exercise_index(p: &Pool) -> Result<(), String> {
    let idx = ferrite_index::FerriteIndex::open_or_create(p, "subject").map_err(e)?;
    idx.check_structure()?;
    let mut n = 0;
    idx.scan(&[], usize::MAX, &mut |_, _| n += 1).map_err(e)?;
    let mut c = idx.cursor().map_err(e)?;
    let mut back = 0;
    let mut cur = c.last().map_err(e)?;
    while cur.is_some() && back <= n {
        back += 1;
        cur = c.prev().map_err(e)?;
    }
    idx.insert(b"after", b"corruption").map_err(e)?;
    idx.remove(&7919u64.to_be_bytes()).map_err(e)?;
    Ok(())
}

fn fill_log(p: &Pool) {
    use ferrite_pmio::log::{Log, LogConfig, LogKind, PmLog};
    let mut l = PmLog::open_or_create(
        p,
        "subject",
        LogConfig {
            kind: LogKind::PopLog,
            padded: true,
            segment_bytes: 64 << 10,
        },
    )
    .unwrap();
    for i in 0..300u64 {
        l.append(&vec![i as u8; 1 + (i as usize * 13) % 200])
            .unwrap();
    }
}

fn exercise_log(p: &Pool) -> Result<(), String> {
    use ferrite_pmio::log::{Log, PmLog};
    let mut l = PmLog::open(p, "subject").map_err(e)?;
    l.entries().map_err(e)?;
    match l.append(b"after corruption") {
        Ok(_) | Err(ferrite_pmio::PmioError::LogFull { .. }) => Ok(()),
        Err(x) => Err(e(x)),
    }
}

fn fill_pages(p: &Pool) {
    use ferrite_pmio::page::{DirtyMask, Method, PageStore, PageStoreConfig};
    let mut s = PageStore::open_or_create(
        p,
        "subject",
        PageStoreConfig {
            page_size: 4096,
            slots: 40,
        },
    )
    .unwrap();
    for pid in 0..30u64 {
        let page = vec![pid as u8; 4096];
        s.write(pid, &page, &DirtyMask::all(64), Method::Cow)
            .unwrap();
        let mut m = DirtyMask::default();
        m.set(3);
        s.write(pid, &vec![pid as u8 ^ 0xff; 4096], &m, Method::MicroLog)
            .unwrap();
    }
}

fn exercise_pages(p: &Pool) -> Result<(), String> {
    use ferrite_pmio::page::{DirtyMask, Method, PageStore};
    let mut s = PageStore::open(p, "subject").map_err(e)?;
    let mut buf = vec![0u8; s.page_size()];
    for pid in s.page_ids() {
        s.read(pid, &mut buf).map_err(e)?;
    }
    let ps = s.page_size();
    s.write(1, &vec![1; ps], &DirtyMask::all(ps / 64), Method::Cow)
        .map_err(e)?;
    Ok(())
}

fn fill_inplace(p: &Pool) {
    use ferrite_pmio::inplace::{InplaceArray, InplaceConfig, InplaceMethod};
    for (name, method) in [
        ("subject", InplaceMethod::Fam),
        ("subject-cow", InplaceMethod::Cow),
    ] {
        let mut a = InplaceArray::open_or_create(
            p,
            name,
            InplaceConfig {
                method,
                value_size: 16,
                count: 200,
                log_bytes: 4096,
            },
        )
        .unwrap();
        for i in 0..200 {
            a.update(i, &[i as u8; 16]).unwrap();
        }
    }
}

fn exercise_inplace(p: &Pool) -> Result<(), String> {
    use ferrite_pmio::inplace::InplaceArray;
    for name in ["subject", "subject-cow"] {
        let mut a = InplaceArray::open(p, name).map_err(e)?;
        let mut out = vec![0u8; a.value_size()];
        for i in 0..a.len() {
            a.read(i, &mut out).map_err(e)?;
        }
        let v = vec![7u8; a.value_size()];
        a.update(0, &v).map_err(e)?;
    }
    Ok(())
}

fn fill_elf(p: &Pool) {
    use ferrite_elf::build::build;
    use ferrite_elf::store::{CreateOptions, ElfStore};
    let cols: Vec<Vec<u32>> = (0..4)
        .map(|c| (0..400u32).map(|r| (r * (c + 3)) % 17).collect())
        .collect();
    let refs: Vec<&[u32]> = cols.iter().map(|c| c.as_slice()).collect();
    let built = build(&refs).unwrap();
    let s = ElfStore::create(
        p,
        "subject",
        &built,
        None,
        &CreateOptions::default(),
        ferrite_elf::Variant::Pm,
    )
    .unwrap();
    for r in 0..20u32 {
        s.insert(&[r % 17, r % 5, 1, 2]).unwrap();
    }
}

fn exercise_elf(p: &Pool) -> Result<(), String> {
    use ferrite_elf::store::ElfStore;
    let s = ElfStore::open(p, "subject", ferrite_elf::Variant::Pm, true).map_err(e)?;
    s.current().elf.verify().map_err(e)?;
    let q = ferrite_elf::Query::range(vec![(0, 16); 4]);
    s.count(&q, 1).map_err(e)?;
    s.insert(&[1, 1, 1, 1]).map_err(e)?;
    Ok(())
}

/// A buffer-manager store entirely in the pool: PM-direct (no SSD files),
/// small pages and logs.
fn buffer_config() -> ferrite_buffer::BufferConfig {
    let mut c = ferrite_buffer::Design::PmDirect.config_paged(1024, 0, 200 * (1024 + 64), 0);
    c.wal_segment_bytes = 40 << 10;
    c
}

fn fill_buffer(p: &Pool) {
    let db = ferrite_btree::Database::open(p, "subject", None, buffer_config()).unwrap();
    let t = db.tree("t").unwrap();
    for i in 0..400u64 {
        t.upsert(
            &(i * 7919).to_be_bytes(),
            &vec![i as u8; 1 + (i as usize * 13) % 90],
        )
        .unwrap();
        if i == 200 {
            db.checkpoint().unwrap();
        }
    }
    for i in 0..50u64 {
        t.remove(&(i * 3 * 7919).to_be_bytes()).unwrap();
    }
    // A transaction left running: restart undoes it.
    let tx = db.begin();
    tx.upsert(&t, b"uncommitted", b"x").unwrap();
    std::mem::forget(tx);
}

fn exercise_buffer(p: &Pool) -> Result<(), String> {
    let db = ferrite_btree::Database::open(p, "subject", None, buffer_config()).map_err(e)?;
    db.check()?;
    let t = db.tree("t").map_err(e)?;
    let mut n = 0;
    t.scan(&[], usize::MAX, &mut |_, _| n += 1).map_err(e)?;
    let mut c = t.cursor().map_err(e)?;
    let mut back = 0;
    let mut cur = c.last().map_err(e)?;
    while cur.is_some() && back <= n {
        back += 1;
        cur = c.prev().map_err(e)?;
    }
    t.upsert(b"after", b"corruption").map_err(e)?;
    t.remove(&7919u64.to_be_bytes()).map_err(e)?;
    db.checkpoint().map_err(e)?;
    Ok(())
}

/// The replicated service's maps: entries put and deleted over several group
/// commits, one group left uncommitted (recovery drops it).
/// Key `i` of the raft maps: every other one in the version keys' space
/// (first byte 1), which a list indexes in the background after an open.
fn raft_key(i: u64) -> Vec<u8> {
    let k = (i * 7919).to_be_bytes();
    if i % 2 == 1 {
        [&[1u8][..], &k].concat()
    } else {
        k.to_vec()
    }
}

fn fill_raft<M: ferrite_raft::PmMap>(mut m: M) {
    for i in 0..300u64 {
        m.put(&raft_key(i), &vec![i as u8; 1 + (i as usize * 13) % 90])
            .unwrap();
        if i % 40 == 39 {
            m.commit().unwrap();
        }
    }
    for i in 0..30u64 {
        m.delete(&raft_key(i * 3)).unwrap();
    }
    m.commit().unwrap();
    m.put(b"uncommitted", b"x").unwrap();
}

fn exercise_raft<M: ferrite_raft::PmMap>(mut m: M) -> Result<(), String> {
    let n = m.check()?;
    let all = m.range(&[], &[0xff; 16], usize::MAX).map_err(e)?;
    if all.len() as u64 != n {
        return Err(format!("check counted {n} entries, a scan {}", all.len()));
    }
    m.put(b"after", b"corruption").map_err(e)?;
    m.delete(&raft_key(1)).map_err(e)?;
    m.commit().map_err(e)?;
    m.check()?;
    Ok(())
}

fn fill_raft_list(p: &Pool) {
    let o = ferrite_raft::map::list::ListOptions {
        page_size: 1024,
        ..Default::default()
    };
    fill_raft(ferrite_raft::ListMap::open_or_create(p, "subject", &o).unwrap());
}

fn exercise_raft_list(p: &Pool) -> Result<(), String> {
    // Versions indexed in the background (as a large list's are).
    let o = ferrite_raft::map::list::ListOptions {
        background_index: 1,
        ..Default::default()
    };
    exercise_raft(ferrite_raft::ListMap::open_or_create(p, "subject", &o).map_err(e)?)
}

fn fill_raft_btree(p: &Pool) {
    fill_raft(ferrite_raft::BTreeMap::open_or_create(p, "subject", &Default::default()).unwrap());
}

fn exercise_raft_btree(p: &Pool) -> Result<(), String> {
    exercise_raft(
        ferrite_raft::BTreeMap::open_or_create(p, "subject", &Default::default()).map_err(e)?,
    )
}

const SUBJECTS: &[Subject] = &[
    Subject {
        name: "index",
        object: ferrite_index::INDEX_TYPE,
        fill: fill_index,
        exercise: exercise_index,
        vital: leaf_magic,
    },
    Subject {
        name: "log",
        object: ferrite_pmio::log::LOG_TYPE,
        fill: fill_log,
        exercise: exercise_log,
        vital: root0,
    },
    Subject {
        name: "page-store",
        object: ferrite_pmio::page::PAGE_STORE_TYPE,
        fill: fill_pages,
        exercise: exercise_pages,
        vital: root0,
    },
    Subject {
        name: "inplace",
        object: ferrite_pmio::inplace::INPLACE_TYPE,
        fill: fill_inplace,
        exercise: exercise_inplace,
        vital: root0,
    },
    Subject {
        name: "elf",
        object: ferrite_elf::layout::OBJECT_TYPE,
        fill: fill_elf,
        exercise: exercise_elf,
        vital: root0,
    },
    Subject {
        name: "buffer",
        object: ferrite_buffer::BUFFER_TYPE,
        fill: fill_buffer,
        exercise: exercise_buffer,
        vital: root0,
    },
    Subject {
        name: "raft-list",
        object: ferrite_raft::map::list::LIST_TYPE,
        fill: fill_raft_list,
        exercise: exercise_raft_list,
        vital: root0,
    },
    Subject {
        name: "raft-btree",
        object: ferrite_raft::map::btree::BTREE_TYPE,
        fill: fill_raft_btree,
        exercise: exercise_raft_btree,
        vital: root0,
    },
];

/// A pool holding the sentinel table and the subject, as an image.
fn build(s: &Subject) -> AlignedBuf {
    let pool = Pool::create_volatile(POOL, &opts()).unwrap();
    let t = SlotTable::open_or_create(&pool, "sentinel", 16).unwrap();
    for i in 0..16 {
        t.publish(i, 1, 300).unwrap();
    }
    drop(t);
    (s.fill)(&pool);
    pool.snapshot()
}

/// Byte ranges of the chunks owned by objects whose name starts with `prefix`.
fn chunks_of(img: &AlignedBuf, prefix: &str) -> Vec<(usize, usize)> {
    let pool = Pool::open_image(AlignedBuf::from_slice(img.as_slice()), &opts()).unwrap();
    let h = *pool.header();
    let ids: Vec<_> = pool
        .objects()
        .into_iter()
        .filter(|o| o.name.starts_with(prefix))
        .map(|o| o.id)
        .collect();
    let table = h.chunk_table_off as usize;
    let mut out = Vec::new();
    for c in 0..h.chunk_count as usize {
        let w = u64::from_le_bytes(
            img.as_slice()[table + 8 * c..table + 8 * c + 8]
                .try_into()
                .unwrap(),
        );
        // Owner is bits 16..32 of a chunk entry (docs/FORMAT.md).
        let owner = (w >> 16) as u16;
        if w != 0 && ids.iter().any(|id| id.index() + 1 == owner as usize) {
            let start = (h.heap_off + c as u64 * h.chunk_size) as usize;
            out.push((start, start + h.chunk_size as usize));
        }
    }
    out
}

/// One corruption of `img`: the kind and place drawn from `rng`. `only` limits
/// the place to those ranges.
fn corrupt(img: &mut [u8], rng: &mut SplitMix, only: Option<&[(usize, usize)]>) {
    let len = img.len();
    let at = match only {
        Some(r) => {
            // Mostly bytes in use (non-zero words), so the damage hits data
            // and pointers rather than unused space.
            let (a, b) = r[rng.below(r.len() as u64) as usize];
            let mut at = a + rng.below((b - a) as u64) as usize;
            for _ in 0..64 {
                if rng.below(16) == 0 || img[at & !7..(at & !7) + 8] != [0; 8] {
                    break;
                }
                at = a + rng.below((b - a) as u64) as usize;
            }
            at
        }
        None => match rng.below(4) {
            // The metadata: header, directory, chunk table.
            0 => rng.below(64 << 10) as usize,
            // Anywhere.
            _ => rng.below(len as u64) as usize,
        },
    };
    let word = at & !7;
    match rng.below(4) {
        0 => img[at] ^= 1 << rng.below(8),
        1 => {
            // A plausible pool offset: 64-byte aligned, inside the pool.
            let v = rng.below(len as u64) & !63;
            img[word..word + 8].copy_from_slice(&v.to_le_bytes());
        }
        2 => {
            let v = rng.next();
            img[word..word + 8].copy_from_slice(&v.to_le_bytes());
        }
        _ => {
            let line = at & !63;
            img[line..line + 64].fill(0);
        }
    }
}

enum Outcome {
    Detected,
    Harmless,
}

/// Opens, recovers and exercises one damaged image on a watchdog thread.
fn trial(s: &'static Subject, img: AlignedBuf) -> Result<Outcome, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(move || match Pool::open_image(img, &opts()) {
            Err(_) => Ok(Outcome::Detected),
            Ok(p) => match (s.exercise)(&p) {
                Err(_) => Ok(Outcome::Detected),
                Ok(()) => Ok(Outcome::Harmless),
            },
        });
        let _ = tx.send(r.unwrap_or_else(|p| {
            let m = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {m}"))
        }));
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| Err("hung (no result within 30 s)".into()))
}

fn sentinel_bytes(img: &[u8], ranges: &[(usize, usize)]) -> Vec<u8> {
    ranges
        .iter()
        .flat_map(|&(a, b)| img[a..b].to_vec())
        .collect()
}

fn fuzz(s: &'static Subject) {
    let clean = build(s);
    assert!(
        matches!(
            trial(s, AlignedBuf::from_slice(clean.as_slice())),
            Ok(Outcome::Harmless)
        ),
        "{}: the undamaged pool must work",
        s.name
    );
    // Damage to the structure's vital metadata is detected, not survived.
    let vital = {
        let p = Pool::open_image(AlignedBuf::from_slice(clean.as_slice()), &opts()).unwrap();
        (s.vital)(&p) as usize
    };
    let mut img = AlignedBuf::from_slice(clean.as_slice());
    img.as_mut_slice()[vital..vital + 8].copy_from_slice(&0x0bad_0bad_0bad_0badu64.to_le_bytes());
    assert!(
        matches!(trial(s, img), Ok(Outcome::Detected)),
        "{}: damage to its metadata at {vital:#x} went unnoticed",
        s.name
    );
    let own = chunks_of(&clean, "subject");
    let sentinel = chunks_of(&clean, "sentinel");
    assert!(!own.is_empty() && !sentinel.is_empty());
    let mut rng = SplitMix(0xC0FFEE ^ s.name.len() as u64);
    let (mut detected, mut harmless) = (0, 0);
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let mut img = AlignedBuf::from_slice(clean.as_slice());
        let own_only = round % 2 == 0;
        for _ in 0..1 + round % 3 {
            corrupt(img.as_mut_slice(), &mut rng, own_only.then_some(&own[..]));
        }
        // Run on a copy; keep the damaged image to compare the sentinel.
        let damaged = sentinel_bytes(img.as_slice(), &sentinel);
        let probe = AlignedBuf::from_slice(img.as_slice());
        match trial(s, probe) {
            Ok(Outcome::Detected) => detected += 1,
            Ok(Outcome::Harmless) => harmless += 1,
            Err(m) => failures.push(format!("round {round}: {m}")),
        }
        if own_only {
            // Recovery and the writes after it must stay inside the subject's
            // chunks: run again on a pool we can inspect afterwards.
            if let Ok(p) = Pool::open_image(img, &opts()) {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (s.exercise)(&p)));
                if r.is_ok() && sentinel_bytes(p.snapshot().as_slice(), &sentinel) != damaged {
                    failures.push(format!(
                        "round {round}: damage inside {} made it write into another object",
                        s.name
                    ));
                }
            }
        }
    }
    eprintln!(
        "{}: {ROUNDS} damaged pools: {detected} detected, {harmless} harmless, {} failures",
        s.name,
        failures.len()
    );
    assert!(failures.is_empty(), "{}: {:#?}", s.name, failures);
}

#[test]
fn index() {
    fuzz(&SUBJECTS[0]);
}

#[test]
fn log() {
    fuzz(&SUBJECTS[1]);
}

#[test]
fn page_store() {
    fuzz(&SUBJECTS[2]);
}

#[test]
fn inplace() {
    fuzz(&SUBJECTS[3]);
}

#[test]
fn elf() {
    fuzz(&SUBJECTS[4]);
}

#[test]
fn buffer() {
    fuzz(&SUBJECTS[5]);
}

#[test]
fn raft_list() {
    fuzz(&SUBJECTS[6]);
}

#[test]
fn raft_btree() {
    fuzz(&SUBJECTS[7]);
}

#[test]
fn every_registered_object_type_is_fuzzed() {
    for st in ferrite_registry::structures() {
        if let Some(t) = st.object_type {
            if t == ferrite_testkit::SLOT_TABLE_TYPE {
                continue; // the sentinel; tests/pool.rs in ferrite-pm fuzzes it
            }
            assert!(
                SUBJECTS.iter().any(|s| s.object == t),
                "{} objects are not fuzzed here",
                st.name
            );
        }
    }
}
