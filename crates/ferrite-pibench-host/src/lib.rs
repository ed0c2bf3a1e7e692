//! Loads a PiBench wrapper library (`create_tree` and its `tree_api` object)
//! and serves it as an [`OrderedKv`], so Ferrite's benchmark harness can drive
//! the published PM indexes' wrappers beside its own indexes.
//!
//! PiBench's plug-in interface is a C++ class; the calls go through a small
//! C++ shim (`shim/host.cpp`) that declares both published layouts of it
//! (`include/pibench_layouts.hpp`):
//!
//! * [`Layout::Ep2`]: PiBench master, which the VLDB'22 artifact's wrappers
//!   (FPTree, LB+-Tree, DPTree, ROART, PACTree, uTree) are built against:
//!   `find, insert, update, remove, scan`.
//! * [`Layout::Optiql`]: the optiql commit scripts/pibench pins: `bulk_load`
//!   before those and `tls_setup` after, and `tree_options_t::data`.
//!
//! [`PiBenchTree::open`] reads the layout from the size of the object's vtable
//! symbol and refuses a vtable of any other length ("VTABLE MISMATCH"), or a
//! named layout the object does not have, before anything is called.
//!
//! Keys: with [`KeyOrder::NativeU64`] (the default for 8-byte keys under the
//! ep2 layout, whose PiBench passes keys as native little-endian integers and
//! whose wrappers compare them as `uint64_t`), 8-byte keys are byte-reversed
//! on the way in and out, so the wrapper's integer order is the harness's byte
//! order. Otherwise keys pass unchanged ([`KeyOrder::Bytes`]; the optiql
//! PiBench passes big-endian keys). [`KeyOrder::NativeI64`] also flips the
//! sign bit, for a wrapper that compares keys as signed integers.

use std::cell::{Cell, RefCell};
use std::ffi::{c_char, c_int, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use ferrite_kv::{BatchOp, KvCursor, KvError, KvResult, OrderedKv, WriteBatch};

mod ffi {
    use std::ffi::{c_char, c_int, c_long};

    #[repr(C)]
    pub struct FphTree {
        _private: [u8; 0],
    }

    extern "C" {
        pub fn fph_last_error() -> *const c_char;
        pub fn fph_layout_slots(layout: c_int) -> c_long;
        pub fn fph_open(
            lib: *const c_char,
            layout: c_int,
            key_size: usize,
            value_size: usize,
            pool_path: *const c_char,
            pool_size: usize,
            num_threads: usize,
        ) -> *mut FphTree;
        pub fn fph_layout(t: *const FphTree) -> c_int;
        pub fn fph_vtable_slots(t: *const FphTree) -> c_long;
        pub fn fph_vtable_symbol(t: *const FphTree) -> *const c_char;
        pub fn fph_close(t: *mut FphTree) -> c_int;
        pub fn fph_find(
            t: *mut FphTree,
            key: *const c_char,
            klen: usize,
            out: *mut c_char,
        ) -> c_int;
        pub fn fph_insert(
            t: *mut FphTree,
            key: *const c_char,
            klen: usize,
            v: *const c_char,
            vlen: usize,
        ) -> c_int;
        pub fn fph_update(
            t: *mut FphTree,
            key: *const c_char,
            klen: usize,
            v: *const c_char,
            vlen: usize,
        ) -> c_int;
        pub fn fph_remove(t: *mut FphTree, key: *const c_char, klen: usize) -> c_int;
        pub fn fph_scan(
            t: *mut FphTree,
            key: *const c_char,
            klen: usize,
            n: c_int,
            out: *mut *mut c_char,
        ) -> c_int;
        pub fn fph_bulk_load(
            t: *mut FphTree,
            records: *const c_char,
            count: usize,
            klen: usize,
            vlen: usize,
        ) -> c_int;
        pub fn fph_tls_setup(t: *mut FphTree) -> c_int;
        pub fn fph_pmdk_counters(out: *mut u64);
        pub fn fph_own_flushes(t: *const FphTree) -> i64;
    }
}

/// Errors of loading a wrapper.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// dlopen, dlsym or create_tree failed, or the vtable does not match
    /// (the message starts with "VTABLE MISMATCH" or "VTABLE UNKNOWN").
    #[error("{lib}: {msg}")]
    Load { lib: String, msg: String },
    #[error("invalid argument: {0}")]
    Invalid(String),
}

/// Which published layout of PiBench's interface a wrapper was built against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// PiBench master / the VLDB'22 artifact: 7 vtable slots.
    Ep2,
    /// PiBench optiql 11c74d69: 9 slots (`bulk_load`, `tls_setup`).
    Optiql,
}

impl Layout {
    fn code(self) -> c_int {
        match self {
            Layout::Ep2 => 1,
            Layout::Optiql => 2,
        }
    }
    fn from_code(c: c_int) -> Option<Layout> {
        match c {
            1 => Some(Layout::Ep2),
            2 => Some(Layout::Optiql),
            _ => None,
        }
    }
    /// Vtable slots (both destructors included) of this layout, as the shim
    /// declares it.
    pub fn slots(self) -> i64 {
        // SAFETY: a pure function of its argument.
        unsafe { ffi::fph_layout_slots(self.code()) as _ }
    }
    pub fn name(self) -> &'static str {
        match self {
            Layout::Ep2 => "ep2",
            Layout::Optiql => "optiql",
        }
    }
}

/// How keys are handed to the wrapper (see the crate documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrder {
    /// Unchanged bytes.
    Bytes,
    /// 8-byte keys byte-reversed (big-endian in the harness, native integers
    /// in the wrapper).
    NativeU64,
    /// 8-byte keys byte-reversed with the sign bit flipped: native integers
    /// for a wrapper that compares them as signed `int64_t` (LB+-Tree's
    /// `key_type` is `long long`), so its signed order is the harness's
    /// unsigned byte order and a scan does not stop at 2^63.
    NativeI64,
}

impl KeyOrder {
    /// Whether 8-byte keys are handed over as native integers.
    fn native(self) -> bool {
        matches!(self, KeyOrder::NativeU64 | KeyOrder::NativeI64)
    }

    /// The 8-byte key `key` (big-endian, the harness's order) as the
    /// wrapper sees it (`to_wrapper`), or a wrapper's key back.
    #[inline]
    fn convert(self, key: &[u8], out: &mut [u8; 8], to_wrapper: bool) {
        for i in 0..8 {
            out[i] = key[7 - i];
        }
        if self == KeyOrder::NativeI64 {
            // The most significant byte: last in native order, first in ours.
            out[if to_wrapper { 7 } else { 0 }] ^= 0x80;
        }
    }
}

/// What `create_tree` gets.
#[derive(Debug, Clone)]
pub struct TreeOptions {
    pub key_size: usize,
    pub value_size: usize,
    pub pool_path: PathBuf,
    pub pool_size: u64,
    pub num_threads: usize,
}

fn last_error() -> String {
    // SAFETY: the shim returns a pointer to this thread's NUL-terminated
    // error string, valid until the next shim call on this thread.
    unsafe { CStr::from_ptr(ffi::fph_last_error()) }
        .to_string_lossy()
        .into_owned()
}

static NEXT_TREE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The tree this thread last ran `tls_setup` for.
    static SET_UP: Cell<u64> = const { Cell::new(0) };
    static VALUE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static KEY_BUF: RefCell<[u8; 8]> = const { RefCell::new([0; 8]) };
}

/// A PiBench tree created by a wrapper library, callable from any thread.
pub struct PiBenchTree {
    t: *mut ffi::FphTree,
    id: u64,
    layout: Layout,
    vtable_slots: Option<i64>,
    vtable_symbol: String,
    lib: PathBuf,
    opts: TreeOptions,
    order: KeyOrder,
    name: String,
    count: AtomicI64,
    tls_calls: AtomicU64,
}

// SAFETY: the wrapper object is thread-safe by PiBench's contract (PiBench
// calls it from every worker thread at once); the handle is only freed in Drop.
unsafe impl Send for PiBenchTree {}
// SAFETY: as above.
unsafe impl Sync for PiBenchTree {}

impl PiBenchTree {
    /// Loads `lib`, creates its tree with `opts` and checks its vtable against
    /// `layout` (None: the layout the vtable's length says).
    pub fn open(
        lib: &Path,
        layout: Option<Layout>,
        opts: &TreeOptions,
        name: &str,
    ) -> Result<PiBenchTree, HostError> {
        let c_lib = CString::new(lib.as_os_str().as_encoded_bytes())
            .map_err(|_| HostError::Invalid("library path contains NUL".into()))?;
        let c_pool = CString::new(opts.pool_path.as_os_str().as_encoded_bytes())
            .map_err(|_| HostError::Invalid("pool path contains NUL".into()))?;
        if opts.key_size == 0 {
            return Err(HostError::Invalid("key size 0".into()));
        }
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let t = unsafe {
            ffi::fph_open(
                c_lib.as_ptr(),
                layout.map_or(0, Layout::code),
                opts.key_size,
                opts.value_size,
                c_pool.as_ptr(),
                opts.pool_size as usize,
                opts.num_threads.max(1),
            )
        };
        if t.is_null() {
            return Err(HostError::Load {
                lib: lib.display().to_string(),
                msg: last_error(),
            });
        }
        // SAFETY: t is a live handle from fph_open.
        let (code, slots, sym) = unsafe {
            (
                ffi::fph_layout(t),
                ffi::fph_vtable_slots(t),
                CStr::from_ptr(ffi::fph_vtable_symbol(t))
                    .to_string_lossy()
                    .into_owned(),
            )
        };
        let layout = Layout::from_code(code).expect("the shim returns a known layout");
        let order = if layout == Layout::Ep2 && opts.key_size == 8 {
            KeyOrder::NativeU64
        } else {
            KeyOrder::Bytes
        };
        Ok(PiBenchTree {
            t,
            id: NEXT_TREE_ID.fetch_add(1, Ordering::Relaxed),
            layout,
            vtable_slots: (slots >= 0).then_some(slots as _),
            vtable_symbol: sym,
            lib: lib.to_path_buf(),
            opts: opts.clone(),
            order,
            name: name.to_string(),
            count: AtomicI64::new(0),
            tls_calls: AtomicU64::new(0),
        })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }
    /// Slots of the object's vtable as its symbol says (None: no symbol, the
    /// layout was named by the caller).
    pub fn vtable_slots(&self) -> Option<i64> {
        self.vtable_slots
    }
    /// The vtable symbol (`_ZTV13fptree_wrapper`, …), empty when unknown.
    pub fn vtable_symbol(&self) -> &str {
        &self.vtable_symbol
    }
    pub fn library(&self) -> &Path {
        &self.lib
    }
    pub fn options(&self) -> &TreeOptions {
        &self.opts
    }
    pub fn key_order(&self) -> KeyOrder {
        self.order
    }
    /// Overrides the key order chosen from the layout.
    pub fn set_key_order(&mut self, o: KeyOrder) {
        self.order = o;
    }
    /// `tls_setup` calls made (optiql layout only).
    pub fn tls_setup_calls(&self) -> u64 {
        self.tls_calls.load(Ordering::Relaxed)
    }

    /// Calls `tls_setup` on this thread (optiql layout; nothing under ep2).
    /// The harness's workers are new threads in every phase, so the first
    /// call of each thread is PiBench's "start of a phase".
    pub fn tls_setup(&self) -> KvResult<()> {
        SET_UP.with(|s| s.set(self.id));
        if self.layout == Layout::Optiql {
            // SAFETY: live handle.
            let rc = unsafe { ffi::fph_tls_setup(self.t) };
            if rc < 0 {
                return Err(KvError::Backend(last_error()));
            }
            self.tls_calls.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    #[inline]
    fn enter(&self) -> KvResult<()> {
        if SET_UP.with(|s| s.get()) != self.id {
            self.tls_setup()?;
        }
        Ok(())
    }

    fn check_key(&self, key: &[u8]) -> KvResult<()> {
        if key.len() != self.opts.key_size {
            return Err(KvError::Backend(format!(
                "{}: keys are {} bytes (create_tree's key_size), got {}",
                self.name,
                self.opts.key_size,
                key.len()
            )));
        }
        Ok(())
    }

    /// Runs `f` with the key as the wrapper sees it.
    #[inline]
    fn with_key<R>(&self, key: &[u8], f: impl FnOnce(*const c_char) -> R) -> R {
        if self.order.native() && key.len() == 8 {
            KEY_BUF.with(|b| {
                let mut b = b.borrow_mut();
                self.order.convert(key, &mut b, true);
                f(b.as_ptr() as *const c_char)
            })
        } else {
            f(key.as_ptr() as *const c_char)
        }
    }

    fn rc(&self, rc: c_int) -> KvResult<bool> {
        if rc < 0 {
            Err(KvError::Backend(format!("{}: {}", self.name, last_error())))
        } else {
            Ok(rc > 0)
        }
    }

    /// optiql `bulk_load` of `count` contiguous `<key><value>` records (keys as
    /// the wrapper sees them). Ok(false): the wrapper has none (the default
    /// slot) or the layout is ep2.
    pub fn bulk_load(&self, records: &[u8], count: usize) -> KvResult<bool> {
        let rec = self.opts.key_size + self.opts.value_size;
        if records.len() != rec * count {
            return Err(KvError::Backend(format!(
                "bulk_load: {} bytes for {count} records of {rec}",
                records.len()
            )));
        }
        self.enter()?;
        // SAFETY: live handle; records holds count records.
        let rc = unsafe {
            ffi::fph_bulk_load(
                self.t,
                records.as_ptr() as *const c_char,
                count,
                self.opts.key_size,
                self.opts.value_size,
            )
        };
        if rc == -2 {
            return Ok(false);
        }
        let ok = self.rc(rc)?;
        if ok {
            self.count.fetch_add(count as i64, Ordering::Relaxed);
        }
        Ok(ok)
    }
}

impl Drop for PiBenchTree {
    fn drop(&mut self) {
        // SAFETY: the handle is live and dropped once.
        unsafe { ffi::fph_close(self.t) };
    }
}

impl OrderedKv for PiBenchTree {
    fn name(&self) -> &str {
        &self.name
    }

    fn limits(&self) -> (usize, usize) {
        (self.opts.key_size, self.opts.value_size)
    }

    fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> KvResult<bool> {
        self.check_key(key)?;
        self.enter()?;
        let vs = self.opts.value_size;
        VALUE_BUF.with(|b| {
            let mut b = b.borrow_mut();
            // Wrappers copy 8 bytes (or their item size) whatever value_size says.
            let need = vs.max(64) + 64;
            if b.len() < need {
                b.resize(need, 0);
            }
            let p = b.as_mut_ptr() as *mut c_char;
            // SAFETY: live handle; the key has key_size bytes, the buffer is
            // larger than any value the wrapper was told about.
            let rc = self.with_key(key, |k| unsafe { ffi::fph_find(self.t, k, key.len(), p) });
            let hit = self.rc(rc)?;
            out.clear();
            if hit {
                out.extend_from_slice(&b[..vs]);
            }
            Ok(hit)
        })
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.check_key(key)?;
        self.enter()?;
        // SAFETY: live handle, valid slices.
        let rc = self.with_key(key, |k| unsafe {
            ffi::fph_insert(
                self.t,
                k,
                key.len(),
                value.as_ptr() as *const c_char,
                value.len(),
            )
        });
        let ok = self.rc(rc)?;
        if ok {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(ok)
    }

    fn update(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        self.check_key(key)?;
        self.enter()?;
        // SAFETY: live handle, valid slices.
        let rc = self.with_key(key, |k| unsafe {
            ffi::fph_update(
                self.t,
                k,
                key.len(),
                value.as_ptr() as *const c_char,
                value.len(),
            )
        });
        self.rc(rc)
    }

    fn upsert(&self, key: &[u8], value: &[u8]) -> KvResult<bool> {
        if self.update(key, value)? {
            Ok(false)
        } else {
            self.insert(key, value)
        }
    }

    fn remove(&self, key: &[u8]) -> KvResult<bool> {
        self.check_key(key)?;
        self.enter()?;
        // SAFETY: live handle, valid key.
        let rc = self.with_key(key, |k| unsafe { ffi::fph_remove(self.t, k, key.len()) });
        let ok = self.rc(rc)?;
        if ok {
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(ok)
    }

    /// Successful inserts minus successful removes (what the wrapper said,
    /// which is not always what it holds).
    fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed).max(0) as usize
    }

    /// Calls `f` for each record the wrapper returned. A wrapper that reports
    /// records but leaves the output pointer null has `f` called for none of
    /// them (the harness counts that as a wrong scan); more records than asked
    /// for are cut to `n`.
    fn scan(&self, start: &[u8], n: usize, f: &mut dyn FnMut(&[u8], &[u8])) -> KvResult<usize> {
        self.check_key(start)?;
        self.enter()?;
        let want = n.min(c_int::MAX as usize) as c_int;
        let mut out: *mut c_char = std::ptr::null_mut();
        // SAFETY: live handle, valid key, out is a valid place for the pointer.
        let rc = self.with_key(start, |k| unsafe {
            ffi::fph_scan(self.t, k, start.len(), want, &mut out)
        });
        if rc < 0 {
            return Err(KvError::Backend(format!("{}: {}", self.name, last_error())));
        }
        let got = rc as usize;
        if out.is_null() || got == 0 {
            return Ok(got);
        }
        let (ks, vs) = (self.opts.key_size, self.opts.value_size);
        let rec = ks + vs;
        let shown = got.min(n);
        // SAFETY: the wrapper's contract: `out` points at `got` contiguous
        // records of key_size + value_size bytes, valid until this thread's
        // next call into the wrapper.
        let recs = unsafe { std::slice::from_raw_parts(out as *const u8, shown * rec) };
        let mut kb = [0u8; 8];
        for r in recs.chunks_exact(rec) {
            let (k, v) = r.split_at(ks);
            if self.order.native() && ks == 8 {
                self.order.convert(k, &mut kb, false);
                f(&kb, v);
            } else {
                f(k, v);
            }
        }
        Ok(got)
    }

    /// The operations one after another (PiBench has no batches; not atomic).
    fn write_batch(&self, batch: &WriteBatch) -> KvResult<()> {
        for op in &batch.ops {
            match op {
                BatchOp::Put { key, value } => {
                    self.upsert(key, value)?;
                }
                BatchOp::Delete { key } => {
                    self.remove(key)?;
                }
            }
        }
        Ok(())
    }

    fn cursor(&self) -> KvResult<Box<dyn KvCursor + '_>> {
        Err(KvError::Backend(format!(
            "{}: PiBench's interface has no cursor",
            self.name
        )))
    }
}

/// Cache lines flushed and drains issued through libpmem (PMDK's flushes and
/// any wrapper's `pmem_*` calls) since the process started. None when the
/// executable does not interpose libpmem (only `ferrite`'s build exports the
/// counting definitions; see shim/host.cpp) or nothing was flushed yet.
pub fn pmdk_flushes() -> Option<(u64, u64)> {
    let mut out = [0u64; 3];
    // SAFETY: out has the three slots the shim writes.
    unsafe { ffi::fph_pmdk_counters(out.as_mut_ptr()) };
    (out[2] > 0).then_some((out[0], out[1]))
}

impl PiBenchTree {
    /// Lines the library flushed with its own instructions, counted by the
    /// `ferrite_flushed_lines` counter of scripts/peers' counting builds
    /// (None for any other build).
    pub fn own_flushes(&self) -> Option<u64> {
        // SAFETY: live handle.
        let n = unsafe { ffi::fph_own_flushes(self.t) };
        (n >= 0).then_some(n as u64)
    }
}

/// `pibench:PATH`, `pibench-ep2:PATH`, `pibench-optiql:PATH`: the library
/// and the layout named (None: read from the vtable).
pub fn parse_spec(spec: &str) -> Option<(Option<Layout>, PathBuf)> {
    let (layout, path) = if let Some(p) = spec.strip_prefix("pibench-ep2:") {
        (Some(Layout::Ep2), p)
    } else if let Some(p) = spec.strip_prefix("pibench-optiql:") {
        (Some(Layout::Optiql), p)
    } else if let Some(p) = spec.strip_prefix("pibench:") {
        (None, p)
    } else {
        return None;
    };
    (!path.is_empty()).then(|| (layout, PathBuf::from(path)))
}

/// A short name for a wrapper library: `libfptree_pmem.so` -> `fptree_pmem`.
pub fn short_name(path: &Path) -> String {
    let f = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let f = f.strip_prefix("lib").unwrap_or(&f);
    let f = f.split(".so").next().unwrap_or(f);
    f.strip_suffix("_pibench_wrapper")
        .or_else(|| f.strip_suffix("_wrapper"))
        .unwrap_or(f)
        .to_string()
}

/// Paths of the probe wrappers build.rs compiles (tests/wrappers), for other
/// crates' tests of the harness: a correct wrapper per layout, and one whose
/// scans come back in descending order and which misses one lookup in seven.
#[doc(hidden)]
pub mod probes {
    pub const EP2: &str = env!("FPH_PROBE_EP2");
    pub const OPTIQL: &str = env!("FPH_PROBE_OPTIQL");
    pub const EP2_WRONG: &str = env!("FPH_PROBE_EP2_WRONG");
}
