//! The `ferrite` binary as a user runs it: pools, bad input, crash tests.

use ferrite_pm::{Pool, PoolOptions};
use std::path::PathBuf;
use std::process::{Command, Output};

/// Held (shared) while a child runs. A forked child holds copies of this
/// process's file descriptors until it execs, and with them their `flock`s; a
/// test that checks a lock is free after dropping a pool takes it exclusively.
static SPAWNING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn ferrite(args: &[&str]) -> Output {
    let _g = SPAWNING.read().unwrap_or_else(|e| e.into_inner());
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(args)
        .output()
        .unwrap()
}

struct Tmp(PathBuf);
impl Tmp {
    fn new(tag: &str) -> Tmp {
        let p = PathBuf::from(format!(
            "/dev/shm/ferrite-cli-{}-{tag}.pool",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&p);
        Tmp(p)
    }
    fn s(&self) -> &str {
        self.0.to_str().unwrap()
    }
}
impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn create_info_check_on_dev_shm() {
    let p = Tmp::new("ok");
    let o = ferrite(&["create", p.s(), "--size", "16M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = ferrite(&["info", p.s()]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("survives a process crash"), "{out}");
    assert!(out.contains("does NOT survive power loss"), "{out}");
    assert!(out.contains("version 1"));
    // The page size the kernel maps the pool with (/dev/shm: 4 KiB unless the
    // machine forces huge pages on shared memory).
    assert!(
        out.contains("pages:       4.0 KiB") || out.contains("pages:       2.0 MiB"),
        "{out}"
    );
    let o = ferrite(&["info", p.s(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["page_size"] == 4096 || v["page_size"] == 2 << 20, "{v}");
    assert_eq!(v["durability"], "emulated-pm-tmpfs");
    assert_eq!(v["power_fail_safe"], false);
    assert_eq!(v["size"], 16 << 20);
    assert_eq!(v["format_version"], 1);
    let o = ferrite(&["check", p.s()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // Creating it again fails without touching it.
    let o = ferrite(&["create", p.s(), "--size", "16M"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("exists"));
}

/// Every kind of bad pool: exit 2, a one-line message, no panic.
#[test]
fn bad_pools_exit_2_with_one_line() {
    let good = Tmp::new("good");
    assert!(ferrite(&["create", good.s(), "--size", "4M"])
        .status
        .success());
    let bytes = std::fs::read(&good.0).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "flip",
            {
                let mut b = bytes.clone();
                b[24] ^= 0x01;
                b
            },
            "checksum",
        ),
        ("trunc", bytes[..100_000].to_vec(), "truncated"),
        ("short", bytes[..10].to_vec(), "truncated"),
        ("zeros", vec![0u8; 4 << 20], "all zeros"),
        (
            "magic",
            {
                let mut b = bytes.clone();
                b[1] = b'X';
                b
            },
            "bad magic",
        ),
        ("empty", Vec::new(), "truncated"),
    ];
    for (tag, content, why) in cases {
        let p = Tmp::new(tag);
        std::fs::write(&p.0, &content).unwrap();
        for cmd in ["info", "check"] {
            let o = ferrite(&[cmd, p.s()]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(2), "{cmd} {tag}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{cmd} {tag}: {err}");
            assert!(err.contains(why), "{cmd} {tag}: {err}");
            assert!(!err.contains("panicked"));
        }
    }
    let o = ferrite(&["info", "/dev/shm/ferrite-no-such-pool.pool"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("No such file"));
}

#[test]
fn usage_errors_exit_64() {
    assert_eq!(ferrite(&["info"]).status.code(), Some(64));
    assert_eq!(
        ferrite(&["create", "/dev/shm/x", "--size", "12Q"])
            .status
            .code(),
        Some(64)
    );
    // No recovery trial at all is refused before any cluster starts.
    let o = ferrite(&["bench", "raft", "cluster", "--recovery-trials", "0"]);
    assert_eq!(o.status.code(), Some(64));
    assert!(stderr(&o).contains("--recovery-trials"), "{}", stderr(&o));
    assert_eq!(ferrite(&["--help"]).status.code(), Some(0));
}

#[test]
fn crash_test_reports_json_and_rejects_unknown_targets() {
    let o = ferrite(&[
        "crash-test",
        "allocator",
        "--ops",
        "150",
        "--seeds",
        "2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["states"].as_u64().unwrap() > 200);
    assert_eq!(v["violations"], 0);
    let o = ferrite(&[
        "crash-test",
        "allocator",
        "--points",
        "25",
        "--ops",
        "150",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["points"], 26);
    let o = ferrite(&["crash-test", "nonsense"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("unknown crash-test target"));
    let o = ferrite(&["crash-test", "list"]);
    assert!(stdout(&o).lines().any(|l| l.starts_with("allocator ")));
    // A tripwire breaks the target on purpose: violations, exit 3.
    let o = ferrite(&[
        "crash-test",
        "index",
        "--ops",
        "200",
        "--no-recovery-crashes",
        "--tripwire",
        "index.skip-insert-flush",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["violations"].as_u64().unwrap() > 0);
    assert_eq!(v["tripwire"], "index.skip-insert-flush");
}

#[test]
fn demo_writes_reopens_and_verifies() {
    let p = Tmp::new("demo");
    let o = ferrite(&["demo", "--pool", p.s(), "--keys", "2000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("verified  all 2000 keys"), "{out}");
    assert!(!p.0.exists(), "demo removes its pool unless --keep");
}

/// Issue 9, defect 5: `ferrite demo --pool EXISTING` used to delete the file.
#[test]
fn demo_never_removes_a_file_it_did_not_create() {
    let p = Tmp::new("demo-existing");
    std::fs::write(&p.0, b"somebody's data").unwrap();
    let o = ferrite(&["demo", "--pool", p.s()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("already exists"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&p.0).unwrap(), b"somebody's data");
}

#[test]
fn check_finds_corrupt_objects() {
    let p = Tmp::new("obj");
    let o = ferrite(&[
        "demo",
        "--pool",
        p.s(),
        "--keys",
        "50",
        "--size",
        "4M",
        "--keep",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(ferrite(&["check", p.s()]).status.code(), Some(0));
    // The demo index's head leaf is the first block of the first chunk;
    // overwrite the leaf's magic (its last word).
    let mut b = std::fs::read(&p.0).unwrap();
    let info: serde_json::Value =
        serde_json::from_slice(&ferrite(&["info", p.s(), "--json"]).stdout).unwrap();
    assert_eq!(info["objects"][0]["name"], "demo");
    assert_eq!(
        info["objects"][0]["index_format_version"],
        ferrite_index::FORMAT_VERSION
    );
    let magic = find_heap_off(&b) as usize + 512 - 8;
    b[magic..magic + 8].copy_from_slice(&0xdead_beefu64.to_le_bytes());
    std::fs::write(&p.0, &b).unwrap();
    let o = ferrite(&["check", p.s()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("CORRUPT"));
}

/// Issue 9, defect 6: page-store and in-place objects are checked (they used
/// to be reported healthy unseen), and an unknown type is not "healthy".
#[test]
fn check_looks_at_every_object_type() {
    use ferrite_pmio::inplace::{InplaceArray, InplaceConfig, InplaceMethod};
    use ferrite_pmio::page::{DirtyMask, Method, PageStore, PageStoreConfig};
    let p = Tmp::new("types");
    {
        // No fork while this process holds the pool (see SPAWNING).
        let _quiet = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
        let pool = Pool::create(&p.0, 8 << 20, &PoolOptions::default()).unwrap();
        let mut st = PageStore::open_or_create(
            &pool,
            "pages",
            PageStoreConfig {
                page_size: 4096,
                slots: 8,
            },
        )
        .unwrap();
        st.write(3, &[7u8; 4096], &DirtyMask::all(64), Method::Cow)
            .unwrap();
        let mut a = InplaceArray::open_or_create(
            &pool,
            "values",
            InplaceConfig {
                method: InplaceMethod::Fam,
                value_size: 16,
                count: 10,
                log_bytes: 4096,
            },
        )
        .unwrap();
        a.update(2, &[9u8; 16]).unwrap();
    }
    let o = ferrite(&["check", p.s(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let verdicts: Vec<&str> = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["verdict"].as_str().unwrap())
        .collect();
    assert!(
        verdicts.iter().any(|v| v.starts_with("ok: 1 pages")),
        "{verdicts:?}"
    );
    assert!(
        verdicts.iter().any(|v| v.starts_with("ok: 10 values")),
        "{verdicts:?}"
    );
    // Damage the page store's region header: reported, exit 2.
    let mut b = std::fs::read(&p.0).unwrap();
    let heap = find_heap_off(&b) as usize;
    let region = (heap..b.len())
        .step_by(64)
        .find(|&o| b[o..o + 8] == 0x4645_5250_4147_4501u64.to_le_bytes())
        .expect("page store header");
    b[region] ^= 0xff;
    std::fs::write(&p.0, &b).unwrap();
    let o = ferrite(&["check", p.s()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("CORRUPT"));
    // An object of a type this build does not know: not called healthy.
    let q = Tmp::new("unknown");
    {
        let _quiet = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
        let pool = Pool::create(&q.0, 1 << 20, &PoolOptions::default()).unwrap();
        pool.create_object("mystery", "someone.elses.type").unwrap();
    }
    let o = ferrite(&["check", q.s()]);
    assert_eq!(o.status.code(), Some(4), "{}", stdout(&o));
    assert!(stdout(&o).contains("UNKNOWN type"), "{}", stdout(&o));
    assert!(!stdout(&o).lines().any(|l| l == "healthy"));
}

/// Issue 9, defect 4: a pool held by another process is answered with a clear
/// error and exit 2, for writers and (while a writer holds it) readers.
#[test]
fn a_pool_in_use_is_refused_with_exit_2() {
    let p = Tmp::new("inuse");
    assert!(ferrite(&["create", p.s(), "--size", "4M"]).status.success());
    let held = Pool::open(&p.0, &PoolOptions::default()).unwrap();
    for args in [
        vec!["info", p.s()],
        vec!["check", p.s()],
        vec!["elf", "info", p.s()],
    ] {
        let o = ferrite(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("in use by another process"),
            "{}",
            stderr(&o)
        );
    }
    // No child of this test binary may be between fork and exec holding a
    // copy of `held`'s descriptor while the lock is checked.
    let quiet = SPAWNING.write().unwrap_or_else(|e| e.into_inner());
    drop(held);
    // Readers share: info runs while this process reads the pool.
    let reader = Pool::open(
        &p.0,
        &PoolOptions {
            read_only: true,
            ..PoolOptions::default()
        },
    )
    .unwrap();
    drop(quiet);
    assert_eq!(ferrite(&["info", p.s()]).status.code(), Some(0));
    drop(reader);
}

/// Reads `heap_off` from the header (offset 64, see docs/FORMAT.md).
fn find_heap_off(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[64..72].try_into().unwrap())
}

/// `check` dry-runs each structure's recovery on a private copy: an intact Elf
/// passes, a damaged one is reported (exit 2), and the file is never modified.
#[test]
fn check_verifies_elf_objects_without_modifying_the_pool() {
    let p = Tmp::new("elfcheck");
    let csv = std::env::temp_dir().join(format!("ferrite-cli-{}-check.csv", std::process::id()));
    std::fs::write(&csv, "a,b,c\n1,2,3\n1,2,4\n5,6,7\n1,9,3\n").unwrap();
    assert!(ferrite(&["create", p.s(), "--size", "8M"]).status.success());
    let o = ferrite(&["elf", "build", p.s(), "--csv", csv.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let _ = std::fs::remove_file(&csv);
    let before = std::fs::read(&p.0).unwrap();
    let o = ferrite(&["check", p.s(), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["objects"][0]["verdict"]
            .as_str()
            .unwrap()
            .starts_with("ok: 4 rows"),
        "{v}"
    );
    assert_eq!(std::fs::read(&p.0).unwrap(), before, "check must not write");
    let mut b = before.clone();
    let heap = find_heap_off(&b) as usize;
    for x in &mut b[heap..heap + 512] {
        *x ^= 0x5a;
    }
    std::fs::write(&p.0, &b).unwrap();
    let o = ferrite(&["check", p.s()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("CORRUPT"));
}

/// Runs `ferrite bench SUB ARGS --out DIR --json`, checks it succeeded and
/// wrote `SUB.svg`, and returns the report (DIR is removed).
fn bench_json(sub: &str, args: &[&str]) -> serde_json::Value {
    let out = Tmp::new(&format!("{sub}bench-out"));
    let o = ferrite(&[&["bench", sub][..], args, &["--out", out.s(), "--json"]].concat());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(std::path::Path::new(out.s())
        .join(format!("{sub}.svg"))
        .exists());
    std::fs::remove_dir_all(out.s()).unwrap();
    v
}

/// `ferrite bench SUB` with each set of flags exits 1 with its message.
fn bench_rejects(sub: &str, cases: &[(&[&str], &str)]) {
    for (args, msg) in cases {
        let bad = ferrite(&[&["bench", sub][..], args].concat());
        assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
        assert!(stderr(&bad).contains(msg), "{}", stderr(&bad));
    }
}

#[test]
fn cache_bench_sweeps_region_sizes_and_names_the_effective_cache() {
    let v = bench_json("cache", &["--max-region", "2M", "--ops", "20000"]);
    let rs = v["results"].as_array().unwrap();
    // 64K..2M (64, 96, 128, 192, 256, 384, 512, 768 KiB, 1, 1.5, 2 MiB), huge
    // and 4 KiB pages.
    assert_eq!(rs.len(), 22);
    let sizes: Vec<u64> = rs.iter().filter_map(|r| r["param"].as_u64()).collect();
    assert_eq!(sizes.len(), 22);
    assert_eq!(*sizes.iter().max().unwrap(), 2 << 20);
    for r in rs {
        assert!(r["ns_per_op"].as_f64().unwrap() > 0.0, "{r}");
    }
    let notes = v["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("effective cache")
                || n.as_str().unwrap().contains("no region")),
        "{notes:?}"
    );
    bench_rejects(
        "cache",
        &[
            (&["--max-region", "512K"], "at least 1M"),
            (&["--max-region", "100T"], "quarter of this machine"),
            (&["--ops", "10"], "--ops must be"),
        ],
    );
}

#[test]
fn memory_floor_bench_reports_every_cell() {
    let v = bench_json("memory", &["--region", "4M", "--ops", "20000"]);
    let rs = v["results"].as_array().unwrap();
    // 3 regions (pool, DRAM 4 KiB, DRAM huge pages) x 4 patterns.
    assert_eq!(rs.len(), 12);
    for r in rs {
        assert!(r["mops"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ns_per_op"].as_f64().unwrap() > 0.0, "{r}");
    }
    let route: Vec<_> = rs
        .iter()
        .filter(|r| r["bench"] == "route-then-leaf")
        .collect();
    assert_eq!(route.len(), 3, "one route-then-leaf cell per region");
    bench_rejects(
        "memory",
        &[
            (&["--region", "4K"], "at least 1M"),
            (&["--region", "100T"], "quarter of this machine"),
            (&["--ops", "0"], "--ops must be"),
        ],
    );
}
