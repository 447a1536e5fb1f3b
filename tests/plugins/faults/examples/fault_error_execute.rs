//! Test plugin `ErrorExecute`: returns an error in `Execute` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorExecute", Error, Execute);
