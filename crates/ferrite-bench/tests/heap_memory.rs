//! The DRAM figure of a volatile baseline is the allocator's growth while it
//! loads. The allocator's statistics are process-wide, so this test has a test
//! binary of its own: other tests freeing memory at the same time would hide
//! the growth.

use ferrite_bench::index::runner::load;
use ferrite_bench::index::variants::{open_variant, VariantConfig};
use ferrite_bench::index::workload::KeyCodec;

#[test]
fn btreemap_memory_grows_with_its_records() {
    let c = VariantConfig {
        pool_dir: std::env::temp_dir(),
        pool_path: None,
        pool_size: 0,
        max_records: 100_000,
        key_len: 8,
        value_size: 8,
        reopen: false,
        redb_load_batch: 100,
    };
    let inst = open_variant("btreemap", &c).unwrap();
    let codec = KeyCodec::new(8, 8, "").unwrap();
    load(inst.kv.as_ref(), &codec, 100_000, 1, 1, &|_| {}).unwrap();
    let m = inst.memory();
    let per = m.dram_bytes.unwrap() as f64 / 100_000.0;
    // Two 8-byte Vecs (24 B headers + 2 small heap blocks) per entry at least.
    assert!(per > 48.0, "{per} bytes per record");
}
