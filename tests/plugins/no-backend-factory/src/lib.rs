//! Test plugin for the host's loader: it does not export `BackendFactory` (only `GetBackendId` ->
//! `"NoFactory"` and `GetVersion`).
//!
//! Failure mode: a required symbol is missing. The host must reject the library with reason
//! `missing_symbol`, naming `BackendFactory`, and register nothing.

bp_test_raw_exports::get_backend_id!(c"NoFactory".as_ptr());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR);
