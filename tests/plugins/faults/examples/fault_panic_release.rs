//! Test plugin `PanicRelease`: panics in `Release` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicRelease", Panic, Release);
