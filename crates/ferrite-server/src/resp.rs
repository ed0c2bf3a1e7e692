//! The client protocol: RESP2, and RESP3 after `HELLO 3`, through the
//! `redis-protocol` crate.
//!
//! Before a request is handed to the decoder, its headers are checked without
//! copying (a command is an array of bulk strings, as in Redis): the declared
//! sizes must stay within the limits and nothing may be nested, so a hostile
//! request can neither make the server buffer without bound nor recurse. A
//! request that breaks a rule gets `-ERR Protocol error: …` and the connection
//! is closed; other connections are not affected. Inline commands
//! (`PING\r\n`, as typed into telnet) are accepted too.

use redis_protocol::resp2::types::{OwnedFrame as Frame2, Resp2Frame};
use redis_protocol::resp3::types::{OwnedFrame as Frame3, Resp3Frame};

use crate::config::Limits;

/// What a parse attempt found.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A whole request (its arguments) and the bytes it used.
    Request(Vec<Vec<u8>>, usize),
    /// More bytes are needed.
    Incomplete,
    /// A protocol error: answer it and close the connection.
    Error(String),
}

const MAX_LINE: usize = 64;
const MAX_INLINE: usize = 64 * 1024;

fn line(buf: &[u8], from: usize, max: usize) -> Result<Option<(&[u8], usize)>, String> {
    let end = (from + max + 2).min(buf.len());
    match buf[from..end].windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some((&buf[from..from + i], from + i + 2))),
        None if buf.len() - from > max + 1 => Err("too long header line".into()),
        None => Ok(None),
    }
}

fn number(b: &[u8], what: &str) -> Result<i64, String> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| format!("invalid {what} length"))
}

/// Parses the request at the start of `buf`.
pub fn parse(buf: &[u8], limits: &Limits) -> Parsed {
    if buf.is_empty() {
        return Parsed::Incomplete;
    }
    if buf[0] != b'*' {
        return parse_inline(buf, limits);
    }
    match scan(buf, limits) {
        Ok(Some(n)) => match redis_protocol::resp2::decode::decode(&buf[..n]) {
            Ok(Some((Frame2::Array(items), used))) if used == n => {
                let mut args = Vec::with_capacity(items.len());
                for i in items {
                    match i {
                        Frame2::BulkString(b) => args.push(b),
                        _ => return Parsed::Error("expected a bulk string".into()),
                    }
                }
                Parsed::Request(args, n)
            }
            Ok(_) => Parsed::Error("malformed request".into()),
            Err(e) => Parsed::Error(format!("{e:?}")),
        },
        Ok(None) => Parsed::Incomplete,
        Err(e) => Parsed::Error(e),
    }
}

/// Checks the headers of an array of bulk strings; returns its total length
/// when it is complete.
fn scan(buf: &[u8], limits: &Limits) -> Result<Option<usize>, String> {
    let Some((h, mut at)) = line(buf, 1, MAX_LINE)? else {
        return Ok(None);
    };
    let n = number(h, "multibulk")?;
    if n < 0 || n as usize > limits.max_args {
        return Err("invalid multibulk length".into());
    }
    let mut declared = at;
    for _ in 0..n {
        if at >= buf.len() {
            return Ok(None);
        }
        if buf[at] != b'$' {
            return Err(format!(
                "expected '$', got '{}'",
                (buf[at] as char).escape_default()
            ));
        }
        let Some((h, next)) = line(buf, at + 1, MAX_LINE)? else {
            return Ok(None);
        };
        let len = number(h, "bulk")?;
        if len < 0 {
            return Err("invalid bulk length".into());
        }
        declared += len as usize + 2 + (next - at);
        if len as usize > limits.max_request || declared > limits.max_request {
            return Err(format!("request larger than {} bytes", limits.max_request));
        }
        at = next + len as usize;
        if at + 2 > buf.len() {
            return Ok(None);
        }
        if &buf[at..at + 2] != b"\r\n" {
            return Err("bulk string not terminated by CRLF".into());
        }
        at += 2;
    }
    Ok(Some(at))
}

fn parse_inline(buf: &[u8], limits: &Limits) -> Parsed {
    let limit = MAX_INLINE.min(limits.max_request);
    let Some(nl) = buf.iter().take(limit + 1).position(|&b| b == b'\n') else {
        return if buf.len() > limit {
            Parsed::Error("too big inline request".into())
        } else {
            Parsed::Incomplete
        };
    };
    let text = &buf[..nl];
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    let args: Vec<Vec<u8>> = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|a| !a.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    Parsed::Request(args, nl + 1)
}

/// A reply, encoded for the connection's protocol version.
#[derive(Debug, Clone, PartialEq)]
pub enum R {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Array(Vec<R>),
    /// A map in RESP3, a flat array of pairs in RESP2.
    Map(Vec<(R, R)>),
}

impl R {
    pub fn ok() -> R {
        R::Simple("OK".into())
    }

    pub fn err(msg: impl Into<String>) -> R {
        R::Error(msg.into())
    }

    pub fn bulk(s: impl AsRef<[u8]>) -> R {
        R::Bulk(s.as_ref().to_vec())
    }

    fn to2(&self) -> Frame2 {
        match self {
            R::Simple(s) => Frame2::SimpleString(s.clone().into_bytes()),
            R::Error(s) => Frame2::Error(s.clone()),
            R::Int(i) => Frame2::Integer(*i),
            R::Bulk(b) => Frame2::BulkString(b.clone()),
            R::Null => Frame2::Null,
            R::Array(v) => Frame2::Array(v.iter().map(R::to2).collect()),
            R::Map(v) => Frame2::Array(v.iter().flat_map(|(k, v)| [k.to2(), v.to2()]).collect()),
        }
    }

    fn to3(&self) -> Frame3 {
        match self {
            R::Simple(s) => Frame3::SimpleString {
                data: s.clone().into_bytes(),
                attributes: None,
            },
            R::Error(s) => Frame3::SimpleError {
                data: s.clone(),
                attributes: None,
            },
            R::Int(i) => Frame3::Number {
                data: *i,
                attributes: None,
            },
            R::Bulk(b) => Frame3::BlobString {
                data: b.clone(),
                attributes: None,
            },
            R::Null => Frame3::Null,
            R::Array(v) => Frame3::Array {
                data: v.iter().map(R::to3).collect(),
                attributes: None,
            },
            R::Map(v) => Frame3::Map {
                data: v.iter().map(|(k, v)| (k.to3(), v.to3())).collect(),
                attributes: None,
            },
        }
    }

    /// Appends the encoding for protocol version `proto` (2 or 3) to `out`.
    pub fn encode(&self, proto: u8, out: &mut Vec<u8>) {
        let at = out.len();
        if proto >= 3 {
            let f = self.to3();
            out.resize(at + f.encode_len(false), 0);
            let n = redis_protocol::resp3::encode::complete::encode(&mut out[at..], &f, false)
                .expect("a buffer of encode_len bytes holds the frame");
            out.truncate(at + n);
        } else {
            let f = self.to2();
            out.resize(at + f.encode_len(false), 0);
            let n = redis_protocol::resp2::encode::encode(&mut out[at..], &f, false)
                .expect("a buffer of encode_len bytes holds the frame");
            out.truncate(at + n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(b: &[u8]) -> Parsed {
        parse(b, &Limits::default())
    }

    #[test]
    fn requests_parse_whole_or_wait_for_more() {
        let req = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n";
        assert_eq!(
            p(req),
            Parsed::Request(
                vec![b"SET".to_vec(), b"k".to_vec(), b"vv".to_vec()],
                req.len()
            )
        );
        for cut in 0..req.len() {
            assert_eq!(p(&req[..cut]), Parsed::Incomplete, "cut {cut}");
        }
        let mut two = req.to_vec();
        two.extend_from_slice(b"PING\r\n");
        assert!(matches!(p(&two), Parsed::Request(_, n) if n == req.len()));
        assert_eq!(p(b"PING\r\n"), Parsed::Request(vec![b"PING".to_vec()], 6));
        assert_eq!(
            p(b"  get   k \n"),
            Parsed::Request(vec![b"get".to_vec(), b"k".to_vec()], 11)
        );
    }

    #[test]
    fn hostile_requests_are_errors_at_once() {
        let l = Limits {
            max_request: 1000,
            max_args: 10,
            ..Limits::default()
        };
        let bad: &[&[u8]] = &[
            b"*-5\r\n",
            b"*x\r\n",
            b"*11\r\n",
            b"*1\r\n*1\r\n",
            b"*1\r\n:5\r\n",
            b"*1\r\n$1001\r\n",
            b"*2\r\n$999\r\n",
            b"*1\r\n$-1\r\n",
            b"*1\r\n$1\r\nab\r\n",
            b"*99999999999999999999999\r\n",
        ];
        for b in bad {
            assert!(
                matches!(parse(b, &l), Parsed::Error(_)),
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
        // A declared size over the limit is refused before its bytes arrive.
        assert!(matches!(parse(b"*2\r\n$999\r\nx", &l), Parsed::Error(_)));
        // An endless header line or inline request.
        assert!(matches!(parse(&[b'*'; 200], &l), Parsed::Error(_)));
        assert!(matches!(parse(&vec![b'a'; 2000], &l), Parsed::Error(_)));
        // Deep nesting would recurse in a decoder: refused by the header check.
        let deep = b"*1\r\n".repeat(100_000);
        assert!(matches!(parse(&deep, &l), Parsed::Error(_)));
    }

    #[test]
    fn replies_encode_in_both_protocols() {
        let mut o = Vec::new();
        R::Map(vec![(R::bulk("a"), R::Int(1))]).encode(2, &mut o);
        assert_eq!(o, b"*2\r\n$1\r\na\r\n:1\r\n");
        o.clear();
        R::Map(vec![(R::bulk("a"), R::Int(1))]).encode(3, &mut o);
        assert_eq!(o, b"%1\r\n$1\r\na\r\n:1\r\n");
        o.clear();
        R::Null.encode(2, &mut o);
        assert_eq!(o, b"$-1\r\n");
        o.clear();
        R::Null.encode(3, &mut o);
        assert_eq!(o, b"_\r\n");
    }
}
