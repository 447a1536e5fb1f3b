//! Test plugin for the host's loader: `GetBackendId` returns bytes that are not UTF-8
//! (`b"Bad\xff\xfeId\0"`). The version is the current Backend API's and `BackendFactory` returns
//! null.
//!
//! Failure mode: an invalid backend id. The host must reject the library with reason `invalid_id`
//! and register nothing (and must not call `BackendFactory`).

bp_test_raw_exports::get_backend_id!(c"Bad\xff\xfeId".as_ptr());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR);
bp_test_raw_exports::null_backend_factory!();
