//! A minimal blocking RESP client for the benchmark's load generators: one
//! request, one reply, no allocation beyond the reply itself (so the client
//! costs little of the machine the replicas share).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    /// An array's length (its elements are read and dropped).
    Array(i64),
}

/// One connection.
pub struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
    req: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<Client> {
        let s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Client {
            r: BufReader::with_capacity(64 * 1024, s.try_clone()?),
            w: s,
            req: Vec::with_capacity(256),
        })
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> std::io::Result<Reply> {
        self.req.clear();
        self.req
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.req
                .extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.req.extend_from_slice(a);
            self.req.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&self.req)?;
        self.read_reply()
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        if self.r.read_line(&mut l)? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        Ok(l.trim_end().to_string())
    }

    fn read_reply(&mut self) -> std::io::Result<Reply> {
        let l = self.line()?;
        let bad = || {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad reply line {l:?}"),
            )
        };
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad());
        match l.as_bytes().first() {
            Some(b'+') => Ok(Reply::Simple(l[1..].to_string())),
            Some(b'-') => Ok(Reply::Error(l[1..].to_string())),
            Some(b':') => Ok(Reply::Int(num(&l[1..])?)),
            Some(b'$') => {
                let n = num(&l[1..])?;
                if n < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let mut b = vec![0u8; n as usize + 2];
                self.r.read_exact(&mut b)?;
                b.truncate(n as usize);
                Ok(Reply::Bulk(Some(b)))
            }
            Some(b'*') => {
                let n = num(&l[1..])?;
                for _ in 0..n.max(0) {
                    self.read_reply()?;
                }
                Ok(Reply::Array(n))
            }
            _ => Err(bad()),
        }
    }
}

/// The value of `key:` in an INFO text.
pub fn info_field(info: &str, key: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
}
