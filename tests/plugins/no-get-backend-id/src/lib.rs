//! Test plugin for the host's loader: it does not export `GetBackendId` (only `GetVersion` and
//! `BackendFactory`).
//!
//! Failure mode: a required symbol is missing. The host must reject the library with reason
//! `missing_symbol`, naming `GetBackendId`, and register nothing.

bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR);
bp_test_raw_exports::null_backend_factory!();
