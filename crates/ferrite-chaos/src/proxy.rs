//! A fault-injecting TCP proxy for one directed replica-to-replica link.
//!
//! Replica `i` is told that replica `j` lives at this proxy's address; the
//! proxy forwards to `j`'s real peer port. A harness partitions the cluster by
//! switching links: [`Link::Pass`] forwards, [`Link::Drop`] closes every
//! connection (open and new) at once, [`Link::Blackhole`] keeps connections
//! open but forwards nothing (the nasty case: a peer that looks alive).
//! Runs on plain threads on loopback and needs no privileges; forwarding loops
//! wake at least every 20 ms (socket read timeouts), so a switch takes effect
//! and the proxy stops promptly.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// What a link does to traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Pass = 0,
    Drop = 1,
    Blackhole = 2,
}

impl Link {
    fn from_u8(v: u8) -> Link {
        match v {
            0 => Link::Pass,
            1 => Link::Drop,
            _ => Link::Blackhole,
        }
    }
}

/// How often blocked loops look at the link state and the stop flag.
const POLL: Duration = Duration::from_millis(20);

struct Shared {
    target: SocketAddr,
    mode: AtomicU8,
    /// Bumped on every switch to `Drop`: connections of an older generation close.
    generation: AtomicU64,
    stop: AtomicBool,
    conns: Mutex<Vec<JoinHandle<()>>>,
    forwarded: AtomicU64,
}

/// A running proxy; stops (and closes its connections) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and forwards to `target`.
    pub fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            target,
            mode: AtomicU8::new(Link::Pass as u8),
            generation: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            forwarded: AtomicU64::new(0),
        });
        let s = shared.clone();
        let acceptor = std::thread::spawn(move || accept_loop(listener, s));
        Ok(Proxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Where replicas should connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Switches the link.
    pub fn set(&self, link: Link) {
        if link == Link::Drop {
            self.shared.generation.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.mode.store(link as u8, Ordering::SeqCst);
    }

    pub fn link(&self) -> Link {
        Link::from_u8(self.shared.mode.load(Ordering::SeqCst))
    }

    /// Bytes forwarded so far (both directions).
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept so it sees the stop flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let conns = std::mem::take(&mut *self.shared.conns.lock().unwrap());
        for c in conns {
            let _ = c.join();
        }
    }
}

fn accept_loop(listener: TcpListener, s: Arc<Shared>) {
    for client in listener.incoming() {
        if s.stop.load(Ordering::SeqCst) {
            break;
        }
        match client {
            Ok(client) => {
                if Link::from_u8(s.mode.load(Ordering::SeqCst)) == Link::Drop {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let s2 = s.clone();
                let h = std::thread::spawn(move || connection(client, s2));
                let mut conns = s.conns.lock().unwrap();
                conns.retain(|h| !h.is_finished());
                conns.push(h);
            }
            Err(_) => continue,
        }
    }
}

/// Forwards one connection until either side closes, the link drops, or the
/// proxy stops.
fn connection(client: TcpStream, s: Arc<Shared>) {
    let gen = s.generation.load(Ordering::SeqCst);
    let Ok(server) = TcpStream::connect_timeout(&s.target, Duration::from_secs(2)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    for c in [&client, &server] {
        let _ = c.set_read_timeout(Some(POLL));
        let _ = c.set_nodelay(true);
    }
    let (c2, s2) = match (client.try_clone(), server.try_clone()) {
        (Ok(a), Ok(b)) => (a, b),
        _ => return,
    };
    let sh = s.clone();
    let up = std::thread::spawn(move || pump(c2, s2, sh, gen));
    pump(server, client, s, gen);
    let _ = up.join();
}

/// Copies `from` to `to` while the link passes; holds data back while it is a
/// black hole; closes both when it drops.
fn pump(mut from: TcpStream, mut to: TcpStream, s: Arc<Shared>, gen: u64) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if s.stop.load(Ordering::SeqCst) || s.generation.load(Ordering::SeqCst) != gen {
            break;
        }
        match Link::from_u8(s.mode.load(Ordering::SeqCst)) {
            Link::Drop => break,
            Link::Blackhole => {
                // Read and discard: the sender sees a live peer that never answers.
                match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                        continue
                    }
                    Err(_) => break,
                }
            }
            Link::Pass => match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    // The link may have been cut while this read waited.
                    match Link::from_u8(s.mode.load(Ordering::SeqCst)) {
                        Link::Pass => {}
                        Link::Blackhole => continue,
                        Link::Drop => break,
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    s.forwarded.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break,
            },
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; stops with the test process.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for c in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut c = c;
                    let mut b = [0u8; 1024];
                    while let Ok(n) = c.read(&mut b) {
                        if n == 0 || c.write_all(&b[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        a
    }

    fn roundtrip(c: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        c.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn passes_drops_blackholes_and_heals() {
        let p = Proxy::start(echo()).unwrap();
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert_eq!(roundtrip(&mut c, b"hello").unwrap(), b"hello");
        // A black hole: the connection stays open, nothing comes back.
        p.set(Link::Blackhole);
        let e = roundtrip(&mut c, b"lost").unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            "{e}"
        );
        // Drop: the connection is closed, new ones are refused at once.
        p.set(Link::Drop);
        let mut b = [0u8; 8];
        let n = c.read(&mut b);
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        let mut d = TcpStream::connect(p.addr()).unwrap();
        d.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert!(matches!(d.read(&mut b), Ok(0) | Err(_)));
        // Healed.
        p.set(Link::Pass);
        let mut e2 = TcpStream::connect(p.addr()).unwrap();
        e2.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(roundtrip(&mut e2, b"again").unwrap(), b"again");
    }
}
