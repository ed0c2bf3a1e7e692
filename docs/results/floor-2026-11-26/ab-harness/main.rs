//! Paired A/B of two Ferrite index builds in one process: both loaded with the
//! same keys, then phases run in alternating chunks (A,B / B,A ...), thread CPU
//! time per op; medians over chunks. Env: N, CHUNK, ROUNDS, PHASES, POOL_DIR, DRAM, K.
use ferrite_kv::OrderedKv;
use ferrite_pm::{Pool, PoolOptions};

fn cpu() -> f64 { let mut ts = libc::timespec{tv_sec:0,tv_nsec:0}; unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }; ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64 }
fn scramble(id: u64) -> u64 { let x = id.wrapping_mul(0xD6E8_FEB8_6659_FD93); x ^ (x >> 32) }
struct Rng(u64);
impl Rng { fn next(&mut self) -> u64 { self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15); let mut z = self.0; z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9); z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb); z ^ (z >> 31) }
  fn below(&mut self, n: u64) -> u64 { ((self.next() as u128 * n as u128) >> 64) as u64 }
  fn unit(&mut self) -> f64 { (self.next() >> 11) as f64 / (1u64 << 53) as f64 } }
fn key(id: u64, klen: usize) -> Vec<u8> { let s = scramble(id); if klen == 8 { s.to_be_bytes().to_vec() } else { let mut k = format!("{:016x}", s).into_bytes(); k.resize(klen, b'.'); k } }
fn env(k: &str, d: u64) -> u64 { std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d) }

fn run(idx: &dyn OrderedKv, ph: &str, keys: &[Vec<u8>], coins: &[bool]) -> f64 {
    let val = 42u64.to_le_bytes();
    let mut out = Vec::new();
    let c = cpu();
    let mut found = 0u64;
    match ph {
        "lookup" => for k in keys { found += idx.get_into(k, &mut out).unwrap() as u64; },
        "insert" => for k in keys { found += idx.insert(k, &val).unwrap() as u64; },
        "update" => for k in keys { found += idx.update(k, &val).unwrap() as u64; },
        "scan" => { for k in keys { let mut m = 0u64; idx.scan(k, 100, &mut |a, b| { m = m.wrapping_add(a[0] as u64 + b[0] as u64); }).unwrap(); std::hint::black_box(m); } found = keys.len() as u64; }
        "mixed" => for (k, &c) in keys.iter().zip(coins) { found += if c { idx.get_into(k, &mut out).unwrap() } else { idx.update(k, &val).unwrap() } as u64; },
        _ => panic!("phase {ph}"),
    }
    assert_eq!(found, keys.len() as u64, "{ph}");
    (cpu() - c) / keys.len() as f64
}

fn median(v: &mut Vec<f64>) -> f64 { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); v[v.len() / 2] }

fn main() {
    let n = env("N", 10_000_000);
    let chunk = env("CHUNK", 200_000);
    let rounds = env("ROUNDS", 5);
    let klen = env("K", 8) as usize;
    let phases = std::env::var("PHASES").unwrap_or("lookup,insert,update,scan,mixed".into());
    let dram = std::env::var("DRAM").is_ok();
    let dir = std::env::var("POOL_DIR").unwrap_or("/dev/shm".into());
    let size = (n + rounds * chunk * 2) * (48 + 3 * klen as u64) + (256 << 20);
    let mk = |tag: &str| -> Pool {
        let dir = std::env::var(format!("POOL_DIR_{}", tag.to_uppercase())).unwrap_or(dir.clone());
        let path = format!("{dir}/index-ab-{tag}-{}.pool", std::process::id());
        let p = Pool::create(&path, size, &PoolOptions::default()).unwrap();
        let _ = std::fs::remove_file(&path);
        p
    };
    let (pa, pb);
    let aa = std::env::var("AA").is_ok();
    let (a, b): (Box<dyn OrderedKv>, Box<dyn OrderedKv>) = if dram {
        (Box::new(ferrite_index_base::FerriteIndex::volatile(size).unwrap()),
         if aa { Box::new(ferrite_index_base::FerriteIndex::volatile(size).unwrap()) } else { Box::new(ferrite_index::FerriteIndex::volatile(size).unwrap()) })
    } else {
        pa = mk("a"); pb = mk("b");
        (Box::new(ferrite_index_base::FerriteIndex::open_or_create(&pa, "h").unwrap()),
         if aa { Box::new(ferrite_index_base::FerriteIndex::open_or_create(&pb, "h").unwrap()) } else { Box::new(ferrite_index::FerriteIndex::open_or_create(&pb, "h").unwrap()) })
    };
    let (a, b) = (&*a, &*b);
    let val = 42u64.to_le_bytes();
    let (mut la, mut lb) = (0.0, 0.0);
    for c0 in (0..n).step_by(1_000_000) {
        let ks: Vec<Vec<u8>> = (c0..(c0 + 1_000_000).min(n)).map(|i| key(i, klen)).collect();
        let t = cpu(); for k in &ks { a.insert(k, &val).unwrap(); } la += cpu() - t;
        let t = cpu(); for k in &ks { b.insert(k, &val).unwrap(); } lb += cpu() - t;
    }
    eprintln!("load cpu ns/op: base {:.0} new {:.0}", la / n as f64, lb / n as f64);

    let mut next_new = n;
    let mut rng = Rng(0x1729);
    let ss = (0.2f64).ln() / (0.8f64).ln();
    for ph in phases.split(',') {
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        let cnt = if ph == "scan" { chunk / 20 } else { chunk };
        for r in 0..rounds {
            let keys: Vec<Vec<u8>> = (0..cnt).map(|_| match ph {
                "insert" => { next_new += 1; key(next_new - 1, klen) }
                "mixed" => key(((n as f64 * rng.unit().powf(ss)) as u64).min(n - 1), klen),
                "scan" => key(rng.below(n - 1000), klen),
                _ => key(rng.below(n), klen),
            }).collect();
            let coins: Vec<bool> = (0..cnt).map(|_| rng.next() & 1 == 0).collect();
            if r % 2 == 0 { ra.push(run(a, ph, &keys, &coins)); rb.push(run(b, ph, &keys, &coins)); }
            else { rb.push(run(b, ph, &keys, &coins)); ra.push(run(a, ph, &keys, &coins)); }
        }
        let (ma, mb) = (median(&mut ra), median(&mut rb));
        println!("{ph:7} base {ma:7.1} ns  new {mb:7.1} ns  new/base time {:.3}  (speedup {:.3}x)", mb / ma, ma / mb);
    }
    println!("load: {:.2}", std::fs::read_to_string("/proc/loadavg").unwrap().split(' ').next().unwrap().parse::<f64>().unwrap());
}
