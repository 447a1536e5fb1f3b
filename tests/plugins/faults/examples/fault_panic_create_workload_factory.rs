//! Test plugin `PanicCreateWorkloadFactory`: panics in `CreateWorkloadFactory` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicCreateWorkloadFactory", Panic, CreateWorkloadFactory);
