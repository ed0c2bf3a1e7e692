//! Exports the PiBench host's libpmem definitions from the `ferrite` binary
//! (crates/ferrite-pibench-host/shim/host.cpp): PiBench wrappers loaded by
//! `ferrite bench --compare pibench:…` then reach PMDK through them, which
//! counts the cache lines PMDK flushes for them (VLDB'22 Fig. 9).

fn main() {
    for sym in [
        "pmem_flush",
        "pmem_persist",
        "pmem_msync",
        "pmem_drain",
        "pmem_memcpy",
        "pmem_memmove",
        "pmem_memset",
    ] {
        println!("cargo:rustc-link-arg-bin=ferrite=-Wl,--export-dynamic-symbol={sym}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
