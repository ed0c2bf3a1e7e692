use ferrite_kv::OrderedKv;
use ferrite_pm::{Pool, PoolOptions};
fn scramble(id: u64) -> u64 { let x = id.wrapping_mul(0xD6E8_FEB8_6659_FD93); x ^ (x >> 32) }
fn main() {
    let n: u64 = std::env::var("N").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let p1 = Pool::create("/mnt/pmhuge/fill-a", 1 << 30, &PoolOptions::default()).unwrap();
    let p2 = Pool::create("/mnt/pmhuge/fill-b", 1 << 30, &PoolOptions::default()).unwrap();
    let a = ferrite_index::FerriteIndex::open_or_create(&p1, "x").unwrap();
    let b = ferrite_index_base::FerriteIndex::open_or_create(&p2, "x").unwrap();
    for i in 0..n { let k = scramble(i).to_be_bytes(); a.insert(&k, &k).unwrap(); b.insert(&k, &k).unwrap(); }
    for pass in 0..3 {
        for (name, idx) in [("new", &a as &dyn OrderedKv), ("base", &b as &dyn OrderedKv)] {
            let t = std::time::Instant::now();
            let mut m = 0u64;
            for i in 0..200_000u64 { let k = scramble(i * 7 + pass).to_be_bytes(); idx.scan(&k, 100, &mut |x, _| m = m.wrapping_add(x[0] as u64)).unwrap(); }
            println!("pass {pass} {name} {:.0} ns/scan {m}", t.elapsed().as_nanos() as f64 / 200_000.0);
        }
    }
    println!("new leaves {} base leaves {}", a.memory_usage().leaves, b.memory_usage().leaves);
    let _ = std::fs::remove_file("/mnt/pmhuge/fill-a"); let _ = std::fs::remove_file("/mnt/pmhuge/fill-b");
}
