//! Fault-injection testing of the replicated service (issue 12): clients
//! record every operation they issue — invocation and response times
//! (monotonic), the reply, or that the reply never came — into history files,
//! and the Go checker in `chaos/checker` (Porcupine, with a key-value model
//! that understands compare-and-set) decides whether each history is
//! linearizable.
//!
//! This module is the Rust side of that contract: [`Record`] is one line of a
//! history file, [`HistoryWriter`] writes them, and [`check`] builds and runs
//! the checker and returns its [`Summary`].

pub mod client;
pub mod cluster;
pub mod history;
pub mod proxy;
pub mod run;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// What happened to an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The reply arrived.
    Ok,
    /// An error reply that guarantees the operation had no effect.
    Fail,
    /// No reply (timeout, dropped connection): it may or may not have applied.
    Unknown,
}

/// One line of a history file (the format `chaos/checker` reads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub client: u32,
    /// `get`, `set` or `cas` (`SET key value IFEQ expected`).
    pub op: String,
    pub key: String,
    /// The value written (set, cas) or read (get, when found).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// cas: the value compared with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
    /// Monotonic nanoseconds at invocation and at the reply (ignored for
    /// `Unknown`).
    pub call: u64,
    pub ret: u64,
    pub status: Status,
    /// get: whether the key existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub found: bool,
    /// cas: whether it applied.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub applied: bool,
}

/// Appends records to a history file, one JSON object per line.
pub struct HistoryWriter {
    out: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
}

impl HistoryWriter {
    pub fn create(path: &Path) -> std::io::Result<HistoryWriter> {
        Ok(HistoryWriter {
            out: std::io::BufWriter::new(std::fs::File::create(path)?),
            path: path.to_path_buf(),
        })
    }

    pub fn record(&mut self, r: &Record) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, r)?;
        self.out.write_all(b"\n")
    }

    /// Flushes and returns the file's path.
    pub fn finish(mut self) -> std::io::Result<PathBuf> {
        self.out.flush()?;
        Ok(self.path)
    }
}

/// A key whose history is not linearizable.
#[derive(Debug, Clone, Deserialize)]
pub struct Violation {
    pub file: String,
    pub key: String,
    #[serde(default)]
    pub html: Option<String>,
}

/// The checker's verdict over all histories it was given.
#[derive(Debug, Clone, Deserialize)]
pub struct Summary {
    pub files: u64,
    pub operations: u64,
    pub indeterminate: u64,
    pub failed_left_out: u64,
    pub keys: u64,
    pub linearizable: bool,
    pub violations: Vec<Violation>,
    pub timed_out: Vec<String>,
}

/// The checker's source directory (`chaos/checker` in the repository).
pub fn checker_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../chaos/checker")
}

/// Builds the checker with `go build` into `out_dir` and returns the binary.
pub fn build_checker(out_dir: &Path) -> Result<PathBuf, String> {
    let bin = out_dir.join("ferrite-linearizability-checker");
    let o = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(".")
        .current_dir(checker_dir())
        .output()
        .map_err(|e| format!("cannot run `go` (Go is needed for the checker): {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "go build failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    Ok(bin)
}

/// Runs the checker binary on `histories`; visualisations of failing
/// histories go to `html_dir`.
pub fn check(checker: &Path, histories: &[PathBuf], html_dir: &Path) -> Result<Summary, String> {
    let o = Command::new(checker)
        .arg("-html-dir")
        .arg(html_dir)
        .args(histories)
        .output()
        .map_err(|e| format!("cannot run the checker: {e}"))?;
    if o.status.code() == Some(2) && o.stdout.is_empty() {
        return Err(format!(
            "the checker refused its input: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    serde_json::from_slice(&o.stdout).map_err(|e| {
        format!(
            "unreadable checker output ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// Builds the `ferrite` binary (crate `ferrite-cli`) with the profile and
/// target directory of the running test executable and returns its path.
///
/// A test of one crate cannot name another crate's binary
/// (`CARGO_BIN_EXE_*` only covers the crate's own), so the harness asks cargo
/// for it — unless the binary is newer than every source file of the
/// workspace (as after `cargo test --workspace`, which builds it), when it is
/// used as it is.
pub fn ferrite_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // <target>/<profile dir>/deps/<test executable>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("unexpected test executable path {}", exe.display()))?;
    let target = profile_dir
        .parent()
        .ok_or_else(|| format!("unexpected test executable path {}", exe.display()))?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug");
    let bin = profile_dir.join("ferrite");
    // Built after the last change to any source of the workspace (as when
    // `cargo test --workspace` built it a moment ago): use it as it is. A
    // second cargo with another package selection could unify features
    // differently and rebuild much of the workspace.
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if let Ok(built) = std::fs::metadata(&bin).and_then(|m| m.modified()) {
        let newest = newest_source(&workspace.join("crates"))
            .max(mtime(&workspace.join("Cargo.lock")))
            .max(mtime(&workspace.join("Cargo.toml")));
        if newest.is_some_and(|n| n <= built) {
            return Ok(bin);
        }
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "ferrite-cli", "--bin", "ferrite"])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let o = cmd
        .output()
        .map_err(|e| format!("cannot run cargo to build ferrite: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "building ferrite failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    if !bin.exists() {
        return Err(format!("{} was not built", bin.display()));
    }
    Ok(bin)
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The newest modification time of a `.rs` or `Cargo.toml` file under `dir`
/// (skipping `target` directories).
fn newest_source(dir: &Path) -> Option<std::time::SystemTime> {
    let mut newest = None;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if p.file_name().is_some_and(|n| n != "target") {
                    stack.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs")
                || p.file_name().is_some_and(|n| n == "Cargo.toml")
            {
                newest = newest.max(mtime(&p));
            }
        }
    }
    newest
}
