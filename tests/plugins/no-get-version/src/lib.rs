//! Test plugin for the host's loader: it does not export `GetVersion` (only `GetBackendId` ->
//! `"NoVersion"` and `BackendFactory`).
//!
//! Failure mode: a required symbol is missing. The host must reject the library with reason
//! `missing_symbol`, naming `GetVersion`, and register nothing.

bp_test_raw_exports::get_backend_id!(c"NoVersion".as_ptr());
bp_test_raw_exports::null_backend_factory!();
