//! Test plugin `PanicAllocatedBytes`: panics in `AllocatedBytes` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicAllocatedBytes", Panic, AllocatedBytes);
