//! The replica-to-replica protocol: versioned, length-prefixed frames.
//!
//! A frame is `len` (u32 big-endian: the bytes that follow), `version` (u8,
//! [`VERSION`]) and one [`PeerMsg`] encoded with postcard (compact: varint
//! integers, length-prefixed byte strings). A frame longer than the limit,
//! of another version or that does not decode is a [`FrameError`]; the
//! connection is then closed (and the error logged) — never a panic.

use ferrite_raft::snapshot::Items;
use ferrite_raft::types::{SnapshotMeta, Vote};
use ferrite_raft::{Command, Reply, TypeConfig};
use openraft::error::RaftError;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Protocol version carried in every frame.
pub const VERSION: u8 = 2;

/// What one replica asks another, and the answers.
#[derive(Serialize, Deserialize)]
pub enum PeerMsg {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    AppendEntriesReply(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(VoteRequest<u64>),
    VoteReply(Result<VoteResponse<u64>, RaftError<u64>>),
    /// Starts a snapshot stream: chunks follow, then [`PeerMsg::SnapshotEnd`].
    SnapshotBegin {
        vote: Vote,
        meta: SnapshotMeta,
    },
    SnapshotChunk(#[serde(with = "ferrite_raft::wire::pairs")] Items),
    SnapshotEnd,
    /// A chunk of a PM store's snapshot: its version records as they are
    /// in PM (`ferrite_raft::map::record`), one byte string (version 2).
    SnapshotRecords(#[serde(with = "serde_bytes")] Vec<u8>),
    SnapshotReply(Result<SnapshotResponse<u64>, String>),
    /// A client's request, forwarded by a follower to the leader.
    Forward(ClientOp),
    ForwardReply(Result<ClientReply, String>),
    /// Handshake (see [`crate::auth`]): the connecting replica's id and nonce.
    Hello {
        id: u64,
        nonce: [u8; 16],
    },
    /// Handshake: the accepting replica's nonce and its proof of the secret.
    Challenge {
        nonce: [u8; 16],
        proof: [u8; 32],
    },
    /// Handshake: the connecting replica's proof of the secret.
    Proof([u8; 32]),
    /// Handshake: authenticated.
    Welcome,
    /// Handshake: refused (the connection closes).
    Denied(String),
}

impl PeerMsg {
    pub fn name(&self) -> &'static str {
        match self {
            PeerMsg::AppendEntries(_) => "append-entries",
            PeerMsg::AppendEntriesReply(_) => "append-entries reply",
            PeerMsg::Vote(_) => "vote",
            PeerMsg::VoteReply(_) => "vote reply",
            PeerMsg::SnapshotBegin { .. } => "snapshot begin",
            PeerMsg::SnapshotChunk(_) => "snapshot chunk",
            PeerMsg::SnapshotEnd => "snapshot end",
            PeerMsg::SnapshotRecords(_) => "snapshot records",
            PeerMsg::SnapshotReply(_) => "snapshot reply",
            PeerMsg::Forward(_) => "forward",
            PeerMsg::ForwardReply(_) => "forward reply",
            PeerMsg::Hello { .. } => "hello",
            PeerMsg::Challenge { .. } => "challenge",
            PeerMsg::Proof(_) => "proof",
            PeerMsg::Welcome => "welcome",
            PeerMsg::Denied(_) => "denial",
        }
    }
}

/// A client request the leader executes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ClientOp {
    /// A mutation, replicated through the log.
    Write(Command),
    /// Linearizable reads of these keys (read-index).
    Get(#[serde(with = "ferrite_raft::wire::list")] Vec<Vec<u8>>),
    /// The number of keys (linearizable).
    DbSize,
    /// `CLUSTER ADDNODE`: add replica `id` (reached at `addr`, its
    /// `--peer-listen` address) as a learner, wait until it has caught up
    /// (at most `catch_up_ms`), then make it a voter unless `learner`.
    AddNode {
        id: u64,
        addr: String,
        learner: bool,
        catch_up_ms: u64,
    },
    /// `CLUSTER REMOVENODE`: remove replica `id` (voter or learner).
    RemoveNode { id: u64 },
}

impl ClientOp {
    /// Whether the request changes anything (an unanswered one has an
    /// unknown outcome).
    pub fn is_mutation(&self) -> bool {
        !matches!(self, ClientOp::Get(_) | ClientOp::DbSize)
    }
}

/// The leader's answer to a [`ClientOp`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ClientReply {
    Write(Reply),
    Values(#[serde(with = "ferrite_raft::wire::opt_list")] Vec<Option<Vec<u8>>>),
    Count(u64),
    /// An administrative request done: what was done.
    Done(String),
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { len: usize, max: usize },
    #[error("protocol version {0}, this build speaks {VERSION}")]
    Version(u8),
    #[error("undecodable frame: {0}")]
    Decode(String),
}

/// Reads one frame (at most `max` bytes after the length).
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<PeerMsg, FrameError> {
    read_frame_into(r, max, Vec::new()).await
}

/// Reads one frame as [`read_frame`] does; a snapshot's records go into
/// `spare` (cleared first), so a receiver that hands its staged chunks back
/// does not fault in fresh pages for every one.
pub async fn read_frame_into<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
    spare: Vec<u8>,
) -> Result<PeerMsg, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(FrameError::TooLarge { len, max });
    }
    if len == 0 {
        return Err(FrameError::Decode("empty frame".into()));
    }
    // The frame's first bytes: enough to see whether it is a snapshot's
    // records, which are then read straight into their own buffer (no
    // zero-filling, no copy out of a frame buffer: a snapshot is tens of MB).
    let mut head = [0u8; 16];
    let h = len.min(head.len());
    r.read_exact(&mut head[..h]).await?;
    if head[0] != VERSION {
        return Err(FrameError::Version(head[0]));
    }
    let (mut buf, at) = match records_payload(&head[1..h], len - 1) {
        Some(at) => {
            let mut b = spare;
            b.clear();
            b.reserve(len - 1 - at);
            (b, 1 + at)
        }
        None => (Vec::with_capacity(len), 0),
    };
    buf.extend_from_slice(&head[at..h]);
    let rest = (len - h) as u64;
    if (&mut *r).take(rest).read_to_end(&mut buf).await? as u64 != rest {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    if at > 0 {
        return Ok(PeerMsg::SnapshotRecords(buf));
    }
    match postcard::take_from_bytes(&buf[1..]) {
        Ok((m, [])) => Ok(m),
        Ok((_, rest)) => Err(FrameError::Decode(format!(
            "{} bytes after the message",
            rest.len()
        ))),
        Err(e) => Err(FrameError::Decode(e.to_string())),
    }
}

/// postcard's encoding of the variant [`PeerMsg::SnapshotRecords`]: its
/// index, a varint of one byte (pinned against postcard by
/// `snapshot_records_frames_are_postcards_and_read_back_whole`).
const RECORDS_TAG: u8 = 7;

/// If a frame body (after the version byte; `body` its first bytes, `len`
/// all of it) is [`PeerMsg::SnapshotRecords`], where its byte string starts.
/// The body is the variant's tag, the string's length as postcard encodes a
/// length (a varint, read here by postcard) and the string.
fn records_payload(body: &[u8], len: usize) -> Option<usize> {
    let rest = body.strip_prefix(&[RECORDS_TAG])?;
    let (n, after) = postcard::take_from_bytes::<u64>(rest).ok()?;
    let at = body.len() - after.len();
    (at as u64 + n == len as u64).then_some(at)
}

/// Encodes one frame.
pub fn encode_frame(msg: &PeerMsg) -> Vec<u8> {
    let mut out = vec![0u8; 5];
    out[4] = VERSION;
    let out = postcard::to_extend(msg, out).expect("peer messages serialise");
    let mut out = out;
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// Writes the frame of [`PeerMsg::SnapshotRecords`] holding `bytes` — the
/// same bytes as [`encode_frame`] — without copying them into a frame.
pub async fn write_records_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut head = vec![0u8, 0, 0, 0, VERSION, RECORDS_TAG];
    // The length as postcard writes a byte string's (a varint).
    head = postcard::to_extend(&(bytes.len() as u64), head).expect("a u64 serialises");
    let len = u32::try_from(head.len() - 4 + bytes.len())
        .map_err(|_| std::io::Error::other("a frame of more than 4 GiB"))?;
    head[..4].copy_from_slice(&len.to_be_bytes());
    w.write_all(&head).await?;
    w.write_all(bytes).await?;
    w.flush().await
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, msg: &PeerMsg) -> std::io::Result<()> {
    w.write_all(&encode_frame(msg)).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn snapshot_records_frames_are_postcards_and_read_back_whole() {
        for n in [0usize, 1, 9, 10, 11, 127, 128, 16383, 16384, 300_000] {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let mut f = Vec::new();
            write_records_frame(&mut f, &bytes).await.unwrap();
            assert_eq!(
                f,
                encode_frame(&PeerMsg::SnapshotRecords(bytes.clone())),
                "{n}"
            );
            match read_frame(&mut &f[..], 1 << 20).await.unwrap() {
                PeerMsg::SnapshotRecords(b) => assert_eq!(b, bytes, "{n}"),
                m => panic!("{n}: read back as {}", m.name()),
            }
            // Cut short anywhere: an error, never a short message.
            for cut in [5, 6, 7, f.len() / 2, f.len() - 1] {
                if cut < f.len() {
                    assert!(
                        read_frame(&mut &f[..cut], 1 << 20).await.is_err(),
                        "{n} cut {cut}"
                    );
                }
            }
            // A length that disagrees with the frame's: decoded by postcard,
            // which refuses it.
            if n > 0 {
                let mut g = f.clone();
                g[6] ^= 1;
                assert!(
                    matches!(
                        read_frame(&mut &g[..], 1 << 20).await,
                        Err(FrameError::Decode(_))
                    ) || n == 0,
                    "{n}"
                );
            }
        }
    }

    #[tokio::test]
    async fn frames_round_trip_and_bad_ones_are_errors() {
        let msg = PeerMsg::Forward(ClientOp::Get(vec![b"k".to_vec()]));
        let f = encode_frame(&msg);
        let got = read_frame(&mut &f[..], 1024).await.unwrap();
        assert!(matches!(got, PeerMsg::Forward(ClientOp::Get(k)) if k == vec![b"k".to_vec()]));
        // Oversized.
        assert!(matches!(
            read_frame(&mut &f[..], 3).await,
            Err(FrameError::TooLarge { .. })
        ));
        // Another version.
        let mut v = f.clone();
        v[4] = 9;
        assert!(matches!(
            read_frame(&mut &v[..], 1024).await,
            Err(FrameError::Version(9))
        ));
        // Garbage of every length, truncations: errors, no panic.
        for cut in 0..f.len() {
            assert!(read_frame(&mut &f[..cut], 1024).await.is_err());
        }
        let mut g = vec![0, 0, 0, 40, VERSION];
        g.extend((0..39u8).map(|i| i.wrapping_mul(97)));
        assert!(matches!(
            read_frame(&mut &g[..], 1024).await,
            Err(FrameError::Decode(_))
        ));
    }
}
