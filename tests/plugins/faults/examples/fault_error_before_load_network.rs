//! Test plugin `ErrorBeforeLoadNetwork`: returns an error in `BeforeLoadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorBeforeLoadNetwork", Error, BeforeLoadNetwork);
