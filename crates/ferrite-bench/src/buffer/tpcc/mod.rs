//! TPC-C on Ferrite's transactional ordered-KV interface ([`TxStore`]): all
//! nine tables as key ranges of one ordered key space with composite keys
//! ([`schema`]), the initial population ([`load`](mod@load)), the five transactions and
//! the mix ([`txns`]), the driver ([`run`]) and the consistency conditions 1–4
//! ([`check`](mod@check)). No think or keying times; warehouses are the size knob.

pub mod check;
pub mod gen;
pub mod load;
pub mod schema;
pub mod txns;

use std::time::{Duration, Instant};

use ferrite_kv::KvResult;

pub use check::check;
pub use load::{load, Scale};
pub use txns::{Driver, Kind, Outcome};

use crate::buffer::txn::TxStore;
use crate::buffer::ycsb::{thread_cpu_secs, thread_rq_wait_secs};

/// How long to run.
#[derive(Debug, Clone)]
pub struct TpccRun {
    pub warehouses: u16,
    pub scale: Scale,
    /// Measured seconds (after the warm-up).
    pub seconds: f64,
    /// Stop the measurement after this many transactions (0: no cap).
    pub max_txns: u64,
    /// Transactions before the measurement.
    pub warmup_txns: u64,
    /// The warm-up stops after this long at the latest.
    pub warmup_seconds: f64,
    pub seed: u64,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct TpccStats {
    pub txns: u64,
    pub secs: f64,
    /// Transactions per second (every type).
    pub tps: f64,
    /// New-Order transactions per minute (TPC-C's tpmC, without think times).
    pub tpmc: f64,
    /// Completed transactions per type, in [`Kind::ALL`] order.
    pub per_kind: [u64; 5],
    /// New-Orders rolled back (the spec's 1%).
    pub rollbacks: u64,
    /// CPU seconds the running thread got, and seconds it waited on a run
    /// queue (as [`crate::buffer::ycsb::RunStats`]).
    pub cpu_secs: f64,
    pub rq_wait_secs: f64,
}

impl TpccStats {
    /// Adds a later slice of the same measurement.
    pub fn add(&mut self, o: &TpccStats) {
        self.txns += o.txns;
        self.secs += o.secs;
        for (a, b) in self.per_kind.iter_mut().zip(o.per_kind) {
            *a += b;
        }
        self.rollbacks += o.rollbacks;
        self.cpu_secs += o.cpu_secs;
        self.rq_wait_secs += o.rq_wait_secs;
        if self.secs > 0.0 {
            self.tps = self.txns as f64 / self.secs;
            self.tpmc = self.per_kind[0] as f64 / self.secs * 60.0;
        }
    }
}

/// Runs the warm-up and then the measured mix on a loaded database.
pub fn run(st: &dyn TxStore, spec: &TpccRun) -> KvResult<TpccStats> {
    let mut drv = Driver::new(spec.warehouses, spec.scale, spec.seed);
    run_with(&mut drv, st, spec)
}

/// [`run`] with a driver that goes on from an earlier run (an interleaved
/// measurement's next slice: its random stream, clock and HISTORY keys
/// continue; `spec.seed` is not used).
pub fn run_with(drv: &mut Driver, st: &dyn TxStore, spec: &TpccRun) -> KvResult<TpccStats> {
    let w0 = Instant::now();
    for i in 0..spec.warmup_txns {
        drv.run_one(st)?;
        if i % 64 == 0 && w0.elapsed().as_secs_f64() >= spec.warmup_seconds {
            break;
        }
    }
    let limit = Duration::from_secs_f64(spec.seconds.max(0.0));
    let mut s = TpccStats::default();
    let (cpu0, rq0) = (thread_cpu_secs(), thread_rq_wait_secs());
    let t0 = Instant::now();
    loop {
        let (k, o) = drv.run_one(st)?;
        s.txns += 1;
        s.per_kind[Kind::ALL.iter().position(|&x| x == k).unwrap_or(0)] += 1;
        s.rollbacks += (o == Outcome::RolledBack) as u64;
        if spec.max_txns > 0 && s.txns >= spec.max_txns {
            break;
        }
        if s.txns % 16 == 0 && t0.elapsed() >= limit {
            break;
        }
    }
    s.secs = t0.elapsed().as_secs_f64();
    s.cpu_secs = thread_cpu_secs() - cpu0;
    if let (Some(a), Some(b)) = (rq0, thread_rq_wait_secs()) {
        s.rq_wait_secs = (b - a).max(0.0);
    }
    s.tps = s.txns as f64 / s.secs;
    s.tpmc = s.per_kind[0] as f64 / s.secs * 60.0;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::schema::{self as sc, Row};
    use super::*;
    use crate::buffer::txn::BatchStore;
    use crate::BTreeMapKv;
    use ferrite_kv::OrderedKv;

    fn loaded(w: u16) -> BTreeMapKv {
        let kv = BTreeMapKv::new();
        let st = BatchStore { kv: &kv };
        let mut last = 0;
        let (rows, _) = load(&st, w, Scale::TINY, 1, &mut |n| last = n).unwrap();
        assert_eq!(rows, last);
        assert_eq!(kv.count() as u64, rows);
        kv
    }

    #[test]
    fn the_population_has_the_specified_rows_and_is_consistent() {
        let kv = loaded(2);
        let st = BatchStore { kv: &kv };
        let count = |tag: u8| {
            let p = sc::Key::table(tag);
            let mut n = 0;
            crate::buffer::txn::kv_range(&kv, p.bytes(), &p.successor(), &mut |_, _| {
                n += 1;
                true
            })
            .unwrap();
            n
        };
        let sc_ = Scale::TINY;
        assert_eq!(count(sc::tag::ITEM), sc_.items as usize);
        assert_eq!(count(sc::tag::STOCK), 2 * sc_.items as usize);
        assert_eq!(count(sc::tag::DISTRICT), 20);
        assert_eq!(count(sc::tag::CUSTOMER), 20 * sc_.customers as usize);
        assert_eq!(count(sc::tag::CUSTOMER_NAME), 20 * sc_.customers as usize);
        assert_eq!(count(sc::tag::ORDER), 20 * sc_.customers as usize);
        assert_eq!(count(sc::tag::NEW_ORDER), 20 * sc_.new_orders as usize);
        assert!(count(sc::tag::ORDER_LINE) >= 20 * 5 * sc_.customers as usize);
        assert_eq!(check(&st, 2).unwrap(), Vec::<String>::new());
        // Row counts are near the estimate the progress bar uses.
        let est = sc_.rows(2) as f64;
        assert!((kv.count() as f64 / est - 1.0).abs() < 0.1);
    }

    #[test]
    fn every_transaction_runs_and_the_database_stays_consistent() {
        let kv = loaded(2);
        let st = BatchStore { kv: &kv };
        let mut drv = Driver::new(2, Scale::TINY, 5);
        for k in Kind::ALL {
            for _ in 0..30 {
                drv.run_kind(&st, k).unwrap();
            }
        }
        let spec = TpccRun {
            warehouses: 2,
            scale: Scale::TINY,
            seconds: 60.0,
            max_txns: 3000,
            warmup_txns: 100,
            warmup_seconds: 60.0,
            seed: 9,
        };
        let s = run(&st, &spec).unwrap();
        assert_eq!(s.txns, 3000);
        // The mix: 45 / 43 / 4 / 4 / 4 percent, within sampling noise.
        let pct = |i: usize| s.per_kind[i] as f64 / s.txns as f64 * 100.0;
        assert!((pct(0) - 45.0).abs() < 4.0 && (pct(1) - 43.0).abs() < 4.0);
        for i in 2..5 {
            assert!((pct(i) - 4.0).abs() < 2.0, "{i}: {}", pct(i));
        }
        assert!(s.rollbacks > 0 && s.rollbacks < s.per_kind[0] / 20);
        assert_eq!(check(&st, 2).unwrap(), Vec::<String>::new());
        // New orders were added and some delivered.
        let d: sc::District =
            sc::District::from_bytes(&kv.get(sc::district(1, 1).bytes()).unwrap().unwrap())
                .unwrap();
        assert!(d.next_o_id > Scale::TINY.customers + 1);
    }

    #[test]
    fn payments_move_money_and_deliveries_remove_new_orders() {
        let kv = loaded(1);
        let st = BatchStore { kv: &kv };
        let ytd = |kv: &BTreeMapKv| {
            sc::Warehouse::from_bytes(&kv.get(sc::warehouse(1).bytes()).unwrap().unwrap())
                .unwrap()
                .ytd
        };
        let before = ytd(&kv);
        let mut drv = Driver::new(1, Scale::TINY, 3);
        drv.run_kind(&st, Kind::Payment).unwrap();
        assert!(ytd(&kv) > before);
        let p = sc::Key::table(sc::tag::NEW_ORDER);
        let n_before =
            crate::buffer::txn::kv_range(&kv, p.bytes(), &p.successor(), &mut |_, _| true).unwrap();
        drv.run_kind(&st, Kind::Delivery).unwrap();
        let n_after =
            crate::buffer::txn::kv_range(&kv, p.bytes(), &p.successor(), &mut |_, _| true).unwrap();
        assert_eq!(n_before - n_after, 10, "one order delivered per district");
        assert_eq!(check(&st, 1).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn the_check_finds_each_broken_condition() {
        let kv = loaded(1);
        let st = BatchStore { kv: &kv };
        // Condition 1: a district's YTD changes without its warehouse's.
        let dk = sc::district(1, 3);
        let mut d = sc::District::from_bytes(&kv.get(dk.bytes()).unwrap().unwrap()).unwrap();
        d.ytd += 1;
        kv.update(dk.bytes(), &d.to_bytes()).unwrap();
        // Condition 3: a hole among the new orders of district 1.
        let first_new = Scale::TINY.customers - Scale::TINY.new_orders + 1;
        assert!(kv
            .remove(sc::new_order(1, 1, first_new + 3).bytes())
            .unwrap());
        // Condition 4: an order line disappears in district 2.
        assert!(kv.remove(sc::order_line(1, 2, 7, 1).bytes()).unwrap());
        // Condition 2: an order beyond D_NEXT_O_ID in district 4.
        let o = sc::Order {
            ol_cnt: 0,
            ..sc::Order::default()
        };
        kv.insert(sc::order(1, 4, 5000).bytes(), &o.to_bytes())
            .unwrap();
        let v = check(&st, 1).unwrap();
        for c in ["condition 1", "condition 2", "condition 3", "condition 4"] {
            assert!(v.iter().any(|m| m.starts_with(c)), "{c} not found in {v:?}");
        }
    }
}
