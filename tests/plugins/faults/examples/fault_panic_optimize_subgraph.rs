//! Test plugin `PanicOptimizeSubgraph`: panics in `OptimizeSubgraph` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("PanicOptimizeSubgraph", Panic, OptimizeSubgraph);
