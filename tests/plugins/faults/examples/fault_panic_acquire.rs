//! Test plugin `PanicAcquire`: panics in `Acquire` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicAcquire", Panic, Acquire);
