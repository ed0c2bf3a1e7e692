//! `kill -9` in the middle of a write workload: a child process (this test
//! binary, re-executed) runs single operations and transactions against a
//! three-tier store (PM pool in /dev/shm, SSD page files on the disk under
//! $TMPDIR) whose tiers are small enough that it evicts, writes SSD pages and
//! checkpoints all the time, and prints the number of each operation once it
//! is acknowledged (committed). It also keeps a transaction open that never
//! commits. The parent kills it with SIGKILL mid-run, reopens the store
//! (restart: page table, redo, undo of the open transaction) and checks the
//! contents against the deterministic workload: every acknowledged operation
//! present, the one in flight entirely or not at all, the open transaction's
//! writes absent; then the tree's structure and page accounting.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ferrite_btree::{BufferConfig, Database, Design};
use ferrite_kv::OrderedKv;
use ferrite_pm::rng::SplitMix;

const ENV: &str = "FERRITE_BTREE_KILL9_DIR";
const KEYS: u64 = 3000;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn cfg() -> BufferConfig {
    let ps = 4096u64;
    let mut c = Design::ThreeTier.config_paged(4096, 32 * ps, 24 * (ps + 64), 1 << 30);
    c.ssd_pages = 1 << 16;
    c.wal_segment_bytes = 1 << 20;
    c.admission_set_size = 32;
    c
}

fn key(k: u64) -> Vec<u8> {
    format!("k{:06}", k.wrapping_mul(7919) % 1_000_000).into_bytes()
}

fn value(i: u64, rng: &mut SplitMix) -> Vec<u8> {
    let mut v = format!("v{i}-").into_bytes();
    v.resize([10usize, 60, 300][rng.below(3) as usize], b'.');
    v
}

/// Operation `i` of the workload, as its effect on the contents (an aborted
/// transaction has none). Deterministic: the parent replays it.
enum Step {
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    Txn(Vec<(Vec<u8>, Option<Vec<u8>>)>, bool),
}

fn step(i: u64, rng: &mut SplitMix) -> Step {
    let k = key(rng.below(KEYS));
    match rng.below(10) {
        0..=5 => Step::Put(k, value(i, rng)),
        6..=7 => Step::Del(k),
        _ => {
            let ops = (0..3)
                .map(|j| {
                    let kk = key(rng.below(KEYS));
                    let v = (j != 1).then(|| value(i * 4 + j, rng));
                    (kk, v)
                })
                .collect();
            Step::Txn(ops, rng.below(4) != 0)
        }
    }
}

fn apply(m: &mut Model, s: &Step) {
    match s {
        Step::Put(k, v) => {
            m.insert(k.clone(), v.clone());
        }
        Step::Del(k) => {
            m.remove(k);
        }
        Step::Txn(ops, true) => {
            for (k, v) in ops {
                match v {
                    Some(v) => m.insert(k.clone(), v.clone()),
                    None => m.remove(k),
                };
            }
        }
        Step::Txn(_, false) => {}
    }
}

fn open(dir: &Path) -> Database {
    Database::open_files(&dir.join("store.pool"), Some(&dir.join("ssd")), cfg()).unwrap()
}

/// The child's workload: runs until killed (or `limit` operations), printing
/// `A i` after operation `i` is acknowledged. Returns the store and its
/// uncommitted transaction.
fn writer(
    dir: &Path,
    limit: Option<u64>,
    out: &mut dyn Write,
) -> (Database, ferrite_btree::Transaction) {
    let db = open(dir);
    let t = db.tree("t").unwrap();
    // A transaction that never commits: its writes must vanish.
    let open_tx = db.begin();
    for j in 0..20 {
        open_tx
            .upsert(&t, format!("zz-uncommitted-{j}").as_bytes(), b"x")
            .unwrap();
    }
    let mut rng = SplitMix(7);
    let mut i = 0;
    while limit.is_none_or(|l| i < l) {
        match step(i, &mut rng) {
            Step::Put(k, v) => {
                t.upsert(&k, &v).unwrap();
            }
            Step::Del(k) => {
                t.remove(&k).unwrap();
            }
            Step::Txn(ops, commit) => {
                let tx = db.begin();
                for (k, v) in &ops {
                    match v {
                        Some(v) => tx.upsert(&t, k, v).unwrap(),
                        None => tx.remove(&t, k).unwrap(),
                    };
                }
                if commit {
                    tx.commit().unwrap();
                } else {
                    tx.abort().unwrap();
                }
            }
        }
        writeln!(out, "A {i}").unwrap();
        out.flush().unwrap();
        i += 1;
    }
    (db, open_tx)
}

/// Copies the files of a live store, as a process crash would leave them.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_tree(&p, &to.join(e.file_name()));
        } else {
            std::fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn check(dir: &Path, acked: u64) {
    let db = open(dir);
    let r = db.restart_report().clone();
    eprintln!("restart after {acked} acknowledged operations: {r:?}");
    let t = db.tree("t").unwrap();
    let mut got = Model::new();
    t.scan(&[], usize::MAX, &mut |k, v| {
        got.insert(k.to_vec(), v.to_vec());
    })
    .unwrap();
    let mut rng = SplitMix(7);
    let mut before = Model::new();
    for i in 0..acked {
        apply(&mut before, &step(i, &mut rng));
    }
    let mut after = before.clone();
    apply(&mut after, &step(acked, &mut rng));
    assert!(
        got == before || got == after,
        "recovered contents ({} keys) match neither the {acked} acknowledged operations ({} keys) nor those plus the one in flight",
        got.len(),
        before.len()
    );
    assert!(r.losers >= 1, "the open transaction is undone: {r:?}");
    db.check().unwrap();
}

fn temp_dir(tag: &str) -> PathBuf {
    let shm = PathBuf::from(format!(
        "/dev/shm/ferrite-btree-kill9-{tag}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&shm);
    std::fs::create_dir_all(&shm).unwrap();
    shm
}

/// Entry point of the child process; in a normal test run it runs the writer
/// for a bounded number of operations and checks the result in-process.
#[test]
fn kill9_child_entry() {
    if let Ok(dir) = std::env::var(ENV) {
        writer(Path::new(&dir), None, &mut std::io::stdout().lock());
        return;
    }
    let dir = temp_dir("inproc");
    let mut acks = Vec::new();
    let live = writer(&dir, Some(2000), &mut acks);
    // The store's files while it runs: what a crash of this process leaves.
    let copy = temp_dir("inproc-copy");
    copy_tree(&dir, &copy);
    drop(live);
    check(&copy, 2000);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&copy);
}

#[test]
fn committed_operations_survive_kill_9() {
    // The pool on /dev/shm (emulated PM), the SSD files on the disk.
    let dir = temp_dir("child");
    let ssd = std::env::temp_dir().join(format!("ferrite-btree-kill9-ssd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ssd);
    std::fs::create_dir_all(&ssd).unwrap();
    std::os::unix::fs::symlink(&ssd, dir.join("ssd")).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "kill9_child_entry",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(ENV, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut last: Option<u64> = None;
    let mut line = String::new();
    while last.is_none_or(|l| l < 6000) {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            panic!("child exited early after {last:?}");
        }
        if let Some(n) = line.strip_prefix("A ").and_then(|s| s.trim().parse().ok()) {
            last = Some(n);
        }
    }
    child.kill().unwrap(); // SIGKILL, mid-operation
                           // Acknowledgements printed before the kill landed count too.
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
    for l in rest.lines() {
        if let Some(n) = l.strip_prefix("A ").and_then(|s| s.trim().parse().ok()) {
            last = Some(n);
        }
    }
    child.wait().unwrap();
    let acked = last.unwrap() + 1;
    check(&dir, acked);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&ssd);
}
