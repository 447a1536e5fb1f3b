//! Test plugin `PanicAfterLoadNetwork`: panics in `AfterLoadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicAfterLoadNetwork", Panic, AfterLoadNetwork);
