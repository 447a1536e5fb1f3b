//! Test plugin for the host's loader: it does not export `GetVersion` (only `GetBackendId` ->
//! `"NoVersion"` and `BackendFactory`).
//!
//! Failure mode: a required symbol is missing. The host must reject the library with reason
//! `missing_symbol`, naming `GetVersion`, and register nothing.

use std::ffi::{c_char, c_void};

/// Backend API symbol: the backend id, NUL-terminated, static.
#[unsafe(no_mangle)]
pub extern "C" fn GetBackendId() -> *const c_char {
    c"NoVersion".as_ptr()
}

/// Backend API symbol: always null (this plugin has no backend object; the host must reject it
/// before calling this).
#[unsafe(no_mangle)]
pub extern "C" fn BackendFactory() -> *mut c_void {
    std::ptr::null_mut()
}
