//! Crash-simulator targets: `log`, `page` and `inplace`.
//!
//! Each cuts power at every fence of a small deterministic workload (several
//! images per fence) and checks the recovered structure against the journal:
//!
//! * **log**: the entries are exactly the acknowledged ones (since the last
//!   acknowledged reset) plus possibly a prefix of the in-flight group, each
//!   entry whole; the log then accepts an append and reopens with it.
//! * **page**: every page is its last acknowledged version, or for the page in
//!   flight the new one, byte for byte: never a mix of lines.
//! * **inplace**: every value is its last acknowledged value or, for the one in
//!   flight, the new one.

use std::collections::BTreeMap;

use ferrite_pm::rng::SplitMix;
use ferrite_pm::{explore, CrashConfig, CrashReport, Journal, JournalHandle, Pool};

use ferrite_pmio::inplace::{InplaceArray, InplaceConfig, InplaceMethod};
use ferrite_pmio::log::{Log, LogConfig, LogKind, PmLog};
use ferrite_pmio::page::{DirtyMask, Method, PageStore, PageStoreConfig};
use ferrite_pmio::PmioError;

/// Workload operations per variant: the CLI passes the generic default (600),
/// which each family scales to reach >= 10,000 crash states in total.
fn scaled(cfg: &CrashConfig, per_default: usize) -> usize {
    if cfg.ops == CrashConfig::default().ops {
        per_default
    } else {
        cfg.ops.max(1)
    }
}

fn s(e: PmioError) -> String {
    e.to_string()
}

/// Every structure here owns exactly one region block, which fits in one chunk
/// of the crash pools: an object owning more chunks leaked a region (e.g. one
/// allocated by a creation that crashed before publishing it).
/// A digest of what a checker recovered (compared between recoveries of one
/// image, with and without a crash during recovery).
fn digest(parts: &impl std::hash::Hash) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

fn no_leak(pool: &Pool) -> Result<(), String> {
    for (id, n) in pool.chunks_by_owner() {
        if n != 1 {
            let name = pool
                .objects()
                .into_iter()
                .find(|o| o.id.index() == id.index())
                .map_or("?".into(), |o| o.name);
            return Err(format!("object {name:?} owns {n} chunks: a region leaked"));
        }
    }
    Ok(())
}

// ----- logs ----------------------------------------------------------------------

#[derive(Debug, Clone)]
pub enum LogOp {
    Create,
    Append(Vec<Vec<u8>>),
    Reset,
    /// Keep this many entries.
    Truncate(usize),
}

const LOG_NAME: &str = "crash-log";

fn log_cfg(kind: LogKind, padded: bool) -> LogConfig {
    LogConfig {
        kind,
        padded,
        segment_bytes: 2048,
    }
}

fn log_workload(
    kind: LogKind,
    padded: bool,
    ops: usize,
    seed: u64,
    pool: &Pool,
    j: &JournalHandle<LogOp>,
) -> Result<(), String> {
    j.begin(LogOp::Create);
    let mut log = PmLog::open_or_create(pool, LOG_NAME, log_cfg(kind, padded)).map_err(s)?;
    j.ack();
    let mut rng = SplitMix(seed);
    for _ in 0..ops {
        let r = rng.below(100);
        if r < 4 {
            j.begin(LogOp::Reset);
            log.reset().map_err(s)?;
            j.ack();
            continue;
        }
        if r < 10 && !log.is_empty() {
            let keep = rng.below(log.len() as u64) as usize;
            j.begin(LogOp::Truncate(keep));
            log.truncate_after(log.first_lsn() + keep as u64 - 1)
                .map_err(s)?;
            j.ack();
            continue;
        }
        let n = if r < 30 { 2 + rng.below(3) as usize } else { 1 };
        let group: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let len = rng.below(130) as usize;
                let b = rng.next();
                (0..len).map(|i| (b >> (i % 57)) as u8 ^ i as u8).collect()
            })
            .collect();
        j.begin(LogOp::Append(group.clone()));
        let refs: Vec<&[u8]> = group.iter().map(|g| g.as_slice()).collect();
        let res = if n == 1 {
            log.append(refs[0]).map(|_| ())
        } else {
            log.append_group(&refs).map(|_| ())
        };
        match res {
            Ok(()) => j.ack(),
            Err(PmioError::LogFull { .. }) => {
                j.abandon();
                j.begin(LogOp::Reset);
                log.reset().map_err(s)?;
                j.ack();
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

fn log_check(pool: Pool, j: &Journal<LogOp>, kind: LogKind, padded: bool) -> Result<u64, String> {
    let created = !j.acked.is_empty();
    let mut first = 1u64;
    let mut model: Vec<Vec<u8>> = Vec::new();
    for op in &j.acked {
        match op {
            LogOp::Create => {}
            LogOp::Append(g) => model.extend(g.iter().cloned()),
            LogOp::Reset => {
                first += model.len() as u64;
                model.clear();
            }
            LogOp::Truncate(keep) => model.truncate(*keep),
        }
    }
    let exists = pool
        .object(LOG_NAME, ferrite_pmio::log::LOG_TYPE)
        .map(|id| pool.root(id, 0) != 0)
        .unwrap_or(false);
    if !exists {
        ferrite_pm::crash::recovered(&pool);
        return if created {
            Err("acknowledged log is missing".into())
        } else {
            Ok(0)
        };
    }
    let mut log = PmLog::open(&pool, LOG_NAME).map_err(|e| format!("open: {e}"))?;
    ferrite_pm::crash::recovered(&pool);
    no_leak(&pool)?;
    if log.kind() != kind || log.padded() != padded {
        return Err("log reopened with another configuration".into());
    }
    let got: Vec<Vec<u8>> = log.entries().map_err(s)?.into_iter().map(|e| e.1).collect();
    let ok = if log.first_lsn() == first
        && got.len() >= model.len()
        && got[..model.len()] == model[..]
    {
        let extra = &got[model.len()..];
        match &j.in_flight {
            Some(LogOp::Append(g)) => extra.len() <= g.len() && extra == &g[..extra.len()],
            _ => extra.is_empty(),
        }
    } else if let Some(LogOp::Truncate(keep)) = j.in_flight {
        log.first_lsn() == first && got[..] == model[..keep.min(model.len())]
    } else {
        // Only an in-flight reset may have emptied the log.
        matches!(j.in_flight, Some(LogOp::Reset))
            && got.is_empty()
            && log.first_lsn() == first + model.len() as u64
    };
    if !ok {
        return Err(format!(
            "{} log: recovered {} entries from lsn {}, acknowledged {} from lsn {} (in flight {:?})",
            kind.name(),
            got.len(),
            log.first_lsn(),
            model.len(),
            first,
            j.in_flight.as_ref().map(|o| match o {
                LogOp::Append(g) => format!("append of {}", g.len()),
                o => format!("{o:?}"),
            })
        ));
    }
    let found = digest(&(log.first_lsn(), &got));
    // The recovered log must be usable: append, reopen, find it.
    let next = log.next_lsn();
    match log.append(b"after recovery") {
        Ok(l) if l == next => {}
        Ok(l) => return Err(format!("post-recovery append got lsn {l}, expected {next}")),
        Err(PmioError::LogFull { .. }) => return Ok(found),
        Err(e) => return Err(format!("post-recovery append: {e}")),
    }
    drop(log);
    let log = PmLog::open(&pool, LOG_NAME).map_err(|e| format!("reopen: {e}"))?;
    if log.len() != got.len() + 1 || log.read(next).map_err(s)? != b"after recovery" {
        return Err("post-recovery append lost on reopen".into());
    }
    Ok(found)
}

pub fn log_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let ops = scaled(cfg, 180);
    let mut total = CrashReport {
        target: "log".into(),
        ..CrashReport::default()
    };
    for kind in LogKind::ALL {
        for padded in [false, true] {
            let seed = cfg.seed;
            let r = explore(
                "log",
                cfg,
                move |p, j| log_workload(kind, padded, ops, seed, p, j),
                move |p, j| log_check(p, j, kind, padded),
            )?;
            total.absorb(r);
        }
    }
    Ok(total)
}

// ----- pages ---------------------------------------------------------------------

#[derive(Debug, Clone)]
pub enum PageOp {
    Create,
    Write {
        pid: u64,
        version: u64,
        mask: DirtyMask,
    },
    Remove {
        pid: u64,
    },
}

const PAGE_NAME: &str = "crash-pages";
const PAGE_SIZE: usize = 512;
const PAGES: u64 = 4;
const PAGE_CFG: PageStoreConfig = PageStoreConfig {
    page_size: PAGE_SIZE,
    slots: 6,
};

fn line_bytes(pid: u64, version: u64, line: usize) -> [u8; 64] {
    let mut r = SplitMix(pid << 40 ^ version << 8 ^ line as u64);
    let mut out = [0u8; 64];
    for c in out.chunks_exact_mut(8) {
        c.copy_from_slice(&r.next().to_le_bytes());
    }
    out
}

fn apply_write(page: &mut [u8], pid: u64, version: u64, mask: &DirtyMask) {
    for l in 0..PAGE_SIZE / 64 {
        if mask.get(l) {
            page[l * 64..(l + 1) * 64].copy_from_slice(&line_bytes(pid, version, l));
        }
    }
}

fn page_workload(
    ops: usize,
    seed: u64,
    pool: &Pool,
    j: &JournalHandle<PageOp>,
) -> Result<(), String> {
    j.begin(PageOp::Create);
    let mut st = PageStore::open_or_create(pool, PAGE_NAME, PAGE_CFG).map_err(s)?;
    j.ack();
    let mut rng = SplitMix(seed ^ 0xAB);
    let mut pages: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for version in 1..=ops as u64 {
        let pid = rng.below(PAGES);
        let mut mask = DirtyMask::default();
        let bits = rng.next();
        for l in 0..PAGE_SIZE / 64 {
            if bits >> (l * 3) & 3 == 0 {
                mask.set(l);
            }
        }
        if mask.count() == 0 {
            mask.set((bits >> 60) as usize % (PAGE_SIZE / 64));
        }
        if rng.below(12) == 0 && pages.contains_key(&pid) {
            j.begin(PageOp::Remove { pid });
            st.remove(pid).map_err(s)?;
            pages.remove(&pid);
            j.ack();
            continue;
        }
        let method = [Method::Cow, Method::MicroLog, Method::Auto][rng.below(3) as usize];
        let page = pages.entry(pid).or_insert_with(|| vec![0; PAGE_SIZE]);
        let first = st.pvn(pid).is_none();
        let mask = if first {
            DirtyMask::all(PAGE_SIZE / 64)
        } else {
            mask
        };
        apply_write(page, pid, version, &mask);
        j.begin(PageOp::Write { pid, version, mask });
        st.write(pid, page, &mask, method).map_err(s)?;
        j.ack();
    }
    Ok(())
}

fn page_check(pool: Pool, j: &Journal<PageOp>) -> Result<u64, String> {
    let created = !j.acked.is_empty();
    let mut model: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    for op in &j.acked {
        match op {
            PageOp::Write { pid, version, mask } => {
                let p = model.entry(*pid).or_insert_with(|| vec![0; PAGE_SIZE]);
                apply_write(p, *pid, *version, mask);
            }
            PageOp::Remove { pid } => {
                model.remove(pid);
            }
            PageOp::Create => {}
        }
    }
    let exists = pool
        .object(PAGE_NAME, ferrite_pmio::page::PAGE_STORE_TYPE)
        .map(|id| pool.root(id, 0) != 0)
        .unwrap_or(false);
    if !exists {
        ferrite_pm::crash::recovered(&pool);
        return if created {
            Err("acknowledged page store is missing".into())
        } else {
            Ok(0)
        };
    }
    let mut found = Vec::new();
    let mut buf = vec![0u8; PAGE_SIZE];
    // Twice: recovery (re-applying a micro log) must be idempotent.
    for round in 0..2 {
        let st = PageStore::open_or_create(&pool, PAGE_NAME, PAGE_CFG)
            .map_err(|e| format!("open: {e}"))?;
        ferrite_pm::crash::recovered(&pool);
        no_leak(&pool)?;
        for pid in 0..PAGES {
            let acked = model.get(&pid);
            let new = match &j.in_flight {
                Some(PageOp::Write {
                    pid: p,
                    version,
                    mask,
                }) if *p == pid => {
                    let mut n = acked.cloned().unwrap_or_else(|| vec![0; PAGE_SIZE]);
                    apply_write(&mut n, pid, *version, mask);
                    Some(n)
                }
                _ => None,
            };
            let present = st.read(pid, &mut buf).map_err(s)?;
            if round == 0 {
                found.push(present.then(|| buf.clone()));
            }
            let removing = matches!(j.in_flight, Some(PageOp::Remove { pid: p }) if p == pid);
            let ok = match (present, acked) {
                (false, None) => true,
                (false, Some(_)) => removing,
                (true, a) => a == Some(&buf) || new.as_ref() == Some(&buf),
            };
            if !ok {
                let lines: Vec<usize> = (0..PAGE_SIZE / 64)
                    .filter(|&l| {
                        acked.is_none_or(|a| a[l * 64..(l + 1) * 64] != buf[l * 64..(l + 1) * 64])
                    })
                    .collect();
                return Err(format!(
                    "round {round}: page {pid} is neither old nor new (present {present}, lines differing from old: {lines:?})"
                ));
            }
        }
    }
    // Usable after recovery.
    let mut st = PageStore::open_or_create(&pool, PAGE_NAME, PAGE_CFG).map_err(s)?;
    let page = vec![0xEE; PAGE_SIZE];
    st.write(0, &page, &DirtyMask::all(PAGE_SIZE / 64), Method::Cow)
        .map_err(|e| format!("post-recovery write: {e}"))?;
    drop(st);
    let st = PageStore::open_or_create(&pool, PAGE_NAME, PAGE_CFG).map_err(s)?;
    if !st.read(0, &mut buf).map_err(s)? || buf != page {
        return Err("post-recovery write lost".into());
    }
    Ok(digest(&found))
}

pub fn page_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let ops = scaled(cfg, 900);
    let seed = cfg.seed;
    let mut r = explore(
        "page",
        cfg,
        move |p, j| page_workload(ops, seed, p, j),
        page_check,
    )?;
    r.target = "page".into();
    Ok(r)
}

// ----- in-place updates ------------------------------------------------------------

#[derive(Debug, Clone)]
pub enum InplaceOp {
    Create,
    Update { idx: usize, version: u64 },
}

const ARRAY_NAME: &str = "crash-array";
const VALUES: usize = 12;

fn inplace_cfg(method: InplaceMethod, value_size: usize) -> InplaceConfig {
    InplaceConfig {
        method,
        value_size,
        count: VALUES,
        log_bytes: 4096,
    }
}

fn value(idx: usize, version: u64, vs: usize) -> Vec<u8> {
    if version == 0 {
        return vec![0; vs];
    }
    let mut r = SplitMix((idx as u64) << 32 ^ version);
    (0..vs).map(|_| r.next() as u8).collect()
}

fn inplace_workload(
    method: InplaceMethod,
    vs: usize,
    ops: usize,
    seed: u64,
    pool: &Pool,
    j: &JournalHandle<InplaceOp>,
) -> Result<(), String> {
    j.begin(InplaceOp::Create);
    let mut a =
        InplaceArray::open_or_create(pool, ARRAY_NAME, inplace_cfg(method, vs)).map_err(s)?;
    j.ack();
    let mut rng = SplitMix(seed ^ 0x1F);
    for version in 1..=ops as u64 {
        let idx = rng.below(VALUES as u64) as usize;
        j.begin(InplaceOp::Update { idx, version });
        a.update(idx, &value(idx, version, vs)).map_err(s)?;
        j.ack();
    }
    Ok(())
}

fn inplace_check(
    pool: Pool,
    j: &Journal<InplaceOp>,
    method: InplaceMethod,
    vs: usize,
) -> Result<u64, String> {
    let created = !j.acked.is_empty();
    let mut model = [0u64; VALUES];
    for op in &j.acked {
        if let InplaceOp::Update { idx, version } = op {
            model[*idx] = *version;
        }
    }
    let exists = pool
        .object(ARRAY_NAME, ferrite_pmio::inplace::INPLACE_TYPE)
        .map(|id| pool.root(id, 0) != 0)
        .unwrap_or(false);
    if !exists {
        ferrite_pm::crash::recovered(&pool);
        return if created {
            Err("acknowledged array is missing".into())
        } else {
            Ok(0)
        };
    }
    let mut out = vec![0u8; vs];
    let mut found = Vec::new();
    for round in 0..2 {
        let a = InplaceArray::open_or_create(&pool, ARRAY_NAME, inplace_cfg(method, vs))
            .map_err(|e| format!("open: {e}"))?;
        ferrite_pm::crash::recovered(&pool);
        no_leak(&pool)?;
        for (idx, &v) in model.iter().enumerate() {
            a.read(idx, &mut out).map_err(s)?;
            if round == 0 {
                found.push(out.clone());
            }
            let in_flight = match j.in_flight {
                Some(InplaceOp::Update { idx: i, version }) if i == idx => Some(version),
                _ => None,
            };
            if out != value(idx, v, vs) && in_flight.is_none_or(|n| out != value(idx, n, vs)) {
                return Err(format!(
                    "round {round}: {} value {idx} is neither version {v} nor the in-flight {in_flight:?}",
                    method.name()
                ));
            }
        }
    }
    let mut a =
        InplaceArray::open_or_create(&pool, ARRAY_NAME, inplace_cfg(method, vs)).map_err(s)?;
    let v = value(0, u64::MAX, vs);
    a.update(0, &v)
        .map_err(|e| format!("post-recovery update: {e}"))?;
    a.read(0, &mut out).map_err(s)?;
    if out != v {
        return Err("post-recovery update lost".into());
    }
    Ok(digest(&found))
}

pub fn inplace_target(cfg: &CrashConfig) -> ferrite_pm::Result<CrashReport> {
    let ops = scaled(cfg, 280);
    let mut total = CrashReport {
        target: "inplace".into(),
        ..CrashReport::default()
    };
    for method in InplaceMethod::ALL {
        for vs in [16usize, 64] {
            let seed = cfg.seed;
            let r = explore(
                "inplace",
                cfg,
                move |p, j| inplace_workload(method, vs, ops, seed, p, j),
                move |p, j| inplace_check(p, j, method, vs),
            )?;
            total.absorb(r);
        }
    }
    Ok(total)
}
