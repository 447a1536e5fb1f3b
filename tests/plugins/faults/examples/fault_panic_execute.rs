//! Test plugin `PanicExecute`: panics in `Execute` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicExecute", Panic, Execute);
