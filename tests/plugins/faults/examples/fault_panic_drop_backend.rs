//! Test plugin `PanicDropBackend`: panics in `DropBackend` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicDropBackend", Panic, DropBackend);
