//! Test plugin `ErrorCreateWorkload`: returns an error in `CreateWorkload` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorCreateWorkload", Error, CreateWorkload);
