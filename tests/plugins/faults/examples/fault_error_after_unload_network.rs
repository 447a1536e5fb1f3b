//! Test plugin `ErrorAfterUnloadNetwork`: returns an error in `AfterUnloadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorAfterUnloadNetwork", Error, AfterUnloadNetwork);
