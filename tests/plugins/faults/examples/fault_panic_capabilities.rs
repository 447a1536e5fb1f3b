//! Test plugin `PanicCapabilities`: panics in `Capabilities` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicCapabilities", Panic, Capabilities);
