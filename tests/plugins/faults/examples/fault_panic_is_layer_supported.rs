//! Test plugin `PanicIsLayerSupported`: panics in `IsLayerSupported` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicIsLayerSupported", Panic, IsLayerSupported);
