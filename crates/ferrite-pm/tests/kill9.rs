//! A child process publishes and frees blocks in a loop, printing each
//! acknowledgement; the parent kills it with SIGKILL mid-run, reopens the pool
//! and checks that everything acknowledged is intact and nothing leaked.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ferrite_pm::account::exhaust_and_account;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{Pool, PoolOptions};
use ferrite_testkit::SlotTable;

const ENV: &str = "FERRITE_KILL9_POOL";
const SLOTS: usize = 512;
const LENS: [usize; 6] = [10, 100, 300, 1000, 5000, 70_000];

/// The child's workload: runs until killed (or for `limit` operations),
/// printing `P slot version len` / `C slot` after each operation returns.
fn writer(path: &Path, limit: Option<u64>, out: &mut dyn Write) {
    let pool = Pool::open(path, &PoolOptions::default()).expect("child opens the pool");
    let t = SlotTable::open_or_create(&pool, "kill9", SLOTS).expect("child opens the table");
    let mut rng = SplitMix(42);
    let mut v = 0u64;
    while limit.is_none_or(|l| v < l) {
        v += 1;
        let slot = rng.below(SLOTS as u64) as usize;
        if rng.below(4) == 0 {
            t.clear(slot).expect("clear");
            writeln!(out, "C {slot}").unwrap();
        } else {
            let len = LENS[rng.below(LENS.len() as u64) as usize];
            t.publish(slot, v, len).expect("publish");
            writeln!(out, "P {slot} {v} {len}").unwrap();
        }
        out.flush().unwrap();
    }
}

fn check(path: &Path, acks: &str) {
    let mut want: HashMap<usize, Option<(u64, usize)>> = HashMap::new();
    let mut last_v = 0;
    for line in acks.lines() {
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        match (line.as_bytes().first(), f.as_slice()) {
            (Some(b'P'), [s, v, l]) => {
                want.insert(*s as usize, Some((*v, *l as usize)));
                last_v = *v;
            }
            (Some(b'C'), [s]) => {
                want.insert(*s as usize, None);
            }
            _ => {} // a line cut by the kill
        }
    }
    let pool = Pool::open(path, &PoolOptions::default()).unwrap();
    let t = SlotTable::open_or_create(&pool, "kill9", SLOTS).unwrap();
    let mut surprises = 0;
    let mut live = Vec::new();
    for s in 0..SLOTS {
        let got = t
            .read(s)
            .unwrap_or_else(|e| panic!("slot {s} damaged: {e}"));
        let got = got.map(|g| (g.version, g.len));
        let exp = want.get(&s).copied().flatten();
        if got != exp {
            // Only the one operation in flight at the kill may differ, and only
            // by being newer than everything acknowledged.
            surprises += 1;
            assert!(
                got.is_none() || got.unwrap().0 > last_v,
                "slot {s}: found {got:?}, acknowledged {exp:?}"
            );
        }
        if t.slot(s) != 0 {
            live.push((t.slot(s), t.heap().block_size(t.slot(s)).unwrap() as u64));
        }
    }
    assert!(
        surprises <= 1,
        "{surprises} slots differ from the acknowledgements"
    );
    let id = pool
        .object("kill9", ferrite_testkit::SLOT_TABLE_TYPE)
        .unwrap();
    live.push((
        pool.root(id, 0),
        t.heap().block_size(pool.root(id, 0)).unwrap() as u64,
    ));
    exhaust_and_account(&pool, t.heap(), live).unwrap();
}

fn temp_pool() -> PathBuf {
    let p = PathBuf::from(format!(
        "/dev/shm/ferrite-kill9-{}-{:?}.pool",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_file(&p);
    drop(Pool::create(&p, 64 << 20, &PoolOptions::default()).unwrap());
    p
}

/// Entry point of the child process; in a normal test run it runs the writer
/// for a bounded number of operations and checks the result in-process.
#[test]
fn kill9_child_entry() {
    if let Ok(path) = std::env::var(ENV) {
        writer(Path::new(&path), None, &mut std::io::stdout().lock());
        return;
    }
    let p = temp_pool();
    let mut acks = Vec::new();
    writer(&p, Some(3000), &mut acks);
    check(&p, &String::from_utf8(acks).unwrap());
    let _ = std::fs::remove_file(&p);
}

#[test]
fn published_blocks_survive_kill_9() {
    let p = temp_pool();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill9_child_entry",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ENV, &p)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut acks = String::new();
    let mut n = 0;
    let mut line = String::new();
    // Kill after 20,000 acknowledged operations (the child is mid-operation).
    while n < 20_000 {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("child exited early after {n} acks");
        }
        if line.starts_with('P') || line.starts_with('C') {
            acks.push_str(&line);
            n += 1;
        }
    }
    // A second process must not open the pool while the child writes to it:
    // neither for writing (it would free chunks the child owns) nor for reading.
    for read_only in [false, true] {
        let opts = PoolOptions {
            read_only,
            ..PoolOptions::default()
        };
        match Pool::open(&p, &opts) {
            Err(ferrite_pm::PmError::InUse { .. }) => {}
            other => panic!("opening a pool another process writes gave {other:?}"),
        }
    }
    child.kill().unwrap(); // SIGKILL
                           // Acks printed before the kill landed are acknowledged too.
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
    for l in rest.lines() {
        if l.starts_with('P') || l.starts_with('C') {
            acks.push_str(l);
            acks.push('\n');
        }
    }
    child.wait().unwrap();
    // The kernel dropped the dead child's lock: the pool opens again.
    check(&p, &acks);
    let _ = std::fs::remove_file(&p);
}
