//! Test plugin `PanicAfterEnqueue`: panics in `AfterEnqueue` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicAfterEnqueue", Panic, AfterEnqueue);
