//! Client connections: read requests (pipelined requests are answered in
//! order), run them, write the replies.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::commands::{self, Conn};
use crate::node::Node;
use crate::resp::{parse, Parsed, R};

/// Accepts client connections until the node shuts down.
pub async fn accept(node: Arc<Node>, listener: TcpListener) {
    let mut stop = node.shutdown.clone();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            r = listener.accept() => match r {
                Ok((sock, _)) => {
                    let _ = sock.set_nodelay(true);
                    let n = node.clone();
                    tokio::spawn(async move { serve(n, sock).await });
                }
                Err(e) => {
                    // Out of file descriptors and the like: keep serving the others.
                    tracing::warn!("accepting a client connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Closes a connection after an error reply so the reply is delivered: no
/// more writes, then what the client still sends is read and dropped for a
/// moment (closing with unread input would reset the connection and could
/// discard the reply).
async fn linger(sock: &mut TcpStream) {
    let _ = sock.shutdown().await;
    let mut sink = vec![0u8; 16 * 1024];
    let drain = async {
        let mut total = 0usize;
        while total < 1 << 20 {
            match sock.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_millis(200), drain).await;
}

struct Slot<'a>(&'a Node);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve(node: Arc<Node>, mut sock: TcpStream) {
    let n = node.clients.fetch_add(1, Ordering::Relaxed) + 1;
    let _slot = Slot(&node);
    if n > node.cfg.limits.max_clients {
        let _ = sock
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    let mut conn = Conn::new(
        node.next_client.fetch_add(1, Ordering::Relaxed),
        node.cfg
            .requirepass
            .as_deref()
            .is_some_and(|p| !p.is_empty()),
    );
    let mut stop = node.shutdown.clone();
    let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    loop {
        let mut used = 0;
        loop {
            match parse(&buf[used..], &node.cfg.limits) {
                Parsed::Request(args, n) => {
                    used += n;
                    if args.is_empty() {
                        continue;
                    }
                    let reply = {
                        let _inflight = node.begin_request();
                        commands::dispatch(&node, &mut conn, args).await
                    };
                    reply.encode(conn.proto, &mut out);
                    if conn.quit {
                        let _ = sock.write_all(&out).await;
                        return;
                    }
                    if out.len() >= 64 * 1024 {
                        if sock.write_all(&out).await.is_err() {
                            return;
                        }
                        out.clear();
                    }
                }
                Parsed::Incomplete => break,
                Parsed::Error(m) => {
                    R::err(format!("ERR Protocol error: {m}")).encode(conn.proto, &mut out);
                    let _ = sock.write_all(&out).await;
                    linger(&mut sock).await;
                    return;
                }
            }
        }
        buf.drain(..used);
        if !out.is_empty() {
            if sock.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        tokio::select! {
            // A shutdown first: no new requests once it began.
            biased;
            _ = stop.changed() => return,
            r = sock.read_buf(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
        }
    }
}
