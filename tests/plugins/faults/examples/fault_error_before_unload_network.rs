//! Test plugin `ErrorBeforeUnloadNetwork`: returns an error in `BeforeUnloadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorBeforeUnloadNetwork", Error, BeforeUnloadNetwork);
