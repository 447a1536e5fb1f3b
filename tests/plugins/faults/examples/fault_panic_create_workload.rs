//! Test plugin `PanicCreateWorkload`: panics in `CreateWorkload` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicCreateWorkload", Panic, CreateWorkload);
