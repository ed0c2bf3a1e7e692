//! Pools: creation, reopening, the root directory, durability detection, and bad
//! input (corrupted, truncated, zeroed, wrong-version files) as errors, never panics.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use ferrite_pm::layout::{self, PoolHeader};
use ferrite_pm::{AlignedBuf, Durability, PmError, Pool, PoolOptions};
use ferrite_testkit::{FullFs, SlotTable, SLOT_TABLE_TYPE};
use proptest::prelude::*;

/// A pool path in /dev/shm, removed on drop.
struct TmpPath(PathBuf);

impl TmpPath {
    fn new(tag: &str) -> TmpPath {
        TmpPath::in_dir("/dev/shm", tag)
    }
    fn in_dir(dir: &str, tag: &str) -> TmpPath {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = PathBuf::from(dir).join(format!(
            "ferrite-test-{}-{tag}-{n}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        TmpPath(p)
    }
}

impl Drop for TmpPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn opts() -> PoolOptions {
    PoolOptions::default()
}

#[test]
fn create_write_reopen_verify() {
    let p = TmpPath::new("reopen");
    {
        let pool = Pool::create(&p.0, 8 << 20, &opts()).unwrap();
        let t = SlotTable::open_or_create(&pool, "t", 100).unwrap();
        for i in 0..100 {
            t.publish(i, i as u64 * 3, 50 + i * 13).unwrap();
        }
    }
    let pool = Pool::open(&p.0, &opts()).unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 100).unwrap();
    assert_eq!(t.open_stats.live_blocks, 101);
    for i in 0..100 {
        let v = t.read(i).unwrap().unwrap();
        assert_eq!((v.version, v.len), (i as u64 * 3, 50 + i * 13));
    }
}

#[test]
fn tmpfs_pools_say_they_do_not_survive_power_loss() {
    let p = TmpPath::new("dur");
    let pool = Pool::create(&p.0, 1 << 20, &opts()).unwrap();
    // MAP_SYNC is refused on tmpfs, so this is emulated PM.
    assert_eq!(pool.durability(), Durability::EmulatedShm);
    assert!(!pool.durability().power_fail_safe());
    assert!(pool
        .durability()
        .describe()
        .contains("does NOT survive power loss"));
}

#[test]
fn ordinary_files_are_emulated_and_msync_mode_is_power_fail_safe() {
    let dir = std::env::temp_dir();
    let p = TmpPath::in_dir(dir.to_str().unwrap(), "file");
    let pool = Pool::create(&p.0, 1 << 20, &opts()).unwrap();
    // On a DAX filesystem this would be Pm; elsewhere it must not claim to be.
    assert!(matches!(
        pool.durability(),
        Durability::EmulatedFile | Durability::EmulatedShm | Durability::Pm
    ));
    drop(pool);
    let ms = PoolOptions {
        msync: true,
        ..opts()
    };
    let pool = Pool::open(&p.0, &ms).unwrap();
    if pool.durability() != Durability::Pm {
        assert_eq!(pool.durability(), Durability::FileMsync);
        assert!(pool.durability().power_fail_safe());
    }
    let t = SlotTable::open_or_create(&pool, "m", 4).unwrap();
    t.publish(1, 9, 100).unwrap();
    drop(t);
    drop(pool);
    let pool = Pool::open(&p.0, &opts()).unwrap();
    let t = SlotTable::open_or_create(&pool, "m", 4).unwrap();
    assert_eq!(t.read(1).unwrap().unwrap().version, 9);
}

#[test]
fn creating_over_an_existing_file_fails_and_keeps_it() {
    let p = TmpPath::new("exists");
    std::fs::write(&p.0, b"precious").unwrap();
    let e = Pool::create(&p.0, 1 << 20, &opts()).unwrap_err();
    assert!(matches!(e, PmError::Io { .. }), "{e}");
    assert_eq!(std::fs::read(&p.0).unwrap(), b"precious");
}

/// A pool file stays sparse (an oversized pool costs nothing until used),
/// but each part of it gets its blocks before it is handed out: the
/// metadata at creation, a chunk when it is claimed. So a full filesystem is
/// an error of the creation or of an allocation, and a store into what was
/// handed out never meets one (into a sparse file's hole it would be a
/// `SIGBUS`, not an error).
#[test]
fn a_full_filesystem_is_an_error_of_the_allocation_never_of_a_store() {
    let Some(fs) = FullFs::new(8 << 20) else {
        return;
    };
    // Larger than the filesystem: created all the same.
    let pool = Pool::create(
        fs.path().join("a.pool"),
        64 << 20,
        &PoolOptions {
            chunk_size: layout::MIN_CHUNK,
            ..opts()
        },
    )
    .unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 100_000).unwrap();
    // Room left for 2 MiB of the pool; a file takes the rest.
    let free = || {
        let c = std::ffi::CString::new(fs.path().to_str().unwrap()).unwrap();
        // SAFETY: statvfs only fills the plain-data struct it is given (all
        // zeroes is a valid value of it); the path outlives the call.
        let st = unsafe {
            let mut st: libc::statvfs = std::mem::zeroed();
            assert_eq!(libc::statvfs(c.as_ptr(), &mut st), 0);
            st
        };
        st.f_bavail * st.f_frsize
    };
    let filler = fs.path().join("filler");
    std::fs::write(&filler, vec![1u8; (free() - (2 << 20)) as usize]).unwrap();
    let mut n = 0;
    let err = loop {
        match t.publish(n, n as u64, 3000) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    match &err {
        PmError::Io { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::StorageFull, "{err}")
        }
        _ => panic!("{err}"),
    }
    assert!(err.to_string().contains("has no room for"), "{err}");
    assert!(n > 300, "only {n} values fit in 2 MiB");
    // Everything handed out took its stores; a file cannot take the room.
    for i in 0..n {
        assert_eq!(t.read(i).unwrap().unwrap().version, i as u64);
    }
    assert!(std::fs::write(fs.path().join("more"), vec![1u8; 1 << 20]).is_err());
    // Room again: allocations go on.
    std::fs::remove_file(&filler).unwrap();
    t.publish(n, n as u64, 3000).unwrap();
    drop(t);
    drop(pool);

    // No room for even the metadata: the creation fails and removes its file.
    let _ = std::fs::remove_file(fs.path().join("more"));
    std::fs::write(&filler, vec![1u8; free() as usize]).unwrap_or(());
    let b = fs.path().join("b.pool");
    let e = Pool::create(&b, 64 << 20, &opts()).unwrap_err();
    assert!(e.to_string().contains("has no room for"), "{e}");
    assert!(!b.exists(), "a failed creation left its file");
}

/// Pages of `base..base + len` that are mapped in this process's page tables
/// (`/proc/self/pagemap`, bit 63), not merely resident in the file.
fn mapped_pages(base: *const u8, len: usize) -> usize {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open("/proc/self/pagemap").unwrap();
    let first = base as u64 / 4096;
    let mut buf = vec![0u8; len / 4096 * 8];
    f.read_exact_at(&mut buf, first * 8).unwrap();
    buf.chunks_exact(8)
        .filter(|e| u64::from_le_bytes((*e).try_into().unwrap()) >> 63 == 1)
        .count()
}

/// A warmer faults the lowest free chunks in ahead of a bulk writer, as far
/// as it is told, and changes nothing the pool holds: the chunks stay free,
/// values read back, allocations take the warmed chunks.
#[test]
fn a_warmer_maps_free_chunks_ahead_and_changes_nothing() {
    let path = TmpPath::new("warm");
    let pool = Pool::create(&path.0, 64 << 20, &opts()).unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 1000).unwrap();
    for i in 0..100 {
        t.publish(i, i as u64, 1000).unwrap();
    }
    let h = pool.header();
    let (cs, heap) = (h.chunk_size as usize, h.heap_off as usize);
    let heap_len = h.chunk_count as usize * cs;
    // SAFETY: heap_off lies inside the pool's mapping.
    let heap_base = unsafe { pool.base().add(heap) } as *const u8;
    let before = mapped_pages(heap_base, heap_len);
    let usage = pool.chunk_usage();

    let w = pool
        .warmer(4 * cs as u64)
        .expect("a file pool has a warmer");
    assert_eq!(w.settle(), 4 * cs as u64);
    let pages = cs / 4096;
    assert_eq!(mapped_pages(heap_base, heap_len), before + 4 * pages);
    // Nothing was claimed, nothing changed; a nudge without claims warms no
    // further (at most the lead is ever warm and unused).
    assert_eq!(pool.chunk_usage(), usage);
    w.nudge();
    assert_eq!(w.settle(), 4 * cs as u64);
    for i in 0..100 {
        assert_eq!(t.read(i).unwrap().unwrap().version, i as u64);
    }
    // Allocations go on into the warmed chunks; once two are claimed, a
    // nudge warms two more.
    let mut n = 100;
    while pool.chunk_usage().1 > usage.1 - 2 {
        t.publish(n, n as u64, 1000).unwrap();
        n += 1;
    }
    assert_eq!(pool.chunk_usage().1, usage.1 - 2);
    w.nudge();
    assert_eq!(w.settle(), 6 * cs as u64);
    assert!(mapped_pages(heap_base, heap_len) >= before + 6 * pages);
    drop(w);
    // A reopen finds it all.
    for i in n..1000 {
        t.publish(i, i as u64, 1000).unwrap();
    }
    drop(t);
    drop(pool);
    let pool = Pool::open(&path.0, &opts()).unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 1000).unwrap();
    for i in 0..1000 {
        assert_eq!(t.read(i).unwrap().unwrap().version, i as u64);
    }

    // Pools without a file mapping have nothing to warm.
    let v = Pool::create_volatile(8 << 20, &opts()).unwrap();
    assert!(v.warmer(1 << 20).is_none());
}

/// On a full filesystem the warmer cannot reserve a chunk: it stops
/// quietly (never a `SIGBUS`), and the allocation reports the full
/// filesystem as before.
#[test]
fn a_warmer_on_a_full_filesystem_stops_quietly() {
    let Some(fs) = FullFs::new(8 << 20) else {
        return;
    };
    let pool = Pool::create(fs.path().join("w.pool"), 64 << 20, &opts()).unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 10_000).unwrap();
    let filler = fs.path().join("filler");
    // Whatever room is left goes to the filler (written until it fails).
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        while f.write_all(&[1u8; 64 << 10]).is_ok() {}
    }
    let w = pool.warmer(16 << 20).unwrap();
    assert_eq!(w.settle(), 0);
    drop(w);
    let mut n = 0;
    let err = loop {
        match t.publish(n, n as u64, 3000) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(err.to_string().contains("has no room for"), "{err}");
    for i in 0..n {
        assert_eq!(t.read(i).unwrap().unwrap().version, i as u64);
    }
}

#[test]
fn invalid_geometry_is_rejected() {
    assert!(matches!(
        Pool::create_volatile(1000, &opts()),
        Err(PmError::Invalid(_))
    ));
    let bad_chunk = PoolOptions {
        chunk_size: 3000,
        ..opts()
    };
    assert!(matches!(
        Pool::create_volatile(1 << 20, &bad_chunk),
        Err(PmError::Invalid(_))
    ));
}

#[test]
fn objects_are_typed_named_and_deletable() {
    let pool = Pool::create_volatile(4 << 20, &opts()).unwrap();
    let a = pool.create_object("a", "ferrite.x").unwrap();
    assert!(matches!(
        pool.create_object("a", "ferrite.x"),
        Err(PmError::ObjectExists(_))
    ));
    assert!(matches!(
        pool.create_object("", "t"),
        Err(PmError::Invalid(_))
    ));
    assert!(matches!(
        pool.create_object(&"n".repeat(41), "t"),
        Err(PmError::Invalid(_))
    ));
    assert_eq!(pool.object("a", "ferrite.x").unwrap(), a);
    match pool.object("a", "ferrite.y") {
        Err(PmError::WrongType {
            found, expected, ..
        }) => {
            assert_eq!(
                (found.as_str(), expected.as_str()),
                ("ferrite.x", "ferrite.y")
            )
        }
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert!(matches!(
        pool.object("b", "ferrite.x"),
        Err(PmError::NoSuchObject(_))
    ));
    // Opening a slot table over an object of another type is refused.
    assert!(matches!(
        SlotTable::open_or_create(&pool, "a", 4),
        Err(PmError::WrongType { .. })
    ));
    pool.set_root(a, 3, 77).unwrap();
    assert_eq!(pool.root(a, 3), 77);
    // Deleting frees the object's chunks.
    let t = SlotTable::open_or_create(&pool, "t", 8).unwrap();
    for i in 0..8 {
        t.publish(i, 1, 3000).unwrap();
    }
    let (_, free_before) = pool.chunk_usage();
    assert!(matches!(pool.delete_object("t"), Err(PmError::HeapBusy(_))));
    drop(t);
    pool.delete_object("t").unwrap();
    let (_, free_after) = pool.chunk_usage();
    assert!(free_after > free_before);
    assert!(matches!(
        pool.object("t", SLOT_TABLE_TYPE),
        Err(PmError::NoSuchObject(_))
    ));
}

#[test]
fn the_directory_fills_up_with_a_clear_error() {
    let pool = Pool::create_volatile(1 << 20, &opts()).unwrap();
    for i in 0..layout::DIR_ENTRIES {
        pool.create_object(&format!("o{i}"), "t").unwrap();
    }
    assert!(matches!(
        pool.create_object("one-more", "t"),
        Err(PmError::DirectoryFull(_))
    ));
}

#[test]
fn a_full_pool_is_an_error_and_loses_nothing() {
    let pool = Pool::create_volatile(
        1 << 20,
        &PoolOptions {
            chunk_size: layout::MIN_CHUNK,
            ..opts()
        },
    )
    .unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 10_000).unwrap();
    let mut n = 0;
    let err = loop {
        match t.publish(n, n as u64, 200) {
            Ok(()) => n += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, PmError::PoolFull { .. }), "{err}");
    assert!(err.to_string().contains("pool is full"));
    assert!(n > 1000);
    for i in 0..n {
        assert_eq!(t.read(i).unwrap().unwrap().version, i as u64);
    }
    // Oversized requests are their own error.
    assert!(matches!(
        t.heap().alloc(1 << 30),
        Err(PmError::TooLarge { .. })
    ));
    assert!(matches!(t.heap().alloc(0), Err(PmError::Invalid(_))));
}

#[test]
fn a_heap_opens_once_at_a_time() {
    let pool = Pool::create_volatile(1 << 20, &opts()).unwrap();
    let t = SlotTable::open_or_create(&pool, "t", 4).unwrap();
    assert!(matches!(
        SlotTable::open_or_create(&pool, "t", 4),
        Err(PmError::HeapBusy(_))
    ));
    drop(t);
    SlotTable::open_or_create(&pool, "t", 4).unwrap();
}

#[test]
fn read_only_pools_refuse_writes() {
    let p = TmpPath::new("ro");
    drop(Pool::create(&p.0, 1 << 20, &opts()).unwrap());
    let pool = Pool::open(
        &p.0,
        &PoolOptions {
            read_only: true,
            ..opts()
        },
    )
    .unwrap();
    assert!(pool.is_read_only());
    assert!(matches!(
        pool.create_object("x", "t"),
        Err(PmError::ReadOnly)
    ));
}

#[test]
fn corrupt_pointers_are_reported_not_followed() {
    let pool = Pool::create_volatile(1 << 20, &opts()).unwrap();
    {
        let t = SlotTable::open_or_create(&pool, "t", 4).unwrap();
        t.publish(0, 1, 10).unwrap();
    }
    let id = pool.object("t", SLOT_TABLE_TYPE).unwrap();
    let root = pool.root(id, 0);
    // Point slot 0 into the middle of a block.
    // SAFETY: the slot array is the root block, in bounds.
    unsafe { *(pool.at(root, 8) as *mut u64) += 8 };
    let e = SlotTable::open_or_create(&pool, "t", 4)
        .err()
        .expect("must fail");
    assert!(e.is_bad_pool(), "{e}");
    assert!(SlotTable::verify(&pool, id).is_err());
}

fn valid_image(size: u64) -> Vec<u8> {
    let pool = Pool::create_volatile(size, &opts()).unwrap();
    {
        let t = SlotTable::open_or_create(&pool, "t", 16).unwrap();
        for i in 0..16 {
            t.publish(i, 1, 100).unwrap();
        }
    }
    pool.snapshot().as_slice().to_vec()
}

fn open_bytes(b: &[u8]) -> Result<Pool, PmError> {
    Pool::open_image(AlignedBuf::from_slice(b), &opts())
}

#[test]
fn each_kind_of_bad_header_has_its_own_message() {
    let img = valid_image(1 << 20);
    let msg = |b: &[u8]| open_bytes(b).expect_err("must fail").to_string();
    assert!(msg(&vec![0u8; 1 << 20]).contains("all zeros"));
    assert!(msg(&img[..100]).contains("truncated"));
    assert!(msg(&img[..1 << 19]).contains("truncated"));
    let mut b = img.clone();
    b[0] ^= 0xff;
    assert!(msg(&b).contains("bad magic"));
    let mut b = img.clone();
    b[40] ^= 1;
    assert!(msg(&b).contains("checksum"));
    // A newer format version with a valid checksum.
    let mut b = img.clone();
    // SAFETY: the image starts with a PoolHeader.
    let mut h: PoolHeader = unsafe { std::ptr::read_unaligned(b.as_ptr() as *const PoolHeader) };
    h.version = layout::FORMAT_VERSION + 1;
    h.checksum = h.compute_checksum();
    // SAFETY: as above.
    unsafe { std::ptr::write_unaligned(b.as_mut_ptr() as *mut PoolHeader, h) };
    let e = open_bytes(&b).err().unwrap();
    assert!(matches!(e, PmError::NewerVersion { .. }), "{e}");
    assert!(e.is_bad_pool());
    // A corrupt directory entry.
    let mut b = img.clone();
    b[layout::HEADER_BYTES as usize + 100] ^= 0x10;
    assert!(msg(&b).contains("directory entry 0"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    /// Any corruption of the metadata area or truncation gives an error or a pool
    /// that passes its own checks — never a panic.
    #[test]
    fn corrupted_or_truncated_images_never_panic(
        flips in proptest::collection::vec((0usize..32768, 1u8..=255), 1..8),
        cut in proptest::option::of(0usize..(1 << 20)),
    ) {
        static IMG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let img = IMG.get_or_init(|| valid_image(1 << 20));
        let mut b = img.clone();
        for (at, x) in flips {
            b[at] ^= x;
        }
        if let Some(c) = cut {
            b.truncate(c.max(1));
        }
        let r = std::panic::catch_unwind(|| {
            if let Ok(pool) = open_bytes(&b) {
                match SlotTable::open_or_create(&pool, "t", 16) {
                    Ok(t) => {
                        for i in 0..t.slots() {
                            let _ = t.read(i);
                        }
                    }
                    Err(e) => { let _ = e.to_string(); }
                }
            }
        });
        prop_assert!(r.is_ok(), "opening a corrupted image panicked");
    }
}

#[test]
fn one_writer_or_many_readers_hold_a_pool() {
    let p = TmpPath::new("lock");
    let ro = PoolOptions {
        read_only: true,
        ..opts()
    };
    let w = Pool::create(&p.0, 1 << 20, &opts()).unwrap();
    let in_use = |r: Result<Pool, PmError>| match r {
        Err(e @ PmError::InUse { .. }) => {
            assert!(e.to_string().contains("in use by another process"), "{e}");
        }
        other => panic!("expected InUse, got {other:?}"),
    };
    in_use(Pool::open(&p.0, &opts()));
    in_use(Pool::open(&p.0, &ro));
    drop(w);
    let r1 = Pool::open(&p.0, &ro).unwrap();
    let r2 = Pool::open(&p.0, &ro).unwrap();
    assert!(
        r1.create_object("x", "t").is_err(),
        "read-only pools refuse writes"
    );
    in_use(Pool::open(&p.0, &opts()));
    drop((r1, r2));
    drop(Pool::open(&p.0, &opts()).unwrap());
}

#[test]
fn the_durability_label_follows_the_flush_setting() {
    use ferrite_pm::FlushKind;
    let p = TmpPath::new("label");
    drop(Pool::create(&p.0, 1 << 20, &opts()).unwrap());
    for (flush, msync) in [
        (FlushKind::Eadr, false),
        (FlushKind::Clflush, false),
        (FlushKind::Eadr, true),
    ] {
        let o = PoolOptions {
            flush: Some(flush),
            msync,
            ..opts()
        };
        let pool = Pool::open(&p.0, &o).unwrap();
        let d = pool.durability();
        // /dev/shm is never DAX here; the label must never claim more than the
        // device and the issued instructions give.
        if msync {
            assert_eq!(d, Durability::FileMsync);
        } else {
            assert_eq!(d, Durability::EmulatedShm);
            assert!(!d.power_fail_safe());
        }
    }
    // The decision itself, also for DAX mappings this machine cannot make:
    // MAP_SYNC without a write-back instruction is not power-fail safe.
    let of = Durability::for_mapping;
    assert_eq!(of(true, false, false, FlushKind::Clwb), Durability::Pm);
    assert_eq!(
        of(true, false, false, FlushKind::ClflushOpt),
        Durability::Pm
    );
    assert_eq!(
        of(true, false, false, FlushKind::Eadr),
        Durability::PmEadrAssumed
    );
    assert_eq!(
        of(true, true, false, FlushKind::Eadr),
        Durability::PmEadrAssumed
    );
    assert_eq!(
        of(false, true, false, FlushKind::Eadr),
        Durability::FileMsync
    );
    assert_eq!(
        of(false, false, true, FlushKind::Clwb),
        Durability::EmulatedShm
    );
    assert_eq!(
        of(false, false, false, FlushKind::Clwb),
        Durability::EmulatedFile
    );
    assert!(!Durability::PmEadrAssumed.power_fail_safe());
    assert!(Durability::PmEadrAssumed
        .describe()
        .contains("ONLY on an eADR platform"));
    assert!(Durability::Pm.power_fail_safe());
}

/// Pools are mapped at a 2 MiB boundary (so a device that allows huge pages can
/// use them) and report the page size the kernel chose; the data is the same
/// whichever it is, and a volatile pool large enough for huge pages is usable
/// from its first to its last byte.
#[test]
fn pools_are_mapped_for_huge_pages_and_report_their_page_size() {
    let t = TmpPath::new("huge");
    let p = Pool::create(&t.0, 8 << 20, &opts()).unwrap();
    assert_eq!(
        p.base() as usize % (2 << 20),
        0,
        "file mapping not 2 MiB aligned"
    );
    let off = p.size() - 64;
    p.word(off).unwrap().store(0xfeed, Ordering::Release);
    p.word(off).unwrap().persist().unwrap();
    let ps = p.page_size();
    if cfg!(target_os = "linux") {
        assert!(matches!(ps, Some(4096) | Some(0x20_0000)), "{ps:?}");
        // The share on huge pages agrees with the page size: some exactly
        // when the page size says 2 MiB.
        let share = p.huge_page_share().expect("a written pool is resident");
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert_eq!(share > 0.0, ps == Some(0x20_0000), "{share} {ps:?}");
    }
    drop(p);
    let p = Pool::open(&t.0, &opts()).unwrap();
    assert_eq!(p.word(off).unwrap().load(Ordering::Acquire), 0xfeed);

    let v = Pool::create_volatile(ferrite_pm::pool::VOLATILE_HUGE_MIN, &opts()).unwrap();
    assert_eq!(
        v.base() as usize % (2 << 20),
        0,
        "volatile pool not 2 MiB aligned"
    );
    let last = v.size() - 8;
    let w = v.word(last).unwrap();
    assert_eq!(
        w.load(Ordering::Acquire),
        0,
        "fresh volatile memory is zeroed"
    );
    w.store(7, Ordering::Release);
    assert_eq!(w.load(Ordering::Acquire), 7);
    if cfg!(target_os = "linux") {
        assert!(matches!(v.page_size(), Some(4096) | Some(0x20_0000)));
    }
}
