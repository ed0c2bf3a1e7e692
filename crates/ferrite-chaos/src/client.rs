//! Clients that issue random `GET`, `SET` and `SET … IFEQ` on a small key
//! space over RESP (through the `redis` crate, so the protocol is someone
//! else's implementation) and record every invocation and response.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_pm::rng::SplitMix;

use crate::{Record, Status};

/// What one client does.
#[derive(Clone)]
pub struct ClientSpec {
    pub id: u32,
    /// Any replica accepts any command; the client picks one per operation.
    pub replicas: Vec<SocketAddr>,
    pub keys: usize,
    /// A reply later than this is indeterminate (and the connection is dropped).
    pub timeout: Duration,
    pub seed: u64,
    /// At most this many operations (every loop is bounded).
    pub max_ops: usize,
    /// `AUTH` password, when the cluster has one.
    pub password: Option<String>,
    /// Set by the harness to end the run.
    pub stop: Arc<AtomicBool>,
    /// The run's time origin (monotonic).
    pub t0: Instant,
}

fn ns(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

fn connect(addr: SocketAddr, spec: &ClientSpec) -> Option<redis::Connection> {
    let info = redis::ConnectionInfo {
        addr: redis::ConnectionAddr::Tcp(addr.ip().to_string(), addr.port()),
        redis: redis::RedisConnectionInfo {
            db: 0,
            username: None,
            password: spec.password.clone(),
            ..Default::default()
        },
    };
    let client = redis::Client::open(info).ok()?;
    let con = client.get_connection_with_timeout(spec.timeout).ok()?;
    con.set_read_timeout(Some(spec.timeout)).ok()?;
    con.set_write_timeout(Some(spec.timeout)).ok()?;
    Some(con)
}

/// Runs one client until `stop` or `max_ops`; returns its records.
pub fn run(spec: ClientSpec) -> Vec<Record> {
    let mut rng = SplitMix(spec.seed ^ (spec.id as u64) << 40);
    let mut out = Vec::new();
    let mut cons: Vec<Option<redis::Connection>> = spec.replicas.iter().map(|_| None).collect();
    // The last value this client saw per key, to make CAS succeed sometimes.
    let mut seen: Vec<Option<String>> = vec![None; spec.keys];
    let mut seq = 0u64;
    while out.len() < spec.max_ops && !spec.stop.load(Ordering::Relaxed) {
        let r = rng.below(spec.replicas.len() as u64) as usize;
        let k = rng.below(spec.keys as u64) as usize;
        let key = format!("k{k}");
        seq += 1;
        let value = format!("c{}-{seq}", spec.id);
        let kind = match rng.below(10) {
            0..=4 => "get",
            5..=7 => "set",
            _ => "cas",
        };
        let expected = seen[k].clone().unwrap_or_else(|| "none".into());
        let mut rec = Record {
            client: spec.id,
            op: kind.into(),
            key: key.clone(),
            value: (kind != "get").then(|| value.clone()),
            expected: (kind == "cas").then(|| expected.clone()),
            call: ns(spec.t0),
            ret: 0,
            status: Status::Fail,
            found: false,
            applied: false,
        };
        if cons[r].is_none() {
            cons[r] = connect(spec.replicas[r], &spec);
        }
        let Some(con) = cons[r].as_mut() else {
            // Nothing was sent: no effect. Back off a little so a client
            // does not spin on a replica that is down.
            rec.ret = ns(spec.t0);
            out.push(rec);
            std::thread::park_timeout(Duration::from_millis(10));
            continue;
        };
        let reply: redis::RedisResult<Option<String>> = match kind {
            "get" => redis::cmd("GET").arg(&key).query(con),
            "set" => redis::cmd("SET").arg(&key).arg(&value).query(con),
            _ => redis::cmd("SET")
                .arg(&key)
                .arg(&value)
                .arg("IFEQ")
                .arg(&expected)
                .query(con),
        };
        rec.ret = ns(spec.t0);
        match reply {
            Ok(v) => {
                rec.status = Status::Ok;
                match kind {
                    "get" => {
                        rec.found = v.is_some();
                        rec.value = v.clone();
                        seen[k] = v;
                    }
                    "set" => seen[k] = Some(value),
                    _ => {
                        rec.applied = v.is_some();
                        if rec.applied {
                            seen[k] = Some(value);
                        }
                    }
                }
            }
            Err(_) => {
                // A timeout, a dropped connection or an error reply: the
                // command may have reached the leader. Indeterminate; start
                // afresh so a late reply is never read as the next one's.
                rec.status = Status::Unknown;
                cons[r] = None;
            }
        }
        out.push(rec);
    }
    out
}

/// A linearizable read of every key, through any replica that answers,
/// retrying up to `deadline`. `None` for a key that could not be read.
pub fn read_all(
    replicas: &[SocketAddr],
    keys: usize,
    password: Option<String>,
    deadline: Instant,
) -> Vec<(String, Option<Option<String>>)> {
    let spec = ClientSpec {
        id: u32::MAX,
        replicas: replicas.to_vec(),
        keys,
        timeout: Duration::from_secs(2),
        seed: 0,
        max_ops: 0,
        password,
        stop: Arc::new(AtomicBool::new(false)),
        t0: Instant::now(),
    };
    let mut out = Vec::new();
    for k in 0..keys {
        let key = format!("k{k}");
        let mut got = None;
        'tries: while Instant::now() < deadline {
            for &a in replicas {
                if let Some(mut con) = connect(a, &spec) {
                    if let Ok(v) = redis::cmd("GET")
                        .arg(&key)
                        .query::<Option<String>>(&mut con)
                    {
                        got = Some(v);
                        break 'tries;
                    }
                }
            }
            std::thread::park_timeout(Duration::from_millis(50));
        }
        out.push((key, got));
    }
    out
}

/// `INFO` of one replica as key/value pairs (empty when it does not answer).
pub fn info(addr: SocketAddr, password: Option<String>) -> Vec<(String, String)> {
    let spec = ClientSpec {
        id: u32::MAX,
        replicas: vec![addr],
        keys: 0,
        timeout: Duration::from_secs(1),
        seed: 0,
        max_ops: 0,
        password,
        stop: Arc::new(AtomicBool::new(false)),
        t0: Instant::now(),
    };
    let Some(mut con) = connect(addr, &spec) else {
        return Vec::new();
    };
    let Ok(text) = redis::cmd("INFO").query::<String>(&mut con) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Every key as replica `addr` itself holds it (`READONLY`: its own state
/// machine, no forwarding to the leader); `None` when it does not answer.
pub fn read_local(
    addr: SocketAddr,
    keys: usize,
    password: Option<String>,
) -> Option<Vec<Option<String>>> {
    let spec = ClientSpec {
        id: u32::MAX,
        replicas: vec![addr],
        keys,
        timeout: Duration::from_secs(2),
        seed: 0,
        max_ops: 0,
        password,
        stop: Arc::new(AtomicBool::new(false)),
        t0: Instant::now(),
    };
    let mut con = connect(addr, &spec)?;
    redis::cmd("READONLY").query::<()>(&mut con).ok()?;
    (0..keys)
        .map(|k| {
            redis::cmd("GET")
                .arg(format!("k{k}"))
                .query::<Option<String>>(&mut con)
                .ok()
        })
        .collect()
}
