//! Real processes: a second process opening a pool gets a clear error; a
//! writer killed with SIGKILL in the middle of its transactions leaves every
//! acknowledged transaction, and the one in flight whole or not at all.
//!
//! The other process is this test binary run again on one test,
//! [`child_process`], with `FERRITE_TEST_CHILD` naming what it does.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use ferrite::{Db, Error};

const CHILD_ENV: &str = "FERRITE_TEST_CHILD";

/// This test binary, run as the other process: `what` is `hold PATH` (open
/// the pool, say so, keep it until stdin closes) or `writer PATH` (commit
/// transactions of three keys forever, numbered on from the last one in the
/// pool, printing `acked N` after each).
fn child(what: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, what);
    c
}

fn child_main(what: &str) -> Result<(), Error> {
    let (cmd, path) = what
        .split_once(' ')
        .filter(|(c, _)| matches!(*c, "hold" | "writer"))
        .ok_or_else(|| Error::Invalid(format!("{CHILD_ENV}={what:?}")))?;
    let db = Db::open_or_create(path, 256 << 20)?;
    let m = db.map("kv")?;
    let mut out = std::io::stdout().lock();
    match cmd {
        "hold" => {
            writeln!(out, "holding").ok();
            out.flush().ok();
            let mut line = String::new();
            while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {}
        }
        "writer" => {
            let start = m
                .get("last")?
                .and_then(|v| <[u8; 8]>::try_from(v).ok())
                .map_or(0, |v| u64::from_be_bytes(v) + 1);
            for i in start.. {
                let mut tx = m.transaction()?;
                for part in ["a", "b", "c"] {
                    tx.upsert(format!("txn:{i:08}:{part}"), i.to_be_bytes())?;
                }
                tx.upsert("last", i.to_be_bytes())?;
                tx.commit()?;
                writeln!(out, "acked {i}").ok();
                out.flush().ok();
            }
        }
        _ => return Err(Error::Invalid(format!("{CHILD_ENV}={what:?}"))),
    }
    Ok(())
}

/// The other process's entry point (see [`child`]); run by the test harness
/// itself, it checks that a malformed order is refused.
#[test]
fn child_process() {
    match std::env::var(CHILD_ENV) {
        Ok(what) => {
            let code = match child_main(&what) {
                Ok(()) => 0,
                Err(e @ Error::InUse { .. }) => {
                    eprintln!("{e}");
                    2
                }
                Err(e) => {
                    eprintln!("{e}");
                    1
                }
            };
            std::process::exit(code);
        }
        Err(_) => {
            assert!(matches!(child_main("bogus"), Err(Error::Invalid(_))));
            assert!(matches!(
                child_main("dance /dev/shm/nope"),
                Err(Error::Invalid(_))
            ));
        }
    }
}

/// The N of an `acked N` line (libtest's "test child_process ... " may
/// precede the first).
fn acked_in(line: &str) -> Option<u64> {
    line.split("acked ").nth(1)?.trim().parse().ok()
}

fn pool(tag: &str) -> String {
    let p = format!("/dev/shm/ferrite-facade-{tag}-{}.pool", std::process::id());
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn a_second_process_gets_in_use_and_the_pool_opens_once_the_first_is_gone() {
    let path = pool("inuse");
    Db::create(&path, 64 << 20).unwrap().close().unwrap();
    let mut holder = child(&format!("hold {path}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    // libtest's "test child_process ... " may precede it on the line.
    while !line.contains("holding") {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the holder ended early"
        );
    }
    // This process is refused, with the path and the reason.
    let e = Db::open(&path).unwrap_err();
    assert!(
        matches!(&e, Error::InUse { path: p } if p.to_str() == Some(path.as_str())),
        "{e:?}"
    );
    assert!(e.to_string().contains("in use by another process"), "{e}");
    assert!(matches!(
        Db::open_or_create(&path, 64 << 20),
        Err(Error::InUse { .. })
    ));
    // So is a third process (its exit status 2 says why).
    let third = child(&format!("writer {path}")).output().unwrap();
    assert_eq!(third.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&third.stderr).contains("in use by another process"));
    // The holder closes: the pool opens.
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    Db::open(&path).unwrap().close().unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn kill_9_mid_transactions_then_reopen_reads_back_every_acknowledged_one() {
    let path = pool("kill9");
    let mut before = 0;
    for round in 0..3 {
        let mut w = child(&format!("writer {path}"))
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(w.stdout.take().unwrap());
        let mut acked = None;
        let mut line = String::new();
        // Let it commit a few hundred transactions, then kill it mid-stream.
        while acked.is_none_or(|a: u64| a < before + 300) {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "writer ended early");
            acked = acked_in(&line).or(acked);
        }
        w.kill().unwrap(); // SIGKILL
        w.wait().unwrap();
        // Lines printed after our last read were acknowledged too.
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let acked = rest.lines().rev().find_map(acked_in).or(acked).unwrap();
        let db = Db::open(&path).unwrap();
        let m = db.map("kv").unwrap();
        let last = u64::from_be_bytes(m.get("last").unwrap().unwrap().try_into().unwrap());
        // The last committed transaction is the acknowledged one or the one
        // in flight, and it is whole; nothing of a later one exists.
        assert!(
            last == acked || last == acked + 1,
            "last {last}, acked {acked}"
        );
        for i in 0..=last {
            for part in ["a", "b", "c"] {
                let k = format!("txn:{i:08}:{part}");
                assert!(
                    m.contains(&k).unwrap(),
                    "round {round}: {k} missing (last {last})"
                );
            }
        }
        let after = format!("txn:{:08}:", last + 1);
        assert_eq!(
            m.count_range(after.as_str()..="txn:~").unwrap(),
            0,
            "round {round}"
        );
        assert_eq!(m.len() as u64, 3 * (last + 1) + 1);
        before = last + 1;
        drop(m);
        db.close().unwrap();
    }
    std::fs::remove_file(&path).unwrap();
}
