//! Test plugin `PanicCreateBackendContext`: panics in `CreateBackendContext` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicCreateBackendContext", Panic, CreateBackendContext);
