//! The crash-test driver: runs a workload on a simulated pool, cuts power at
//! every fence (or a seeded sample of fences), opens each surviving image through
//! the normal open path and checks an invariant supplied by the structure.
//!
//! Each crash point yields `seeds` images under the simulator's 8-byte model
//! (see [`crate::sim`]): seed 0 keeps only durable lines, seed 1 lets every
//! dirty line reach PM, further seeds draw torn lines. The point "after the
//! last fence" is tested too.
//!
//! **Crash during recovery.** When recovering an image issued fences (repairs,
//! clean-up), the recovery is run again under the simulator and power is cut
//! at each of its fences; each of those images is recovered once more and must
//! give the same checked outcome (the checker's return value) as the
//! uninterrupted recovery. Checkers call [`recovered`] once the structure is
//! open, so that their own checking (which may allocate) is not counted as
//! recovery.
//!
//! The workload records what it has acknowledged in a [`Journal`]: `begin(op)`
//! before an operation starts, `ack()` when it returned. The checker sees the
//! acknowledged operations and the one in flight (which may be all-or-nothing).

use std::cell::Cell;
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::persist;
use crate::pool::{Pool, PoolOptions};
use crate::rng::SplitMix;
use crate::sim::CrashPoint;
use crate::AlignedBuf;

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
    /// Seeds the workload (each target draws its operations from it) and the
    /// sampling.
    pub seed: u64,
    pub pool_size: u64,
    pub chunk_size: u64,
    /// Scales the workload (targets interpret it: operations, keys, ...).
    pub ops: usize,
    /// Also cut power at every fence of each recovery (and recover again).
    pub recovery_crashes: bool,
    /// Images per crash point inside recovery (>= 1).
    pub recovery_seeds: u32,
    /// Stop checking once this many violations were found (0: never stop).
    /// Tripwire runs set it to 1: one violation shows the checker caught the
    /// broken variant, and the rest of the exploration would cost time only.
    pub stop_after_violations: u64,
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
            recovery_crashes: true,
            recovery_seeds: 3,
            stop_after_violations: 0,
        }
    }
}

/// The simulator's model, as reported by crash tests.
pub const MODEL: &str = "8-byte stores; per dirty line a program-order prefix of recorded stores (x86-TSO), any subset of other changed words";

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
    /// Fences inside recoveries at which power was cut again.
    pub recovery_points: u64,
    /// Images of crashes during recovery that were recovered and checked
    /// (included in `states`).
    pub recovery_states: u64,
}

impl CrashReport {
    /// Adds another report's counts (for targets made of several workloads).
    pub fn absorb(&mut self, o: CrashReport) {
        self.fences += o.fences;
        self.points += o.points;
        self.states += o.states;
        self.violations += o.violations;
        self.acked_ops += o.acked_ops;
        self.recovery_points += o.recovery_points;
        self.recovery_states += o.recovery_states;
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

thread_local! {
    /// Fence count of this thread when the checker declared recovery over.
    static RECOVERY_END: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Declares that recovery of `pool` is complete: the checker's further work
/// (reads, accounting that allocates) issues no more recovery crash points.
/// Checkers call it right after opening the structure.
pub fn recovered(pool: &Pool) {
    RECOVERY_END.with(|c| c.set(Some(persist::thread_fence_count())));
    pool.clear_crash_hook();
}

#[derive(Default)]
struct Acc {
    points: u64,
    states: u64,
    violations: u64,
    examples: Vec<Violation>,
    recovery_points: u64,
    recovery_states: u64,
}

impl Acc {
    fn violation(&mut self, fence: u64, seed: u64, message: String) {
        self.violations += 1;
        if self.examples.len() < 10 {
            self.examples.push(Violation {
                fence,
                seed,
                message,
            });
        }
    }
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

type Outcome<R> = std::result::Result<R, String>;

/// Opens `img` (plain, no simulator) and runs the checker, catching panics.
fn recover_and_check<E, R, C>(img: AlignedBuf, j: &Journal<E>, check: &C) -> Outcome<R>
where
    C: Fn(Pool, &Journal<E>) -> Outcome<R>,
{
    catch_unwind(AssertUnwindSafe(|| {
        match Pool::open_image(img, &PoolOptions::default()) {
            Ok(p) => check(p, j),
            Err(e) => Err(format!("pool failed to open: {e}")),
        }
    }))
    .unwrap_or_else(|p| Err(format!("recovery panicked: {}", panic_text(p))))
}

/// Checks one crash image: recovers it, and when recovery issued fences,
/// recovers it again under the simulator cutting power at each of them.
#[allow(clippy::too_many_arguments)]
fn check_image<E, R, C>(
    cfg: &CrashConfig,
    fence: u64,
    seed: u64,
    img: AlignedBuf,
    j: &Journal<E>,
    check: &Arc<C>,
    a: &mut Acc,
) where
    E: Clone + Send + 'static,
    R: PartialEq + std::fmt::Debug + Send + 'static,
    C: Fn(Pool, &Journal<E>) -> Outcome<R> + Send + Sync + 'static,
{
    let copy = (cfg.recovery_crashes).then(|| AlignedBuf::from_slice(img.as_slice()));
    RECOVERY_END.with(|c| c.set(None));
    let f0 = persist::thread_fence_count();
    let reference = recover_and_check(img, j, &**check);
    let end = RECOVERY_END
        .with(|c| c.take())
        .unwrap_or_else(persist::thread_fence_count);
    a.states += 1;
    let reference = match reference {
        Ok(r) => r,
        Err(m) => return a.violation(fence, seed, m),
    };
    let Some(copy) = copy.filter(|_| end > f0) else {
        return;
    };
    // Recovery wrote and fenced: crash it at each of its fences.
    type Nested<R> = Vec<(u64, u64, Outcome<R>)>;
    let nested: Arc<Mutex<Nested<R>>> = Arc::new(Mutex::new(Vec::new()));
    let hook = {
        let (nested, check, j) = (nested.clone(), check.clone(), j.clone());
        let seeds = cfg.recovery_seeds.max(1);
        let base = cfg.seed ^ fence.rotate_left(17) ^ seed;
        Box::new(move |pt: &CrashPoint<'_>| {
            let dirty = pt.dirty_lines();
            let n = if dirty.is_empty() { 1 } else { seeds };
            for s in 0..n {
                let sd = image_seed(base, pt.fence, s);
                let out = recover_and_check(pt.image(&dirty, sd), &j, &*check);
                nested.lock().unwrap().push((pt.fence, sd, out));
            }
        })
    };
    let again = catch_unwind(AssertUnwindSafe(|| {
        match Pool::open_image_simulated(copy, Some(hook)) {
            Ok(p) => check(p, j),
            Err(e) => Err(format!("pool failed to open: {e}")),
        }
    }))
    .unwrap_or_else(|p| Err(format!("recovery panicked: {}", panic_text(p))));
    let nested = std::mem::take(&mut *nested.lock().unwrap());
    a.states += 1;
    match again {
        Ok(r) if r == reference => {}
        other => a.violation(
            fence,
            seed,
            format!("recovery under the simulator gave {other:?}, plain recovery {reference:?}"),
        ),
    }
    let mut points = BTreeSet::new();
    for (rf, sd, out) in nested {
        points.insert(rf);
        a.states += 1;
        a.recovery_states += 1;
        match out {
            Ok(r) if r == reference => {}
            Ok(r) => a.violation(
                fence,
                seed,
                format!("crash at recovery fence {rf} (image seed {sd}) then recovery gave {r:?}, uninterrupted recovery {reference:?}"),
            ),
            Err(m) => a.violation(
                fence,
                seed,
                format!("crash at recovery fence {rf} (image seed {sd}) then recovery: {m}"),
            ),
        }
    }
    a.recovery_points += points.len() as u64;
}

/// Runs `workload` on a fresh simulated pool, crashing at the configured fences,
/// and checks every crash image with `check`, which recovers the structure from
/// the pool, checks it against the journal and returns what it found (compared
/// between recoveries, see the module docs; `()` when only the verdict
/// matters). `workload` must be deterministic for a given config (it runs twice
/// when sampling: once to count fences).
pub fn explore<E, R, W, C>(
    target: &str,
    cfg: &CrashConfig,
    workload: W,
    check: C,
) -> Result<CrashReport>
where
    E: Clone + Send + 'static,
    R: PartialEq + std::fmt::Debug + Send + 'static,
    W: Fn(&Pool, &JournalHandle<E>) -> std::result::Result<(), String>,
    C: Fn(Pool, &Journal<E>) -> Outcome<R> + Send + Sync + 'static,
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
    let acc = Arc::new(Mutex::new(Acc::default()));
    let check = Arc::new(check);
    let seeds = cfg.seeds.max(1);
    let base = cfg.seed;

    let run_point = {
        let journal = journal.clone();
        let acc = acc.clone();
        let cfg = cfg.clone();
        move |point: &CrashPoint<'_>| {
            let dirty = point.dirty_lines();
            let j = journal.0.lock().unwrap().clone();
            let mut a = acc.lock().unwrap();
            if cfg.stop_after_violations > 0 && a.violations >= cfg.stop_after_violations {
                return;
            }
            a.points += 1;
            // Seeds beyond the first two only differ when some line is dirty.
            let n = if dirty.is_empty() { 1 } else { seeds };
            for s in 0..n {
                let seed = image_seed(base, point.fence, s);
                let img = point.image(&dirty, seed);
                check_image(&cfg, point.fence, seed, img, &j, &check, &mut a);
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
        recovery_points: a.recovery_points,
        recovery_states: a.recovery_states,
    })
}
