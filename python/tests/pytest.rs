//! The Python package's tests, run by the Rust suite: installs the package the
//! way a user does (`pip install ./python`: pip fetches maturin from PyPI as
//! the build backend, maturin builds the Rust extension) into a virtual
//! environment under `target/tmp/`, adds numpy, and runs `pytest python/tests`
//! with it. Fails when pip or pytest fails.
//!
//! maturin builds in the workspace's target directory (cargo releases its
//! lock once the outer `cargo test` has built everything), so the extension
//! reuses the release build of the workspace: only the extension crate
//! itself is compiled again.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(what: &str, cmd: &mut Command) {
    eprintln!("$ {cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}

fn venv() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = tmp.join("python-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        // pytest comes with the machine's Python (--system-site-packages).
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(
            "creating the virtual environment",
            Command::new(base)
                .args(["-m", "venv", "--system-site-packages"])
                .arg(&venv),
        );
    }
    python
}

#[test]
fn pip_install_then_pytest() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = venv();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    run(
        "pip install ./python",
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(here)
            .env(
                "CARGO_TARGET_DIR",
                tmp.parent().expect("target/tmp is in target"),
            )
            .env_remove("CARGO_BUILD_TARGET_DIR"),
    );
    let has = |module: &str| {
        Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has("numpy") {
        run(
            "pip install numpy",
            Command::new(&python).args(["-m", "pip", "install", "--quiet", "numpy"]),
        );
    }
    assert!(
        has("pytest"),
        "pytest is not importable in {}",
        python.display()
    );
    // Run from a directory without the source package, so that the installed
    // one is imported.
    run(
        "pytest python/tests",
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            // pytest's temporary directories inside target/, not in /tmp where
            // pytest-of-USER would outlive the run.
            .arg(format!("--basetemp={}", tmp.join("pytest").display()))
            .arg(here.join("tests"))
            .current_dir(tmp),
    );
}
