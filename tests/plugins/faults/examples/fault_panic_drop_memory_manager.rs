//! Test plugin `PanicDropMemoryManager`: panics in `DropMemoryManager` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicDropMemoryManager", Panic, DropMemoryManager);
