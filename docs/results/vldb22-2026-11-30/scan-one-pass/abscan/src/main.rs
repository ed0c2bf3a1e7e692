//! One index, loaded once; scans in alternating chunks with the prototype off/on.
use ferrite_kv::OrderedKv;
use ferrite_pm::{Pool, PoolOptions};
use std::sync::atomic::Ordering;
fn cpu() -> f64 { let mut ts = libc::timespec{tv_sec:0,tv_nsec:0}; unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }; ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64 }
fn wall() -> f64 { let mut ts = libc::timespec{tv_sec:0,tv_nsec:0}; unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) }; ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64 }
fn scramble(id: u64) -> u64 { let x = id.wrapping_mul(0xD6E8_FEB8_6659_FD93); x ^ (x >> 32) }
struct Rng(u64);
impl Rng { fn next(&mut self) -> u64 { self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15); let mut z = self.0; z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9); z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb); z ^ (z >> 31) }
  fn below(&mut self, n: u64) -> u64 { ((self.next() as u128 * n as u128) >> 64) as u64 } }
fn env(k: &str, d: u64) -> u64 { std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d) }
fn median(v: &mut Vec<f64>) -> f64 { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); v[v.len() / 2] }
fn main() {
    let n = env("N", 10_000_000);
    let chunk = env("CHUNK", 20_000);
    let rounds = env("ROUNDS", 15);
    let len = env("LEN", 100) as usize;
    let size = n * 64 + (512 << 20);
    let path = format!("/mnt/pmhuge/abscan-{}.pool", std::process::id());
    let p = Pool::create(&path, size, &PoolOptions::default()).unwrap();
    let _ = std::fs::remove_file(&path);
    let idx = ferrite_index::FerriteIndex::open_or_create(&p, "h").unwrap();
    let val = 42u64.to_le_bytes();
    for i in 0..n { idx.insert(&scramble(i).to_be_bytes(), &val).unwrap(); }
    let mut rng = Rng(7);
    let (mut a, mut b, mut aw, mut bw) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds * 2 {
        let on = std::env::var("ALWAYS").is_ok() || ((r % 2 == 1) ^ ((r / 2) % 2 == 1));
        ferrite_index::tree::scan::PROTO.store(if on { env("ON", 1) as u32 } else { env("OFF", 0) as u32 }, Ordering::Relaxed);
        let keys: Vec<[u8; 8]> = (0..chunk).map(|_| scramble(rng.below(n)).to_be_bytes()).collect();
        let (c, w) = (cpu(), wall());
        let mut tot = 0usize;
        for k in &keys { let mut m = 0u64; tot += idx.scan(k, len, &mut |x, y| { m = m.wrapping_add(x[0] as u64 + y[0] as u64); }).unwrap(); std::hint::black_box(m); }
        let (c, w) = ((cpu() - c) / chunk as f64, (wall() - w) / chunk as f64);
        assert!(tot >= chunk as usize * (len - 1) / 2);
        if on { b.push(c); bw.push(w) } else { a.push(c); aw.push(w) }
    }
    if std::env::var("LENS").is_ok() {
        ferrite_index::tree::scan::PROTO.store(env("ON", 1) as u32, Ordering::Relaxed);
        let mut lk = vec![];
        let mut g = 0u64;
        let t = cpu();
        for _ in 0..chunk { let mut o = Vec::new(); g += idx.get_into(&scramble(rng.below(n)).to_be_bytes(), &mut o).unwrap() as u64; }
        println!("lookup {:.0} ns", (cpu() - t) / chunk as f64); assert_eq!(g, chunk);
        for l in [1usize, 2, 9, 17, 34, 51, 68, 85, 100, 150, 200] { let keys: Vec<[u8; 8]> = (0..chunk).map(|_| scramble(rng.below(n)).to_be_bytes()).collect();
            let t = cpu(); for k in &keys { let mut m = 0u64; idx.scan(k, l, &mut |x, y| { m = m.wrapping_add(x[0] as u64 + y[0] as u64); }).unwrap(); std::hint::black_box(m); }
            lk.push((l, (cpu() - t) / chunk as f64)); }
        for (l, t) in lk { println!("scan{l}: {t:.0} ns"); }
    }
    let (ma, mb) = (median(&mut a), median(&mut b));
    println!("scan{len}: off {:.0} ns, on {:.0} ns (cpu); off/on = {:.3}; wall off {:.0} on {:.0}", ma, mb, ma / mb, median(&mut aw), median(&mut bw));
}
