//! Test plugin for the host's loader: it does not export `GetBackendId` (only `GetVersion` and
//! `BackendFactory`).
//!
//! Failure mode: a required symbol is missing. The host must reject the library with reason
//! `missing_symbol`, naming `GetBackendId`, and register nothing.

use std::ffi::c_void;

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
