//! Test plugin `ErrorAfterEnqueue`: returns an error in `AfterEnqueue` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorAfterEnqueue", Error, AfterEnqueue);
