//! Drives the probe wrapper (tests/wrappers/probe_wrapper.cpp), compiled by
//! build.rs against each published layout's tree_api.hpp, through the host,
//! and checks that every call reaches the method it names (the probe counts
//! calls per method), that the layout is read from the vtable, and that a
//! vtable of another length, or a layout the object does not have, is refused
//! before anything is called.

use std::path::Path;

use ferrite_kv::OrderedKv;
use ferrite_pibench_host::{parse_spec, short_name, KeyOrder, Layout, PiBenchTree, TreeOptions};

fn opts(k: usize, v: usize) -> TreeOptions {
    TreeOptions {
        key_size: k,
        value_size: v,
        pool_path: "/dev/shm/fph-probe-pool".into(),
        pool_size: 12345,
        num_threads: 3,
    }
}

/// The probe's call counters and the options it received, read from the
/// already loaded library.
struct Probe {
    calls: *const [u64; 8],
    key_size: *const usize,
    num_threads: *const usize,
    pool_size: *const usize,
    pool_path: *const libc::c_char,
}

fn probe(lib: &str) -> Probe {
    let c = std::ffi::CString::new(lib).unwrap();
    // SAFETY: RTLD_NOLOAD only returns the handle of a library already loaded.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!h.is_null(), "{lib} is not loaded");
    let sym = |n: &str| {
        let n = std::ffi::CString::new(n).unwrap();
        // SAFETY: valid handle and name.
        let p = unsafe { libc::dlsym(h, n.as_ptr()) };
        assert!(!p.is_null());
        p
    };
    Probe {
        calls: sym("probe_calls") as *const [u64; 8],
        key_size: sym("probe_key_size") as *const usize,
        num_threads: sym("probe_num_threads") as *const usize,
        pool_size: sym("probe_pool_size") as *const usize,
        pool_path: sym("probe_pool_path") as *const libc::c_char,
    }
}

impl Probe {
    fn calls(&self) -> [u64; 8] {
        // SAFETY: the library stays loaded for the process's life.
        unsafe { std::ptr::read_volatile(self.calls) }
    }
}

const FIND: usize = 0;
const INSERT: usize = 1;
const UPDATE: usize = 2;
const REMOVE: usize = 3;
const SCAN: usize = 4;
const BULK: usize = 5;
const TLS: usize = 6;
const DTOR: usize = 7;

/// Calls every method once and checks that exactly that method's counter moved.
fn exercise(lib: &str, layout: Layout) {
    let p = probe_after_open(lib, layout);
    let (t, p) = p;
    let step = |what: usize, f: &dyn Fn()| {
        let before = p.calls();
        f();
        let after = p.calls();
        for i in 0..7 {
            // tls_setup runs once per thread, before this thread's first call.
            if i == TLS {
                continue;
            }
            let want = u64::from(i == what);
            assert_eq!(
                after[i] - before[i],
                want,
                "{lib}: calling method {what} moved counter {i} (vtable slots shifted?)"
            );
        }
    };
    let k = 7u64.to_be_bytes();
    step(INSERT, &|| assert!(t.insert(&k, b"value-07").unwrap()));
    step(INSERT, &|| assert!(!t.insert(&k, b"value-xx").unwrap()));
    step(FIND, &|| {
        assert_eq!(t.get(&k).unwrap().as_deref(), Some(&b"value-07"[..]))
    });
    step(UPDATE, &|| assert!(t.update(&k, b"value-08").unwrap()));
    step(FIND, &|| {
        assert_eq!(t.get(&k).unwrap().as_deref(), Some(&b"value-08"[..]))
    });
    step(UPDATE, &|| {
        assert!(!t.update(&9u64.to_be_bytes(), b"nothing!").unwrap())
    });
    for i in [3u64, 300, 1 << 40] {
        t.insert(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
    }
    step(SCAN, &|| {
        let mut keys = Vec::new();
        let n = t
            .scan(&4u64.to_be_bytes(), 10, &mut |k, _| {
                keys.push(u64::from_be_bytes(k.try_into().unwrap()))
            })
            .unwrap();
        assert_eq!(n, 3);
        // Ascending in the harness's byte order whatever order the wrapper uses.
        assert_eq!(keys, vec![7, 300, 1 << 40]);
    });
    step(REMOVE, &|| assert!(t.remove(&k).unwrap()));
    step(REMOVE, &|| assert!(!t.remove(&k).unwrap()));
    step(FIND, &|| assert!(t.get(&k).unwrap().is_none()));
    // The options reached create_tree intact.
    // SAFETY: plain reads of the probe's globals.
    unsafe {
        assert_eq!(*p.key_size, 8);
        assert_eq!(*p.num_threads, 3);
        assert_eq!(*p.pool_size, 12345);
        let path = std::ffi::CStr::from_ptr(p.pool_path).to_str().unwrap();
        assert_eq!(path, "/dev/shm/fph-probe-pool");
    }
    let bulk = {
        let before = p.calls();
        let mut recs = Vec::new();
        for i in 1000u64..1010 {
            let mut key = i.to_be_bytes();
            if t.key_order() == KeyOrder::NativeU64 {
                key.reverse();
            }
            recs.extend_from_slice(&key);
            recs.extend_from_slice(&i.to_le_bytes());
        }
        let ok = t.bulk_load(&recs, 10).unwrap();
        (ok, p.calls()[BULK] - before[BULK])
    };
    match layout {
        Layout::Ep2 => assert_eq!(bulk, (false, 0), "ep2 has no bulk_load slot"),
        Layout::Optiql => {
            assert_eq!(bulk, (true, 1));
            assert_eq!(
                t.get(&1005u64.to_be_bytes()).unwrap().unwrap(),
                1005u64.to_le_bytes()
            );
        }
    }
    // tls_setup: once per thread per tree under optiql, never under ep2.
    let before = p.calls()[TLS];
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                t.get(&k).unwrap();
                t.get(&k).unwrap();
            });
        }
    });
    let tls = p.calls()[TLS] - before;
    assert_eq!(tls, if layout == Layout::Optiql { 3 } else { 0 });
    let d = p.calls()[DTOR];
    drop(t);
    assert_eq!(p.calls()[DTOR], d + 1, "the destructor ran once");
}

fn probe_after_open(lib: &str, layout: Layout) -> (PiBenchTree, Probe) {
    let t = PiBenchTree::open(Path::new(lib), None, &opts(8, 8), "probe").unwrap();
    assert_eq!(t.layout(), layout, "{lib}");
    assert_eq!(t.vtable_slots(), Some(layout.slots()));
    assert!(
        t.vtable_symbol().starts_with("_ZTV"),
        "{}",
        t.vtable_symbol()
    );
    let p = probe(lib);
    (t, p)
}

#[test]
fn the_ep2_layout_reaches_every_method() {
    eprintln!("ep2 probe built against {}", env!("FPH_EP2_HEADER"));
    exercise(env!("FPH_PROBE_EP2"), Layout::Ep2);
}

#[test]
fn the_optiql_layout_reaches_every_method() {
    eprintln!("optiql probe built against {}", env!("FPH_OPTIQL_HEADER"));
    exercise(env!("FPH_PROBE_OPTIQL"), Layout::Optiql);
}

#[test]
fn the_layouts_have_the_published_slot_counts() {
    assert_eq!(Layout::Ep2.slots(), 7);
    assert_eq!(Layout::Optiql.slots(), 9);
}

fn open_err(lib: &str, layout: Option<Layout>) -> String {
    match PiBenchTree::open(Path::new(lib), layout, &opts(8, 8), "probe") {
        Ok(_) => panic!("{lib} opened as {layout:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_layout_the_object_does_not_have_is_refused_before_any_call() {
    for (lib, wrong) in [
        (env!("FPH_PROBE_EP2"), Layout::Optiql),
        (env!("FPH_PROBE_OPTIQL"), Layout::Ep2),
    ] {
        let e = open_err(lib, Some(wrong));
        assert!(e.contains("VTABLE MISMATCH"), "{e}");
        let c = probe(lib).calls();
        // Only create_tree and the destructor ran (earlier tests may have
        // called more, in parallel: compare the refusal's own effect).
        let again = open_err(lib, Some(wrong));
        let d = probe(lib).calls();
        assert_eq!(&d[..7], &c[..7], "{again}: a method was called");
        assert_eq!(d[DTOR], c[DTOR] + 1, "the refused object is destroyed");
    }
}

#[test]
fn a_vtable_of_another_length_is_refused() {
    for lib in [env!("FPH_PROBE_EP2_EXTRA"), env!("FPH_PROBE_OPTIQL_EXTRA")] {
        let e = open_err(lib, None);
        assert!(e.contains("VTABLE MISMATCH"), "{e}");
        assert!(e.contains("8 slots") || e.contains("10 slots"), "{e}");
        // A layout named explicitly does not override the vtable's length.
        assert!(open_err(lib, Some(Layout::Ep2)).contains("VTABLE MISMATCH"));
        assert!(open_err(lib, Some(Layout::Optiql)).contains("VTABLE MISMATCH"));
    }
}

#[test]
fn a_hidden_vtable_needs_the_layout_named() {
    for (lib, layout) in [
        (env!("FPH_PROBE_EP2_HIDDEN"), Layout::Ep2),
        (env!("FPH_PROBE_OPTIQL_HIDDEN"), Layout::Optiql),
    ] {
        let e = open_err(lib, None);
        assert!(e.contains("VTABLE UNKNOWN"), "{e}");
        let t = PiBenchTree::open(Path::new(lib), Some(layout), &opts(8, 8), "probe").unwrap();
        assert_eq!(t.vtable_slots(), None);
        assert!(t.insert(&1u64.to_be_bytes(), b"12345678").unwrap());
        assert_eq!(
            t.get(&1u64.to_be_bytes()).unwrap().as_deref(),
            Some(&b"12345678"[..])
        );
    }
}

#[test]
fn missing_libraries_and_symbols_are_errors() {
    let e = open_err("/nonexistent/libnothing.so", None);
    assert!(e.contains("dlopen"), "{e}");
    // A library without create_tree: the C library itself.
    let e = open_err("libm.so.6", None);
    assert!(e.contains("no create_tree"), "{e}");
}

#[test]
fn keys_of_the_wrong_size_are_errors_not_calls() {
    let t = PiBenchTree::open(
        Path::new(env!("FPH_PROBE_EP2")),
        None,
        &opts(16, 8),
        "probe16",
    )
    .unwrap();
    assert_eq!(
        t.key_order(),
        KeyOrder::Bytes,
        "only 8-byte keys are integers"
    );
    assert!(t.insert(b"0123456789abcdef", b"vvvvvvvv").unwrap());
    assert!(t.get(b"short").is_err());
    assert!(t.cursor().is_err());
}

#[test]
fn specs_and_short_names() {
    assert_eq!(
        parse_spec("pibench:/x/libfptree_pmem.so"),
        Some((None, "/x/libfptree_pmem.so".into()))
    );
    assert_eq!(
        parse_spec("pibench-ep2:a.so").map(|s| s.0),
        Some(Some(Layout::Ep2))
    );
    assert_eq!(
        parse_spec("pibench-optiql:a.so").map(|s| s.0),
        Some(Some(Layout::Optiql))
    );
    assert_eq!(parse_spec("pibench:"), None);
    assert_eq!(parse_spec("ferrite"), None);
    assert_eq!(short_name(Path::new("/w/libfptree_pmem.so")), "fptree_pmem");
    assert_eq!(
        short_name(Path::new("libdptree_pibench_wrapper.so")),
        "dptree"
    );
    assert_eq!(short_name(Path::new("liblbtree_wrapper.so")), "lbtree");
}

/// Keys on both sides of 2^63 (big-endian, the harness's order), inserted
/// into `t`; the keys a scan from the first returns, in the harness's order.
fn scan_across_the_sign_bit(t: &PiBenchTree) -> Vec<u64> {
    let keys: Vec<u64> = (0..4u64)
        .flat_map(|i| [(1 << 63) - 4 + i, (1 << 63) + i])
        .collect();
    for k in &keys {
        assert!(t.insert(&k.to_be_bytes(), &k.to_le_bytes()).unwrap());
    }
    for k in &keys {
        assert_eq!(t.get(&k.to_be_bytes()).unwrap().unwrap(), k.to_le_bytes());
    }
    let mut got = Vec::new();
    let start = ((1u64 << 63) - 4).to_be_bytes();
    t.scan(&start, 8, &mut |k, v| {
        let k = u64::from_be_bytes(k.try_into().unwrap());
        assert_eq!(v, k.to_le_bytes(), "the record's own value");
        got.push(k);
    })
    .unwrap();
    got
}

#[test]
fn signed_integer_keys_scan_across_the_sign_bit_with_keys_i64() {
    let lib = Path::new(env!("FPH_PROBE_EP2_SIGNED"));
    let want: Vec<u64> = ((1u64 << 63) - 4..(1 << 63) + 4).collect();
    // As unsigned native integers (the ep2 default), a wrapper comparing
    // int64_t puts keys >= 2^63 first: the scan from 2^63 - 4 stops at 2^63 - 1.
    let t = PiBenchTree::open(lib, None, &opts(8, 8), "signed-u64").unwrap();
    assert_eq!(t.key_order(), KeyOrder::NativeU64);
    assert_eq!(scan_across_the_sign_bit(&t), want[..4].to_vec());
    drop(t);
    // With the sign bit flipped, its signed order is the harness's order.
    let mut t = PiBenchTree::open(lib, None, &opts(8, 8), "signed-i64").unwrap();
    t.set_key_order(KeyOrder::NativeI64);
    assert_eq!(scan_across_the_sign_bit(&t), want);
}
