//! Every failure a user can cause gives a typed error, never a panic, and
//! loses nothing: a full pool (the data written before stays readable, also
//! after a reopen), oversized keys and values, a name of another kind of
//! object, a pool or map from a newer format, a file that is not a pool, a
//! pool in use, a missing file, a bad name.

use std::os::unix::fs::FileExt;

use ferrite::{Batch, Db, ElfQuery, Error, MAX_KEY, MAX_VALUE};

fn pool(tag: &str) -> String {
    let p = format!(
        "/dev/shm/ferrite-facade-err-{tag}-{}.pool",
        std::process::id()
    );
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn a_full_pool_is_an_error_and_loses_nothing() {
    let path = pool("full");
    let db = Db::create(&path, 16 << 20).unwrap();
    let m = db.map("m").unwrap();
    let value = vec![7u8; 4000];
    let mut written = 0u64;
    let err = loop {
        match m.insert(written.to_be_bytes(), &value) {
            Ok(true) => written += 1,
            Ok(false) => unreachable!("fresh keys"),
            Err(e) => break e,
        }
        assert!(written < 1_000_000, "the pool never filled up");
    };
    assert!(matches!(err, Error::PoolFull { .. }), "{err:?}");
    assert!(err.to_string().contains("pool is full"), "{err}");
    // A transaction and a batch that do not fit fail the same way and
    // change nothing.
    let before = m.len();
    let mut tx = m.transaction().unwrap();
    for i in 0..50u64 {
        tx.upsert((1_000_000 + i).to_be_bytes(), &value).unwrap();
    }
    let e = tx.commit().unwrap_err();
    assert!(
        matches!(e, Error::PoolFull { .. } | Error::TooLarge { .. }),
        "{e:?}"
    );
    let mut b = Batch::new();
    for i in 0..50u64 {
        b.put((2_000_000 + i).to_be_bytes(), &value);
    }
    assert!(m.apply(&b).is_err());
    assert_eq!(m.len(), before);
    // Everything written before is there, before and after a reopen; removing
    // makes room again.
    for i in 0..written {
        assert_eq!(m.get(i.to_be_bytes()).unwrap().as_deref(), Some(&value[..]));
    }
    assert!(m.remove(0u64.to_be_bytes()).unwrap());
    drop(m);
    db.close().unwrap();
    let db = Db::open(&path).unwrap();
    let m = db.map("m").unwrap();
    assert_eq!(m.len() as u64, written - 1);
    assert_eq!(m.iter().count() as u64, written - 1);
    drop(m);
    drop(db);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn oversized_keys_and_values_are_refused_everywhere() {
    let db = Db::volatile(64 << 20).unwrap();
    let m = db.map("m").unwrap();
    let big_key = vec![1u8; MAX_KEY + 1];
    let big_value = vec![1u8; MAX_VALUE + 1];
    let key_err = |r: ferrite::Result<bool>| {
        assert!(
            matches!(r, Err(Error::KeyTooLarge { len, max }) if len == MAX_KEY + 1 && max == MAX_KEY),
            "{r:?}"
        )
    };
    key_err(m.insert(&big_key, "v"));
    key_err(m.upsert(&big_key, "v"));
    key_err(m.update(&big_key, "v"));
    key_err(m.remove(&big_key));
    key_err(m.contains(&big_key));
    assert!(matches!(m.get(&big_key), Err(Error::KeyTooLarge { .. })));
    assert!(matches!(
        m.insert("k", &big_value),
        Err(Error::ValueTooLarge { len, max }) if len == MAX_VALUE + 1 && max == MAX_VALUE
    ));
    assert!(matches!(
        m.compare_and_swap("k", None::<&[u8]>, Some(&big_value)),
        Err(Error::ValueTooLarge { .. })
    ));
    assert!(matches!(
        m.update_with("k", |_| Some(big_value.clone())),
        Err(Error::ValueTooLarge { .. })
    ));
    let mut b = Batch::new();
    b.put("ok", "v").put(&big_key, "v");
    assert!(matches!(m.apply(&b), Err(Error::KeyTooLarge { .. })));
    let mut tx = m.transaction().unwrap();
    assert!(matches!(
        tx.insert(&big_key, "v"),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(matches!(
        tx.upsert("k", &big_value),
        Err(Error::ValueTooLarge { .. })
    ));
    tx.commit().unwrap();
    // The largest allowed ones work; nothing else was written.
    assert!(m.insert(vec![2u8; MAX_KEY], vec![3u8; MAX_VALUE]).unwrap());
    assert_eq!(m.len(), 1);
    assert_eq!(
        m.get_with(vec![2u8; MAX_KEY], |v| v.len()).unwrap(),
        Some(MAX_VALUE)
    );
}

#[test]
fn a_name_of_another_kind_is_wrong_type() {
    let db = Db::volatile(64 << 20).unwrap();
    db.create_elf("table", &[&[1, 2, 3]]).unwrap();
    db.map("users").unwrap();
    let e = db.map("table").unwrap_err();
    assert!(
        matches!(&e, Error::WrongType { name, .. } if name == "table"),
        "{e:?}"
    );
    assert!(matches!(db.elf("users"), Err(Error::WrongType { .. })));
    assert!(matches!(
        db.create_elf("users", &[&[1]]),
        Err(Error::Exists { .. })
    ));
    assert!(matches!(
        db.create_elf("table", &[&[1]]),
        Err(Error::Exists { .. })
    ));
    assert!(matches!(db.map(""), Err(Error::Invalid(_))));
    assert!(matches!(db.map(&"n".repeat(1000)), Err(Error::Invalid(_))));
    // Bad Elf input is Invalid, not a panic.
    assert!(matches!(
        db.create_elf("ragged", &[&[1, 2], &[1]]),
        Err(Error::Invalid(_))
    ));
    let t = db.elf("table").unwrap();
    assert!(matches!(
        t.query(&ElfQuery::new().eq(5, 1)),
        Err(Error::Invalid(_))
    ));
    assert!(matches!(t.insert(&[1, 2]), Err(Error::Invalid(_))));
}

#[test]
fn newer_formats_foreign_files_and_missing_files_are_named() {
    // A pool whose header claims a newer version.
    let path = pool("newer");
    Db::create(&path, 16 << 20).unwrap().close().unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut hdr = [0u8; 16];
    f.read_exact_at(&mut hdr, 0).unwrap();
    // Header: magic (8 bytes), then the format version (u32).
    f.write_all_at(&99u32.to_le_bytes(), 8).unwrap();
    let e = Db::open(&path).unwrap_err();
    assert!(matches!(e, Error::NewerFormat { found: 99, .. }), "{e:?}");
    assert!(e.to_string().contains("upgrade Ferrite"), "{e}");
    drop(f);
    std::fs::remove_file(&path).unwrap();

    // A map written by a newer index format (root word 2 holds its tag).
    let path = pool("newer-map");
    let db = Db::create(&path, 16 << 20).unwrap();
    db.map("m").unwrap().insert("k", "v").unwrap();
    let id = db.pool().object("m", "ferrite.index").unwrap();
    db.pool()
        .set_root(id, 2, ferrite_index::FORMAT_TAG + 1)
        .unwrap();
    db.close().unwrap();
    let db = Db::open(&path).unwrap();
    let e = db.map("m").unwrap_err();
    assert!(
        matches!(&e, Error::NewerFormat { what, found, supported }
            if what.contains("\"m\"") && *found == ferrite_index::FORMAT_VERSION + 1 && *supported == ferrite_index::FORMAT_VERSION),
        "{e:?}"
    );
    drop(db);
    std::fs::remove_file(&path).unwrap();

    // Not a pool at all.
    let path = pool("zeroes");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    assert!(matches!(Db::open(&path), Err(Error::NotAPool(_))));
    std::fs::write(&path, b"hello").unwrap();
    assert!(matches!(Db::open(&path), Err(Error::NotAPool(_))));
    std::fs::remove_file(&path).unwrap();

    // Missing file; too small a pool.
    assert!(matches!(Db::open(&path), Err(Error::Io { .. })));
    assert!(matches!(Db::create(&path, 4096), Err(Error::Invalid(_))));
    assert!(!std::path::Path::new(&path).exists());
}

#[test]
fn a_second_open_in_the_same_process_is_in_use_too() {
    let path = pool("twice");
    let db = Db::create(&path, 16 << 20).unwrap();
    assert!(matches!(Db::open(&path), Err(Error::InUse { .. })));
    drop(db);
    Db::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
}
