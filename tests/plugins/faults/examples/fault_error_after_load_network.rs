//! Test plugin `ErrorAfterLoadNetwork`: returns an error in `AfterLoadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorAfterLoadNetwork", Error, AfterLoadNetwork);
