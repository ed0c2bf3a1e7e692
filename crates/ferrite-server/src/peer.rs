//! The receiving side of the replica-to-replica protocol.

use std::sync::Arc;

use ferrite_raft::SnapshotSink;
use openraft::Snapshot;
use tokio::net::{TcpListener, TcpStream};

use crate::node::Node;
use crate::proto::{read_frame, write_frame, FrameError, PeerMsg};

/// How long an opened replica connection may take to authenticate.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Accepts peer connections until the node shuts down; each must pass the
/// cluster-secret handshake ([`crate::auth`]) before anything else is read.
pub async fn accept(node: Arc<Node>, listener: TcpListener) {
    let mut stop = node.shutdown.clone();
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            r = listener.accept() => match r {
                Ok((sock, from)) => {
                    let _ = sock.set_nodelay(true);
                    let n = node.clone();
                    tokio::spawn(async move {
                        let mut sock = sock;
                        let secret = n.cfg.cluster_secret.clone();
                        let shake = crate::auth::accept(&mut sock, &secret, n.cfg.limits.max_frame);
                        match tokio::time::timeout(HANDSHAKE_TIMEOUT, shake).await {
                            Ok(Ok(id)) => n.pool.arrived(id),
                            Ok(Err(e)) => {
                                tracing::error!("replica {}: refused a replica connection from {from}: {e}", n.id);
                                return;
                            }
                            Err(_) => {
                                tracing::error!("replica {}: refused a replica connection from {from}: no handshake within {HANDSHAKE_TIMEOUT:?}", n.id);
                                return;
                            }
                        }
                        if let Err(e) = serve(&n, sock).await {
                            tracing::error!("replica {}: closing the peer connection from {from}: {e}", n.id);
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("accepting a peer connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Serves one peer connection: one request frame, one reply frame, until the
/// peer closes it or sends something invalid.
async fn serve(node: &Node, mut sock: TcpStream) -> Result<(), FrameError> {
    let max = node.cfg.limits.max_frame;
    let mut stop = node.shutdown.clone();
    loop {
        let msg = tokio::select! {
            _ = stop.changed() => return Ok(()),
            m = read_frame(&mut sock, max) => match m {
                Ok(m) => m,
                Err(FrameError::Closed) => return Ok(()),
                Err(e) => return Err(e),
            },
        };
        let reply = match msg {
            PeerMsg::AppendEntries(req) => {
                *node.last_leader_contact.lock().unwrap() = Some(std::time::Instant::now());
                PeerMsg::AppendEntriesReply(node.raft.append_entries(req).await)
            }
            PeerMsg::Vote(req) => PeerMsg::VoteReply(node.raft.vote(req).await),
            PeerMsg::SnapshotBegin { vote, meta } => {
                let r = receive_snapshot(node, &mut sock, vote, meta).await?;
                PeerMsg::SnapshotReply(r)
            }
            PeerMsg::Forward(op) => {
                let _inflight = node.begin_request();
                PeerMsg::ForwardReply(node.exec_forwarded(op).await)
            }
            other => {
                return Err(FrameError::Decode(format!(
                    "a {} is not a request",
                    other.name()
                )));
            }
        };
        write_frame(&mut sock, &reply).await?;
    }
}

/// Receives a snapshot's chunks into the store and installs it.
async fn receive_snapshot(
    node: &Node,
    sock: &mut TcpStream,
    vote: ferrite_raft::types::Vote,
    meta: ferrite_raft::types::SnapshotMeta,
) -> Result<Result<openraft::raft::SnapshotResponse<u64>, String>, FrameError> {
    let max = node.cfg.limits.max_frame;
    let t0 = std::time::Instant::now();
    let (mut chunks, mut items_in) = (0u64, 0u64);
    // Time spent staging (the rest of the receiving is waiting for frames).
    let mut staging = std::time::Duration::ZERO;
    let mut sink: Option<Box<dyn SnapshotSink>> = match node.replica.sink(&meta) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!("replica {}: cannot receive a snapshot: {e}", node.id);
            None
        }
    };
    let mut failed: Option<String> = None;
    loop {
        match read_frame(sock, max).await? {
            PeerMsg::SnapshotChunk(items) => {
                chunks += 1;
                items_in += items.len() as u64;
                if let Some(s) = sink.as_mut() {
                    let t = std::time::Instant::now();
                    let r = s.push(items);
                    staging += t.elapsed();
                    if let Err(e) = r {
                        failed = Some(e.to_string());
                        sink = None;
                    }
                }
            }
            PeerMsg::SnapshotRecords(bytes) => {
                chunks += 1;
                if let Some(s) = sink.as_mut() {
                    let t = std::time::Instant::now();
                    let r = s.push_records(bytes);
                    staging += t.elapsed();
                    match r {
                        Ok(n) => items_in += n,
                        Err(e) => {
                            failed = Some(e.to_string());
                            sink = None;
                        }
                    }
                }
            }
            PeerMsg::SnapshotEnd => break,
            other => {
                return Err(FrameError::Decode(format!(
                    "a {} inside a snapshot stream",
                    other.name()
                )));
            }
        }
    }
    let Some(sink) = sink else {
        return Ok(Err(
            failed.unwrap_or_else(|| "the snapshot could not be staged".into())
        ));
    };
    let data = match sink.finish() {
        Ok(d) => d,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let staged = t0.elapsed();
    let snap = Snapshot {
        meta,
        snapshot: Box::new(data),
    };
    let r = node
        .raft
        .install_full_snapshot(vote, snap)
        .await
        .map_err(|e| e.to_string());
    tracing::info!(
        "replica {}: snapshot of {items_in} items in {chunks} chunks received and staged in {:.1} ms (staging {:.1} ms of it), installed in {:.1} ms",
        node.id,
        staged.as_secs_f64() * 1e3,
        staging.as_secs_f64() * 1e3,
        (t0.elapsed() - staged).as_secs_f64() * 1e3
    );
    Ok(r)
}
