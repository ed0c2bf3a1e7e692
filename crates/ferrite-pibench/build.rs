//! Compiles the C++ tree_api shim (over ferrite-c's include/ferrite.h) into
//! the library, and the dlopen test driver (an executable that loads the
//! library the way PiBench does) next to it.
//!
//! The driver is compiled against PiBench's own `include/tree_api.hpp` when a
//! checkout is available ($PIBENCH_SRC, else the one scripts/pibench/run.sh
//! clones by default), and otherwise against tests/interface/tree_api.hpp, our
//! statement of the pinned commit's interface. Never against the adapter's
//! include/tree_api.hpp: the test must not share the adapter's idea of the
//! layout. `FERRITE_PIBENCH_UPSTREAM_HEADER` tells the tests which was used.

use std::path::{Path, PathBuf};
use std::process::Command;

/// PiBench's header to compile the driver against, if a checkout is here.
fn upstream_header() -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed=PIBENCH_SRC");
    let nonempty = |v: &std::ffi::OsString| !v.is_empty();
    if let Some(src) = std::env::var_os("PIBENCH_SRC").filter(nonempty) {
        let h = Path::new(&src).join("include/tree_api.hpp");
        if !h.is_file() {
            panic!(
                "PIBENCH_SRC={}: no include/tree_api.hpp there (unset it to use \
                 tests/interface/tree_api.hpp)",
                Path::new(&src).display()
            );
        }
        return Some(h);
    }
    // run.sh's default: WORK=${TMPDIR:-/tmp}/ferrite-pibench, PIBENCH_SRC=$WORK/pibench.
    // A checkout made there after this script last ran is only noticed once
    // PIBENCH_SRC or TMPDIR changes (watching a missing path would rebuild on
    // every build).
    println!("cargo:rerun-if-env-changed=TMPDIR");
    let tmp = std::env::var_os("TMPDIR")
        .filter(nonempty)
        .map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    let h = tmp.join("ferrite-pibench/pibench/include/tree_api.hpp");
    h.is_file().then_some(h)
}

fn main() {
    println!("cargo:rerun-if-changed=shim/ferrite_wrapper.cpp");
    println!("cargo:rerun-if-changed=include/tree_api.hpp");
    println!("cargo:rerun-if-changed=../ferrite-c/include/ferrite.h");
    println!("cargo:rerun-if-changed=tests/pibench_driver.cpp");
    println!("cargo:rerun-if-changed=tests/interface/tree_api.hpp");
    cc::Build::new()
        .cpp(true)
        .file("shim/ferrite_wrapper.cpp")
        .include("include")
        // Ferrite's C API, the only thing the shim calls.
        .include("../ferrite-c/include")
        .flag_if_supported("-std=c++17")
        .warnings(true)
        .extra_warnings(true)
        .compile("ferrite_pibench_shim");

    let upstream = upstream_header();
    // -isystem for PiBench's header: its warnings (unused parameters) are not ours.
    let (include, label) = match &upstream {
        Some(h) => {
            println!("cargo:rerun-if-changed={}", h.display());
            let dir = h.parent().expect("header has a directory");
            (
                format!("-isystem{}", dir.display()),
                format!("PiBench's {}", h.display()),
            )
        }
        None => (
            "-Itests/interface".to_string(),
            "tests/interface/tree_api.hpp (no PiBench checkout)".to_string(),
        ),
    };
    let label = label.replace(['"', '\\'], "?");

    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let driver = out.join("pibench_driver");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-pthread"])
        .arg(include)
        .arg(format!("-DFERRITE_PIBENCH_INTERFACE=\"{label}\""))
        .arg("tests/pibench_driver.cpp")
        .arg("-o")
        .arg(&driver)
        .arg("-ldl")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "{cxx} failed to compile tests/pibench_driver.cpp against {label}: {s} \
             (a compile error here can mean the interface changed)"
        ),
        Err(e) => panic!("cannot run {cxx} (the PiBench adapter needs a C++ compiler): {e}"),
    }
    println!(
        "cargo:rustc-env=FERRITE_PIBENCH_DRIVER={}",
        driver.display()
    );
    println!(
        "cargo:rustc-env=FERRITE_PIBENCH_UPSTREAM_HEADER={}",
        upstream
            .as_deref()
            .map(Path::display)
            .map_or(String::new(), |d| d.to_string())
    );
}
