//! Runs one index's part of a benchmark in a child process, so a published
//! index that crashes (a segfault in a wrapper, an abort in PMDK) is reported
//! with what it had measured so far while the other indexes still run, and
//! whatever it mapped or leaked is gone when the child exits.
//!
//! The child streams [`Event`]s to the parent as JSON lines over a pipe.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrite_report::BenchResult;
use serde_json::{json, Value};

use crate::{BenchError, Result};

/// What an index's part of a run reports, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The index opened: name, what it is, what it promises.
    Info {
        name: String,
        label: String,
        contract: String,
    },
    Note(String),
    Warning(String),
    /// About to run this (for the crash report).
    Running(String),
    Result(Box<BenchResult>),
    /// Lookups that returned another key's value, and all wrong answers.
    Wrong {
        values: u64,
        total: u64,
    },
}

impl Event {
    fn to_json(&self) -> Value {
        match self {
            Event::Info {
                name,
                label,
                contract,
            } => json!({"e": "info", "name": name, "label": label, "contract": contract}),
            Event::Note(s) => json!({"e": "note", "s": s}),
            Event::Warning(s) => json!({"e": "warning", "s": s}),
            Event::Running(s) => json!({"e": "running", "s": s}),
            Event::Result(b) => json!({"e": "result", "r": b}),
            Event::Wrong { values, total } => {
                json!({"e": "wrong", "values": values, "total": total})
            }
        }
    }

    fn from_json(v: &Value) -> Option<Event> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(match v.get("e")?.as_str()? {
            "info" => Event::Info {
                name: s("name")?,
                label: s("label")?,
                contract: s("contract")?,
            },
            "note" => Event::Note(s("s")?),
            "warning" => Event::Warning(s("s")?),
            "running" => Event::Running(s("s")?),
            "result" => Event::Result(Box::new(serde_json::from_value(v.get("r")?.clone()).ok()?)),
            "wrong" => Event::Wrong {
                values: v.get("values")?.as_u64()?,
                total: v.get("total")?.as_u64()?,
            },
            _ => return None,
        })
    }
}

/// Runs `part` in a forked child, passing its events to `sink` as they come.
/// A child that fails, panics or dies by a signal adds a [`Event::Warning`]
/// naming what it was running; the events before stay. Returns whether the
/// child finished cleanly.
///
/// Call only while this process runs no other threads of its own that hold
/// locks (the benchmark's workers are joined between indexes).
///
/// `budget` gives each step (each [`Event::Running`]) its time: a child that
/// is still in a step after that long is killed (a published index that spins
/// forever) and reported.
///
/// `ended` is called with the child's process id once it has been reaped,
/// however it ended: the place to remove what a killed child left behind.
pub fn in_child(
    what: &str,
    part: impl FnOnce(&mut dyn FnMut(Event)) -> Result<()>,
    budget: &dyn Fn(&str) -> Duration,
    sink: &mut dyn FnMut(Event),
    ended: &mut dyn FnMut(i32),
) -> Result<bool> {
    let mut fds = [0i32; 2];
    // SAFETY: fds is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(BenchError::Io {
            path: "pipe".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: fork in a process whose other threads (if any) hold no locks
    // the child needs (see above); the child only runs `part` and _exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(BenchError::Io {
            path: "fork".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    if pid == 0 {
        // Drop every descriptor inherited from the parent but stdio and the
        // pipe: a pool file's lock belongs to its open file description, so
        // a copy held here would keep another thread's pool locked (`InUse`
        // for its reopen) for as long as this child runs.
        let w_fd = fds[1] as libc::c_uint;
        // SAFETY: close_range only closes descriptors of this (child) process;
        // none of them is used by the child after this point but the pipe.
        unsafe {
            if w_fd > 3 {
                libc::syscall(
                    libc::SYS_close_range,
                    3 as libc::c_uint,
                    w_fd - 1,
                    0 as libc::c_uint,
                );
            }
            libc::syscall(
                libc::SYS_close_range,
                w_fd + 1,
                libc::c_uint::MAX,
                0 as libc::c_uint,
            );
        }
        // SAFETY: the write end belongs to this child from here on.
        let mut w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
        // SAFETY: closing the child's copy of the read end.
        unsafe { libc::close(fds[0]) };
        let mut emit = |e: Event| {
            let _ = writeln!(w, "{}", e.to_json());
        };
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| part(&mut emit)))
        {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => {
                emit(Event::Warning(format!("{what}: {}", chain(&e))));
                1
            }
            Err(_) => {
                emit(Event::Warning(format!("{what}: panicked")));
                101
            }
        };
        let _ = std::io::stdout().flush();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    // SAFETY: closing the parent's copy of the write end; the read end is ours.
    unsafe { libc::close(fds[1]) };
    // SAFETY: fds[0] is an open descriptor owned by this function.
    let r = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    let mut running = String::from("opening it");
    // The watchdog: kills the child when a step outlives its budget.
    let step = Arc::new(Mutex::new((
        Instant::now() + budget(&running),
        running.clone(),
    )));
    let done = Arc::new(AtomicBool::new(false));
    let killed: Arc<Mutex<Option<(String, Duration)>>> = Arc::new(Mutex::new(None));
    let dog = {
        let (step, done, killed) = (step.clone(), done.clone(), killed.clone());
        let t0 = Instant::now();
        std::thread::spawn(move || {
            while !done.load(Ordering::Acquire) {
                let (deadline, name) = step.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if Instant::now() >= deadline {
                    *killed.lock().unwrap_or_else(|e| e.into_inner()) = Some((name, t0.elapsed()));
                    // SAFETY: killing our own child, which has not been reaped.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return;
                }
                std::thread::park_timeout(Duration::from_millis(200));
            }
        })
    };
    for line in BufReader::new(r).lines() {
        let Ok(line) = line else { break };
        let Some(e) = serde_json::from_str::<Value>(&line)
            .ok()
            .as_ref()
            .and_then(Event::from_json)
        else {
            continue;
        };
        if let Event::Running(s) = &e {
            running.clone_from(s);
            *step.lock().unwrap_or_else(|e| e.into_inner()) =
                (Instant::now() + budget(s), s.clone());
        }
        sink(e);
    }
    let mut status = 0i32;
    // SAFETY: waiting for our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    done.store(true, Ordering::Release);
    dog.thread().unpark();
    let _ = dog.join();
    ended(pid);
    if let Some((name, after)) = killed.lock().unwrap_or_else(|e| e.into_inner()).take() {
        sink(Event::Warning(format!(
            "{what}: killed after {:.0} s: still {name} after its time ({:.0} s); its results before are kept",
            after.as_secs_f64(),
            budget(&name).as_secs_f64()
        )));
        return Ok(false);
    }
    if libc::WIFSIGNALED(status) {
        sink(Event::Warning(format!(
            "{what}: the process running it died of signal {} while {running}; its results before are kept",
            libc::WTERMSIG(status)
        )));
        return Ok(false);
    }
    Ok(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// An error with its sources, one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_cross_the_pipe_and_a_crash_is_reported() {
        let mut got = Vec::new();
        let mut reaped = None;
        let ok = in_child(
            "probe",
            |emit| {
                emit(Event::Note(std::process::id().to_string()));
                emit(Event::Info {
                    name: "x".into(),
                    label: "l".into(),
                    contract: "c".into(),
                });
                emit(Event::Result(Box::new(BenchResult::new(
                    "lookup", "x", None, 1, 2.5,
                ))));
                emit(Event::Running("scan 1t".into()));
                // A crash as a wrapper's failed assertion ends (SIGABRT).
                std::process::abort()
            },
            &|_| Duration::from_secs(60),
            &mut |e| got.push(e),
            &mut |pid| reaped = Some(pid),
        )
        .unwrap();
        assert!(!ok);
        // The child said its pid; `ended` got the same one.
        assert!(matches!(&got[0], Event::Note(n) if Some(n.parse::<i32>().unwrap()) == reaped));
        got.remove(0);
        assert!(matches!(&got[0], Event::Info { name, .. } if name == "x"));
        assert!(matches!(&got[1], Event::Result(b) if b.mops == 2.5));
        match got.last().unwrap() {
            Event::Warning(w) => {
                assert!(w.contains("signal 6") && w.contains("scan 1t"), "{w}")
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn a_step_that_outlives_its_budget_is_killed() {
        let mut got = Vec::new();
        let ok = in_child(
            "probe",
            |emit| {
                emit(Event::Running("spinning".into()));
                // Waits for the watchdog's SIGKILL (no sleep: blocks on a read
                // that never completes).
                let mut fds = [0i32; 2];
                // SAFETY: a pipe whose write end stays open: read blocks.
                unsafe {
                    libc::pipe(fds.as_mut_ptr());
                    let mut b = 0u8;
                    libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
                }
                Ok(())
            },
            &|s| {
                if s == "spinning" {
                    Duration::from_millis(300)
                } else {
                    Duration::from_secs(60)
                }
            },
            &mut |e| got.push(e),
            &mut |_| {},
        )
        .unwrap();
        assert!(!ok);
        match got.last().unwrap() {
            Event::Warning(w) => assert!(w.contains("killed") && w.contains("spinning"), "{w}"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn an_error_in_the_child_is_a_warning() {
        let mut got = Vec::new();
        let ok = in_child(
            "probe",
            |_| Err(BenchError::Options("no such thing".into())),
            &|_| Duration::from_secs(60),
            &mut |e| got.push(e),
            &mut |_| {},
        )
        .unwrap();
        assert!(!ok);
        assert!(matches!(&got[0], Event::Warning(w) if w.contains("no such thing")));
    }
}
