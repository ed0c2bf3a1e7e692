//! A three-replica cluster spoken to with the `redis` crate (someone else's
//! implementation of the protocol): every command on every replica,
//! pipelining, RESP3, and the replies to bad requests.

mod common;

use common::Cluster;
use ferrite_raft::StoreKind;
use redis::{Commands, RedisResult, Value};

fn exercise(kind: StoreKind) {
    let c = Cluster::start(kind, 3, &format!("cmds-{kind}"), |_| {});
    let mut conns: Vec<redis::Connection> = (0..3).map(|i| c.client(i)).collect();
    // Writes and reads on every replica (followers forward to the leader).
    for (i, con) in conns.iter_mut().enumerate() {
        let k = format!("k{i}");
        let _: () = con.set(&k, "v").unwrap();
        let v: String = con.get(&k).unwrap();
        assert_eq!(v, "v");
    }
    for (j, con) in conns.iter_mut().enumerate() {
        for i in 0..3 {
            let v: Option<String> = con.get(format!("k{i}")).unwrap();
            assert_eq!(v.as_deref(), Some("v"), "replica {j} reads k{i}");
        }
    }
    let con = &mut conns[1];
    // SET key value IFEQ expected: applied (OK) or not (nil).
    let r: Option<String> = redis::cmd("SET")
        .arg("k0")
        .arg("w")
        .arg("IFEQ")
        .arg("v")
        .query(con)
        .unwrap();
    assert_eq!(r.as_deref(), Some("OK"));
    let r: Option<String> = redis::cmd("SET")
        .arg("k0")
        .arg("x")
        .arg("IFEQ")
        .arg("v")
        .query(con)
        .unwrap();
    assert_eq!(r, None, "the comparison fails against w");
    let r: Option<String> = redis::cmd("SET")
        .arg("absent")
        .arg("x")
        .arg("IFEQ")
        .arg("v")
        .query(con)
        .unwrap();
    assert_eq!(r, None, "IFEQ never creates a key");
    assert_eq!(con.get::<_, String>("k0").unwrap(), "w");
    // NX / XX.
    let r: Option<String> = redis::cmd("SET")
        .arg("n")
        .arg("1")
        .arg("NX")
        .query(con)
        .unwrap();
    assert_eq!(r.as_deref(), Some("OK"));
    let r: Option<String> = redis::cmd("SET")
        .arg("n")
        .arg("2")
        .arg("NX")
        .query(con)
        .unwrap();
    assert_eq!(r, None);
    let r: Option<String> = redis::cmd("SET")
        .arg("n")
        .arg("3")
        .arg("XX")
        .query(con)
        .unwrap();
    assert_eq!(r.as_deref(), Some("OK"));
    let r: Option<String> = redis::cmd("SET")
        .arg("nx-absent")
        .arg("3")
        .arg("XX")
        .query(con)
        .unwrap();
    assert_eq!(r, None);
    // DEL, EXISTS, DBSIZE.
    assert_eq!(
        con.exists::<_, i64>(&["k0", "k1", "nope", "k0"]).unwrap(),
        3
    );
    assert_eq!(con.del::<_, i64>(&["k1", "nope", "k2"]).unwrap(), 2);
    assert_eq!(
        redis::cmd("DBSIZE").query::<i64>(con).unwrap(),
        2,
        "k0 and n"
    );
    // PING, ECHO, INFO.
    assert_eq!(redis::cmd("PING").query::<String>(con).unwrap(), "PONG");
    assert_eq!(
        redis::cmd("ECHO").arg("hi").query::<String>(con).unwrap(),
        "hi"
    );
    let info: String = redis::cmd("INFO").query(con).unwrap();
    for field in [
        "role:",
        "raft_leader_id:",
        "raft_term:",
        "raft_commit_index:",
        "raft_applied_index:",
        "durability:",
    ] {
        assert!(info.contains(field), "INFO lacks {field}: {info}");
    }
    assert!(info.contains(&format!("store:{}", kind.name())));
    // Binary-safe keys and values, an empty value.
    let bin: Vec<u8> = (0..=255).collect();
    let _: () = con.set(&bin[..], &bin[..]).unwrap();
    assert_eq!(con.get::<_, Vec<u8>>(&bin[..]).unwrap(), bin);
    let _: () = con.set("empty", "").unwrap();
    assert_eq!(con.get::<_, Vec<u8>>("empty").unwrap(), Vec::<u8>::new());
    // Pipelining: 200 commands in one round trip, answered in order.
    let mut p = redis::pipe();
    for i in 0..100 {
        p.set(format!("p{i}"), i).ignore();
    }
    for i in 0..100 {
        p.get(format!("p{i}"));
    }
    let got: Vec<i64> = p.query(&mut conns[2]).unwrap();
    assert_eq!(got, (0..100).collect::<Vec<i64>>());
    // Errors are replies, the connection stays usable.
    let e: RedisResult<Value> = redis::cmd("GET").query(&mut conns[0]);
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("wrong number of arguments"));
    let e: RedisResult<Value> = redis::cmd("NOSUCH").arg("x").query(&mut conns[0]);
    assert!(e.unwrap_err().to_string().contains("unknown command"));
    let e: RedisResult<Value> = redis::cmd("SET")
        .arg("a")
        .arg("b")
        .arg("EX")
        .arg("10")
        .query(&mut conns[0]);
    assert!(e.is_err());
    let e: RedisResult<Value> = redis::cmd("SET")
        .arg("a")
        .arg("b")
        .arg("NX")
        .arg("XX")
        .query(&mut conns[0]);
    assert!(e.unwrap_err().to_string().contains("syntax"));
    assert_eq!(
        redis::cmd("PING").query::<String>(&mut conns[0]).unwrap(),
        "PONG"
    );
    // RESP3 after HELLO 3 (the client negotiates it).
    let mut r3 = redis::Client::open(format!("redis://{}/?protocol=resp3", c.addr(0)))
        .unwrap()
        .get_connection()
        .unwrap();
    let v: Value = redis::cmd("GET").arg("missing").query(&mut r3).unwrap();
    assert_eq!(v, Value::Nil);
    let v: Value = redis::cmd("CONFIG")
        .arg("GET")
        .arg("save")
        .query(&mut r3)
        .unwrap();
    assert!(matches!(v, Value::Map(_)), "{v:?}");
    assert_eq!(r3.get::<_, String>("k0").unwrap(), "w");
}

#[test]
fn list_cluster_serves_redis_clients() {
    exercise(StoreKind::List);
}

#[test]
fn btree_cluster_serves_redis_clients() {
    exercise(StoreKind::BTree);
}

#[test]
fn wal_cluster_serves_redis_clients() {
    exercise(StoreKind::Wal);
}
