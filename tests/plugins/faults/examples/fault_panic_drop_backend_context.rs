//! Test plugin `PanicDropBackendContext`: panics in `DropBackendContext` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicDropBackendContext", Panic, DropBackendContext);
