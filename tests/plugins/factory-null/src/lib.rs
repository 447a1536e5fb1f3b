//! Test plugin for the host's loader: backend id `"NullFactory"`, the current Backend API version,
//! and a `BackendFactory` that returns null. It does not export `BackplaneTakeFactoryError`, so
//! the host gets no reason.
//!
//! Failure mode: the factory fails. The host must report reason `factory_failed` (with a message
//! saying no reason was given) and register nothing.

bp_test_raw_exports::get_backend_id!(c"NullFactory".as_ptr());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR);
bp_test_raw_exports::null_backend_factory!();
