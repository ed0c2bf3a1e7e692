use ferrite_kv::OrderedKv;
use ferrite_pm::{Pool, PoolOptions};
fn scramble(id: u64) -> u64 { let x = id.wrapping_mul(0xD6E8_FEB8_6659_FD93); x ^ (x >> 32) }
struct Rng(u64);
impl Rng { fn next(&mut self) -> u64 { self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15); let mut z = self.0; z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9); z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb); z ^ (z >> 31) }
  fn unit(&mut self) -> f64 { (self.next() >> 11) as f64 / (1u64 << 53) as f64 } }
fn main() {
    let n: u64 = 10_000_000;
    let ph = std::env::var("PH").unwrap_or("mixed".into());
    let p1 = Pool::create("/mnt/pmhuge/mix-a", 4 << 30, &PoolOptions::default()).unwrap();
    let _ = std::fs::remove_file("/mnt/pmhuge/mix-a");
    let a = ferrite_index::FerriteIndex::open_or_create(&p1, "x").unwrap();
    let val = 42u64.to_le_bytes();
    for i in 0..n { let k = scramble(i).to_be_bytes(); a.insert(&k, &val).unwrap(); }
    let ss = (0.2f64).ln() / (0.8f64).ln();
    let mut rng = Rng(7);
    let keys: Vec<[u8; 8]> = (0..4_000_000).map(|_| { let id = if ph == "mixed" { ((n as f64 * rng.unit().powf(ss)) as u64).min(n - 1) } else { (rng.unit() * n as f64) as u64 }; scramble(id).to_be_bytes() }).collect();
    let coins: Vec<bool> = (0..keys.len()).map(|_| rng.next() & 1 == 0).collect();
    eprintln!("ready {}", std::process::id());
    let mut out = Vec::new();
    let t = std::time::Instant::now();
    for _ in 0..3 { for (k, &c) in keys.iter().zip(&coins) {
        let ok = match ph.as_str() { "lookup" => a.get_into(k, &mut out).unwrap(), "update" => a.update(k, &val).unwrap(), _ => if c { a.get_into(k, &mut out).unwrap() } else { a.update(k, &val).unwrap() } };
        assert!(ok);
    } }
    eprintln!("{ph}: {:.0} ns/op", t.elapsed().as_nanos() as f64 / (3 * keys.len()) as f64);
}
