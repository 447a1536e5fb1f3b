//! Raw Backend API exports for the deliberately broken test plugins.
//!
//! The broken plugins cannot use `backplane_api::export_backend!`: it refuses bad ids at
//! compile time and always exports all three symbols. Each of them states here only what is
//! broken (a missing symbol, a bad id, a wrong version, a null factory); these macros write
//! the rest. They expand in the calling crate, so the symbols belong to that plugin.

/// Writes a version through `GetVersion`'s out-pointers, skipping null ones.
#[allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "body of a C entry point: GetVersion's contract is null or valid pointers"
)]
pub fn write_version(major: *mut u32, minor: *mut u32, value: (u32, u32)) {
    if !major.is_null() {
        // SAFETY: `GetVersion`'s contract: the caller passes null or a valid, aligned `u32`.
        unsafe { major.write(value.0) }
    }
    if !minor.is_null() {
        // SAFETY: as above.
        unsafe { minor.write(value.1) }
    }
}

/// Exports `GetBackendId` returning `$id` (an expression of type `*const c_char`).
#[macro_export]
macro_rules! get_backend_id {
    ($id:expr) => {
        /// Backend API symbol: the backend id (deliberately what this test plugin needs).
        #[unsafe(no_mangle)]
        pub extern "C" fn GetBackendId() -> *const ::std::ffi::c_char {
            $id
        }
    };
}

/// Exports `GetVersion` reporting `($major, $minor)`.
#[macro_export]
macro_rules! get_version {
    ($major:expr, $minor:expr) => {
        /// Backend API symbol: the Backend API version this test plugin claims.
        #[allow(
            clippy::not_unsafe_ptr_arg_deref,
            reason = "C entry point: the pointers are only forwarded to a null-checking writer"
        )]
        #[unsafe(no_mangle)]
        pub extern "C" fn GetVersion(major: *mut u32, minor: *mut u32) {
            $crate::write_version(major, minor, ($major, $minor))
        }
    };
}

/// Exports a `BackendFactory` that returns null after evaluating `$before` (default: nothing).
#[macro_export]
macro_rules! null_backend_factory {
    () => {
        $crate::null_backend_factory!({});
    };
    ($before:block) => {
        /// Backend API symbol: always null (these test plugins never get that far, or fail here).
        #[unsafe(no_mangle)]
        pub extern "C" fn BackendFactory() -> *mut ::std::ffi::c_void {
            $before;
            ::std::ptr::null_mut()
        }
    };
}
