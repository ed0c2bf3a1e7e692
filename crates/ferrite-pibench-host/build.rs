//! Compiles the C++ host shim (shim/host.cpp) into this crate, and the test
//! wrapper libraries (tests/wrappers/probe_wrapper.cpp) next to it.
//!
//! Each test wrapper is compiled against one layout's `tree_api.hpp`:
//! PiBench's own when a checkout is there (`PIBENCH_MASTER_SRC` for master,
//! the ep2 layout; `PIBENCH_SRC` or scripts/pibench's default clone for the
//! optiql commit), otherwise tests/interface/<layout>/tree_api.hpp, our
//! statement of it. Never against the host's include/pibench_layouts.hpp: the
//! tests must not share the host's idea of the layout. `FPH_<NAME>_HEADER`
//! tells the tests which header each wrapper was built against.

use std::path::{Path, PathBuf};
use std::process::Command;

fn nonempty_env(name: &str) -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The upstream header of a layout, if a checkout is named (or, for optiql,
/// at scripts/pibench/run.sh's default place).
fn upstream(layout: &str) -> Option<PathBuf> {
    let src = match layout {
        "ep2" => nonempty_env("PIBENCH_MASTER_SRC"),
        _ => nonempty_env("PIBENCH_SRC").or_else(|| {
            let tmp = nonempty_env("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"));
            let d = tmp.join("ferrite-pibench/pibench");
            d.join("include/tree_api.hpp").is_file().then_some(d)
        }),
    }?;
    let h = src.join("include/tree_api.hpp");
    if !h.is_file() {
        panic!(
            "{}: no include/tree_api.hpp there (unset the variable to use tests/interface/{layout})",
            src.display()
        );
    }
    // A master checkout must have the ep2 layout, an optiql one tls_setup.
    let text = std::fs::read_to_string(&h).unwrap_or_default();
    let has_tls = text.contains("tls_setup");
    if (layout == "ep2") == has_tls {
        panic!(
            "{} is not PiBench's {layout} interface (tls_setup {}): point {} at the right checkout",
            h.display(),
            if has_tls { "present" } else { "absent" },
            if layout == "ep2" {
                "PIBENCH_MASTER_SRC (branch master)"
            } else {
                "PIBENCH_SRC (commit 11c74d69)"
            }
        );
    }
    Some(h)
}

fn compile_wrapper(
    cxx: &str,
    out: &Path,
    name: &str,
    include: &Path,
    defs: &[&str],
    extra: &[String],
) -> PathBuf {
    let lib = out.join(format!("lib{name}.so"));
    let status = Command::new(cxx)
        .args(["-std=c++17", "-O2", "-Wall", "-fPIC", "-shared", "-pthread"])
        .arg(format!("-I{}", include.display()))
        .args(defs)
        .args(extra)
        .arg("tests/wrappers/probe_wrapper.cpp")
        .arg("-o")
        .arg(&lib)
        .status();
    match status {
        Ok(s) if s.success() => lib,
        Ok(s) => panic!(
            "{cxx} failed to compile the {name} test wrapper against {}: {s}",
            include.display()
        ),
        Err(e) => panic!("cannot run {cxx} (the PiBench host needs a C++ compiler): {e}"),
    }
}

fn main() {
    for f in [
        "shim/host.cpp",
        "include/pibench_layouts.hpp",
        "tests/wrappers/probe_wrapper.cpp",
        "tests/interface/ep2/tree_api.hpp",
        "tests/interface/optiql/tree_api.hpp",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    cc::Build::new()
        .cpp(true)
        .file("shim/host.cpp")
        .include("include")
        .flag_if_supported("-std=c++17")
        .warnings(true)
        .extra_warnings(true)
        .compile("ferrite_pibench_host");
    println!("cargo:rustc-link-lib=dylib=dl");

    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let mut headers = Vec::new();
    for layout in ["ep2", "optiql"] {
        let (dir, label) = match upstream(layout) {
            Some(h) => {
                println!("cargo:rerun-if-changed={}", h.display());
                let d = h.parent().expect("header has a directory").to_path_buf();
                (d, h.display().to_string())
            }
            None => (
                PathBuf::from(format!("tests/interface/{layout}")),
                format!("tests/interface/{layout}/tree_api.hpp"),
            ),
        };
        headers.push((layout, dir, label));
    }
    let hide = out.join("hide-vtables.map");
    std::fs::write(&hide, "{ global: create_tree; probe_*; local: *; };\n")
        .expect("write the version script");
    // Hidden from the dynamic symbols and stripped of the symbol table: a
    // vtable the host cannot measure.
    let hide_flag = vec![
        format!("-Wl,--version-script={}", hide.display()),
        "-s".to_string(),
    ];
    for (layout, dir, label) in &headers {
        let opt: &[&str] = if *layout == "optiql" {
            &["-DPROBE_OPTIQL"]
        } else {
            &[]
        };
        let variants: [(&str, Vec<&str>, &[String]); 4] = [
            ("", vec![], &[]),
            ("extra", vec!["-DPROBE_EXTRA_SLOT"], &[]),
            ("wrong", vec!["-DPROBE_WRONG_ORDER"], &[]),
            ("hidden", vec![], &hide_flag),
        ];
        for (suffix, defs, extra) in variants {
            let mut d: Vec<&str> = opt.to_vec();
            d.extend(defs);
            let name = if suffix.is_empty() {
                format!("probe_{layout}")
            } else {
                format!("probe_{layout}_{suffix}")
            };
            let lib = compile_wrapper(&cxx, &out, &name, dir, &d, extra);
            println!(
                "cargo:rustc-env=FPH_{}={}",
                name.to_ascii_uppercase(),
                lib.display()
            );
        }
        if *layout == "ep2" {
            // A wrapper comparing 8-byte keys as signed integers (LB+-Tree).
            let lib = compile_wrapper(
                &cxx,
                &out,
                "probe_ep2_signed",
                dir,
                &["-DPROBE_SIGNED"],
                &[],
            );
            println!("cargo:rustc-env=FPH_PROBE_EP2_SIGNED={}", lib.display());
        }
        println!(
            "cargo:rustc-env=FPH_{}_HEADER={}",
            layout.to_ascii_uppercase(),
            label.replace(['"', '\\'], "?")
        );
    }
}
