//! Compiles the C++ tree_api shim into the library, and the dlopen test driver
//! (an executable that loads the library the way PiBench does) next to it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=shim/ferrite_wrapper.cpp");
    println!("cargo:rerun-if-changed=include/tree_api.hpp");
    println!("cargo:rerun-if-changed=include/ferrite_pibench.h");
    println!("cargo:rerun-if-changed=tests/pibench_driver.cpp");
    cc::Build::new()
        .cpp(true)
        .file("shim/ferrite_wrapper.cpp")
        .include("include")
        .flag_if_supported("-std=c++17")
        .warnings(true)
        .extra_warnings(true)
        .compile("ferrite_pibench_shim");

    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let driver = out.join("pibench_driver");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let mut cmd = Command::new(&cxx);
    cmd.args([
        "-std=c++17",
        "-O2",
        "-Wall",
        "-Wextra",
        "-pthread",
        "-Iinclude",
    ]);
    let status = cmd
        .arg("tests/pibench_driver.cpp")
        .arg("-o")
        .arg(&driver)
        .arg("-ldl")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("{cxx} failed to compile tests/pibench_driver.cpp: {s}"),
        Err(e) => panic!("cannot run {cxx} (the PiBench adapter needs a C++ compiler): {e}"),
    }
    println!(
        "cargo:rustc-env=FERRITE_PIBENCH_DRIVER={}",
        driver.display()
    );
}
