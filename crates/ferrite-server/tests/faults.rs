//! Bad input on both ports, replicas stopped and restarted from their pools,
//! a lagging replica brought back by snapshot.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Cluster;
use ferrite_raft::StoreKind;
use redis::Commands;

fn raw(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the server closes the connection (or resets it).
fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading until the server closes: {e}"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn malformed_and_oversized_requests_close_only_their_connection() {
    let c = Cluster::start(StoreKind::List, 3, "badclient", |cfg| {
        cfg.limits.max_request = 1 << 20;
    });
    let mut good = c.client(0);
    let _: () = good.set("k", "v").unwrap();
    let bad: Vec<&[u8]> = vec![
        b"*1\r\n:5\r\n",                    // not a bulk string
        b"*1\r\n*1\r\n$1\r\nx\r\n",         // nested
        b"*2\r\n$3\r\nGET\r\n$2000000\r\n", // declared larger than the limit
        b"*-3\r\n",                         // negative count
        b"*1\r\n$1\r\nxyz\r\n",             // bad terminator
        b"*1\r\n$abc\r\n",                  // not a number
    ];
    for b in bad {
        let mut s = raw(c.addr(1));
        s.write_all(b).unwrap();
        let reply = read_to_close(&mut s);
        assert!(
            reply.starts_with("-ERR Protocol error"),
            "{:?} -> {reply:?}",
            String::from_utf8_lossy(b)
        );
        // Everyone else is still served.
        assert_eq!(good.get::<_, String>("k").unwrap(), "v");
    }
    // A request over the limit, sent in full.
    let mut s = raw(c.addr(0));
    let big = vec![b'x'; 2 << 20];
    let mut req = format!("*3\r\n$3\r\nSET\r\n$1\r\nb\r\n${}\r\n", big.len()).into_bytes();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    let _ = s.write_all(&req); // the server may close before reading it all
    let reply = read_to_close(&mut s);
    assert!(reply.contains("larger than"), "{reply:?}");
    // Inline commands (telnet) work, a valid pipeline after garbage does not run.
    let mut s = raw(c.addr(2));
    s.write_all(b"PING\r\nGET k\r\nQUIT\r\n").unwrap();
    assert_eq!(read_to_close(&mut s), "+PONG\r\n$1\r\nv\r\n+OK\r\n");
    assert_eq!(good.get::<_, String>("k").unwrap(), "v");
}

#[test]
fn garbage_on_the_peer_port_closes_the_connection_and_replication_goes_on() {
    let c = Cluster::start(StoreKind::BTree, 3, "badpeer", |cfg| {
        cfg.limits.max_frame = 1 << 20;
    });
    let mut con = c.client(0);
    let peer = c.cfgs[1].peer_listen;
    let frames: Vec<Vec<u8>> = vec![
        vec![0, 0, 0, 5, 99, 1, 2, 3, 4], // another protocol version
        vec![0xff, 0xff, 0xff, 0xff],     // 4 GiB frame
        vec![0, 0, 0, 6, 1, 0xee, 0xee, 0xee, 0xee, 0xee], // undecodable
        vec![0, 0, 0, 0],                 // empty frame
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), // not our protocol at all
    ];
    for f in frames {
        let mut s = raw(peer);
        s.write_all(&f).unwrap();
        let got = read_to_close(&mut s);
        assert!(got.is_empty(), "the replica answered garbage with {got:?}");
        let _: () = con.set("after", format!("{f:?}")).unwrap();
        assert_eq!(con.get::<_, String>("after").unwrap(), format!("{f:?}"));
    }
}

#[test]
fn a_lagging_replica_catches_up_by_snapshot() {
    for kind in [StoreKind::List, StoreKind::BTree, StoreKind::Wal] {
        let mut c = Cluster::start(kind, 3, &format!("lag-{kind}"), |cfg| {
            cfg.raft.snapshot_every = 100;
            cfg.raft.keep_logs = 10;
        });
        let leader = c.wait_leader();
        let lagger = (leader + 1) % 3;
        c.stop(lagger);
        let mut con = c.client(leader);
        for i in 0..600 {
            let _: () = con
                .set(format!("key{}", i % 250), vec![i as u8; 2000])
                .unwrap();
        }
        let raft = c.server(leader).node().raft.clone();
        let m =
            c.rt.block_on(raft.wait(Some(Duration::from_secs(30))).metrics(
                |m| m.purged.is_some_and(|p| p.index > 100),
                "the leader purges its log",
            ))
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        // The leader's store, not the metrics: metrics are published
        // asynchronously and may not show the last acknowledged writes yet
        // (waiting for a stale index let the check read before the lagger
        // applied them).
        let applied = c
            .server(leader)
            .node()
            .replica
            .status()
            .applied
            .unwrap()
            .index;
        assert!(applied >= m.last_applied.unwrap().index);
        c.restart(lagger);
        c.wait_applied(lagger, applied);
        let node = c.server(lagger).node();
        let lm = node.raft.metrics().borrow().clone();
        assert!(
            lm.snapshot.is_some(),
            "{kind}: the replica installed a snapshot"
        );
        for i in 350..600 {
            let want = vec![i as u8; 2000];
            assert_eq!(
                node.replica
                    .get(format!("key{}", i % 250).as_bytes())
                    .unwrap(),
                Some(want),
                "{kind} key{}",
                i % 250
            );
        }
        assert_eq!(node.replica.status().keys, 250, "{kind}");
    }
}

#[test]
fn all_replicas_restart_from_their_stores_with_every_acknowledged_write() {
    for kind in [StoreKind::List, StoreKind::BTree, StoreKind::Wal] {
        let mut c = Cluster::start(kind, 3, &format!("restart-{kind}"), |_| {});
        let mut con = c.client(1);
        for i in 0..300 {
            let _: () = con.set(format!("r{i}"), i).unwrap();
        }
        let r: Option<String> = redis::cmd("SET")
            .arg("r7")
            .arg("x")
            .arg("IFEQ")
            .arg("7")
            .query(&mut con)
            .unwrap();
        assert_eq!(r.as_deref(), Some("OK"));
        drop(con);
        for i in 0..3 {
            c.stop(i);
        }
        for i in 0..3 {
            c.restart(i);
        }
        c.wait_leader();
        let mut con = c.client(2);
        for i in 0..300 {
            let want = if i == 7 {
                "x".to_string()
            } else {
                i.to_string()
            };
            assert_eq!(
                con.get::<_, String>(format!("r{i}")).unwrap(),
                want,
                "{kind} r{i}"
            );
        }
        assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 300);
    }
}
