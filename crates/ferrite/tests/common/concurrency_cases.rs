//! The facade's concurrency cases, run by `concurrency.rs` (the gate's
//! default barriers) and `concurrency_fences.rs` (its fallback fences).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ferrite::{Batch, Db, Error};
use ferrite_pm::rng::SplitMix;

pub const ACCOUNTS: u64 = 32;
pub const OPENING: u64 = 1_000;

fn account(i: u64) -> Vec<u8> {
    format!("acct:{i:02}").into_bytes()
}

fn balance(v: &[u8]) -> u64 {
    u64::from_be_bytes(v.try_into().expect("8-byte balance"))
}

pub fn transfers_in_transactions_never_change_the_total_any_reader_sees() {
    let db = Db::volatile(256 << 20).unwrap();
    let m = db.map("bank").unwrap();
    let mut b = Batch::new();
    for i in 0..ACCOUNTS {
        b.put(account(i), OPENING.to_be_bytes());
    }
    m.apply(&b).unwrap();
    let stop = AtomicBool::new(false);
    let commits = AtomicU64::new(0);
    let checks = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (m, stop, commits) = (&m, &stop, &commits);
            s.spawn(move || {
                let mut rng = SplitMix(t + 1);
                for n in 0..3000u64 {
                    let a = rng.below(ACCOUNTS);
                    let c = (a + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
                    let mut tx = m.transaction().unwrap();
                    let ba = balance(&tx.get(account(a)).unwrap().unwrap());
                    let bc = balance(&tx.get(account(c)).unwrap().unwrap());
                    let x = rng.below(ba + 1);
                    tx.upsert(account(a), (ba - x).to_be_bytes()).unwrap();
                    tx.upsert(account(c), (bc + x).to_be_bytes()).unwrap();
                    // Some transactions also write notes, some roll back.
                    tx.upsert(format!("note:{t}:{}", n % 50), n.to_be_bytes())
                        .unwrap();
                    if n % 7 == 0 {
                        tx.rollback();
                    } else {
                        tx.commit().unwrap();
                        commits.fetch_add(1, Ordering::Relaxed);
                    }
                }
                stop.store(true, Ordering::Release);
            });
        }
        // Plain writers of other keys run beside the transactions.
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::Acquire) {
                m.upsert(format!("plain:{}", i % 100), i.to_be_bytes())
                    .unwrap();
                i += 1;
            }
        });
        // Readers: one scan of the accounts (one chunk: read whole), and a
        // read-only transaction of single gets.
        for r in 0..2 {
            let (m, stop, checks) = (&m, &stop, &checks);
            s.spawn(move || {
                // At least one check, however late this thread starts.
                loop {
                    let done = stop.load(Ordering::Acquire);
                    let total: u64 = if r == 0 {
                        m.range("acct:".."acct;")
                            .map(|e| balance(&e.unwrap().1))
                            .sum()
                    } else {
                        let tx = m.transaction().unwrap();
                        (0..ACCOUNTS)
                            .map(|i| balance(&tx.get(account(i)).unwrap().unwrap()))
                            .sum()
                    };
                    assert_eq!(total, ACCOUNTS * OPENING, "reader {r} saw half a transfer");
                    checks.fetch_add(1, Ordering::Relaxed);
                    if done {
                        break;
                    }
                }
            });
        }
    });
    let total: u64 = m
        .range("acct:".."acct;")
        .map(|e| balance(&e.unwrap().1))
        .sum();
    assert_eq!(total, ACCOUNTS * OPENING);
    assert!(commits.load(Ordering::Relaxed) > 4000);
    assert!(checks.load(Ordering::Relaxed) > 0);
}

pub fn update_with_and_compare_and_swap_lose_no_increment() {
    let db = Db::volatile(64 << 20).unwrap();
    let m = db.map("counters").unwrap();
    let per_thread = 2000u64;
    std::thread::scope(|s| {
        for t in 0..3 {
            let m = &m;
            s.spawn(move || {
                for _ in 0..per_thread {
                    if t == 0 {
                        // Optimistic increments: read, then swap if unchanged.
                        loop {
                            let cur = m.get("n").unwrap();
                            let next = cur.as_deref().map_or(0, balance) + 1;
                            if m.compare_and_swap("n", cur, Some(next.to_be_bytes()))
                                .unwrap()
                                .is_ok()
                            {
                                break;
                            }
                        }
                    } else {
                        m.update_with("n", |old| {
                            Some((old.map_or(0, balance) + 1).to_be_bytes().to_vec())
                        })
                        .unwrap();
                    }
                    // Plain writers of the same key would break the counts;
                    // writers of other keys share the stripes harmlessly.
                    m.upsert(format!("other:{t}"), b"x").unwrap();
                }
            });
        }
    });
    assert_eq!(balance(&m.get("n").unwrap().unwrap()), 3 * per_thread);
}

pub fn writing_around_ones_own_transaction_is_an_error_not_a_deadlock() {
    let db = Db::volatile(64 << 20).unwrap();
    let m = db.map("m").unwrap();
    let other = db.map("other").unwrap();
    let mut tx = m.transaction().unwrap();
    tx.upsert("a", "1").unwrap();
    for r in [
        m.insert("b", "2").map(|_| ()),
        m.upsert("b", "2").map(|_| ()),
        m.remove("b").map(|_| ()),
        m.apply(&Batch::new()),
        m.update_with("b", |_| None).map(|_| ()),
        m.transaction().map(|_| ()),
    ] {
        assert!(
            matches!(r, Err(Error::TransactionActive { ref map }) if map == "m"),
            "{r:?}"
        );
    }
    // Reads and other maps are fine.
    assert_eq!(m.get("a").unwrap(), None);
    other.upsert("b", "2").unwrap();
    tx.commit().unwrap();
    assert!(m.upsert("b", "2").is_ok());
    // Inside update_with's closure: reads work, writes are refused.
    m.update_with("a", |old| {
        assert_eq!(m.get("b").unwrap(), Some(b"2".to_vec()));
        assert!(matches!(
            m.upsert("c", "3"),
            Err(Error::TransactionActive { .. })
        ));
        old.map(|o| [o, b"!"].concat())
    })
    .unwrap();
    assert_eq!(m.get("a").unwrap(), Some(b"1!".to_vec()));
    assert!(m.upsert("c", "3").is_ok());
}

pub fn a_transaction_waits_for_other_writers_and_holds_them_off() {
    let db = Db::volatile(64 << 20).unwrap();
    let m = db.map("m").unwrap();
    m.upsert("k", 0u64.to_be_bytes()).unwrap();
    let tx = m.transaction().unwrap();
    let started = AtomicBool::new(false);
    let wrote = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            started.store(true, Ordering::Release);
            m.upsert("k", 1u64.to_be_bytes()).unwrap();
            wrote.store(true, Ordering::Release);
        });
        while !started.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        // However long the writer has had, it cannot have written: the
        // transaction's view is stable.
        for _ in 0..1000 {
            assert_eq!(tx.get("k").unwrap(), Some(0u64.to_be_bytes().to_vec()));
            assert!(!wrote.load(Ordering::Acquire));
            std::thread::yield_now();
        }
        drop(tx);
    });
    assert!(wrote.load(Ordering::Acquire));
    assert_eq!(m.get("k").unwrap(), Some(1u64.to_be_bytes().to_vec()));
}

/// The `#[test]` functions of one harness: each calls `setup` (which picks
/// the gate's barriers before any gate exists), then its case; one more test
/// checks the barriers in use are `$barriers`.
#[macro_export]
macro_rules! concurrency_tests {
    ($setup:path, $barriers:literal) => {
        #[test]
        fn transfers_in_transactions_never_change_the_total_any_reader_sees() {
            $setup();
            cases::transfers_in_transactions_never_change_the_total_any_reader_sees();
        }
        #[test]
        fn update_with_and_compare_and_swap_lose_no_increment() {
            $setup();
            cases::update_with_and_compare_and_swap_lose_no_increment();
        }
        #[test]
        fn writing_around_ones_own_transaction_is_an_error_not_a_deadlock() {
            $setup();
            cases::writing_around_ones_own_transaction_is_an_error_not_a_deadlock();
        }
        #[test]
        fn a_transaction_waits_for_other_writers_and_holds_them_off() {
            $setup();
            cases::a_transaction_waits_for_other_writers_and_holds_them_off();
        }
        #[test]
        fn the_gate_uses_the_expected_barriers() {
            $setup();
            let _db = ferrite::Db::volatile(16 << 20).unwrap();
            assert_eq!(ferrite::writer_barriers(), $barriers);
        }
    };
}
