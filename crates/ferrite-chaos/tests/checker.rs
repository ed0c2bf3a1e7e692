//! The Go linearizability checker, run from the Rust suite: its own Go tests,
//! then histories written by the Rust side of the format and judged by it.

use std::path::PathBuf;
use std::process::Command;

use ferrite_chaos::{build_checker, check, checker_dir, HistoryWriter, Record, Status};

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrite-chaos-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_go_checker_passes_its_own_tests() {
    for args in [vec!["vet", "./..."], vec!["test", "./..."]] {
        let o = Command::new("go")
            .args(&args)
            .current_dir(checker_dir())
            .output()
            .expect("go is installed (the README's test command runs the Go tests too)");
        assert!(
            o.status.success(),
            "go {args:?}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let o = Command::new("gofmt")
        .args(["-l", "."])
        .current_dir(checker_dir())
        .output()
        .expect("gofmt");
    assert!(
        o.stdout.is_empty(),
        "not gofmt-formatted: {}",
        String::from_utf8_lossy(&o.stdout)
    );
}

fn rec(client: u32, op: &str, key: &str, call: u64, ret: u64) -> Record {
    Record {
        client,
        op: op.into(),
        key: key.into(),
        value: None,
        expected: None,
        call,
        ret,
        status: Status::Ok,
        found: false,
        applied: false,
    }
}

#[test]
fn histories_written_here_are_judged_there() {
    let dir = tmp("judge");
    let bin = build_checker(&dir).unwrap();
    let write = |name: &str, rs: &[Record]| {
        let mut w = HistoryWriter::create(&dir.join(name)).unwrap();
        for r in rs {
            w.record(r).unwrap();
        }
        w.finish().unwrap()
    };
    let set = |c, k: &str, v: &str, a, b| Record {
        value: Some(v.into()),
        ..rec(c, "set", k, a, b)
    };
    let get = |c, k: &str, v: Option<&str>, a, b| Record {
        value: v.map(Into::into),
        found: v.is_some(),
        ..rec(c, "get", k, a, b)
    };
    let cas = |c, k: &str, e: &str, v: &str, applied, a, b| Record {
        value: Some(v.into()),
        expected: Some(e.into()),
        applied,
        ..rec(c, "cas", k, a, b)
    };
    let good = write(
        "good.jsonl",
        &[
            set(0, "k", "1", 0, 10),
            // Concurrent with the set: may see either.
            get(1, "k", None, 5, 8),
            cas(1, "k", "1", "2", true, 20, 30),
            Record {
                status: Status::Unknown,
                ..set(2, "k", "3", 35, 0)
            },
            get(0, "k", Some("2"), 40, 50),
        ],
    );
    let summary = check(&bin, std::slice::from_ref(&good), &dir).unwrap();
    assert!(summary.linearizable, "{summary:?}");
    assert_eq!(
        (summary.operations, summary.indeterminate, summary.keys),
        (5, 1, 1)
    );
    let bad = write(
        "bad.jsonl",
        &[
            set(0, "k", "1", 0, 10),
            set(0, "k", "2", 20, 30),
            // A stale read after both writes were acknowledged.
            get(1, "k", Some("1"), 40, 50),
            set(0, "other", "x", 0, 10),
        ],
    );
    let summary = check(&bin, &[good, bad.clone()], &dir).unwrap();
    assert!(!summary.linearizable);
    assert_eq!(summary.violations.len(), 1, "{summary:?}");
    assert_eq!(summary.violations[0].key, "k");
    let html = summary.violations[0].html.clone().unwrap();
    assert!(std::fs::read_to_string(html).unwrap().contains("<html"));
    std::fs::remove_dir_all(&dir).unwrap();
}
