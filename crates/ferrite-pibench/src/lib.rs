//! The PiBench adapter: `libferrite_pibench.so` exports `create_tree`, the
//! entry point PiBench looks up with `dlsym`. It forwards to a C++ shim
//! (`shim/ferrite_wrapper.cpp`) that implements PiBench's `tree_api` class
//! over Ferrite's C API (`ferrite-c`, `include/ferrite.h`): the adapter has no
//! glue of its own, only the C++ class PiBench's virtual calls need.
//!
//! `$FERRITE_PIBENCH_INDEX` picks the map: `ferrite` (default; the durable map
//! of a pool) or `ferrite-dram` (the same map in DRAM). See the shim.

use std::ffi::c_void;

// The shim calls the C API; linking the crate brings its symbols in.
pub use ferrite_c;

extern "C" {
    /// The C++ shim's constructor of the `tree_api` object.
    fn ferrite_pibench_create_tree(opt: *const c_void) -> *mut c_void;
    /// The C++ shim's count of `tls_setup` calls on a tree (-1: not ours).
    fn ferrite_pibench_tree_tls_setups(tree: *const c_void) -> i64;
}

/// PiBench's entry point: `extern "C" tree_api* create_tree(const
/// tree_options_t&)`. A C++ reference is passed as a pointer, so this forwards
/// it to the shim unchanged; null when the index cannot be opened (the shim
/// says why on stderr).
///
/// # Safety
/// `opt` must point to a PiBench `tree_options_t`.
#[no_mangle]
pub unsafe extern "C" fn create_tree(opt: *const c_void) -> *mut c_void {
    if opt.is_null() {
        eprintln!("ferrite: create_tree: null options");
        return std::ptr::null_mut();
    }
    // SAFETY: opt points to a tree_options_t (the caller's contract); the shim
    // catches every C++ exception.
    unsafe { ferrite_pibench_create_tree(opt) }
}

/// How many times PiBench's `tls_setup` (the last `tree_api` vtable slot) ran
/// on `tree`, an object returned by [`create_tree`]; -1 for null or for an
/// object of another library. The adapter's `tls_setup` does nothing else (see
/// `shim/ferrite_wrapper.cpp`); the dlopen test uses this to prove that the
/// driver's call through that slot reaches the adapter.
///
/// # Safety
/// `tree` must be null or point to a live object derived from PiBench's
/// `tree_api` (one [`create_tree`] returned and not yet deleted).
#[no_mangle]
pub unsafe extern "C" fn ferrite_pibench_tls_setups(tree: *const c_void) -> i64 {
    if tree.is_null() {
        return -1;
    }
    // SAFETY: tree points to a live tree_api object (the caller's contract); the
    // shim only reads it through a dynamic_cast, which yields null (reported as
    // -1) for a tree_api of another library, and throws nothing.
    unsafe { ferrite_pibench_tree_tls_setups(tree) }
}
