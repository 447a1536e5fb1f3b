//! Test plugin `PanicUseCustomAllocator`: panics in `UseCustomAllocator` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicUseCustomAllocator", Panic, UseCustomAllocator);
