//! Raw Backend API exports for the deliberately broken test plugins.
//!
//! The broken plugins cannot use `backplane_api::export_backend!`: it refuses bad ids at
//! compile time and always exports all three symbols. Each of them states here only what is
//! broken (a missing symbol, a bad id, a wrong version, a null factory); these macros write
//! the rest. They expand in the calling crate, so the symbols belong to that plugin.

/// Writes a version through `GetVersion`'s out-pointers, skipping null ones.
///
/// # Safety
/// `major` and `minor` are each null or valid for writing one `u32`.
pub unsafe fn write_version(major: *mut u32, minor: *mut u32, value: (u32, u32)) {
    if !major.is_null() {
        // SAFETY: not null, and valid for a write by this function's contract.
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
        ///
        /// # Safety
        /// `major` and `minor` are each null or valid for writing one `u32`.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn GetVersion(major: *mut u32, minor: *mut u32) {
            // SAFETY: the caller's contract is `write_version`'s.
            unsafe { $crate::write_version(major, minor, ($major, $minor)) }
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
