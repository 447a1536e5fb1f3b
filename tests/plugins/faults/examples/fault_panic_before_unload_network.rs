//! Test plugin `PanicBeforeUnloadNetwork`: panics in `BeforeUnloadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicBeforeUnloadNetwork", Panic, BeforeUnloadNetwork);
