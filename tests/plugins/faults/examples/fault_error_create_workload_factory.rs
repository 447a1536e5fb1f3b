//! Test plugin `ErrorCreateWorkloadFactory`: returns an error in `CreateWorkloadFactory` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorCreateWorkloadFactory", Error, CreateWorkloadFactory);
