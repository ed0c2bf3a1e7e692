//! `include/ferrite.h` is what cbindgen makes of this crate today: the test
//! regenerates the header and fails when the checked-in copy differs.
//! `FERRITE_BLESS=1 cargo test -p ferrite-c --test header` writes the new one.

use std::path::Path;

#[test]
fn the_checked_in_header_is_the_generated_one() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("UTF-8 header");
    let path = dir.join("include/ferrite.h");
    if std::env::var_os("FERRITE_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/ferrite.h");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in != generated {
        let line = checked_in
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "the end".to_string(), |l| format!("line {}", l + 1));
        panic!(
            "include/ferrite.h is stale (first difference at {line}): regenerate it with \
             `FERRITE_BLESS=1 cargo test -p ferrite-c --test header` and commit it"
        );
    }
    // The header declares what the C example and the adapters use.
    for name in [
        "ferrite_db_open_or_create",
        "ferrite_map_get_with",
        "ferrite_iter_prev",
        "ferrite_txn_commit",
        "FERRITE_ERR_IN_USE",
        "typedef struct ferrite_map ferrite_map;",
    ] {
        assert!(generated.contains(name), "{name} missing from the header");
    }
}
