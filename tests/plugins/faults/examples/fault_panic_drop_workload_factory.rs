//! Test plugin `PanicDropWorkloadFactory`: panics in `DropWorkloadFactory` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicDropWorkloadFactory", Panic, DropWorkloadFactory);
