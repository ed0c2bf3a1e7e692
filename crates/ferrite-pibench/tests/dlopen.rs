//! Loads the built `libferrite_pibench.so` with `dlopen` through PiBench's
//! interface (a C++ driver compiled by build.rs) and checks every method, for
//! each index the adapter can serve (`ferrite`, `ferrite-dram`: the maps of
//! Ferrite's C API).
//!
//! The driver is compiled against PiBench's own `include/tree_api.hpp` when a
//! checkout is available ($PIBENCH_SRC, or scripts/pibench/run.sh's clone) and
//! otherwise against `tests/interface/tree_api.hpp`, never against the
//! adapter's header. It first checks that every slot of that interface, up to
//! the last (`tls_setup`), holds a function of the adapter library in the
//! adapter object's vtable, then calls them all and checks that the adapter
//! counted each `tls_setup` call (see `tests/pibench_driver.cpp`). An adapter
//! whose vtable is shorter than the driver's fails here with "VTABLE MISMATCH".

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The cdylib cargo built beside this test binary.
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps directory");
    let candidates = [
        deps.join("libferrite_pibench.so"),
        deps.parent()
            .map(|p| p.join("libferrite_pibench.so"))
            .unwrap_or_default(),
    ];
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| panic!("libferrite_pibench.so not found next to {}", exe.display()))
}

fn run_check(index: &str, pool: Option<&str>) {
    let pool_path = pool
        .map(|tag| {
            format!(
                "/dev/shm/ferrite-pibench-test-{tag}-{}.pool",
                std::process::id()
            )
        })
        .unwrap_or_default();
    if !pool_path.is_empty() {
        let _ = std::fs::remove_file(&pool_path);
    }
    let child = Command::new(env!("FERRITE_PIBENCH_DRIVER"))
        .arg("check")
        .arg(library())
        .arg(&pool_path)
        .env("FERRITE_PIBENCH_INDEX", index)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the driver");
    // A failed check exits without deleting its trees: remove the temporary
    // pools they left (/dev/shm/ferrite-pibench-PID-N.pool).
    let prefix = format!("ferrite-pibench-{}-", child.id());
    let out = child.wait_with_output().expect("wait for the driver");
    for e in std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if !pool_path.is_empty() {
        let _ = std::fs::remove_file(&pool_path);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{index}: driver failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("checks passed"), "{index}: {stdout}");
    // The driver says which tree_api.hpp it was compiled against: PiBench's own
    // whenever build.rs found a checkout.
    let upstream = env!("FERRITE_PIBENCH_UPSTREAM_HEADER");
    let interface = stdout.lines().find(|l| l.starts_with("interface: "));
    eprintln!("{index}: {}", interface.unwrap_or("(no interface line)"));
    let want = if upstream.is_empty() {
        "tests/interface/tree_api.hpp"
    } else {
        upstream
    };
    assert!(
        interface.is_some_and(|l| l.contains(want)),
        "{index}: driver not compiled against {want}:\n{stdout}"
    );
    // The exact vtable length check needs the library's symbol table, which
    // cargo's builds of this workspace keep (no `strip` in the profiles).
    assert!(
        stdout.contains("vtable length: 9 slots, as the interface"),
        "{index}: the vtable length was not checked (library stripped?):\n{stdout}"
    );
}

#[test]
fn pibench_loads_ferrite_on_pm_and_every_method_works() {
    run_check("ferrite", Some("pm"));
}

#[test]
fn pibench_loads_ferrite_dram() {
    run_check("ferrite-dram", None);
}

#[test]
fn a_bad_index_name_makes_create_tree_return_null() {
    let out = Command::new(env!("FERRITE_PIBENCH_DRIVER"))
        .arg("check")
        .arg(library())
        .arg("")
        .env("FERRITE_PIBENCH_INDEX", "nope")
        .output()
        .expect("run the driver");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("FERRITE_PIBENCH_INDEX"), "{stderr}");
    // The old benchmark baseline is not served any more: PiBench's stlmap
    // wrapper is the std::map baseline.
    let out = Command::new(env!("FERRITE_PIBENCH_DRIVER"))
        .arg("check")
        .arg(library())
        .arg("")
        .env("FERRITE_PIBENCH_INDEX", "btreemap")
        .output()
        .expect("run the driver");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("use ferrite or ferrite-dram"), "{stderr}");
}

#[test]
fn the_adapter_uses_the_c_api_and_nothing_else() {
    // The shim includes ferrite.h and no adapter-specific C header exists.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shim = std::fs::read_to_string(dir.join("shim/ferrite_wrapper.cpp")).unwrap();
    assert!(shim.contains("#include \"ferrite.h\""));
    assert!(!dir.join("include/ferrite_pibench.h").exists());
    assert!(!shim.contains("ferrite_kv_"));
}
