//! Test plugin for the host's loader: the three Backend API functions are exported only under
//! C++-mangled names (`_Z12GetBackendIdv`, `_Z10GetVersionPjS_`, `_Z14BackendFactoryv`), as a C++
//! plugin that forgot `extern "C"` would.
//!
//! Failure mode: the required symbols are missing. The host must reject the library with reason
//! `missing_symbol` (naming `GetBackendId`, the first one looked up) and register nothing.

use std::ffi::{c_char, c_void};

/// The backend id (`"Mangled"`), exported only as the C++-mangled `GetBackendId()`.
#[unsafe(export_name = "_Z12GetBackendIdv")]
pub extern "C" fn get_backend_id() -> *const c_char {
    c"Mangled".as_ptr()
}

/// The current Backend API version, exported only as the C++-mangled
/// `GetVersion(unsigned*, unsigned*)`.
///
/// # Safety
/// `major` and `minor` are each null or valid for writing one `u32`.
#[unsafe(export_name = "_Z10GetVersionPjS_")]
pub unsafe extern "C" fn get_version(major: *mut u32, minor: *mut u32) {
    // SAFETY: the caller's contract is `__export_version`'s.
    unsafe { backplane_api::ffi::__export_version(major, minor) }
}

/// Always null, exported only as the C++-mangled `BackendFactory()`.
#[unsafe(export_name = "_Z14BackendFactoryv")]
pub extern "C" fn backend_factory() -> *mut c_void {
    std::ptr::null_mut()
}
