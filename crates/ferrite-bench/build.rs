//! Records the build for the reports' `environment`: `rustc -V`, the cargo
//! profile and optimisation level, and the git commit the sources are at.

use std::process::Command;

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = output(&rustc, &["-V"]).unwrap_or_else(|| "rustc (unknown)".into());
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".into());
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "?".into());
    let commit = output("git", &["rev-parse", "--short=12", "HEAD"]).unwrap_or_default();
    println!("cargo:rustc-env=FERRITE_BUILD_RUSTC={version}");
    println!("cargo:rustc-env=FERRITE_BUILD_PROFILE={profile}, opt-level {opt}");
    println!("cargo:rustc-env=FERRITE_BUILD_COMMIT={commit}");
    // Rerun when HEAD moves (a commit, a checkout), and not for every edit.
    println!("cargo:rerun-if-changed=build.rs");
    for p in ["HEAD", "packed-refs"] {
        if let Some(path) = output("git", &["rev-parse", "--git-path", p]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    if let Some(r) = output("git", &["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = output("git", &["rev-parse", "--git-path", &r]) {
            if std::path::Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rerun-if-env-changed=RUSTC");
}
