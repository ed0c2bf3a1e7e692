//! SSD faults: failed writes, torn writes and failed `fdatasync`, injected at
//! the system-call layer (`FaultyBackend`) and produced by a real failing
//! device (`ferrite_testkit::FailingDisk`: ext4 on a loop device whose
//! backing store runs out). In every case the operation fails with a clear
//! I/O error, later writes are refused until reopen, no committed data is
//! lost, and the store reopens (restart redoes from the log in PM) with every
//! committed record.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use ferrite_btree::{BufferConfig, Database, Design};
use ferrite_buffer::{
    BufferError, DirectFiles, Fault, FaultControl, FaultyBackend, MemBackend, SsdBackend,
};
use ferrite_kv::{KvError, OrderedKv};
use ferrite_pm::{Pool, PoolOptions};
use ferrite_testkit::FailingDisk;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2654435761) % 100_000_000).into_bytes()
}

fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = format!("value-{i}-").into_bytes();
    v.resize(len, b'x');
    v
}

fn buffer_error(e: &KvError) -> Option<&BufferError> {
    e.storage_error()
        .and_then(|s| s.downcast_ref::<BufferError>())
}

/// Inserts from `from` until an operation fails; returns the error and the
/// next id. Every acknowledged insert goes into `m`.
fn insert_until_error(
    t: &ferrite_btree::BTree,
    m: &mut Model,
    from: u64,
    len: usize,
    max: u64,
) -> (KvError, u64) {
    for i in from..from + max {
        let (k, v) = (key(i), value(i, len));
        match t.upsert(&k, &v) {
            Ok(_) => {
                m.insert(k, v);
            }
            Err(e) => return (e, i + 1),
        }
    }
    panic!("{max} inserts and no failure");
}

fn verify(db: &Database, m: &Model) {
    let t = db.tree("t").unwrap();
    let mut got = Model::new();
    t.scan(&[], usize::MAX, &mut |k, v| {
        got.insert(k.to_vec(), v.to_vec());
    })
    .unwrap();
    let missing = m.keys().filter(|k| !got.contains_key(*k)).count();
    assert_eq!(missing, 0, "{missing} committed keys lost");
    assert_eq!(&got, m, "contents differ from the committed ones");
    db.check().unwrap();
}

fn small_cfg(design: Design) -> BufferConfig {
    let ps = 4096u64;
    let mut c = design.config_paged(4096, 16 * ps, 8 * (ps + 64), 1 << 30);
    c.wal_segment_bytes = 4 << 20;
    c.admission_set_size = 16;
    c
}

/// A store whose SSD files live in `mem`, behind fault injection.
struct Injected {
    pool: Pool,
    mem: Arc<MemBackend>,
    cfg: BufferConfig,
}

impl Injected {
    fn new(design: Design) -> Injected {
        let cfg = small_cfg(design);
        Injected {
            pool: Pool::create_volatile(cfg.pool_bytes() + (16 << 20), &PoolOptions::default())
                .unwrap(),
            mem: Arc::new(MemBackend::new()),
            cfg,
        }
    }

    fn open(&self, ctl: &Arc<FaultControl>) -> Database {
        let b: Arc<dyn SsdBackend> = Arc::new(FaultyBackend::new(self.mem.clone(), ctl.clone()));
        Database::open(&self.pool, "f", Some(b), self.cfg.clone()).unwrap()
    }

    /// A process crash, then a reopen on a healthy device.
    fn crash_and_reopen(&mut self, db: Database) -> Database {
        let img = self.pool.snapshot();
        drop(db);
        self.pool = Pool::open_image(img, &PoolOptions::default()).unwrap();
        self.open(&FaultControl::new())
    }
}

fn injected(design: Design, fault: Fault, after: u64) {
    let mut env = Injected::new(design);
    let ctl = FaultControl::new();
    let db = env.open(&ctl);
    let t = db.tree("t").unwrap();
    let mut m = Model::new();
    for i in 0..400 {
        t.upsert(&key(i), &value(i, 300)).unwrap();
        m.insert(key(i), value(i, 300));
    }
    ctl.arm(fault, after);
    let (e, next) = if fault == Fault::FailSync {
        // Checkpoints and PM evictions sync: keep writing, checkpointing.
        let mut next = 400;
        loop {
            if let Err(e) = db.checkpoint() {
                break (e, next);
            }
            let (e, n) = match (0..50).try_for_each(|j| {
                let i = next + j;
                t.upsert(&key(i), &value(i, 300)).map(|_| {
                    m.insert(key(i), value(i, 300));
                })
            }) {
                Ok(()) => (None, next + 50),
                Err(e) => (Some(e), next + 50),
            };
            next = n;
            if let Some(e) = e {
                break (e, next);
            }
        }
    } else {
        insert_until_error(&t, &mut m, 400, 300, 200_000)
    };
    let msg = e.to_string();
    eprintln!("{} with {fault:?}: {msg}", design.name());
    assert!(
        matches!(buffer_error(&e), Some(BufferError::Io { .. })),
        "the failure is an I/O error: {msg}"
    );
    assert!(
        msg.contains("injected"),
        "the system call's error reaches the caller: {msg}"
    );
    // The failure is sticky: later writes that need the SSD are refused with
    // a message that says what to do.
    let (e2, _) = insert_until_error(&t, &mut m, next, 300, 200_000);
    let msg2 = e2.to_string();
    assert!(
        matches!(buffer_error(&e2), Some(BufferError::SsdFailed(_))),
        "later writes refused: {msg2}"
    );
    assert!(msg2.contains("reopen"), "{msg2}");
    drop(t);
    let db = env.crash_and_reopen(db);
    let r = db.restart_report().clone();
    assert!(r.records_redone > 0, "{r:?}");
    verify(&db, &m);
    // The reopened store works (and checkpoints) again.
    let t = db.tree("t").unwrap();
    t.upsert(b"after", b"reopen").unwrap();
    db.checkpoint().unwrap();
}

#[test]
fn a_failed_ssd_write_loses_nothing_committed() {
    injected(Design::SsdBm, Fault::FailWrite, 20);
    injected(Design::ThreeTier, Fault::FailWrite, 20);
}

#[test]
fn a_torn_ssd_write_is_repaired_by_redo() {
    injected(Design::SsdBm, Fault::TornWrite { bytes: 1536 }, 20);
    injected(Design::ThreeTier, Fault::TornWrite { bytes: 512 }, 10);
}

#[test]
fn a_failed_fdatasync_loses_nothing_committed() {
    injected(Design::SsdBm, Fault::FailSync, 0);
    injected(Design::ThreeTier, Fault::FailSync, 1);
}

// ----- a real failing device --------------------------------------------------------

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            // A failed device may refuse to read blocks it never wrote: copy
            // what reads back, the rest is zeros (redo rewrites those pages).
            let data = std::fs::read(e.path()).unwrap_or_default();
            std::fs::write(to.join(e.file_name()), data).unwrap();
        }
    }
}

fn on_failing_disk(buffered: bool) {
    // 64 MiB of filesystem on 8 MiB of real backing store.
    let Some(disk) = FailingDisk::new(64 << 20, 8 << 20) else {
        return;
    };
    let pool_path = std::path::PathBuf::from(format!(
        "/dev/shm/ferrite-faults-{}-{buffered}.pool",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&pool_path);
    let ssd_dir = disk.path().join("ssd");
    let mut cfg = small_cfg(Design::SsdBm);
    cfg.ssd_pages = (48 << 20) / 4096;
    let pool = Pool::create(&pool_path, cfg.pool_bytes(), &PoolOptions::default()).unwrap();
    let files = if buffered {
        DirectFiles::buffered(&ssd_dir).unwrap()
    } else {
        DirectFiles::open(&ssd_dir, 4096).unwrap()
    };
    assert_eq!(files.is_direct(), !buffered, "{}", files.describe());
    let db = Database::open(&pool, "f", Some(Arc::new(files)), cfg.clone()).unwrap();
    let t = db.tree("t").unwrap();
    let mut m = Model::new();
    // Write more than the device holds: evicted pages go to SSD; with
    // buffered files the page cache takes them and the checkpoint's
    // fdatasync meets the failure.
    let mut next = 0;
    let e = loop {
        let (e, n) = match (0..2000).try_for_each(|j| {
            let i = next + j;
            t.upsert(&key(i), &value(i, 700)).map(|_| {
                m.insert(key(i), value(i, 700));
            })
        }) {
            Ok(()) => (None, next + 2000),
            Err(e) => (Some(e), next + 2000),
        };
        next = n;
        if let Some(e) = e {
            break e;
        }
        if let Err(e) = db.checkpoint() {
            break e;
        }
        assert!(next < 400_000, "writing {} records never failed", next);
    };
    let msg = e.to_string();
    eprintln!(
        "failing disk ({}): {msg}",
        if buffered { "buffered" } else { "O_DIRECT" }
    );
    assert!(
        matches!(buffer_error(&e), Some(BufferError::Io { .. })),
        "{msg}"
    );
    assert!(
        msg.contains("No space left") || msg.contains("Input/output error"),
        "the kernel's error reaches the caller: {msg}"
    );
    if buffered {
        assert!(msg.contains("fdatasync"), "{msg}");
    }
    drop(t);
    drop(db);
    drop(pool);
    // The files are recoverable: with the SSD files moved to a healthy disk,
    // the store reopens with every committed record.
    let healthy =
        std::env::temp_dir().join(format!("ferrite-faults-{}-{buffered}", std::process::id()));
    let _ = std::fs::remove_dir_all(&healthy);
    copy_dir(&ssd_dir, &healthy);
    let pool = Pool::open(&pool_path, &PoolOptions::default()).unwrap();
    let files = DirectFiles::open(&healthy, 4096).unwrap();
    let db = Database::open(&pool, "f", Some(Arc::new(files)), cfg).unwrap();
    verify(&db, &m);
    drop(db);
    drop(pool);
    let _ = std::fs::remove_dir_all(&healthy);
    let _ = std::fs::remove_file(&pool_path);
}

#[test]
fn a_failed_o_direct_write_on_a_real_device_loses_nothing_committed() {
    on_failing_disk(false);
}

#[test]
fn a_failed_fdatasync_on_a_real_device_loses_nothing_committed() {
    on_failing_disk(true);
}
