//! Bad input on both ports, replicas stopped and restarted from their pools,
//! a lagging replica brought back by snapshot, a restarted replica
//! announcing itself to a leader waiting to reach it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use common::Cluster;
use ferrite_raft::StoreKind;
use ferrite_server::network::PeerPool;
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

/// A restarted replica opens a connection to each peer as soon as it
/// serves, so a leader waiting to reach it tries again at once.
#[test]
fn a_restarted_replica_announces_itself_to_its_peers() {
    let mut c = Cluster::start(StoreKind::List, 3, "announce", |_| {});
    let leader = c.wait_leader();
    let f = (leader + 1) % 3;
    let mut arrivals = c.server(leader).node().pool.arrivals_of(c.cfgs[f].id);
    c.stop(f);
    let before = *arrivals.borrow_and_update();
    // The restarted replica does not campaign within the test and has no
    // clients: nothing but its announcement opens a connection from it.
    c.cfgs[f].raft.election_min = Duration::from_secs(600);
    c.cfgs[f].raft.election_max = Duration::from_secs(1200);
    c.restart(f);
    c.rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(60), arrivals.changed()).await
    })
    .expect("the restarted replica announced itself to the leader")
    .unwrap();
    assert!(*arrivals.borrow() > before);
}

/// A call to a replica that refuses connections waits for it, and connects
/// when the replica announces itself (here with no probing, and a wait far
/// longer than the test: only the announcement can end it).
#[test]
fn a_call_waiting_for_a_refusing_replica_connects_when_it_is_announced() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let addr = ferrite_chaos::cluster::free_port().unwrap();
    let secret = b"announce-secret".to_vec();
    rt.block_on(async {
        let pool = Arc::new(PeerPool::new(1 << 20, 1, secret.clone()));
        let mut arrivals = pool.arrivals_of(2);
        let (p, a) = (pool.clone(), addr.to_string());
        let call = tokio::spawn(async move {
            p.reach(&mut arrivals, &a, Duration::from_secs(3600), None)
                .await
                .map(drop)
        });
        // Refused at least once (nothing listens there yet).
        tokio::time::timeout(Duration::from_secs(60), async {
            while pool.contact(&addr.to_string()).last_error.is_none() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the call tried and was refused");
        assert!(!call.is_finished());
        let l = tokio::net::TcpListener::bind(addr).await.unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            ferrite_server::auth::accept(&mut s, &secret, 1 << 20)
                .await
                .unwrap()
        });
        pool.arrived(2);
        tokio::time::timeout(Duration::from_secs(60), call)
            .await
            .expect("the waiting call connects once the replica is announced")
            .unwrap()
            .expect("connected");
        assert_eq!(server.await.unwrap(), 1, "the handshake named the caller");
    });
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
