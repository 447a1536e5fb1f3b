//! Test plugin `ErrorCreateMemoryManager`: returns an error in `CreateMemoryManager` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorCreateMemoryManager", Error, CreateMemoryManager);
