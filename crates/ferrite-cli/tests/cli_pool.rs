//! The `ferrite` binary as a user runs it: pools, bad input, crash tests.

use std::path::PathBuf;
use std::process::{Command, Output};

fn ferrite(args: &[&str]) -> Output {
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
    let o = ferrite(&["info", p.s(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
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
    assert!(stdout(&o).lines().any(|l| l == "allocator"));
}

#[test]
fn demo_writes_reopens_and_verifies() {
    let p = Tmp::new("demo");
    let o = ferrite(&["demo", "--pool", p.s(), "--blocks", "2000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("verified  all 2000 blocks intact"), "{out}");
    assert!(!p.0.exists(), "demo removes its pool unless --keep");
}

#[test]
fn check_finds_corrupt_objects() {
    let p = Tmp::new("obj");
    let o = ferrite(&[
        "demo",
        "--pool",
        p.s(),
        "--blocks",
        "50",
        "--size",
        "4M",
        "--keep",
    ]);
    assert!(o.status.success());
    assert_eq!(ferrite(&["check", p.s()]).status.code(), Some(0));
    // Corrupt the first slot pointer of the demo table (its root block is the
    // first 64-byte block of the first chunk): point it into the header.
    let mut b = std::fs::read(&p.0).unwrap();
    let info: serde_json::Value =
        serde_json::from_slice(&ferrite(&["info", p.s(), "--json"]).stdout).unwrap();
    assert_eq!(info["objects"][0]["name"], "demo");
    let heap_off = find_heap_off(&b);
    b[heap_off as usize..heap_off as usize + 8].copy_from_slice(&8u64.to_le_bytes());
    std::fs::write(&p.0, &b).unwrap();
    let o = ferrite(&["check", p.s()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("CORRUPT"));
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

#[test]
fn memory_floor_bench_reports_every_cell() {
    let out = Tmp::new("membench-out");
    let o = ferrite(&[
        "bench",
        "memory",
        "--region",
        "4M",
        "--ops",
        "20000",
        "--out",
        out.s(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rs = v["results"].as_array().unwrap();
    // 3 regions (pool, DRAM 4 KiB, DRAM huge pages) x 3 patterns.
    assert_eq!(rs.len(), 9);
    for r in rs {
        assert!(r["mops"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["ns_per_op"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(std::path::Path::new(out.s()).join("memory.svg").exists());
    std::fs::remove_dir_all(out.s()).unwrap();
    for (args, msg) in [
        (&["--region", "4K"][..], "at least 1M"),
        (&["--region", "100T"][..], "quarter of this machine"),
        (&["--ops", "0"][..], "--ops must be"),
    ] {
        let bad = ferrite(&[&["bench", "memory"][..], args].concat());
        assert_eq!(bad.status.code(), Some(1), "{}", stderr(&bad));
        assert!(stderr(&bad).contains(msg), "{}", stderr(&bad));
    }
}
