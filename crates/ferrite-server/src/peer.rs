//! The receiving side of the replica-to-replica protocol.

use std::sync::Arc;

use ferrite_raft::snapshot::Chunk;
use ferrite_raft::SnapshotSink;
use openraft::Snapshot;
use tokio::net::{TcpListener, TcpStream};

use crate::node::Node;
use crate::proto::{read_frame, read_frame_into, write_frame, FrameError, PeerMsg};

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
    let mut chunks = 0u64;
    let sink = match node.replica.sink(&meta) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!("replica {}: cannot receive a snapshot: {e}", node.id);
            None
        }
    };
    // The chunks are staged on a thread of their own while the next ones
    // are read from the socket. A chunk that cannot be staged ends the
    // staging (the rest of the stream is read and dropped) and the snapshot
    // is refused with the reason.
    // Staged chunks come back to be read into again.
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(2);
    let (back, spares) = std::sync::mpsc::channel::<Vec<u8>>();
    let stager = tokio::task::spawn_blocking(move || stage(sink, rx, back));
    loop {
        let spare = spares.try_recv().unwrap_or_default();
        let chunk = match read_frame_into(sock, max, spare).await? {
            PeerMsg::SnapshotChunk(items) => Chunk::Items(items),
            PeerMsg::SnapshotRecords(bytes) => Chunk::Records(bytes),
            PeerMsg::SnapshotEnd => break,
            other => {
                return Err(FrameError::Decode(format!(
                    "a {} inside a snapshot stream",
                    other.name()
                )));
            }
        };
        chunks += 1;
        // A stager that stopped has dropped its end: the chunk is dropped.
        let _ = tx.send(chunk).await;
    }
    drop(tx);
    let (data, items_in, staging) = match stager.await {
        Ok(r) => r,
        Err(e) => return Ok(Err(format!("staging the snapshot: {e}"))),
    };
    let data = match data {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
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

/// Stages a snapshot's chunks as they come; returns the staged snapshot (or
/// why it could not be staged), the items it holds and the time spent
/// staging (not waiting for chunks).
fn stage(
    mut sink: Option<Box<dyn SnapshotSink>>,
    mut rx: tokio::sync::mpsc::Receiver<Chunk>,
    back: std::sync::mpsc::Sender<Vec<u8>>,
) -> (
    Result<ferrite_raft::SnapshotData, String>,
    u64,
    std::time::Duration,
) {
    let mut busy = std::time::Duration::ZERO;
    let mut items = 0u64;
    let mut failed: Option<String> = None;
    while let Some(chunk) = rx.blocking_recv() {
        let Some(s) = sink.as_mut() else { break };
        let t = std::time::Instant::now();
        let r = match chunk {
            Chunk::Items(batch) => {
                let n = batch.len() as u64;
                s.push(batch).map(|()| n)
            }
            Chunk::Records(bytes) => {
                let r = s.push_records(&bytes);
                let _ = back.send(bytes);
                r
            }
        };
        busy += t.elapsed();
        match r {
            Ok(n) => items += n,
            Err(e) => {
                failed = Some(e.to_string());
                sink = None;
            }
        }
    }
    let data = match sink {
        Some(s) => s.finish().map_err(|e| e.to_string()),
        None => Err(failed.unwrap_or_else(|| "the snapshot could not be staged".into())),
    };
    (data, items, busy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_raft::snapshot::Items;
    use ferrite_raft::{SnapshotData, StoreError};

    /// A sink that takes `room` chunks and refuses the next, as a full pool
    /// would.
    struct Tight {
        room: usize,
        took: Vec<Vec<u8>>,
    }

    impl SnapshotSink for Tight {
        fn at(&self) -> u64 {
            7
        }
        fn push(&mut self, _: Items) -> ferrite_raft::Result<()> {
            Ok(())
        }
        fn push_records(&mut self, bytes: &[u8]) -> ferrite_raft::Result<u64> {
            if self.took.len() == self.room {
                return Err(StoreError::Invalid("no room for the snapshot".into()));
            }
            self.took.push(bytes.to_vec());
            Ok(1)
        }
        fn finish(self: Box<Self>) -> ferrite_raft::Result<SnapshotData> {
            Ok(SnapshotData::from_items(Vec::new()))
        }
    }

    fn run(room: usize, chunks: usize) -> (Result<SnapshotData, String>, u64, Vec<Vec<u8>>) {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let (back, spares) = std::sync::mpsc::channel();
        let sink: Box<dyn SnapshotSink> = Box::new(Tight {
            room,
            took: Vec::new(),
        });
        let stager = std::thread::spawn(move || stage(Some(sink), rx, back));
        // As the receiver does: a stager that stopped drops its end, and
        // the rest of the stream is dropped without blocking.
        for i in 0..chunks {
            let _ = tx.blocking_send(Chunk::Records(vec![i as u8; 100]));
        }
        drop(tx);
        let (data, items, _) = stager.join().unwrap();
        (data, items, spares.try_iter().collect())
    }

    #[test]
    fn the_stager_stages_every_chunk_and_hands_the_buffers_back() {
        let (data, items, spares) = run(usize::MAX, 10);
        assert!(data.is_ok());
        assert_eq!(items, 10);
        assert_eq!(
            spares.len(),
            10,
            "every staged chunk comes back to be reused"
        );
    }

    #[test]
    fn a_chunk_that_cannot_be_staged_refuses_the_snapshot_with_the_reason() {
        let (data, items, _) = run(3, 10);
        assert_eq!(items, 3);
        let e = data.expect_err("the snapshot is refused");
        assert!(e.contains("no room for the snapshot"), "{e}");
    }
}
