//! Lines read per level of a tree lookup, measured as a chain (2026-11-29; built
//! outside the workspace: `cargo build --release`, then
//! `./target/release/pat p1 p7 p8 p2 n7 p9 pa pb q4 q2`; needs /mnt/pmhuge, a tmpfs
//! mounted huge=always). Each operation reads lines of a random 1 KiB "node" in
//! 16 MiB of DRAM on huge pages, then (address taken from what it read) lines of a
//! random 512-byte "leaf" in a 320 MiB file on the tmpfs; the next operation's
//! address depends on what this one read, so operations do not overlap. Nine
//! rounds, patterns in turn; the median per pattern is what docs/BENCHMARKS.md shows.
//!
//!   p1  node 1 line        -> leaf 1 line           (the route floor)
//!   p7  node 13 lines      -> leaf 1 line
//!   p8  node 1 line        -> leaf 8 lines
//!   p2  node 13 lines      -> leaf 8 lines          (Ferrite's pattern)
//!   n7  node 7 lines       -> leaf 8 lines          (level-0 fanout 32)
//!   p9  node 13 lines      -> leaf 3 lines          (two-choice home lines)
//!   pa  node 13 lines      -> leaf header line, then the entry's line (dependent)
//!   pb  node line 0, then one line it names (dependent) -> leaf 8 lines
//!   q4  node header + 3 adjacent lines (an interpolated window) -> leaf 8 lines
//!   q2  node header + 1 line -> leaf 8 lines
//!   saa/swa/sat/swt: a key's own node and leaf (10 M keys, 17 per leaf, 40 leaves per
//!       node), node all lines (a) or header + window (w), leaf all 8 lines (a) or
//!       line 1 + two hashed lines (t); SKEW=1 draws keys selfsimilar 0.2 (u1.txt, s1.txt)
//!   p3-p6: the write chains (barrier after the leaf; p4 with a CAS on the lock word)
use std::arch::x86_64::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

fn map_file(path: &str, len: usize) -> *mut u8 {
    unsafe {
        let c = std::ffi::CString::new(path).unwrap();
        let fd = libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT, 0o644);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len as i64), 0);
        let p = libc::mmap(std::ptr::null_mut(), len + (2 << 20), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
        assert!(p != libc::MAP_FAILED);
        libc::munmap(p, len + (2 << 20));
        let a = ((p as usize) + (2 << 20) - 1) & !((2 << 20) - 1);
        let q = libc::mmap(a as *mut _, len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED | libc::MAP_FIXED, fd, 0);
        assert!(q != libc::MAP_FAILED);
        libc::madvise(q, len, libc::MADV_HUGEPAGE);
        let q = q as *mut u8;
        for i in (0..len).step_by(4096) { *q.add(i) = 1; }
        q
    }
}
fn map_anon(len: usize) -> *mut u8 {
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len + (2 << 20), libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        let a = ((p as usize) + (2 << 20) - 1) & !((2 << 20) - 1);
        libc::madvise(a as *mut _, len, libc::MADV_HUGEPAGE);
        let q = a as *mut u8;
        let mut r = Rng(12345);
        for i in (0..len).step_by(8) { *(q.add(i) as *mut u64) = r.next(); }
        q
    }
}
#[inline(always)]
fn dep0(v: u64) -> u64 { let mut t = v; unsafe { std::arch::asm!("and {0}, 0", inout(reg) t, options(nomem, nostack)); } t }
struct Rng(u64);
impl Rng { fn next(&mut self) -> u64 { self.0 ^= self.0 << 13; self.0 ^= self.0 >> 7; self.0 ^= self.0 << 17; self.0 } }

#[inline(always)]
unsafe fn rd(p: *const u8) -> u64 { std::ptr::read_volatile(p as *const u64) }

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ops: u64 = 2_000_000;
    let node_bytes = 16usize << 20; // level-0 nodes region (~10 MB at 10M records)
    let pool_bytes = 320usize << 20;
    let nodes = map_anon(node_bytes);
    let pool = map_file("/mnt/pmhuge/pat.pool", pool_bytes);
    let nnodes = (node_bytes / 1024) as u64; // 1 KiB node slots
    let nleaves = (pool_bytes / 512) as u64;
    let which: Vec<&str> = args[1..].iter().map(|s| s.as_str()).collect();
    for round in 0..9 {
    for w in &which {
        let mut r = Rng(0x9E3779B97F4A7C15 ^ round);
        let mut sink = 0u64;
        let t = Instant::now();
        let skew = std::env::var("SKEW").is_ok();
        let nkeys: u64 = 10_000_000;
        let expo = (0.2f64).ln() / (0.8f64).ln();
        for _ in 0..ops {
            if w.starts_with('s') {
                // s<node><leaf>: node 'a' = all 13 lines, 'w' = header + 3-line window;
                // leaf 'a' = 8 lines, 't' = lines 1 + two hashed lines.
                let u = (r.next() >> 11) as f64 / (1u64 << 53) as f64;
                let id = if skew { ((nkeys as f64) * u.powf(expo)) as u64 % nkeys } else { (r.next() % nkeys) };
                let pos = id.wrapping_mul(0x9E3779B97F4A7C15).rotate_left(29).wrapping_mul(0xBF58476D1CE4E5B9) % nkeys;
                let leaf = pos / 17;
                let node = (leaf / 40) as usize;
                let b = w.as_bytes();
                unsafe {
                    let n = nodes.add(node * 1024 + dep0(sink) as usize);
                    let mut acc;
                    if b[1] == b'a' {
                        for l in 1..13 { _mm_prefetch(n.add(64 * l) as *const i8, _MM_HINT_T0); }
                        acc = rd(n);
                        for l in 1..13 { acc = acc.wrapping_add(rd(n.add(64 * l))); }
                    } else {
                        let j = 1 + ((leaf % 40) as usize * 12 / 40).min(9);
                        for l in 0..3 { _mm_prefetch(n.add(64 * (j + l)) as *const i8, _MM_HINT_T0); }
                        acc = rd(n);
                        for l in 0..3 { acc = acc.wrapping_add(rd(n.add(64 * (j + l)))); }
                    }
                    let lf = pool.add((leaf as usize) * 512 + dep0(acc) as usize);
                    let mut s = 0;
                    if b[2] == b'a' {
                        for l in 0..8 { s += rd(lf.add(64 * l)); }
                    } else {
                        let h1 = (pos as usize >> 3) & 7; let h2 = (pos as usize >> 6) & 7;
                        s = rd(lf.add(64)) + rd(lf.add(64 * h1)) + rd(lf.add(64 * h2));
                    }
                    sink = sink.wrapping_add(s);
                }
                continue;
            }
            let x = r.next().wrapping_add(dep0(sink)); let chain = args.len() > 0 && std::env::var("NOCHAIN").is_err(); let x = if chain { x } else { r.0 };
            unsafe {
                // node address from the random draw, then the leaf from a word of the node
                // (dependent): emulate by mixing the loaded word into the leaf index.
                let n = nodes.add(((x % nnodes) as usize) * 1024);
                if matches!(*w, "q4" | "q2" | "q3" | "r2" | "r4") {
                    let w0 = match *w { "q4" | "r4" => 3, "q3" => 2, _ => 1 };
                    let j = 1 + ((x >> 20) % (12 - w0 as u64)) as usize;
                    if w.starts_with('q') { for l in 0..w0 { _mm_prefetch(n.add(64 * (j + l)) as *const i8, _MM_HINT_T0); } }
                    let mut acc = rd(n);
                    for l in 0..w0 { acc = acc.wrapping_add(rd(n.add(64 * (j + l)))); }
                    let y = rd(n.add(8)).wrapping_add(dep0(acc));
                    let lf = pool.add(((y % nleaves) as usize) * 512);
                    let mut s = 0; for l in 0..8 { s += rd(lf.add(64 * l)); } sink = sink.wrapping_add(s);
                    continue;
                }
                let nlines = match *w { "p1" | "p3" | "p8" | "pb" | "pc" | "pd" => 1, "n7" => 7, _ => 13 };
                for l in 1..nlines { _mm_prefetch(n.add(64 * l) as *const i8, _MM_HINT_T0); }
                let mut acc = rd(n);
                for l in 1..nlines { acc = acc.wrapping_add(rd(n.add(64 * l))); }
                let mut y = rd(n.add(8)).wrapping_add(dep0(acc));
                if matches!(*w, "pb" | "pc" | "pd") {
                    let l = 1 + (acc % 14) as usize;
                    let a2 = rd(n.add(64 * l));
                    if *w == "pd" { let b2 = rd(n.add(64 * (l + 1))); y = y.wrapping_add(dep0(b2)); }
                    y = y.wrapping_add(dep0(a2));
                }
                let lf = pool.add(((y % nleaves) as usize) * 512);
                match *w {
                    "p1" | "p7" => { sink = sink.wrapping_add(rd(lf)); }
                    "p8" | "n7" | "pb" | "pd" => { let mut s = 0; for l in 0..8 { s += rd(lf.add(64 * l)); } sink = sink.wrapping_add(s); }
                    "p9" => { let mut s = 0; for l in 0..3 { s += rd(lf.add(64 * l)); } sink = sink.wrapping_add(s); }
                    "pa" | "pc" => { let h = rd(lf); let l = ((dep0(h) + (x >> 40)) & 7) as usize; sink = sink.wrapping_add(rd(lf.add(64*l))); }
                    "p2" => { let mut s = 0; for l in 0..8 { s += rd(lf.add(64 * l)); } sink = sink.wrapping_add(s); }
                    "p3" => {
                        let v = rd(lf);
                        std::ptr::write_volatile(lf.add(8) as *mut u64, v + 1);
                        clwb(lf as *const u8);
                        _mm_sfence();
                        sink = sink.wrapping_add(v);
                    }
                    "p4" | "p5" | "p6" => {
                        if *w == "p6" { for l in 0..8 { _mm_prefetch(lf.add(64 * l) as *const i8, _MM_HINT_T0); } }
                        let lock = &*(lf.add(64 + 56) as *const AtomicU64);
                        let v = if *w == "p5" { lock.load(Ordering::Acquire) } else {
                            let v = lock.load(Ordering::Relaxed);
                            let _ = lock.compare_exchange(v, v | 1, Ordering::Acquire, Ordering::Relaxed);
                            v
                        };
                        let mut s = 0; for l in 0..8 { s += rd(lf.add(64 * l)); }
                        let k = (s as usize ^ x as usize) & 7;
                        std::ptr::write_volatile(lf.add(64 * k + 16) as *mut u64, s);
                        clwb(lf.add(64 * k) as *const u8);
                        _mm_sfence();
                        lock.store(v.wrapping_add(2) & !1, Ordering::Release);
                        sink = sink.wrapping_add(s);
                    }
                    _ => panic!("pattern"),
                }
            }
        }
        let ns = t.elapsed().as_nanos() as f64 / ops as f64;
        println!("{w} round {round}: {ns:.0} ns/op {}", sink & 1);
    }
    }
    std::fs::remove_file("/mnt/pmhuge/pat.pool").ok();
}

#[inline(always)]
unsafe fn clwb(p: *const u8) { std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)); }
