//! Test plugin `PanicCreateMemoryManager`: panics in `CreateMemoryManager` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicCreateMemoryManager", Panic, CreateMemoryManager);
