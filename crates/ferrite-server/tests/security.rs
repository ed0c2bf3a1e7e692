//! Safe on a network: clients authenticate when a password is set (`AUTH`,
//! `HELLO … AUTH`, `redis-cli -a`), replicas prove the cluster secret to each
//! other, and the limits on request size, peer frames, pipelines and
//! connections are answered with errors while everyone else is served.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Cluster;
use ferrite_raft::StoreKind;
use ferrite_server::auth;
use ferrite_server::proto::{encode_frame, ClientOp, PeerMsg};

fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Sends one inline command and reads one reply line.
fn line(r: &mut BufReader<TcpStream>, cmd: &str) -> String {
    r.get_mut()
        .write_all(format!("{cmd}\r\n").as_bytes())
        .unwrap();
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l.trim_end().to_string()
}

#[test]
fn clients_must_authenticate_when_a_password_is_set() {
    let c = Cluster::start(StoreKind::List, 3, "auth", |cfg| {
        cfg.requirepass = Some("s3cret-pw".into());
    });
    let mut r = BufReader::new(raw(c.addr(1)));
    // Unauthenticated: every command but AUTH/HELLO/QUIT is refused.
    for cmd in ["GET k", "SET k v", "PING", "INFO", "DBSIZE"] {
        assert_eq!(
            line(&mut r, cmd),
            "-NOAUTH Authentication required.",
            "{cmd}"
        );
    }
    // A wrong password, a wrong user.
    assert!(line(&mut r, "AUTH wrong").starts_with("-WRONGPASS"));
    assert!(line(&mut r, "AUTH nobody s3cret-pw").starts_with("-WRONGPASS"));
    assert!(line(&mut r, "HELLO 3 AUTH default wrong").starts_with("-WRONGPASS"));
    assert_eq!(line(&mut r, "GET k"), "-NOAUTH Authentication required.");
    // The right one.
    assert_eq!(line(&mut r, "AUTH s3cret-pw"), "+OK");
    assert_eq!(line(&mut r, "SET k v"), "+OK");
    assert_eq!(line(&mut r, "GET k"), "$1");

    // Someone else's client library, with and without the password.
    let url = |pw: &str| format!("redis://:{pw}@{}/", c.addr(0));
    let mut good = redis::Client::open(url("s3cret-pw"))
        .unwrap()
        .get_connection()
        .unwrap();
    let v: String = redis::cmd("GET").arg("k").query(&mut good).unwrap();
    assert_eq!(v, "v");
    let bad = redis::Client::open(url("nope")).unwrap().get_connection();
    assert!(bad.is_err(), "a wrong password connected");
    let mut none = redis::Client::open(format!("redis://{}/", c.addr(2)))
        .unwrap()
        .get_connection()
        .unwrap();
    let e = redis::cmd("GET")
        .arg("k")
        .query::<Option<String>>(&mut none)
        .unwrap_err();
    assert!(e.to_string().contains("NOAUTH"), "{e}");

    // redis-cli -a, as a user types it.
    let port = c.addr(2).port().to_string();
    let cli = |pw: &str| {
        Command::new("redis-cli")
            .args(["-p", &port, "-a", pw, "--no-auth-warning", "GET", "k"])
            .output()
            .expect("redis-cli (Debian's redis-tools; .ci/run installs it)")
    };
    assert_eq!(
        String::from_utf8_lossy(&cli("s3cret-pw").stdout).trim(),
        "v"
    );
    let o = cli("wrong");
    let out = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("WRONGPASS") || out.contains("NOAUTH"), "{out}");
}

#[test]
fn a_replica_without_the_cluster_secret_is_refused() {
    let c = Cluster::start(StoreKind::BTree, 3, "secret", |cfg| {
        cfg.cluster_secret = b"the cluster's secret".to_vec();
        cfg.limits.max_frame = 1 << 20;
    });
    let mut con = c.client(0);
    let _: () = redis::cmd("SET").arg("a").arg("1").query(&mut con).unwrap();
    let peer = c.cfgs[1].peer_listen;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The wrong secret, and no secret: refused.
        for secret in [&b"another secret"[..], b""] {
            let mut s = tokio::net::TcpStream::connect(peer).await.unwrap();
            let e = auth::connect(&mut s, secret, 99, 1 << 20)
                .await
                .unwrap_err();
            assert!(
                matches!(e, auth::HandshakeError::WrongSecret),
                "{secret:?}: {e}"
            );
        }
        // A request without the handshake: denied, nothing executed.
        let mut s = tokio::net::TcpStream::connect(peer).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(&encode_frame(&PeerMsg::Forward(ClientOp::Get(vec![
            b"a".to_vec()
        ]))))
        .await
        .unwrap();
        let got = ferrite_server::proto::read_frame(&mut s, 1 << 20).await;
        assert!(
            matches!(got, Ok(PeerMsg::Denied(_))),
            "an unauthenticated request was answered"
        );
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        assert!(rest.is_empty());
        // The right secret is welcome; a frame over the limit after it
        // closes the connection without an answer.
        let mut s = tokio::net::TcpStream::connect(peer).await.unwrap();
        auth::connect(&mut s, b"the cluster's secret", 99, 1 << 20)
            .await
            .unwrap();
        s.write_all(&(2u32 << 20).to_be_bytes()).await.unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        assert!(rest.is_empty(), "an oversized frame was answered");
    });
    // The cluster still replicates.
    let _: () = redis::cmd("SET").arg("a").arg("2").query(&mut con).unwrap();
    let v: String = redis::cmd("GET").arg("a").query(&mut c.client(2)).unwrap();
    assert_eq!(v, "2");
}

#[test]
fn a_flood_of_connections_is_answered_with_an_error() {
    let c = Cluster::start(StoreKind::Wal, 1, "flood", |cfg| {
        cfg.limits.max_clients = 8;
    });
    let addr = c.addr(0);
    let mut held: Vec<BufReader<TcpStream>> = (0..8)
        .map(|_| {
            let mut r = BufReader::new(raw(addr));
            assert_eq!(line(&mut r, "PING"), "+PONG");
            r
        })
        .collect();
    for _ in 0..50 {
        let mut s = raw(addr);
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert_eq!(out, "-ERR max number of clients reached\r\n");
    }
    // The connections within the limit are still served.
    for r in &mut held {
        assert_eq!(line(r, "PING"), "+PONG");
    }
    // Once they close, new ones are served again (the server notices the
    // closes asynchronously: try, bounded).
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut r = BufReader::new(raw(addr));
        let reply = line(&mut r, "PING");
        if reply == "+PONG" {
            break;
        }
        assert_eq!(reply, "-ERR max number of clients reached");
        assert!(Instant::now() < deadline, "slots were not given back");
        std::thread::park_timeout(Duration::from_millis(20));
    }
}

#[test]
fn a_deep_pipeline_is_answered_in_order_without_unbounded_buffering() {
    let c = Cluster::start(StoreKind::List, 1, "pipeline", |_| {});
    let s = raw(c.addr(0));
    let mut w = s.try_clone().unwrap();
    let n = 20_000;
    // Write the whole pipeline from another thread while this one reads: the
    // server answers as it reads, and stops reading while its replies are
    // not taken (TCP back-pressure), so neither side buffers without bound.
    let writer = std::thread::spawn(move || {
        let mut req = Vec::new();
        for i in 0..n {
            req.extend_from_slice(format!("*2\r\n$4\r\nECHO\r\n$6\r\n{i:06}\r\n").as_bytes());
        }
        w.write_all(&req).unwrap();
    });
    let mut r = BufReader::new(s);
    for i in 0..n {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        assert_eq!(l, "$6\r\n");
        l.clear();
        r.read_line(&mut l).unwrap();
        assert_eq!(l, format!("{i:06}\r\n"));
    }
    writer.join().unwrap();
}
