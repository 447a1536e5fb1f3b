//! Test plugin `ErrorOptimizeSubgraph`: returns an error in `OptimizeSubgraph` (see the `bp_test_faults` crate doc).
bp_test_faults::fault_plugin!("ErrorOptimizeSubgraph", Error, OptimizeSubgraph);
