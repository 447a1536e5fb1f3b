//! Test plugin `PanicDropWorkload`: panics in `DropWorkload` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicDropWorkload", Panic, DropWorkload);
