//! Test plugin `ErrorRelease`: returns an error in `Release` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorRelease", Error, Release);
