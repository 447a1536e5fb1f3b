//! Test plugin `PanicBeforeLoadNetwork`: panics in `BeforeLoadNetwork` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicBeforeLoadNetwork", Panic, BeforeLoadNetwork);
