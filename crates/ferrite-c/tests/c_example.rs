//! Compiles `examples/demo.c` with the system C compiler (`cc`, or `$CC`)
//! against `include/ferrite.h` and the `libferrite_c.so` cargo built for
//! this test, runs its tour and checks every line it prints; then runs it as
//! a writer of transactions, kills it with SIGKILL, and runs its reopen
//! check; and shows that it gets FERRITE_ERR_IN_USE for a pool this process
//! holds open.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The directory with the `libferrite_c.so` built beside this test.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    for d in [
        deps.clone(),
        deps.parent().map(Path::to_path_buf).unwrap_or_default(),
    ] {
        if d.join("libferrite_c.so").exists() {
            return d;
        }
    }
    panic!("libferrite_c.so not found next to {}", exe.display());
}

/// The demo, compiled once per test process.
fn demo() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
            // In cargo's scratch directory for tests (under target/), not /tmp:
            // the binary outlives the test process.
            let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("ferrite-c-demo-{}", std::process::id()));
            let lib = lib_dir();
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let o = Command::new(&cc)
                .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
                .arg("-I")
                .arg(crate_dir.join("include"))
                .arg(crate_dir.join("examples/demo.c"))
                .arg("-o")
                .arg(&out)
                .arg(format!("-L{}", lib.display()))
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-lferrite_c")
                .output()
                .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
            assert!(
                o.status.success(),
                "{cc} failed to compile examples/demo.c:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            out
        })
        .clone()
}

fn pool(tag: &str) -> String {
    let p = format!("/dev/shm/ferrite-c-{tag}-{}.pool", std::process::id());
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn the_c_demo_compiles_runs_and_prints_what_it_should() {
    let path = pool("tour");
    let o = Command::new(demo()).arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "demo failed ({}):\n{stdout}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let want = "\
durability: emulated-pm-tmpfs
insert apple: FERRITE_OK
insert apple again: FERRITE_EXISTS
update durian: FERRITE_NOT_FOUND
get cherry: dark red
get into 2 bytes: FERRITE_ERR_BUFFER_TOO_SMALL (needs 8)
get_alloc banana: yellow
get_with apple: 3 bytes
range: apple=red banana=yellow cherry=dark red
reverse: cherry=dark red banana=yellow apple=red
after the transfer: alice=70 bob=30
cas lock (absent -> me): FERRITE_OK
cas lock (absent -> you): FERRITE_CONFLICT
oversized key: FERRITE_ERR_KEY_TOO_LARGE: key of 2000 bytes exceeds the limit of 1024 bytes
lineitem as a map: FERRITE_ERR_WRONG_TYPE
elf: 2 of 4 rows match: 0 2
keys: 5
close with the map still open: FERRITE_ERR_STILL_OPEN
";
    assert_eq!(stdout, want);
    // The pool closed with the last handle: this process can open it, and
    // finds what the demo wrote.
    let db = ferrite::Db::open(&path).unwrap();
    assert_eq!(
        db.map("fruit").unwrap().get("banana").unwrap(),
        Some(b"yellow".to_vec())
    );
    drop(db);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn kill_9_the_c_writer_then_reopen_from_c_and_rust() {
    let path = pool("kill9");
    let mut before = 0u64;
    for round in 0..2 {
        let mut w = Command::new(demo())
            .args([&path, "writer"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(w.stdout.take().unwrap());
        let mut line = String::new();
        let mut acked = 0;
        while acked < before + 300 {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the writer ended early"
            );
            acked = line.trim().strip_prefix("acked ").unwrap().parse().unwrap();
        }
        w.kill().unwrap(); // SIGKILL
        w.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        if let Some(a) = rest
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("acked ")?.parse().ok())
        {
            acked = a;
        }
        let o = Command::new(demo())
            .args([&path, "check"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "round {round}: check failed:\n{stdout}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let last: u64 = stdout
            .trim()
            .strip_prefix("ok last=")
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(
            last == acked || last == acked + 1,
            "last {last}, acked {acked}"
        );
        assert!(stdout.contains(" after=0"), "{stdout}");
        // Rust reads the same.
        let db = ferrite::Db::open(&path).unwrap();
        let m = db.map("txns").unwrap();
        assert_eq!(m.len() as u64, 3 * (last + 1) + 1);
        drop(m);
        db.close().unwrap();
        before = last + 1;
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn the_c_demo_gets_in_use_for_a_pool_this_process_holds() {
    let path = pool("inuse");
    let db = ferrite::Db::create(&path, 64 << 20).unwrap();
    let o = Command::new(demo()).args([&path, "open"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(2), "{stdout}");
    assert!(
        stdout.starts_with("open: FERRITE_ERR_IN_USE\nmessage: "),
        "{stdout}"
    );
    assert!(stdout.contains("in use by another process"), "{stdout}");
    db.close().unwrap();
    let o = Command::new(demo()).args([&path, "open"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "open: FERRITE_OK\n");
    std::fs::remove_file(&path).unwrap();
}
