//! Test plugin `ErrorCreateBackendContext`: returns an error in `CreateBackendContext` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorCreateBackendContext", Error, CreateBackendContext);
