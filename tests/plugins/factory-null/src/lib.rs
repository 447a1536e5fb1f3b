//! Test plugin for the host's loader: backend id `"NullFactory"`, the current Backend API version,
//! and a `BackendFactory` that returns null. It does not export `BackplaneTakeFactoryError`, so
//! the host gets no reason.
//!
//! Failure mode: the factory fails. The host must report reason `factory_failed` (with a message
//! saying no reason was given) and register nothing.

use std::ffi::{c_char, c_void};

/// Backend API symbol: the backend id, NUL-terminated, static.
#[unsafe(no_mangle)]
pub extern "C" fn GetBackendId() -> *const c_char {
    c"NullFactory".as_ptr()
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

/// Backend API symbol: always null, the failure under test.
#[unsafe(no_mangle)]
pub extern "C" fn BackendFactory() -> *mut c_void {
    std::ptr::null_mut()
}
