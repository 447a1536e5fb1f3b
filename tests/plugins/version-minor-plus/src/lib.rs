//! Test plugin for the host's loader: backend id `"MinorPlus"`, built against Backend API
//! `API_MAJOR`.`API_MINOR + 1` (one minor version newer than the host). `BackendFactory` returns
//! null.
//!
//! Failure mode: an incompatible Backend API version (a plugin built against `M.m` loads iff `M ==
//! host major && m <= host minor`). The host must reject the library with reason
//! `incompatible_version`, naming both versions, and must not call `BackendFactory`.

use std::ffi::{c_char, c_void};

/// Backend API symbol: the backend id, NUL-terminated, static.
#[unsafe(no_mangle)]
pub extern "C" fn GetBackendId() -> *const c_char {
    c"MinorPlus".as_ptr()
}

/// Backend API symbol: `API_MAJOR`.`API_MINOR + 1`, one minor newer than the host.
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
        unsafe { minor.write(backplane_api::API_MINOR + 1) }
    }
}

/// Backend API symbol: always null (this plugin has no backend object; the host must reject it
/// before calling this).
#[unsafe(no_mangle)]
pub extern "C" fn BackendFactory() -> *mut c_void {
    std::ptr::null_mut()
}
