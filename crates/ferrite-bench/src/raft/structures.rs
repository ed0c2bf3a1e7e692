//! The thesis's single-node comparison of the structures (§4.2): 20,000
//! 10-byte keys (10-byte values) inserted, read and deleted in random order,
//! mean time per operation, modifications committed every 10 (the thesis's
//! setting), beside Ferrite's PM range index (which persists every operation
//! itself). Times are thread CPU time (the machine is shared); persist
//! barriers and flushed lines per operation are exact.

use std::path::PathBuf;

use ferrite_index::kv::OrderedKv;
use ferrite_pm::clock::CpuTimer;
use ferrite_pm::rng::SplitMix;
use ferrite_pm::{persist, Pool, TempPool};
use ferrite_raft::{BTreeMap, BTreeOptions, ListMap, ListOptions, PmMap};
use ferrite_report::chart;
use ferrite_report::BenchResult;

use crate::{env, BenchError, BenchOutput, Result};

/// What to run.
#[derive(Debug, Clone)]
pub struct StructOpts {
    pub pool_dir: PathBuf,
    /// Keys (the thesis: 20,000).
    pub keys: u64,
    /// Commit every this many modifications (the thesis: 10).
    pub commit_every: usize,
    /// Repetitions; the median is reported.
    pub reps: usize,
}

struct Cell {
    ns: f64,
    fences: f64,
    lines: f64,
}

fn keys(n: u64, seed: u64) -> Vec<Vec<u8>> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut r = SplitMix(seed);
    for i in (1..v.len()).rev() {
        v.swap(i, r.below(i as u64 + 1) as usize);
    }
    v.into_iter()
        .map(|i| format!("{i:010}").into_bytes())
        .collect()
}

fn timed(n: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<Cell> {
    let before = persist::thread_stats();
    let t = CpuTimer::start();
    for i in 0..n {
        f(i)?;
    }
    let secs = t.secs();
    let d = persist::thread_stats().since(before);
    Ok(Cell {
        ns: secs * 1e9 / n as f64,
        fences: d.fences as f64 / n as f64,
        lines: d.flushed_lines as f64 / n as f64,
    })
}

fn e<E: std::fmt::Display>(x: E) -> BenchError {
    BenchError::Check(x.to_string())
}

/// insert, read, delete on a PM map with group commit every `k`.
fn map_cells<M: PmMap>(
    o: &StructOpts,
    open: impl Fn(&Pool) -> ferrite_raft::Result<M>,
) -> Result<[Cell; 3]> {
    let tp = TempPool::create(&o.pool_dir, "raft-structures", 256 << 20)?;
    let mut m = open(tp.pool()).map_err(e)?;
    let ins = keys(o.keys, 1);
    let val = *b"value-0123";
    let k = o.commit_every.max(1);
    let insert = timed(ins.len(), |i| {
        m.put(&ins[i], &val).map_err(e)?;
        if (i + 1) % k == 0 {
            m.commit().map_err(e)?;
        }
        Ok(())
    })?;
    m.commit().map_err(e)?;
    let rd = keys(o.keys, 2);
    let read = timed(rd.len(), |i| match m.get(&rd[i]).map_err(e)? {
        Some(_) => Ok(()),
        None => Err(BenchError::Check("a key went missing".into())),
    })?;
    let del = keys(o.keys, 3);
    let delete = timed(del.len(), |i| {
        m.delete(&del[i]).map_err(e)?;
        if (i + 1) % k == 0 {
            m.commit().map_err(e)?;
        }
        Ok(())
    })?;
    m.commit().map_err(e)?;
    if !m.is_empty() {
        return Err(BenchError::Check("keys left after deleting all".into()));
    }
    Ok([insert, read, delete])
}

fn index_cells(o: &StructOpts) -> Result<[Cell; 3]> {
    let tp = TempPool::create(&o.pool_dir, "raft-structures-index", 256 << 20)?;
    let idx = ferrite_index::FerriteIndex::open_or_create(tp.pool(), "index")?;
    let ins = keys(o.keys, 1);
    let val = *b"value-0123";
    let insert = timed(ins.len(), |i| {
        idx.insert(&ins[i], &val)?;
        Ok(())
    })?;
    let rd = keys(o.keys, 2);
    let mut out = Vec::new();
    let read = timed(rd.len(), |i| {
        if idx.get_into(&rd[i], &mut out)? {
            Ok(())
        } else {
            Err(BenchError::Check("a key went missing".into()))
        }
    })?;
    let del = keys(o.keys, 3);
    let delete = timed(del.len(), |i| {
        idx.remove(&del[i])?;
        Ok(())
    })?;
    Ok([insert, read, delete])
}

fn median(mut v: Vec<[Cell; 3]>) -> [Cell; 3] {
    let mid = v.len() / 2;
    // Median by insert time (the runs are whole: one repetition's three cells).
    v.sort_by(|a, b| a[0].ns.total_cmp(&b[0].ns));
    v.swap_remove(mid)
}

/// Runs the comparison.
pub fn structures(o: &StructOpts) -> Result<BenchOutput> {
    if o.keys == 0 {
        return Err(BenchError::Options("--keys must be at least 1".into()));
    }
    let mut rep = env::report("raft-structures", &o.pool_dir);
    let variants: [(&str, &str); 4] = [
        (
            "list",
            "hybrid: PM list of pages (1 KiB) + DRAM index, group commit",
        ),
        ("btree-4", "persistent CoW B+-tree, fan-out 4, group commit"),
        (
            "btree-6",
            "persistent CoW B+-tree, fan-out 6 (the store's default), group commit",
        ),
        (
            "ferrite-index",
            "Ferrite's PM range index (persists every operation)",
        ),
    ];
    let mut all = Vec::new();
    for (name, about) in variants {
        eprintln!("raft structures: {name}");
        let mut runs = Vec::new();
        for _ in 0..o.reps.max(1) {
            runs.push(match name {
                "list" => map_cells(o, |p| {
                    ListMap::open_or_create(p, "m", &ListOptions::default())
                })?,
                "btree-4" => map_cells(o, |p| {
                    BTreeMap::open_or_create(p, "m", &BTreeOptions { fanout: 4 })
                })?,
                "btree-6" => map_cells(o, |p| {
                    BTreeMap::open_or_create(p, "m", &BTreeOptions { fanout: 6 })
                })?,
                _ => index_cells(o)?,
            });
        }
        let cells = median(runs);
        for (op, c) in ["insert", "read", "delete"].iter().zip(&cells) {
            let mut r = BenchResult::new(op, name, Some(o.keys.into()), 1, 1e3 / c.ns)
                .with("mean_ns", c.ns)
                .with("fences_per_op", c.fences)
                .with("lines_per_op", c.lines);
            r.p50_ns = None;
            rep.results.push(r);
        }
        rep.notes.push(format!("{name}: {about}"));
        all.push((name, cells));
    }
    let get = |n: &str, op: usize| all.iter().find(|x| x.0 == n).map(|x| x.1[op].ns);
    if let (Some(l), Some(b)) = (get("list", 0), get("btree-6", 0)) {
        rep.notes.push(format!(
            "bar: B+-tree (fan-out 6) insert {b:.0} ns / list insert {l:.0} ns = {:.1}x (bar >= 3x; thesis 3097/884 = 3.5x)",
            b / l
        ));
    }
    rep.notes.push(format!(
        "commit every {} modifications; thesis (Optane, pmemkv beside): insert list 884, B-trees 3097 ns; read 340 / 500; delete 612 / 3839",
        o.commit_every
    ));
    env::finish(&mut rep);
    let cats: Vec<String> = ["insert", "read", "delete"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let series: Vec<(String, Vec<f64>)> = all
        .iter()
        .map(|(n, c)| (n.to_string(), c.iter().map(|x| x.ns).collect()))
        .collect();
    let svg = chart::bar_chart(
        &format!("{} keys of 10 bytes: mean time per operation", o.keys),
        "ns (thread CPU)",
        &cats,
        &series,
    );
    Ok(BenchOutput {
        report: rep,
        svg,
        extra_cols: vec!["mean_ns", "fences_per_op", "lines_per_op"],
    })
}
