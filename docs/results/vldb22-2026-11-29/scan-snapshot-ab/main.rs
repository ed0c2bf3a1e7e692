//! Paired A/B of scans (and lookups): two index builds loaded with the same
//! keys, chunks alternating A,B / B,A; thread CPU ns per op, medians.
use ferrite_kv::OrderedKv;
fn cpu() -> f64 { let mut ts = libc::timespec{tv_sec:0,tv_nsec:0}; unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }; ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64 }
fn scramble(id: u64) -> u64 { let x = id.wrapping_mul(0xD6E8_FEB8_6659_FD93); x ^ (x >> 32) }
fn env(k: &str, d: u64) -> u64 { std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d) }
fn run(idx: &dyn OrderedKv, ph: &str, from: u64, cnt: u64, n: u64) -> f64 {
    let c = cpu();
    let mut out = Vec::new();
    let mut tot = 0usize;
    for i in from..from + cnt {
        let k = scramble((i.wrapping_mul(0x9E37_79B9)) % n).to_be_bytes();
        match ph {
            "scan" => { let mut s = 0u64; tot += idx.scan(&k, 100, &mut |a, b| { s = s.wrapping_add(a[0] as u64 + b[0] as u64); }).unwrap(); std::hint::black_box(s); }
            _ => { tot += idx.get_into(&k, &mut out).unwrap() as usize; }
        }
    }
    std::hint::black_box(tot);
    (cpu() - c) / cnt as f64
}
fn med(v: &mut Vec<f64>) -> f64 { v.sort_by(|a, b| a.partial_cmp(b).unwrap()); v[v.len() / 2] }
fn main() {
    let n = env("N", 10_000);
    let chunk = env("CHUNK", 20_000);
    let rounds = env("ROUNDS", 11);
    let dir = std::env::var("POOL_DIR").unwrap_or("/mnt/pmhuge".into());
    let mk = |t: &str| { let path = format!("{dir}/sm-{t}-{}.pool", std::process::id());
        let p = ferrite_pm::Pool::create(&path, n * 80 + (256 << 20), &ferrite_pm::PoolOptions::default()).unwrap();
        let _ = std::fs::remove_file(&path); p };
    let (pa, pb) = (mk("a"), mk("b"));
    let a = ferrite_index_base::FerriteIndex::open_or_create(&pa, "h").unwrap();
    let b = ferrite_index::FerriteIndex::open_or_create(&pb, "h").unwrap();
    let v = 42u64.to_le_bytes();
    for i in 0..n { let k = scramble(i).to_be_bytes(); a.insert(&k, &v).unwrap(); b.insert(&k, &v).unwrap(); }
    for ph in std::env::var("PHASES").unwrap_or("scan,lookup".into()).split(',') {
        let (mut ta, mut tb) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let from = r * chunk;
            if r % 2 == 0 { ta.push(run(&a, ph, from, chunk, n)); tb.push(run(&b, ph, from, chunk, n)); }
            else { tb.push(run(&b, ph, from, chunk, n)); ta.push(run(&a, ph, from, chunk, n)); }
        }
        let (ma, mb) = (med(&mut ta), med(&mut tb));
        println!("{ph}: base {ma:.0} ns, new {mb:.0} ns, new/base time {:.3} (speedup {:.3}x)", mb / ma, ma / mb);
    }
}
