use std::time::Instant;
use std::hint::black_box;
fn perm(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect(); let mut x = seed;
    for i in (1..n).rev() { x ^= x << 13; x ^= x >> 7; x ^= x << 17; let j = (x % (i as u64 + 1)) as usize; v.swap(i, j); }
    v
}
fn main() {
    let region: usize = 320 << 20;
    let p = unsafe { libc::mmap(std::ptr::null_mut(), 2 * region + (4<<20), libc::PROT_READ|libc::PROT_WRITE, libc::MAP_PRIVATE|libc::MAP_ANONYMOUS, -1, 0) } as usize;
    let base = (p + (2<<20) - 1) & !((2<<20)-1);
    unsafe { libc::madvise(base as *mut _, 2 * region, libc::MADV_HUGEPAGE) };
    let zero = black_box(0u64);
    let steps = 2_000_000;
    // single level: blocks of bsz, chain through a random cyclic permutation; next stored in word 0.
    for &bsz in &[512usize, 1024] {
        let nb = region / bsz;
        let order = perm(nb, 0x9e37 + bsz as u64);
        for i in 0..nb { let a = base + order[i] * bsz; unsafe { *(a as *mut u64) = order[(i + 1) % nb] as u64; } }
        for &k in &[1usize, 2, 3, 4, 8, 13, 16] {
            if k * 64 > bsz { continue; }
            let mut idx = order[0]; let t = Instant::now();
            for _ in 0..steps {
                let b = base + idx * bsz;
                let mut s = unsafe { *(b as *const u64) };
                for l in 1..k { s = s.wrapping_add(unsafe { *((b + l * 64) as *const u64) } & zero); }
                idx = s as usize;
            }
            println!("block {bsz:5} lines {k:2}: {:6.1} ns/step ({idx})", t.elapsed().as_nanos() as f64 / steps as f64);
        }
    }
    // two levels: node (1 KiB, region A) -> leaf (512 B, region B) -> node ...
    let nn = region / 1024; let nl = region / 512;
    let on = perm(nn, 5); let ol = perm(nl, 7);
    let lb = base + region + (2 << 20);
    // node on[i] points to leaf ol[i]; leaf ol[i] points to node on[i+1]
    for i in 0..nn { unsafe { *((base + on[i] * 1024) as *mut u64) = ol[i] as u64; *((lb + ol[i] * 512) as *mut u64) = on[(i + 1) % nn] as u64; } }
    for &(a, b) in &[(13usize, 8usize), (13, 3), (13, 2), (8, 8), (4, 8), (3, 8), (3, 3), (3, 2), (2, 2), (1, 1)] {
        let mut idx = on[0]; let t = Instant::now();
        for _ in 0..steps {
            let n = base + idx * 1024;
            let mut s = unsafe { *(n as *const u64) };
            for l in 1..a { s = s.wrapping_add(unsafe { *((n + l * 64) as *const u64) } & zero); }
            let lf = lb + s as usize * 512;
            let mut s2 = unsafe { *(lf as *const u64) };
            for l in 1..b { s2 = s2.wrapping_add(unsafe { *((lf + l * 64) as *const u64) } & zero); }
            idx = s2 as usize;
        }
        println!("node {a:2} lines + leaf {b} lines: {:6.1} ns ({idx})", t.elapsed().as_nanos() as f64 / steps as f64);
    }
}
