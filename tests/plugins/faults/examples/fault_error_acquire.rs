//! Test plugin `ErrorAcquire`: returns an error in `Acquire` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorAcquire", Error, Acquire);
