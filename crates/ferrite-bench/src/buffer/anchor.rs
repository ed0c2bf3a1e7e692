//! Outside anchors on the same YCSB records: LMDB (through `heed`) and SQLite
//! (through `rusqlite`, the bundled library), each in a child process held to
//! the DRAM budget by a memory cgroup ([`super::cgroup`]), so that their reads
//! served by the OS page cache count against the same budget as the buffer
//! manager's DRAM tier.
//!
//! Protocol: the parent runs the child twice, `--phase load` (no limit: the
//! load writes the files, syncs them and drops them from the page cache) and
//! `--phase run` (inside the cgroup: warm-up, then the measurement); each
//! prints one JSON object on its last line of stdout. The child is any
//! command line that ends up in [`child_main`] (the `ferrite` binary's hidden
//! `bench buffer-anchor` subcommand).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use ferrite_kv::{KvError, KvResult};
use serde_json::{json, Value};

use super::cgroup::{self, MemCgroup, MemUsage};
use super::ycsb::{self, RunSpec, RunStats, Workload, YcsbTarget, FIELD_LEN};

/// An outside store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Lmdb,
    Sqlite,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::Lmdb, Engine::Sqlite];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Lmdb => "lmdb",
            Engine::Sqlite => "sqlite",
        }
    }

    pub fn parse(s: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Its durability setting, written next to every result.
    pub fn durability(self) -> &'static str {
        match self {
            Engine::Lmdb => {
                "LMDB default flags plus MDB_NORDAHEAD: each update its own write transaction (get, change the field, put), fsync at commit (durable); reads copy the field out of its mmap"
            }
            Engine::Sqlite => {
                "SQLite journal_mode=WAL, synchronous=FULL: each update its own transaction (read the record, UPDATE it with the field changed), WAL fsync at commit (durable); reads SELECT substr() of the field; default page cache (2 MiB), no mmap"
            }
        }
    }
}

fn kv_err(e: impl std::fmt::Display) -> KvError {
    KvError::Backend(e.to_string())
}

/// LMDB through heed: one unnamed database of byte keys and values.
pub struct Lmdb {
    env: heed::Env,
    db: heed::Database<heed::types::Bytes, heed::types::Bytes>,
}

impl Lmdb {
    /// Opens (creating) the environment in `dir`, mapping up to `map_bytes`.
    pub fn open(dir: &Path, map_bytes: u64) -> KvResult<Lmdb> {
        std::fs::create_dir_all(dir).map_err(kv_err)?;
        // SAFETY: heed requires that the environment is not opened twice in
        // one process and that no other process uses it unsafely; the
        // benchmark opens it once, in one child process.
        let env = unsafe {
            let mut o = heed::EnvOpenOptions::new();
            // No readahead: LMDB's advice for databases larger than RAM
            // (readahead would fill the memory budget with unused pages).
            o.flags(heed::EnvFlags::NO_READ_AHEAD);
            o.map_size(map_bytes as usize).max_dbs(1).open(dir)
        }
        .map_err(kv_err)?;
        let mut w = env.write_txn().map_err(kv_err)?;
        let db = env.create_database(&mut w, None).map_err(kv_err)?;
        w.commit().map_err(kv_err)?;
        Ok(Lmdb { env, db })
    }

    pub fn sync(&self) -> KvResult<()> {
        self.env.force_sync().map_err(kv_err)
    }
}

impl YcsbTarget for Lmdb {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        let r = self.env.read_txn().map_err(kv_err)?;
        out.clear();
        match self.db.get(&r, key).map_err(kv_err)? {
            Some(v) => {
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn write(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let mut w = self.env.write_txn().map_err(kv_err)?;
        if self.db.get(&w, key).map_err(kv_err)?.is_none() {
            return Ok(false);
        }
        self.db.put(&mut w, key, value).map_err(kv_err)?;
        w.commit().map_err(kv_err)?;
        Ok(true)
    }
    fn range(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        let r = self.env.read_txn().map_err(kv_err)?;
        let b: (std::ops::Bound<&[u8]>, std::ops::Bound<&[u8]>) =
            (std::ops::Bound::Included(start), std::ops::Bound::Unbounded);
        let mut i = 0;
        for e in self.db.range(&r, &b).map_err(kv_err)? {
            if i == n {
                break;
            }
            let (k, v) = e.map_err(kv_err)?;
            f(k, v);
            i += 1;
        }
        Ok(i)
    }
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> KvResult<()> {
        let mut w = self.env.write_txn().map_err(kv_err)?;
        for (k, v) in batch {
            self.db.put(&mut w, k, v).map_err(kv_err)?;
        }
        w.commit().map_err(kv_err)
    }
    /// The field straight out of the map (LMDB's reads are zero-copy).
    fn read_field(&self, key: &[u8], field: usize, out: &mut Vec<u8>) -> KvResult<bool> {
        let r = self.env.read_txn().map_err(kv_err)?;
        out.clear();
        match self.db.get(&r, key).map_err(kv_err)? {
            Some(v) => {
                let a = (field * FIELD_LEN).min(v.len());
                let b = ((field + 1) * FIELD_LEN).min(v.len());
                out.extend_from_slice(&v[a..b]);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    /// Read, change the field, put back, in one write transaction (LMDB
    /// copies a page on write anyway).
    fn write_field(&self, key: &[u8], field: usize, bytes: &[u8]) -> KvResult<bool> {
        let mut w = self.env.write_txn().map_err(kv_err)?;
        let Some(old) = self.db.get(&w, key).map_err(kv_err)? else {
            return Ok(false);
        };
        let mut v = old.to_vec();
        match v.get_mut(field * FIELD_LEN..field * FIELD_LEN + bytes.len()) {
            Some(f) => f.copy_from_slice(bytes),
            None => return Ok(false),
        }
        self.db.put(&mut w, key, &v).map_err(kv_err)?;
        w.commit().map_err(kv_err)?;
        Ok(true)
    }
}

/// SQLite: `ycsb(k INTEGER PRIMARY KEY, v BLOB)`, the 4-byte key as the rowid
/// (its big-endian byte order is the integer order).
pub struct Sqlite {
    conn: rusqlite::Connection,
}

fn rowid(key: &[u8]) -> i64 {
    let mut b = [0u8; 4];
    let n = key.len().min(4);
    b[..n].copy_from_slice(&key[..n]);
    u32::from_be_bytes(b) as i64
}

impl Sqlite {
    pub fn open(path: &Path) -> KvResult<Sqlite> {
        let conn = rusqlite::Connection::open(path).map_err(kv_err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(kv_err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(kv_err)?;
        conn.execute(
            "CREATE TABLE IF NOT EXISTS ycsb (k INTEGER PRIMARY KEY, v BLOB NOT NULL)",
            [],
        )
        .map_err(kv_err)?;
        Ok(Sqlite { conn })
    }

    /// Moves the WAL into the database file and truncates it.
    pub fn checkpoint(&self) -> KvResult<()> {
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(kv_err)
    }
}

impl YcsbTarget for Sqlite {
    fn read(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        let mut st = self
            .conn
            .prepare_cached("SELECT v FROM ycsb WHERE k = ?1")
            .map_err(kv_err)?;
        let mut rows = st.query([rowid(key)]).map_err(kv_err)?;
        out.clear();
        match rows.next().map_err(kv_err)? {
            Some(r) => {
                let v = r.get_ref(0).map_err(kv_err)?;
                out.extend_from_slice(v.as_blob().map_err(kv_err)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }
    fn write(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        let mut st = self
            .conn
            .prepare_cached("UPDATE ycsb SET v = ?1 WHERE k = ?2")
            .map_err(kv_err)?;
        Ok(st
            .execute(rusqlite::params![value, rowid(key)])
            .map_err(kv_err)?
            == 1)
    }
    fn range(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        let mut st = self
            .conn
            .prepare_cached("SELECT k, v FROM ycsb WHERE k >= ?1 ORDER BY k LIMIT ?2")
            .map_err(kv_err)?;
        let mut rows = st
            .query(rusqlite::params![rowid(start), n as i64])
            .map_err(kv_err)?;
        let mut i = 0;
        while let Some(r) = rows.next().map_err(kv_err)? {
            let k: i64 = r.get(0).map_err(kv_err)?;
            let v = r.get_ref(1).map_err(kv_err)?;
            f(&(k as u32).to_be_bytes(), v.as_blob().map_err(kv_err)?);
            i += 1;
        }
        Ok(i)
    }
    fn load_batch(&self, batch: &[(Vec<u8>, Vec<u8>)]) -> KvResult<()> {
        let tx = self.conn.unchecked_transaction().map_err(kv_err)?;
        {
            let mut st = tx
                .prepare_cached("INSERT INTO ycsb (k, v) VALUES (?1, ?2)")
                .map_err(kv_err)?;
            for (k, v) in batch {
                st.execute(rusqlite::params![rowid(k), v]).map_err(kv_err)?;
            }
        }
        tx.commit().map_err(kv_err)
    }
    /// `substr` of the blob: SQLite returns only the field.
    fn read_field(&self, key: &[u8], field: usize, out: &mut Vec<u8>) -> KvResult<bool> {
        let mut st = self
            .conn
            .prepare_cached("SELECT substr(v, ?2, ?3) FROM ycsb WHERE k = ?1")
            .map_err(kv_err)?;
        let mut rows = st
            .query(rusqlite::params![
                rowid(key),
                (field * FIELD_LEN + 1) as i64,
                FIELD_LEN as i64
            ])
            .map_err(kv_err)?;
        out.clear();
        match rows.next().map_err(kv_err)? {
            Some(r) => {
                let v = r.get_ref(0).map_err(kv_err)?;
                out.extend_from_slice(v.as_blob().map_err(kv_err)?);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Records per load transaction of the anchors.
const ANCHOR_LOAD_BATCH: usize = 10_000;

fn open_engine(engine: Engine, dir: &Path, records: u64) -> KvResult<Box<dyn YcsbTarget>> {
    Ok(match engine {
        Engine::Lmdb => Box::new(Lmdb::open(
            dir,
            (records * 2500 + (256 << 20)).next_multiple_of(1 << 20),
        )?),
        Engine::Sqlite => {
            std::fs::create_dir_all(dir).map_err(kv_err)?;
            Box::new(Sqlite::open(&dir.join("ycsb.sqlite"))?)
        }
    })
}

/// Loads `records` YCSB records into `engine`'s files in `dir`, syncs them
/// and drops them from the page cache.
pub fn load(engine: Engine, dir: &Path, records: u64) -> KvResult<f64> {
    let t0 = Instant::now();
    match engine {
        Engine::Lmdb => {
            let s = Lmdb::open(
                dir,
                (records * 2500 + (256 << 20)).next_multiple_of(1 << 20),
            )?;
            load_in_batches(&s, records)?;
            s.sync()?;
        }
        Engine::Sqlite => {
            std::fs::create_dir_all(dir).map_err(kv_err)?;
            let s = Sqlite::open(&dir.join("ycsb.sqlite"))?;
            load_in_batches(&s, records)?;
            s.checkpoint()?;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    cgroup::evict_dir(dir).map_err(kv_err)?;
    Ok(secs)
}

fn load_in_batches(t: &dyn YcsbTarget, records: u64) -> KvResult<()> {
    let mut batch = Vec::with_capacity(ANCHOR_LOAD_BATCH);
    let mut v = Vec::new();
    for id in 0..records {
        ycsb::record(id as u32, &mut v);
        batch.push((ycsb::key(id as u32).to_vec(), v.clone()));
        if batch.len() == ANCHOR_LOAD_BATCH || id + 1 == records {
            t.load_batch(&batch)?;
            batch.clear();
        }
    }
    Ok(())
}

/// Bytes of the engine's files in `dir`.
pub fn files_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn stats_json(s: &RunStats) -> Value {
    json!({
        "ops": s.ops, "secs": s.secs, "mops": s.mops, "p50_ns": s.p50_ns,
        "p99_ns": s.p99_ns, "wrong": s.wrong, "missing": s.missing, "cpu_secs": s.cpu_secs,
        "rq_wait_secs": s.rq_wait_secs,
    })
}

fn stats_from_json(v: &Value) -> RunStats {
    let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
    RunStats {
        ops: v["ops"].as_u64().unwrap_or(0),
        secs: f("secs"),
        mops: f("mops"),
        p50_ns: f("p50_ns"),
        p99_ns: f("p99_ns"),
        wrong: v["wrong"].as_u64().unwrap_or(0),
        missing: v["missing"].as_u64().unwrap_or(0),
        timeline: Vec::new(),
        samples: Vec::new(),
        cpu_secs: f("cpu_secs"),
        rq_wait_secs: f("rq_wait_secs"),
    }
}

/// The child's side: `--engine E --dir D --records N --phase load|run
/// [--workload W --seconds S --warmup-seconds S --seed N]`; returns the JSON
/// line to print.
pub fn child_main(args: &[String]) -> KvResult<String> {
    let get = |name: &str| -> Option<&str> {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let need = |name: &str| get(name).ok_or_else(|| kv_err(format!("missing {name}")));
    let num = |name: &str, d: f64| -> KvResult<f64> {
        get(name).map_or(Ok(d), |s| {
            s.parse().map_err(|e| kv_err(format!("{name}: {e}")))
        })
    };
    let engine = Engine::parse(need("--engine")?)
        .ok_or_else(|| kv_err("--engine must be lmdb or sqlite"))?;
    let dir = PathBuf::from(need("--dir")?);
    let records = num("--records", 0.0)? as u64;
    match need("--phase")? {
        "load" => {
            let secs = load(engine, &dir, records)?;
            Ok(json!({"load_s": secs, "file_bytes": files_bytes(&dir)}).to_string())
        }
        "run" => {
            let w = Workload::parse(need("--workload")?)
                .ok_or_else(|| kv_err("--workload: ro, rwNN or scan"))?;
            let mut spec = RunSpec::new(w, records, num("--seconds", 5.0)?);
            spec.warmup_seconds = num("--warmup-seconds", 0.0)?;
            spec.warmup_ops = if spec.warmup_seconds > 0.0 {
                u64::MAX
            } else {
                0
            };
            spec.seed = num("--seed", 42.0)? as u64;
            let t = open_engine(engine, &dir, records)?;
            let s = ycsb::run(t.as_ref(), &spec)?;
            Ok(stats_json(&s).to_string())
        }
        p => Err(kv_err(format!("unknown phase {p}"))),
    }
}

/// What one anchor measurement gave.
#[derive(Debug, Clone)]
pub struct AnchorResult {
    pub engine: Engine,
    pub workload: Workload,
    pub records: u64,
    pub file_bytes: u64,
    pub load_s: f64,
    pub stats: RunStats,
    /// The run child's cgroup accounting (peak includes the page cache).
    pub usage: MemUsage,
    pub limit: u64,
}

/// Runs `prefix` + the child arguments (prefix: the command that reaches
/// [`child_main`]), optionally inside `cg`; returns the JSON it printed.
fn run_child(prefix: &[String], args: &[String], cg: Option<&MemCgroup>) -> KvResult<Value> {
    let (prog, pre) = prefix
        .split_first()
        .ok_or_else(|| kv_err("no anchor child command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(pre)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = match cg {
        Some(cg) => cg.spawn(&mut cmd),
        None => cmd.spawn(),
    }
    .map_err(|e| kv_err(format!("starting {prog}: {e}")))?;
    let out = child.wait_with_output().map_err(kv_err)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(kv_err(format!(
            "anchor child {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let last = stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).map_err(|e| kv_err(format!("anchor child printed {last:?}: {e}")))
}

/// Loads `engine` in a child, then runs each of `workloads` in a child held
/// to `limit` bytes by a memory cgroup. The files go to `dir` (removed after).
#[allow(clippy::too_many_arguments)]
pub fn measure(
    prefix: &[String],
    engine: Engine,
    dir: &Path,
    records: u64,
    workloads: &[Workload],
    limit: u64,
    seconds: f64,
    warmup_seconds: f64,
    seed: u64,
) -> KvResult<Vec<AnchorResult>> {
    let _ = std::fs::remove_dir_all(dir);
    let base = |phase: &str| -> Vec<String> {
        vec![
            "--engine".into(),
            engine.name().into(),
            "--dir".into(),
            dir.display().to_string(),
            "--records".into(),
            records.to_string(),
            "--phase".into(),
            phase.into(),
        ]
    };
    let res = (|| {
        let l = run_child(prefix, &base("load"), None)?;
        let mut out = Vec::new();
        for &w in workloads {
            cgroup::evict_dir(dir).map_err(kv_err)?;
            let cg = MemCgroup::create(&format!("ferrite-anchor-{}", engine.name()), limit)
                .map_err(kv_err)?;
            let mut a = base("run");
            a.extend([
                "--workload".into(),
                w.name(),
                "--seconds".into(),
                seconds.to_string(),
                "--warmup-seconds".into(),
                warmup_seconds.to_string(),
                "--seed".into(),
                seed.to_string(),
            ]);
            let v = run_child(prefix, &a, Some(&cg))?;
            let usage = cg.usage().map_err(kv_err)?;
            out.push(AnchorResult {
                engine,
                workload: w,
                records,
                file_bytes: l["file_bytes"].as_u64().unwrap_or(0),
                load_s: l["load_s"].as_f64().unwrap_or(0.0),
                stats: stats_from_json(&v),
                usage,
                limit,
            });
        }
        Ok(out)
    })();
    let _ = std::fs::remove_dir_all(dir);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_engine(engine: Engine) {
        let dir = std::env::temp_dir().join(format!(
            "ferrite-anchor-test-{}-{}",
            engine.name(),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        load(engine, &dir, 3000).unwrap();
        assert!(files_bytes(&dir) >= 3000 * 1000);
        let t = open_engine(engine, &dir, 3000).unwrap();
        for w in [
            Workload::ReadOnly,
            Workload::ReadWrite { update_pct: 50 },
            Workload::Scan,
        ] {
            let mut spec = RunSpec::new(w, 3000, 60.0);
            spec.max_ops = 300;
            let s = ycsb::run(t.as_ref(), &spec).unwrap();
            assert_eq!((s.ops, s.wrong, s.missing), (300, 0, 0), "{w:?}");
        }
        // Scans return records in key order, as many as asked.
        let mut keys = Vec::new();
        let n = t
            .range(&[0, 0, 0, 0], 50, &mut |k, _| keys.push(k.to_vec()))
            .unwrap();
        assert_eq!(n, 50);
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        drop(t);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lmdb_runs_the_ycsb_workloads_on_the_same_records() {
        check_engine(Engine::Lmdb);
    }

    #[test]
    fn sqlite_runs_the_ycsb_workloads_on_the_same_records() {
        check_engine(Engine::Sqlite);
    }

    #[test]
    fn the_child_protocol_reports_errors_clearly() {
        let e = child_main(&["--engine".into(), "nope".into()]).unwrap_err();
        assert!(e.to_string().contains("lmdb or sqlite"), "{e}");
        let e = child_main(&["--engine".into(), "lmdb".into()]).unwrap_err();
        assert!(e.to_string().contains("--dir"), "{e}");
    }
}
