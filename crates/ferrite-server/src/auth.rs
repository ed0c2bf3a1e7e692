//! Authentication: the client password (`requirepass`, clients send `AUTH`)
//! and the cluster secret that replicas prove to each other when a
//! replica-to-replica connection opens.
//!
//! The peer handshake is a mutual challenge–response with HMAC-SHA256 keyed
//! by the cluster secret, so the secret itself never crosses the network:
//!
//! 1. the connecting replica sends `Hello { id, nonce_c }`;
//! 2. the accepting replica answers `Challenge { nonce_s, proof_s }` with
//!    `proof_s = HMAC(secret, "ferrite-peer-v1 server" ‖ nonce_c ‖ nonce_s)`;
//! 3. the connecting replica sends `Proof(proof_c)`, with
//!    `proof_c = HMAC(secret, "ferrite-peer-v1 client" ‖ nonce_c ‖ nonce_s)`,
//!    and checks `proof_s` (a listener without the secret cannot pose as a
//!    replica);
//! 4. the accepting replica checks it and answers `Welcome`, or `Denied` and
//!    closes the connection (and logs who was refused).
//!
//! Without a configured secret both sides use the empty secret: the
//! handshake still runs (one protocol), but it proves nothing, which is why a
//! replica refuses to listen for peers on a non-loopback address without one.
//! The traffic after the handshake is not encrypted.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::proto::{read_frame, write_frame, FrameError, PeerMsg};

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a handshake nonce.
pub const NONCE: usize = 16;

/// Compares without an early exit (the time taken does not reveal how much of
/// a guess matched).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn nonce() -> [u8; NONCE] {
    let mut n = [0u8; NONCE];
    getrandom::fill(&mut n).expect("the operating system's random source");
    n
}

fn proof(secret: &[u8], role: &str, nc: &[u8; NONCE], ns: &[u8; NONCE]) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes a key of any length");
    m.update(b"ferrite-peer-v1 ");
    m.update(role.as_bytes());
    m.update(nc);
    m.update(ns);
    m.finalize().into_bytes().into()
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the peer does not know the cluster secret")]
    WrongSecret,
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("refused by the peer: {0}")]
    Denied(String),
    #[error("expected a {expected} in the handshake, got a {got}")]
    Unexpected {
        expected: &'static str,
        got: &'static str,
    },
}

/// The connecting side. `id` is this replica's id (for the other's logs).
pub async fn connect<S: AsyncRead + AsyncWrite + Unpin>(
    sock: &mut S,
    secret: &[u8],
    id: u64,
    max_frame: usize,
) -> Result<(), HandshakeError> {
    let nc = nonce();
    write_frame(sock, &PeerMsg::Hello { id, nonce: nc }).await?;
    let (ns, ps) = match read_frame(sock, max_frame).await? {
        PeerMsg::Challenge { nonce, proof } => (nonce, proof),
        PeerMsg::Denied(why) => return Err(HandshakeError::Denied(why)),
        other => {
            return Err(HandshakeError::Unexpected {
                expected: "challenge",
                got: other.name(),
            })
        }
    };
    // The proof goes first, so a replica holding another secret is refused
    // and logged by the accepting side too.
    write_frame(sock, &PeerMsg::Proof(proof(secret, "client", &nc, &ns))).await?;
    if !constant_time_eq(&ps, &proof(secret, "server", &nc, &ns)) {
        return Err(HandshakeError::WrongSecret);
    }
    match read_frame(sock, max_frame).await? {
        PeerMsg::Welcome => Ok(()),
        PeerMsg::Denied(why) => Err(HandshakeError::Denied(why)),
        other => Err(HandshakeError::Unexpected {
            expected: "welcome",
            got: other.name(),
        }),
    }
}

/// The accepting side; returns the id the peer gave.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    sock: &mut S,
    secret: &[u8],
    max_frame: usize,
) -> Result<u64, HandshakeError> {
    // Nothing but a handshake is read before the peer is authenticated, and
    // handshake frames are small.
    let max = max_frame.min(4096);
    let (id, nc) = match read_frame(sock, max).await? {
        PeerMsg::Hello { id, nonce } => (id, nonce),
        other => {
            let _ = write_frame(sock, &PeerMsg::Denied("authenticate first".into())).await;
            return Err(HandshakeError::Unexpected {
                expected: "hello",
                got: other.name(),
            });
        }
    };
    let ns = nonce();
    write_frame(
        sock,
        &PeerMsg::Challenge {
            nonce: ns,
            proof: proof(secret, "server", &nc, &ns),
        },
    )
    .await?;
    let pc = match read_frame(sock, max).await? {
        PeerMsg::Proof(p) => p,
        other => {
            return Err(HandshakeError::Unexpected {
                expected: "proof",
                got: other.name(),
            })
        }
    };
    if !constant_time_eq(&pc, &proof(secret, "client", &nc, &ns)) {
        let _ = write_frame(sock, &PeerMsg::Denied("wrong cluster secret".into())).await;
        return Err(HandshakeError::WrongSecret);
    }
    write_frame(sock, &PeerMsg::Welcome).await?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn pair(a: &'static [u8], b: &'static [u8]) -> (Result<(), String>, Result<u64, String>) {
        let (mut x, mut y) = tokio::io::duplex(8192);
        let c = tokio::spawn(async move {
            connect(&mut x, a, 7, 1 << 20)
                .await
                .map_err(|e| e.to_string())
        });
        let s = accept(&mut y, b, 1 << 20).await.map_err(|e| e.to_string());
        drop(y);
        (c.await.unwrap(), s)
    }

    #[tokio::test]
    async fn the_same_secret_is_welcome_a_different_one_is_refused() {
        assert_eq!(pair(b"s3cret", b"s3cret").await, (Ok(()), Ok(7)));
        let (c, s) = pair(b"wrong", b"s3cret").await;
        // Each side finds the other's proof wrong.
        assert_eq!(c.unwrap_err(), "the peer does not know the cluster secret");
        assert_eq!(s.unwrap_err(), "the peer does not know the cluster secret");
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
