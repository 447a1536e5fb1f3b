//! Test plugin for the host's loader: backend id `"OldVersion"`, built against Backend API
//! 0.7 (an older major version). `BackendFactory` returns null.
//!
//! Failure mode: an incompatible Backend API version (a plugin built against `M.m` loads iff
//! `M == host major && m <= host minor`). The host must reject the library with reason
//! `incompatible_version`, naming both versions, and must not call `BackendFactory`.

bp_test_raw_exports::get_backend_id!(c"OldVersion".as_ptr());
bp_test_raw_exports::get_version!(0, 7);
bp_test_raw_exports::null_backend_factory!();
