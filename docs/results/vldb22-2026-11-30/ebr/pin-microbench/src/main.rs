use std::time::Instant;
fn run(threads: usize, f: fn()) -> f64 {
    let n = 20_000_000u64;
    let t = Instant::now();
    std::thread::scope(|s| { for _ in 0..threads { s.spawn(move || for _ in 0..n { f() }); } });
    t.elapsed().as_nanos() as f64 / n as f64
}
fn cb() { let g = crossbeam_epoch::pin(); std::hint::black_box(&g); }
fn eb() { let g = ferrite_index::ebr::pin(); std::hint::black_box(&g); }
fn main() {
    for th in [1, 2] { for _ in 0..2 {
        println!("{th} threads, ns per pin+unpin per thread: crossbeam {:.2}, ebr {:.2}", run(th, cb), run(th, eb));
    } }
}
