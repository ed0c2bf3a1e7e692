//! A small key-value command over the facade, and the other process of the
//! facade's process tests.
//!
//! ```sh
//! cargo run --release -p ferrite --example kv -- /dev/shm/demo.pool put hello world
//! cargo run --release -p ferrite --example kv -- /dev/shm/demo.pool get hello
//! cargo run --release -p ferrite --example kv -- /dev/shm/demo.pool scan
//! ```
//!
//! `hold` opens the pool and keeps it open until standard input closes;
//! `writer` commits transactions of three keys forever (numbered on from the
//! last one in the pool), printing `acked N` after each commit (the kill -9 test kills it mid-stream).

use std::io::{BufRead, Write};
use std::process::ExitCode;

use ferrite::{Db, Error};

const SIZE: u64 = 256 << 20;

fn run(args: &[String]) -> Result<(), Error> {
    let usage =
        || Error::Invalid("usage: kv POOL put K V | get K | del K | scan | hold | writer".into());
    let (path, cmd) = match args {
        [p, c, ..] => (p, c.as_str()),
        _ => return Err(usage()),
    };
    let db = Db::open_or_create(path, SIZE)?;
    let m = db.map("kv")?;
    match (cmd, &args[2..]) {
        ("put", [k, v]) => {
            m.upsert(k, v)?;
        }
        ("get", [k]) => match m.get(k)? {
            Some(v) => println!("{}", String::from_utf8_lossy(&v)),
            None => {
                return Err(Error::NotFound {
                    kind: "key",
                    name: k.clone(),
                })
            }
        },
        ("del", [k]) => {
            m.remove(k)?;
        }
        ("scan", []) => {
            for e in m.iter() {
                let (k, v) = e?;
                println!(
                    "{}={}",
                    String::from_utf8_lossy(&k),
                    String::from_utf8_lossy(&v)
                );
            }
        }
        ("hold", []) => {
            println!("holding {}", db.durability().name());
            std::io::stdout().flush().ok();
            let mut line = String::new();
            while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {}
        }
        ("writer", []) => {
            let mut out = std::io::stdout().lock();
            // Continue after the last committed transaction.
            let start = m
                .get("last")?
                .and_then(|v| String::from_utf8(v).ok()?.parse::<u64>().ok())
                .map_or(0, |v| v + 1);
            for i in start.. {
                let mut tx = m.transaction()?;
                for part in ["a", "b", "c"] {
                    tx.upsert(format!("txn:{i:08}:{part}"), i.to_string())?;
                }
                tx.upsert("last", i.to_string())?;
                tx.commit()?;
                writeln!(out, "acked {i}").ok();
                out.flush().ok();
            }
        }
        _ => return Err(usage()),
    }
    drop(m);
    db.close()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kv: {e}");
            ExitCode::from(if matches!(e, Error::InUse { .. }) {
                2
            } else {
                1
            })
        }
    }
}
