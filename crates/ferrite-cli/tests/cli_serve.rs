//! `ferrite serve` is safe on a network by default: a non-loopback client
//! port needs a password, a non-loopback replica port a cluster secret; it
//! refuses to start otherwise (exit status 64, a message naming the option)
//! and creates nothing.

use std::process::Command;

fn serve(args: &[&str]) -> (i32, String, bool) {
    let pool = format!("/dev/shm/ferrite-cli-serve-{}.pool", std::process::id());
    let o = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["serve", "--id", "1", "--pool", &pool])
        .args(args)
        .output()
        .unwrap();
    let created = std::path::Path::new(&pool).exists();
    let _ = std::fs::remove_file(&pool);
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        created,
    )
}

#[test]
fn exposed_ports_without_a_password_or_secret_are_refused_at_start() {
    let lo = ["--peer-listen", "127.0.0.1:0"];
    let (code, err, created) = serve(&[&["--listen", "0.0.0.0:0"][..], &lo].concat());
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--requirepass"), "{err}");
    assert!(!created, "a refused replica created its pool");

    let (code, err, _) = serve(&[
        "--listen",
        "127.0.0.1:0",
        "--peer-listen",
        "0.0.0.0:0",
        "--requirepass",
        "pw",
    ]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--cluster-secret"), "{err}");

    // An empty password or secret is none.
    let empty = std::env::temp_dir().join(format!("ferrite-empty-{}", std::process::id()));
    std::fs::write(&empty, "\n").unwrap();
    let (code, err, _) = serve(&[
        "--listen",
        "0.0.0.0:0",
        "--requirepass-file",
        empty.to_str().unwrap(),
    ]);
    std::fs::remove_file(&empty).unwrap();
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("empty"), "{err}");
}
