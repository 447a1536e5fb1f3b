//! Test plugin for the host's loader: `GetBackendId` returns `"Unknown"`, the reserved id. The
//! version is the current Backend API's and `BackendFactory` returns null.
//!
//! Failure mode: an invalid backend id. The host must reject the library with reason `invalid_id`
//! and register nothing (and must not call `BackendFactory`).

use std::ffi::{c_char, c_void};

/// Backend API symbol: the (invalid) backend id.
#[unsafe(no_mangle)]
pub extern "C" fn GetBackendId() -> *const c_char {
    c"Unknown".as_ptr()
}

/// Backend API symbol: the current Backend API version (`backplane_api::API_MAJOR`.`API_MINOR`).
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

/// Backend API symbol: always null (this plugin has no backend object; the host must reject it
/// before calling this).
#[unsafe(no_mangle)]
pub extern "C" fn BackendFactory() -> *mut c_void {
    std::ptr::null_mut()
}
