//! Test plugin for the host's loader: backend id `"MinorPlus"`, built against Backend API
//! `API_MAJOR`.`API_MINOR + 1` (one minor version newer than the host). `BackendFactory` returns
//! null.
//!
//! Failure mode: an incompatible Backend API version (a plugin built against `M.m` loads iff `M ==
//! host major && m <= host minor`). The host must reject the library with reason
//! `incompatible_version`, naming both versions, and must not call `BackendFactory`.

bp_test_raw_exports::get_backend_id!(c"MinorPlus".as_ptr());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR + 1);
bp_test_raw_exports::null_backend_factory!();
