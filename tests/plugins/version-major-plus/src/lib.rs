//! Test plugin for the host's loader: backend id `"MajorPlus"`, built against Backend API
//! `API_MAJOR + 1`.0 (the next major version). `BackendFactory` returns null.
//!
//! Failure mode: an incompatible Backend API version (a plugin built against `M.m` loads iff
//! `M == host major && m <= host minor`). The host must reject the library with reason
//! `incompatible_version`, naming both versions, and must not call `BackendFactory`.

bp_test_raw_exports::get_backend_id!(c"MajorPlus".as_ptr());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR + 1, 0);
bp_test_raw_exports::null_backend_factory!();
