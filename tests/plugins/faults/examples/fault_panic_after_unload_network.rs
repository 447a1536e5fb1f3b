//! Test plugin `PanicAfterUnloadNetwork`: panics in `AfterUnloadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicAfterUnloadNetwork", Panic, AfterUnloadNetwork);
