//! The commands: `GET`, `SET [NX|XX|IFEQ v]`, `DEL`, `EXISTS`, `DBSIZE`,
//! `PING`, `ECHO`, `INFO`, `HELLO`, `SELECT 0`, `QUIT`, `READONLY` /
//! `READWRITE` (local, possibly stale reads), `CLUSTER ADDNODE` /
//! `CLUSTER REMOVENODE` (membership changes), and the `CONFIG GET`,
//! `COMMAND` and `CLIENT` replies that `redis-cli`, `redis-benchmark` and
//! client libraries ask for when they connect.

use ferrite_raft::{Command, Cond, Reply};
use openraft::ServerState;

use crate::node::Node;
use crate::proto::{ClientOp, ClientReply};
use crate::resp::R;

/// One client connection's state.
pub struct Conn {
    pub id: u64,
    /// RESP version (2, or 3 after `HELLO 3`).
    pub proto: u8,
    pub name: Option<Vec<u8>>,
    pub quit: bool,
    /// After `READONLY` (Redis Cluster's command for reading from a
    /// replica): `GET` reads this replica's own state machine, which may be
    /// stale, instead of a linearizable read through the leader. `READWRITE`
    /// turns it off. For inspecting a replica (e.g. comparing replicas after
    /// a fault test); writes are unaffected.
    pub local_reads: bool,
    /// Whether the connection may run commands: always without a password,
    /// after a successful `AUTH` (or `HELLO … AUTH`) with one.
    pub authenticated: bool,
}

impl Conn {
    /// A new connection; `password` says whether the server has one.
    pub fn new(id: u64, password: bool) -> Conn {
        Conn {
            authenticated: !password,
            id,
            proto: 2,
            name: None,
            quit: false,
            local_reads: false,
        }
    }
}

fn wrong_args(cmd: &[u8]) -> R {
    R::err(format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(cmd).to_lowercase()
    ))
}

fn upper(b: &[u8]) -> Vec<u8> {
    b.to_ascii_uppercase()
}

/// `AUTH [username] password`: `default` is the only user.
fn auth(node: &Node, conn: &mut Conn, user: Option<&[u8]>, password: &[u8]) -> R {
    let Some(expected) = node.cfg.requirepass.as_deref().filter(|p| !p.is_empty()) else {
        return R::err(
            "ERR AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        );
    };
    let user_ok = user.is_none_or(|u| u == b"default");
    if user_ok && crate::auth::constant_time_eq(password, expected.as_bytes()) {
        conn.authenticated = true;
        R::ok()
    } else {
        tracing::warn!(
            "replica {}: client {} failed to authenticate (wrong password)",
            node.id,
            conn.id
        );
        R::err("WRONGPASS invalid username-password pair or user is disabled.")
    }
}

/// Runs one command.
pub async fn dispatch(node: &Node, conn: &mut Conn, args: Vec<Vec<u8>>) -> R {
    let name = upper(&args[0]);
    let n = args.len();
    if !conn.authenticated && !matches!(name.as_slice(), b"AUTH" | b"HELLO" | b"QUIT") {
        return R::err("NOAUTH Authentication required.");
    }
    match name.as_slice() {
        b"AUTH" => match n {
            2 => auth(node, conn, None, &args[1]),
            3 => auth(node, conn, Some(&args[1]), &args[2]),
            _ => wrong_args(&args[0]),
        },
        b"PING" => match n {
            1 => R::Simple("PONG".into()),
            2 => R::Bulk(args[1].clone()),
            _ => wrong_args(&args[0]),
        },
        b"ECHO" if n == 2 => R::Bulk(args[1].clone()),
        b"GET" if n == 2 && (conn.local_reads || node.cfg.tripwire_stale_reads) => {
            match node.replica.get(&args[1]) {
                Ok(v) => v.map_or(R::Null, R::Bulk),
                Err(e) => R::err(format!("ERR reading this replica's state: {e}")),
            }
        }
        b"READONLY" if n == 1 => {
            conn.local_reads = true;
            R::ok()
        }
        b"READWRITE" if n == 1 => {
            conn.local_reads = false;
            R::ok()
        }
        b"GET" if n == 2 => match node.exec(ClientOp::Get(vec![args[1].clone()])).await {
            Ok(ClientReply::Values(mut v)) if v.len() == 1 => {
                v.pop().flatten().map_or(R::Null, R::Bulk)
            }
            Ok(_) => R::err("ERR unexpected reply from the leader"),
            Err(e) => R::Error(e),
        },
        b"SET" if n >= 3 => set(node, &args).await,
        b"DEL" if n >= 2 => {
            let cmd = Command::Del {
                keys: args[1..].to_vec(),
            };
            write(node, cmd, |r| match r {
                Reply::Del { removed } => R::Int(removed as i64),
                _ => R::err("ERR unexpected reply"),
            })
            .await
        }
        b"EXISTS" if n >= 2 => match node.exec(ClientOp::Get(args[1..].to_vec())).await {
            Ok(ClientReply::Values(v)) => R::Int(v.iter().filter(|x| x.is_some()).count() as i64),
            Ok(_) => R::err("ERR unexpected reply from the leader"),
            Err(e) => R::Error(e),
        },
        b"DBSIZE" if n == 1 => match node.exec(ClientOp::DbSize).await {
            Ok(ClientReply::Count(c)) => R::Int(c as i64),
            Ok(_) => R::err("ERR unexpected reply from the leader"),
            Err(e) => R::Error(e),
        },
        b"INFO" => R::Bulk(
            info(
                node,
                args.get(1)
                    .map(|s| String::from_utf8_lossy(s).to_lowercase()),
            )
            .into_bytes(),
        ),
        b"HELLO" => hello(node, conn, &args),
        b"SELECT" if n == 2 => {
            if args[1] == b"0" {
                R::ok()
            } else {
                R::err("ERR DB index is out of range")
            }
        }
        b"QUIT" => {
            conn.quit = true;
            R::ok()
        }
        b"CONFIG" if n >= 2 => config(node, &args),
        b"COMMAND" => command(&args),
        b"CLIENT" if n >= 2 => client(conn, &args),
        b"CLUSTER" if n >= 2 => cluster(node, &args).await,
        b"ECHO" | b"GET" | b"SET" | b"DEL" | b"EXISTS" | b"DBSIZE" | b"SELECT" | b"CONFIG"
        | b"CLIENT" | b"CLUSTER" => wrong_args(&args[0]),
        _ => {
            let rest: Vec<String> = args[1..]
                .iter()
                .take(5)
                .map(|a| format!("'{}'", String::from_utf8_lossy(&a[..a.len().min(64)])))
                .collect();
            R::err(format!(
                "ERR unknown command '{}', with args beginning with: {}",
                String::from_utf8_lossy(&args[0][..args[0].len().min(64)]),
                rest.join(" ")
            ))
        }
    }
}

async fn write(node: &Node, cmd: Command, f: impl FnOnce(Reply) -> R) -> R {
    if let Err(e) = cmd.check_limits() {
        return R::err(format!("ERR {e}"));
    }
    match node.exec(ClientOp::Write(cmd)).await {
        Ok(ClientReply::Write(r)) => f(r),
        Ok(_) => R::err("ERR unexpected reply from the leader"),
        Err(e) => R::Error(e),
    }
}

/// `SET key value [NX|XX|IFEQ expected]`: `+OK` when written, a null reply
/// when the condition did not hold.
async fn set(node: &Node, args: &[Vec<u8>]) -> R {
    let mut cond = Cond::Always;
    let mut i = 3;
    while i < args.len() {
        let opt = upper(&args[i]);
        let next = match opt.as_slice() {
            b"NX" => Cond::Nx,
            b"XX" => Cond::Xx,
            b"IFEQ" => match args.get(i + 1) {
                Some(v) => {
                    i += 1;
                    Cond::IfEq(v.clone())
                }
                None => return R::err("ERR syntax error"),
            },
            b"EX" | b"PX" | b"EXAT" | b"PXAT" | b"KEEPTTL" => {
                return R::err("ERR Ferrite keys do not expire: SET takes NX, XX or IFEQ")
            }
            b"GET" => return R::err("ERR Ferrite's SET does not take GET"),
            _ => return R::err("ERR syntax error"),
        };
        if cond != Cond::Always {
            return R::err("ERR syntax error");
        }
        cond = next;
        i += 1;
    }
    let cmd = Command::Set {
        key: args[1].clone(),
        value: args[2].clone(),
        cond,
    };
    write(node, cmd, |r| match r {
        Reply::Set { applied: true } => R::ok(),
        Reply::Set { applied: false } => R::Null,
        _ => R::err("ERR unexpected reply"),
    })
    .await
}

fn role(node: &Node) -> (&'static str, ServerState) {
    let st = node.raft.metrics().borrow().state;
    (
        if st == ServerState::Leader {
            "master"
        } else {
            "slave"
        },
        st,
    )
}

fn hello(node: &Node, conn: &mut Conn, args: &[Vec<u8>]) -> R {
    let mut i = 1;
    let mut proto = conn.proto;
    if let Some(v) = args.get(1) {
        match v.as_slice() {
            b"2" => proto = 2,
            b"3" => proto = 3,
            _ => return R::err("NOPROTO unsupported protocol version"),
        }
        i = 2;
    }
    while i < args.len() {
        match upper(&args[i]).as_slice() {
            b"AUTH" if i + 2 < args.len() => {
                if let R::Error(e) = auth(node, conn, Some(&args[i + 1]), &args[i + 2]) {
                    return R::Error(e);
                }
                i += 3;
            }
            b"SETNAME" if i + 1 < args.len() => {
                conn.name = Some(args[i + 1].clone());
                i += 2;
            }
            _ => return R::err("ERR syntax error in HELLO option"),
        }
    }
    if !conn.authenticated {
        return R::err("NOAUTH HELLO must be called with the client's AUTH credentials");
    }
    conn.proto = proto;
    let (r, _) = role(node);
    R::Map(vec![
        (R::bulk("server"), R::bulk("ferrite")),
        (R::bulk("version"), R::bulk("7.0.0")),
        (R::bulk("proto"), R::Int(conn.proto as i64)),
        (R::bulk("id"), R::Int(conn.id as i64)),
        (R::bulk("mode"), R::bulk("standalone")),
        (
            R::bulk("role"),
            R::bulk(if r == "master" { "master" } else { "replica" }),
        ),
        (R::bulk("modules"), R::Array(vec![])),
    ])
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a.eq_ignore_ascii_case(b) => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

fn config(node: &Node, args: &[Vec<u8>]) -> R {
    match upper(&args[1]).as_slice() {
        b"GET" if args.len() >= 3 => {
            let known = [
                ("save", String::new()),
                ("appendonly", "no".to_string()),
                ("maxmemory", "0".to_string()),
                ("databases", "1".to_string()),
                ("maxclients", node.cfg.limits.max_clients.to_string()),
                (
                    "proto-max-bulk-len",
                    node.cfg.limits.max_request.to_string(),
                ),
            ];
            let mut out = Vec::new();
            for (k, v) in known {
                if args[2..]
                    .iter()
                    .any(|p| p.len() <= 128 && glob(p, k.as_bytes()))
                {
                    out.push((R::bulk(k), R::bulk(v)));
                }
            }
            R::Map(out)
        }
        b"RESETSTAT" => R::ok(),
        _ => R::err("ERR Ferrite's configuration is set at start (ferrite serve --help)"),
    }
}

fn command(args: &[Vec<u8>]) -> R {
    match args.get(1).map(|a| upper(a)).as_deref() {
        None => R::Array(vec![]),
        Some(b"COUNT") => R::Int(21),
        Some(b"DOCS") => R::Map(vec![]),
        Some(b"INFO") => R::Array(args[2..].iter().map(|_| R::Null).collect()),
        Some(b"LIST") => R::Array(
            [
                "get",
                "set",
                "del",
                "exists",
                "dbsize",
                "ping",
                "echo",
                "info",
                "hello",
                "select",
                "quit",
                "config",
                "command",
                "client",
                "auth",
                "readonly",
                "readwrite",
                "cluster",
            ]
            .iter()
            .map(R::bulk)
            .collect(),
        ),
        _ => R::err("ERR unknown COMMAND subcommand"),
    }
}

/// `CLUSTER ADDNODE id host:port [LEARNER]` and `CLUSTER REMOVENODE id`:
/// membership changes through openraft (on the leader, wherever the client
/// sent them). `host:port` is the new replica's `--peer-listen` address as
/// the others reach it; the new replica runs `ferrite serve --join`.
async fn cluster(node: &Node, args: &[Vec<u8>]) -> R {
    let id_of = |a: &[u8]| -> Result<u64, R> {
        std::str::from_utf8(a)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&i| i > 0)
            .ok_or_else(|| R::err("ERR the replica id must be a positive integer"))
    };
    let op = match upper(&args[1]).as_slice() {
        b"ADDNODE" if (4..=5).contains(&args.len()) => {
            let id = match id_of(&args[2]) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let addr = String::from_utf8_lossy(&args[3]).into_owned();
            if addr
                .rsplit_once(':')
                .is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err())
            {
                return R::err(format!(
                    "ERR {addr:?} is not host:port (the new replica's --peer-listen address)"
                ));
            }
            let learner = match args.get(4).map(|a| upper(a)) {
                None => false,
                Some(a) if a == b"LEARNER" => true,
                Some(_) => return R::err("ERR syntax error: CLUSTER ADDNODE id host:port [LEARNER]"),
            };
            ClientOp::AddNode {
                id,
                addr,
                learner,
                catch_up_ms: node.cfg.catch_up_timeout.as_millis() as u64,
            }
        }
        b"REMOVENODE" if args.len() == 3 => match id_of(&args[2]) {
            Ok(id) => ClientOp::RemoveNode { id },
            Err(e) => return e,
        },
        b"ADDNODE" | b"REMOVENODE" => {
            return R::err(
                "ERR wrong number of arguments: CLUSTER ADDNODE id host:port [LEARNER] | CLUSTER REMOVENODE id",
            )
        }
        _ => {
            return R::err(
                "ERR unknown CLUSTER subcommand: Ferrite takes CLUSTER ADDNODE id host:port [LEARNER] and CLUSTER REMOVENODE id",
            )
        }
    };
    tracing::warn!("replica {}: membership change requested: {op:?}", node.id);
    match node.exec(op).await {
        Ok(ClientReply::Done(what)) => {
            tracing::warn!("replica {}: {what}", node.id);
            R::Simple(format!("OK {what}"))
        }
        Ok(_) => R::err("ERR unexpected reply from the leader"),
        Err(e) => R::Error(e),
    }
}

fn client(conn: &mut Conn, args: &[Vec<u8>]) -> R {
    match upper(&args[1]).as_slice() {
        b"SETNAME" if args.len() == 3 => {
            conn.name = Some(args[2].clone());
            R::ok()
        }
        b"GETNAME" => conn.name.clone().map_or(R::Null, R::Bulk),
        b"ID" => R::Int(conn.id as i64),
        b"SETINFO" => R::ok(),
        b"INFO" => R::bulk(format!(
            "id={} name={} resp={}\n",
            conn.id,
            String::from_utf8_lossy(conn.name.as_deref().unwrap_or_default()),
            conn.proto
        )),
        _ => R::err("ERR unknown CLIENT subcommand"),
    }
}

fn opt(l: Option<ferrite_raft::types::LogId>) -> String {
    l.map_or("-".into(), |l| l.index.to_string())
}

fn host_port(addr: &str) -> (String, String) {
    match addr.rsplit_once(':') {
        Some((h, p)) => (h.trim_matches(['[', ']']).to_string(), p.to_string()),
        None => (addr.to_string(), String::new()),
    }
}

/// `INFO replication`: Redis's fields where they mean the same (`role`,
/// `connected_slaves`, `slaveN:…`, `master_*`), with Raft's view of each
/// replica. On the leader, one `slaveN` line per other member: its id, the
/// address it is replicated to (its `--peer-listen`), `state` (online when
/// the last call to it succeeded within the election timeout), `offset` (the
/// last log index it is known to hold), `lag` (entries behind the leader's
/// log), `member` (voter or learner) and `last_ack_ms`. On a follower: the
/// leader it follows, whether it heard from it within the election timeout,
/// and how far its own log and state machine are.
fn replication(
    node: &Node,
    m: &openraft::RaftMetrics<u64, openraft::BasicNode>,
) -> Vec<(String, String)> {
    let (role, _) = role(node);
    let membership = m.membership_config.membership();
    let voters: Vec<u64> = membership.voter_ids().collect();
    let is_voter = |id: u64| voters.contains(&id);
    let member = |id: u64| if is_voter(id) { "voter" } else { "learner" };
    let last = m.last_log_index.unwrap_or(0);
    let within = node.cfg.raft.election_max;
    let mut out = vec![
        ("role".to_string(), role.to_string()),
        ("raft_member".into(), member(node.id).into()),
    ];
    if let Some(repl) = &m.replication {
        let mut lines = Vec::new();
        let mut online = 0;
        for (id, _) in membership.nodes() {
            if *id == node.id {
                continue;
            }
            let addr = node.peer_addr_of(*id).unwrap_or_default();
            let contact = node.pool.contact(&addr);
            let up = contact.reachable(within);
            online += up as usize;
            let matched = repl.get(id).cloned().flatten().map(|l| l.index);
            let (ip, port) = host_port(&addr);
            lines.push(format!(
                "id={id},ip={ip},port={port},state={},offset={},lag={},member={},last_ack_ms={}",
                if up { "online" } else { "offline" },
                matched.map_or("-1".into(), |i| i.to_string()),
                matched.map_or(last.to_string(), |i| last.saturating_sub(i).to_string()),
                member(*id),
                contact
                    .last_ok
                    .map_or("-1".into(), |t| t.elapsed().as_millis().to_string()),
            ));
        }
        out.push(("connected_slaves".into(), online.to_string()));
        for (i, l) in lines.into_iter().enumerate() {
            out.push((format!("slave{i}"), l));
        }
        out.push(("master_repl_offset".into(), last.to_string()));
    } else {
        let leader = m.current_leader.filter(|&l| l != node.id);
        let addr = leader
            .and_then(|l| node.peer_addr_of(l))
            .unwrap_or_default();
        let (host, port) = host_port(&addr);
        let heard = *node.last_leader_contact.lock().unwrap();
        let up = leader.is_some() && heard.is_some_and(|t| t.elapsed() <= within);
        out.extend([
            (
                "master_id".to_string(),
                leader.map_or("-".into(), |l| l.to_string()),
            ),
            ("master_host".into(), host),
            ("master_port".into(), port),
            (
                "master_link_status".into(),
                if up { "up" } else { "down" }.into(),
            ),
            (
                "master_last_io_seconds_ago".into(),
                heard.map_or("-1".into(), |t| t.elapsed().as_secs().to_string()),
            ),
            (
                "slave_repl_offset".into(),
                m.last_applied.map_or(0, |l| l.index).to_string(),
            ),
            ("slave_read_repl_offset".into(), last.to_string()),
            ("connected_slaves".into(), "0".into()),
        ]);
    }
    out
}

/// `INFO store`: the store, and (PM stores) how full its pool is.
fn store_section(node: &Node, st: &ferrite_raft::ReplicaStatus) -> Vec<(String, String)> {
    let sp = node.replica.space();
    let mut out = vec![
        ("store".to_string(), node.replica.kind().name().to_string()),
        ("durability".into(), node.replica.durability()),
        (
            "store_path".into(),
            node.cfg.store.path.display().to_string(),
        ),
        ("keys".into(), st.keys.to_string()),
        (
            "store_index".into(),
            if node.replica.index_ready() {
                "ready"
            } else {
                "building"
            }
            .into(),
        ),
        ("store_used_bytes".into(), sp.used.to_string()),
        ("store_live_bytes".into(), sp.live.to_string()),
    ];
    if let (Some(cap), Some(limit)) = (sp.capacity, sp.write_limit(node.cfg.max_pool_use)) {
        out.extend([
            ("pool_capacity_bytes".to_string(), cap.to_string()),
            (
                "pool_used_pct".into(),
                format!("{:.1}", 100.0 * sp.fraction()),
            ),
            ("pool_write_limit_bytes".into(), limit.to_string()),
            ("store_held_back".into(), sp.held_back.to_string()),
            (
                "pool_full".into(),
                // Less than 1 % of the pool left below the write limit.
                if sp.used + cap / 100 > limit {
                    "yes"
                } else {
                    "no"
                }
                .into(),
            ),
        ]);
    }
    out
}

/// The `INFO` text: Redis's sections that clients look at, plus `raft` and
/// `store`.
pub fn info(node: &Node, section: Option<String>) -> String {
    let want = section.filter(|s| !matches!(s.as_str(), "all" | "everything" | "default"));
    let wanted = |name: &str| want.as_deref().is_none_or(|w| w == name);
    let m = node.raft.metrics().borrow().clone();
    let st = node.replica.status();
    let (_, state) = role(node);
    let members: Vec<String> = m
        .membership_config
        .membership()
        .nodes()
        .map(|(id, n)| format!("{id}={}", n.addr))
        .collect();
    let sections: Vec<(&str, Vec<(String, String)>)> = vec![
        (
            "server",
            vec![
                ("redis_version".into(), "7.0.0".into()),
                ("ferrite_version".into(), env!("CARGO_PKG_VERSION").into()),
                ("process_id".into(), std::process::id().to_string()),
                ("tcp_port".into(), node.client_addr.port().to_string()),
                (
                    "uptime_in_seconds".into(),
                    node.started.elapsed().as_secs().to_string(),
                ),
            ],
        ),
        (
            "clients",
            vec![(
                "connected_clients".into(),
                node.clients
                    .load(std::sync::atomic::Ordering::Relaxed)
                    .to_string(),
            )],
        ),
        ("replication", replication(node, &m)),
        (
            "raft",
            vec![
                ("raft_node_id".into(), node.id.to_string()),
                (
                    "raft_running".into(),
                    match &m.running_state {
                        Ok(()) => "ok".to_string(),
                        Err(e) => format!("stopped: {e}").replace(['\r', '\n'], " "),
                    },
                ),
                ("raft_state".into(), format!("{state:?}")),
                (
                    "raft_leader_id".into(),
                    m.current_leader.map_or("-".into(), |l| l.to_string()),
                ),
                ("raft_term".into(), m.current_term.to_string()),
                (
                    "raft_last_log_index".into(),
                    m.last_log_index.map_or("-".into(), |i| i.to_string()),
                ),
                (
                    "raft_commit_index".into(),
                    opt(st.committed.or(m.last_applied)),
                ),
                ("raft_applied_index".into(), opt(m.last_applied)),
                ("raft_snapshot_index".into(), opt(m.snapshot)),
                ("raft_purged_index".into(), opt(m.purged)),
                ("raft_members".into(), members.join(",")),
                (
                    "raft_read_consistency".into(),
                    "linearizable (read-index)".into(),
                ),
            ],
        ),
        // Only when asked for: it measures the store (a WAL's files are
        // listed), which a client polling `INFO raft` should not pay for.
        (
            "store",
            if wanted("store") {
                store_section(node, &st)
            } else {
                Vec::new()
            },
        ),
        (
            "keyspace",
            vec![(
                "db0".into(),
                format!("keys={},expires=0,avg_ttl=0", st.keys),
            )],
        ),
    ];
    let mut out = String::new();
    for (name, kv) in sections {
        if !wanted(name) {
            continue;
        }
        let mut title = name.to_string();
        title[..1].make_ascii_uppercase();
        out.push_str(&format!("# {title}\r\n"));
        for (k, v) in kv {
            out.push_str(&format!("{k}:{v}\r\n"));
        }
        out.push_str("\r\n");
    }
    out
}
