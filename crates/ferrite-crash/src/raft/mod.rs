//! The `raft-list` and `raft-btree` crash-test targets.
//!
//! The workload drives a [`RaftCore`] the way openraft drives a store (it is
//! single-threaded because the crash simulator is): groups of appends (SET,
//! SET NX/XX/IFEQ, DEL, blank and membership entries, values from 0 bytes to
//! larger than a list page), applies, truncations of the unapplied suffix,
//! snapshots with purges, votes, snapshot installations (beyond the log and
//! inside it) and, for the list, clean-up steps. Each group ends with a
//! commit, after which openraft would be told the entries are durable: that
//! is the acknowledgement the journal records. Every operation carries the
//! model's `Logical` state after it.
//!
//! The checker opens each crash image through the normal open path and
//! requires the recovered store to be exactly the state after the last
//! acknowledged operation or after the one in flight (a group commits all or
//! nothing): the log is the acknowledged log plus the whole unacknowledged
//! group or nothing of it, every entry decodes whole (with the versions its
//! record names), the vote is the last acknowledged one, and the state read
//! at the recovered applied index equals the model's log applied up to it.
//! The structure's own check (list: every index entry points at its record;
//! tree: order, depth, fan-out, every block owned once) runs too.

mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use ferrite_pm::rng::SplitMix;
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};
use ferrite_raft::core::RaftCore;
use ferrite_raft::map::btree::{BTreeMap as PmBTree, BTreeOptions};
use ferrite_raft::map::list::{ListMap, ListOptions};
use ferrite_raft::map::PmMap;
use ferrite_raft::types::{
    Command, Cond, Entry, LogId, Membership, SnapshotMeta, StoredMembership, Vote,
};
use openraft::{CommittedLeaderId, EntryPayload};

use self::model::{Logical, Model};

const OBJECT: &str = "crash-raft";
const KEYS: u64 = 12;
/// Operations of the default workload (about 10,000 crash states).
pub const DEFAULT_OPS: usize = 1700;

/// A map the crash workloads can open (small pages and fan-out, so that the
/// small workloads grow, split and clean the structures).
pub trait CrashMap: PmMap {
    fn open(pool: &Pool) -> ferrite_raft::Result<Self>;
}

impl CrashMap for ListMap {
    fn open(pool: &Pool) -> ferrite_raft::Result<Self> {
        // Every open indexes the versions in the background (the production
        // default does so only for large lists), so recovery runs that path.
        ListMap::open_or_create(
            pool,
            OBJECT,
            &ListOptions {
                page_size: 512,
                background_index: 1,
            },
        )
    }
}

impl CrashMap for PmBTree {
    fn open(pool: &Pool) -> ferrite_raft::Result<Self> {
        PmBTree::open_or_create(pool, OBJECT, &BTreeOptions { fanout: 4 })
    }
}

/// One journalled operation and the state after it.
#[derive(Debug, Clone)]
pub struct Op {
    pub what: String,
    pub after: Arc<Logical>,
}

fn key(k: u64) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

fn value(step: u64, k: u64, rng: &mut SplitMix) -> Vec<u8> {
    let len = [0usize, 5, 10, 10, 40, 200, 700][rng.below(7) as usize];
    (0..len)
        .map(|i| (step * 131 + k * 7 + i as u64) as u8)
        .collect()
}

fn lid(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

struct Gen {
    rng: SplitMix,
    term: u64,
    node: u64,
    step: u64,
}

impl Gen {
    fn command(&mut self, m: &Model) -> Command {
        let k = self.rng.below(KEYS);
        let r = self.rng.below(100);
        let v = value(self.step, k, &mut self.rng);
        if r < 12 {
            let n = 1 + self.rng.below(3);
            return Command::Del {
                keys: (0..n).map(|i| key((k + i * 5) % KEYS)).collect(),
            };
        }
        let cond = match r {
            12..=26 => Cond::Nx,
            27..=41 => Cond::Xx,
            42..=64 => match m.newest(&key(k)) {
                Some(cur) if self.rng.below(10) < 7 => Cond::IfEq(cur),
                _ => Cond::IfEq(value(self.step + 1, k, &mut self.rng)),
            },
            _ => Cond::Always,
        };
        Command::Set {
            key: key(k),
            value: v,
            cond,
        }
    }

    fn entries(&mut self, m: &Model, n: u64) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut shadow = m.clone();
        for _ in 0..n {
            let idx = shadow.next_index();
            let r = self.rng.below(100);
            let payload = if r < 8 {
                EntryPayload::Blank
            } else if r < 11 {
                let nodes: std::collections::BTreeSet<u64> = if self.rng.below(2) == 0 {
                    [1, 2, 3].into()
                } else {
                    [1, 2].into()
                };
                EntryPayload::Membership(Membership::new(vec![nodes], ()))
            } else {
                EntryPayload::Normal(self.command(&shadow))
            };
            let e = Entry {
                log_id: lid(self.term, self.node, idx),
                payload,
            };
            shadow.append(std::slice::from_ref(&e));
            out.push(e);
        }
        out
    }
}

fn s(e: ferrite_raft::StoreError) -> String {
    e.to_string()
}

/// What a workload run did (to show the crash test exercises it).
#[derive(Debug, Default, Clone, Copy)]
pub struct Shape {
    pub installs: u64,
    pub truncations: u64,
    pub purges: u64,
    pub votes: u64,
    /// The map's maintenance counter (list: pages cleaned).
    pub maintenance: u64,
}

/// Runs the workload on `pool` (journalling into `j` when given).
pub fn workload<M: CrashMap>(
    cfg: &CrashConfig,
    pool: &Pool,
    j: Option<&JournalHandle<Op>>,
) -> Result<Shape, String> {
    let mut shape = Shape::default();
    let begin = |what: String, after: &Model| {
        if let Some(j) = j {
            j.begin(Op {
                what,
                after: Arc::new(after.logical()),
            });
        }
    };
    let ack = || {
        if let Some(j) = j {
            j.ack();
        }
    };
    let mut m = Model::default();
    begin("open".into(), &m);
    let map = M::open(pool).map_err(s)?;
    let mut core = RaftCore::open(map).map_err(s)?;
    ack();
    let mut g = Gen {
        rng: SplitMix(cfg.seed ^ 0x7261_6674),
        term: 1,
        node: 1,
        step: 0,
    };
    for step in 0..cfg.ops as u64 {
        g.step = step;
        let r = g.rng.below(100);
        if r < 4 {
            g.term += 1;
            g.node = 1 + g.rng.below(3);
            let v = if g.rng.below(2) == 0 {
                Vote::new(g.term, g.node)
            } else {
                Vote::new_committed(g.term, g.node)
            };
            m.vote = Some(v);
            begin(format!("vote {v}"), &m);
            core.save_vote(&v).map_err(s)?;
            shape.votes += 1;
            ack();
        } else if r < 6 {
            install(&mut g, &mut m, &mut core, begin, ack)?;
            shape.installs += 1;
        } else if r < 13 {
            begin("clean-up".into(), &m);
            for _ in 0..40 {
                if !core.maintenance().map_err(s)? {
                    break;
                }
            }
            ack();
        } else {
            let n = 1 + g.rng.below(3);
            let mut what = Vec::new();
            let mut after = m.clone();
            let mut actions = Vec::new();
            for _ in 0..n {
                let a = g.rng.below(100);
                let last = after.last_log().map(|l| l.index);
                let applied = after.applied_index();
                match last.filter(|_| a >= 55) {
                    None => {
                        let n = 1 + g.rng.below(3);
                        let es = g.entries(&after, n);
                        after.append(&es);
                        what.push(format!("append {}..", es[0].log_id.index));
                        actions.push(Action::Append(es));
                    }
                    Some(last) if a < 75 => {
                        let from = applied.map_or(0, |x| x + 1);
                        if from <= last {
                            let upto = from + g.rng.below(last - from + 1);
                            after.apply(upto);
                            what.push(format!("apply ..={upto}"));
                            actions.push(Action::Apply(upto));
                        }
                    }
                    Some(last) if a < 85 => {
                        let from = applied
                            .map_or(0, |x| x + 1)
                            .max(after.purged.map_or(0, |p| p.index + 1));
                        if from <= last {
                            let t = from + g.rng.below(last - from + 1);
                            after.truncate(t);
                            g.term += 1;
                            what.push(format!("truncate {t}.."));
                            actions.push(Action::Truncate(t));
                        }
                    }
                    Some(_) => {
                        if let Some(ap) = after.applied {
                            let keep = g.rng.below(3);
                            if ap.index >= keep {
                                let upto = after
                                    .log
                                    .get(&(ap.index - keep))
                                    .map(|e| e.log_id)
                                    .unwrap_or(ap);
                                if after.purged.is_none_or(|p| p.index < upto.index) {
                                    after.purge(upto);
                                    what.push(format!("snapshot, purge ..={}", upto.index));
                                    actions.push(Action::SnapshotPurge(upto));
                                }
                            }
                        }
                    }
                }
            }
            begin(what.join(", "), &after);
            for a in actions {
                match a {
                    Action::Append(es) => {
                        core.append(&es).map_err(s)?;
                        m.append(&es);
                    }
                    Action::Apply(upto) => {
                        let from = m.applied_index().map_or(0, |x| x + 1);
                        let es: Vec<Entry> = core.entries(from, upto + 1).map_err(s)?;
                        if es.len() as u64 != upto + 1 - from {
                            return Err(format!(
                                "log read {from}..={upto} gave {} entries",
                                es.len()
                            ));
                        }
                        core.apply(&es).map_err(s)?;
                        m.apply(upto);
                    }
                    Action::Truncate(t) => {
                        core.truncate(lid(0, 0, t)).map_err(s)?;
                        m.truncate(t);
                        shape.truncations += 1;
                    }
                    Action::SnapshotPurge(upto) => {
                        core.build_snapshot().map_err(s)?;
                        core.purge(upto).map_err(s)?;
                        m.purge(upto);
                        shape.purges += 1;
                    }
                }
            }
            if m.logical() != after.logical() {
                return Err(format!("model diverged from the plan at step {step}"));
            }
            core.commit().map_err(s)?;
            ack();
        }
    }
    shape.maintenance = core.map().stats().maintenance;
    Ok(shape)
}

enum Action {
    Append(Vec<Entry>),
    Apply(u64),
    Truncate(u64),
    SnapshotPurge(LogId),
}

/// Installs a snapshot: beyond the log (random contents) or inside it (the
/// state at that index, keeping the entries after it).
fn install<M: CrashMap>(
    g: &mut Gen,
    m: &mut Model,
    core: &mut RaftCore<M>,
    begin: impl Fn(String, &Model),
    ack: impl Fn(),
) -> Result<(), String> {
    let last = m.next_index();
    let from = m.applied_index().map_or(0, |a| a + 1);
    let inside = g.rng.below(2) == 0 && from < last;
    let (s_id, items) = if inside {
        let s = from + g.rng.below(last - from);
        let id = m.log.get(&s).map(|e| e.log_id).expect("inside the log");
        (id, m.state_at(s))
    } else {
        g.term += 1;
        let s = last + 1 + g.rng.below(3);
        let mut items = BTreeMap::new();
        for k in 0..KEYS {
            if g.rng.below(3) > 0 {
                items.insert(key(k), value(g.step + 1000, k, &mut g.rng));
            }
        }
        (lid(g.term, 2, s), items)
    };
    let meta = SnapshotMeta {
        last_log_id: Some(s_id),
        last_membership: StoredMembership::new(
            Some(lid(1, 1, 0)),
            Membership::new(vec![[1, 2, 3].into()], ()),
        ),
        snapshot_id: format!("crash-{}", g.step),
    };
    let mut after = m.clone();
    after.install(&meta, &items);
    begin(format!("install snapshot at {}", s_id.index), &after);
    let mut staged = core.staging().map_err(s)?;
    if g.rng.below(2) == 0 {
        for (k, v) in &items {
            RaftCore::<M>::stage_item(&mut staged, s_id.index, k, v).map_err(s)?;
        }
    } else {
        // As a replica receives it from a PM leader: the versions' records
        // in chunks of a few ([`RaftCore::stage_records`]; the list copies
        // them into its pages with non-temporal stores).
        let mut chunk = Vec::new();
        for (i, (k, v)) in items.iter().enumerate() {
            ferrite_raft::map::record::push(
                &mut chunk,
                &ferrite_raft::keys::data_key(k, s_id.index),
                &ferrite_raft::keys::version_value(v),
            );
            if i % 3 == 2 {
                RaftCore::<M>::stage_records(&mut staged, s_id.index, &chunk).map_err(s)?;
                chunk.clear();
            }
        }
        RaftCore::<M>::stage_records(&mut staged, s_id.index, &chunk).map_err(s)?;
    }
    core.install(&meta, staged, items.len() as u64).map_err(s)?;
    *m = after;
    ack();
    Ok(())
}

/// What the store holds, read through the same calls openraft and clients use.
fn observe<M: PmMap>(core: &RaftCore<M>) -> Result<Logical, String> {
    let st = core.status().clone();
    let from = st.purged.map_or(0, |p| p.index + 1);
    let to = st.last_log.map_or(0, |l| l.index + 1);
    let log = core.entries(from, to.max(from)).map_err(s)?;
    if log.len() as u64 != to.saturating_sub(from) {
        return Err(format!(
            "the log has a hole: {} entries readable in {from}..{to}",
            log.len()
        ));
    }
    let mut state = BTreeMap::new();
    for k in 0..KEYS {
        if let Some(v) = core.get(&key(k)).map_err(s)? {
            state.insert(key(k), v);
        }
    }
    Ok(Logical {
        vote: st.vote,
        last_log: st.last_log,
        purged: st.purged,
        log,
        applied: st.applied,
        membership: st.membership,
        state,
        live_keys: st.live_keys,
    })
}

fn describe(got: &Logical, want: &Logical) -> String {
    let mut d = Vec::new();
    if got.vote != want.vote {
        d.push(format!("vote {:?} (want {:?})", got.vote, want.vote));
    }
    if got.last_log != want.last_log || got.purged != want.purged {
        d.push(format!(
            "log {:?}..{:?} (want {:?}..{:?})",
            got.purged.map(|l| l.index),
            got.last_log.map(|l| l.index),
            want.purged.map(|l| l.index),
            want.last_log.map(|l| l.index)
        ));
    } else if got.log != want.log {
        d.push("log entries differ".into());
    }
    if got.applied != want.applied {
        d.push(format!(
            "applied {:?} (want {:?})",
            got.applied, want.applied
        ));
    }
    if got.state != want.state {
        d.push(format!(
            "state has {} keys (want {})",
            got.state.len(),
            want.state.len()
        ));
    }
    if got.live_keys != want.live_keys {
        d.push(format!(
            "live key count {} (want {})",
            got.live_keys, want.live_keys
        ));
    }
    if got.membership != want.membership {
        d.push("membership differs".into());
    }
    d.join("; ")
}

/// Opens a crash image, checks it against the journal and returns what it found.
pub fn check<M: CrashMap>(pool: Pool, j: &Journal<Op>) -> Result<Logical, String> {
    let map = M::open(&pool).map_err(|e| format!("open: {e}"))?;
    let core = RaftCore::open(map).map_err(|e| format!("open: {e}"))?;
    ferrite_pm::crash::recovered(&pool);
    core.map().check().map_err(|e| format!("structure: {e}"))?;
    let got = observe(&core)?;
    if got.live_keys != got.state.len() as u64 {
        return Err(format!(
            "{} live keys counted, {} readable",
            got.live_keys,
            got.state.len()
        ));
    }
    let acked = j.acked.last().map(|o| o.after.clone()).unwrap_or_default();
    if *acked == got {
        return Ok(got);
    }
    if let Some(f) = &j.in_flight {
        if *f.after == got {
            return Ok(got);
        }
        return Err(format!(
            "recovered neither the acknowledged state nor the one after {:?}: vs acknowledged: {}; vs in flight: {}",
            f.what,
            describe(&got, &acked),
            describe(&got, &f.after)
        ));
    }
    Err(format!(
        "recovered state differs from the acknowledged one: {}",
        describe(&got, &acked)
    ))
}

fn scaled(cfg: &CrashConfig) -> CrashConfig {
    let mut c = cfg.clone();
    if cfg.ops == CrashConfig::default().ops {
        c.ops = DEFAULT_OPS;
    }
    c
}

/// Runs one structure's target (a tripwire armed on this thread breaks it).
pub fn target<M: CrashMap>(name: &str, cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let c = scaled(cfg);
    let c2 = c.clone();
    explore(
        name,
        &c,
        move |p, j| workload::<M>(&c2, p, Some(j)).map(|_| ()),
        check::<M>,
    )
}

/// `ferrite crash-test raft-list`.
pub fn raft_list_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    target::<ListMap>("raft-list", cfg)
}

/// `ferrite crash-test raft-btree`.
pub fn raft_btree_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    target::<PmBTree>("raft-btree", cfg)
}

#[cfg(test)]
mod tests;
