//! Test plugin `MissingDep`: valid symbols, but the library depends on
//! `libbp_absent_dep.so`, a shared library that `build.rs` builds into `OUT_DIR` and links
//! against without a search path or rpath, so it is missing at run time.
//!
//! Failure mode: the dynamic loader cannot open the file (`RTLD_NOW`: "libbp_absent_dep.so:
//! cannot open shared object file"). The host must report reason `open_failed` with the
//! loader's message, and must never reach the symbols. (Were the dependency found, the factory
//! would return null: `factory_failed`.)

use std::ffi::{c_char, c_int, c_void};

unsafe extern "C" {
    /// Defined in `libbp_absent_dep.so` (`c/bp_absent_dep.c`); returns 42.
    fn bp_absent_dep_value() -> c_int;
}

/// Backend API symbol: the backend id, NUL-terminated, static.
#[unsafe(no_mangle)]
pub extern "C" fn GetBackendId() -> *const c_char {
    c"MissingDep".as_ptr()
}

/// Backend API symbol: the current Backend API version.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "C contract of GetVersion: the caller passes null or valid pointers"
)]
#[unsafe(no_mangle)]
pub extern "C" fn GetVersion(major: *mut u32, minor: *mut u32) {
    if !major.is_null() {
        // SAFETY: `GetVersion`'s contract: the caller passes null or a valid, aligned `u32`.
        unsafe { major.write(backplane_api::API_MAJOR) }
    }
    if !minor.is_null() {
        // SAFETY: as above.
        unsafe { minor.write(backplane_api::API_MINOR) }
    }
}

/// Backend API symbol: calls into the absent dependency (which keeps it linked), then returns
/// null: this plugin has no backend object.
#[unsafe(no_mangle)]
pub extern "C" fn BackendFactory() -> *mut c_void {
    // SAFETY: a plain C function without arguments; the library is loaded if we run at all.
    let value = unsafe { bp_absent_dep_value() };
    debug_assert_eq!(value, 42);
    std::ptr::null_mut()
}
