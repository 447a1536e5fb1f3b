//! Test plugin `MissingDep`: valid symbols, but the library depends on
//! `libbp_absent_dep.so`, a shared library that `build.rs` builds into `OUT_DIR` and links
//! against without a search path or rpath, so it is missing at run time.
//!
//! Failure mode: the dynamic loader cannot open the file (`RTLD_NOW`: "libbp_absent_dep.so:
//! cannot open shared object file"). The host must report reason `open_failed` with the
//! loader's message, and must never reach the symbols. (Were the dependency found, the factory
//! would return null: `factory_failed`.)

use std::ffi::c_int;

unsafe extern "C" {
    /// Defined in `libbp_absent_dep.so` (`c/bp_absent_dep.c`); returns 42.
    fn bp_absent_dep_value() -> c_int;
}

bp_test_raw_exports::get_backend_id!(c"MissingDep".as_ptr());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR);
// Calling into the absent dependency keeps it linked; there is no backend object.
bp_test_raw_exports::null_backend_factory!({
    // SAFETY: a plain C function without arguments; the library is loaded if we run at all.
    let value = unsafe { bp_absent_dep_value() };
    debug_assert_eq!(value, 42);
});
