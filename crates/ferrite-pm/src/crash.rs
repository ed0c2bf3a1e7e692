//! The crash-test driver: runs a workload on a simulated pool, cuts power at
//! every fence (or a seeded sample of fences), opens each surviving image through
//! the normal open path and checks an invariant supplied by the structure.
//!
//! Each crash point yields `seeds` images: seed 0 keeps only durable lines,
//! seed 1 lets every dirty line reach PM, further seeds pick a random subset. The
//! point "after the last fence" is tested too.
//!
//! The workload records what it has acknowledged in a [`Journal`]: `begin(op)`
//! before an operation starts, `ack()` when it returned. The checker sees the
//! acknowledged operations and the one in flight (which may be all-or-nothing).

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::pool::{Pool, PoolOptions};
use crate::sim::{CrashPoint, SplitMix};

/// Which fences to cut power at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoints {
    /// Every fence.
    All,
    /// This many fences, chosen uniformly with the config's seed.
    Sample(usize),
}

/// Parameters of a crash exploration.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    pub points: CrashPoints,
    /// Images per crash point (>= 1).
    pub seeds: u32,
    /// Seeds the workload (via [`CrashConfig::workload_seed`]) and the sampling.
    pub seed: u64,
    pub pool_size: u64,
    pub chunk_size: u64,
    /// Scales the workload (targets interpret it: operations, keys, ...).
    pub ops: usize,
}

impl Default for CrashConfig {
    fn default() -> Self {
        CrashConfig {
            points: CrashPoints::All,
            seeds: 4,
            seed: 1,
            pool_size: 1 << 20,
            chunk_size: crate::layout::MIN_CHUNK,
            ops: 600,
        }
    }
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The fence before which power was cut (`fences + 1` = after the last one).
    pub fence: u64,
    pub seed: u64,
    pub message: String,
}

/// Outcome of an exploration.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    pub target: String,
    /// Fences the workload issued.
    pub fences: u64,
    /// Crash points tested.
    pub points: u64,
    /// Crash images recovered and checked.
    pub states: u64,
    /// Images whose check failed.
    pub violations: u64,
    /// The first few violations, for diagnosis.
    pub examples: Vec<Violation>,
    /// Operations the workload acknowledged.
    pub acked_ops: u64,
}

impl CrashReport {
    /// Adds another report's counts (for targets made of several workloads).
    pub fn absorb(&mut self, o: CrashReport) {
        self.fences += o.fences;
        self.points += o.points;
        self.states += o.states;
        self.violations += o.violations;
        self.acked_ops += o.acked_ops;
        for v in o.examples {
            if self.examples.len() < 10 {
                self.examples.push(v);
            }
        }
    }
}

/// What the workload has acknowledged so far.
#[derive(Debug, Clone)]
pub struct Journal<E> {
    pub acked: Vec<E>,
    pub in_flight: Option<E>,
}

/// Shared handle through which a workload records its operations.
pub struct JournalHandle<E>(Arc<Mutex<Journal<E>>>);

impl<E> Clone for JournalHandle<E> {
    fn clone(&self) -> Self {
        JournalHandle(self.0.clone())
    }
}

impl<E> JournalHandle<E> {
    fn new() -> Self {
        JournalHandle(Arc::new(Mutex::new(Journal {
            acked: Vec::new(),
            in_flight: None,
        })))
    }

    /// Declares the operation about to run (not yet acknowledged).
    pub fn begin(&self, op: E) {
        self.0.lock().unwrap().in_flight = Some(op);
    }

    /// The operation begun last returned: it is acknowledged.
    pub fn ack(&self) {
        let mut j = self.0.lock().unwrap();
        if let Some(op) = j.in_flight.take() {
            j.acked.push(op);
        }
    }

    /// The operation begun last failed without effect (e.g. pool full).
    pub fn abandon(&self) {
        self.0.lock().unwrap().in_flight = None;
    }

    /// Number of acknowledged operations.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().acked.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The checker: gets the recovered pool and the journal at the crash point.
pub type Checker<E> = dyn FnMut(Pool, &Journal<E>) -> std::result::Result<(), String> + Send;

struct Acc {
    points: u64,
    states: u64,
    violations: u64,
    examples: Vec<Violation>,
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".into()
    }
}

/// Mixes a crash point's fence number and image seed into one reproducible seed.
fn image_seed(base: u64, fence: u64, s: u32) -> u64 {
    if s < 2 {
        s as u64
    } else {
        SplitMix(base ^ fence.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ (s as u64) << 48).next() | 2
    }
}

/// Runs `workload` on a fresh simulated pool, crashing at the configured fences,
/// and checks every crash image with `check`. `workload` must be deterministic for
/// a given config (it runs twice when sampling: once to count fences).
pub fn explore<E, W, C>(
    target: &str,
    cfg: &CrashConfig,
    workload: W,
    check: C,
) -> Result<CrashReport>
where
    E: Clone + Send + 'static,
    W: Fn(&Pool, &JournalHandle<E>) -> std::result::Result<(), String>,
    C: FnMut(Pool, &Journal<E>) -> std::result::Result<(), String> + Send + 'static,
{
    let opts = PoolOptions {
        chunk_size: cfg.chunk_size,
        ..PoolOptions::default()
    };
    let selected: Option<BTreeSet<u64>> = match cfg.points {
        CrashPoints::All => None,
        CrashPoints::Sample(n) => {
            let pool = Pool::create_simulated(cfg.pool_size, &opts)?;
            pool.set_crash_hook(None)?;
            workload(&pool, &JournalHandle::new())
                .map_err(|e| crate::PmError::Invalid(format!("workload failed: {e}")))?;
            let total = pool.sim_fences().unwrap_or(0);
            let mut rng = SplitMix(cfg.seed ^ 0x5eed);
            let mut set = BTreeSet::new();
            if n as u64 >= total {
                set.extend(1..=total);
            } else {
                while set.len() < n {
                    set.insert(1 + rng.below(total));
                }
            }
            Some(set)
        }
    };

    let journal = JournalHandle::<E>::new();
    let acc = Arc::new(Mutex::new(Acc {
        points: 0,
        states: 0,
        violations: 0,
        examples: Vec::new(),
    }));
    let check: Arc<Mutex<Box<Checker<E>>>> = Arc::new(Mutex::new(Box::new(check)));
    let seeds = cfg.seeds.max(1);
    let base = cfg.seed;

    let run_point = {
        let journal = journal.clone();
        let acc = acc.clone();
        let check = check.clone();
        move |point: &CrashPoint<'_>| {
            let dirty = point.dirty_lines();
            let j = journal.0.lock().unwrap().clone();
            let mut a = acc.lock().unwrap();
            a.points += 1;
            let mut check = check.lock().unwrap();
            // Seeds beyond the first two only differ when some line is dirty.
            let n = if dirty.is_empty() { 1 } else { seeds };
            for s in 0..n {
                let seed = image_seed(base, point.fence, s);
                let img = point.image(&dirty, seed);
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    match Pool::open_image(img, &PoolOptions::default()) {
                        Ok(p) => (check)(p, &j),
                        Err(e) => Err(format!("pool failed to open: {e}")),
                    }
                }))
                .unwrap_or_else(|p| Err(format!("recovery panicked: {}", panic_text(p))));
                a.states += 1;
                if let Err(message) = outcome {
                    a.violations += 1;
                    if a.examples.len() < 10 {
                        a.examples.push(Violation {
                            fence: point.fence,
                            seed,
                            message,
                        });
                    }
                }
            }
        }
    };
    let run_point = Arc::new(Mutex::new(run_point));

    let pool = Pool::create_simulated(cfg.pool_size, &opts)?;
    {
        let run_point = run_point.clone();
        pool.set_crash_hook(Some(Box::new(move |p: &CrashPoint<'_>| {
            if selected.as_ref().is_none_or(|s| s.contains(&p.fence)) {
                (run_point.lock().unwrap())(p);
            }
        })))?;
    }
    workload(&pool, &journal)
        .map_err(|e| crate::PmError::Invalid(format!("workload failed: {e}")))?;
    let fences = pool.sim_fences().unwrap_or(0);
    pool.set_crash_hook(None)?;
    pool.with_crash_point(|p| (run_point.lock().unwrap())(p))?;

    let a = acc.lock().unwrap();
    let acked = journal.len() as u64;
    Ok(CrashReport {
        target: target.to_string(),
        fences,
        points: a.points,
        states: a.states,
        violations: a.violations,
        examples: a.examples.clone(),
        acked_ops: acked,
    })
}
