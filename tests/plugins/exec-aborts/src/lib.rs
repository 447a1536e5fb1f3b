//! Test plugin `ExecAbort` (vendor `Test`): a working ReLU backend (see
//! `bp_test_exec_fault_support`) whose third `execute` call in the process calls
//! `std::process::abort()` (SIGABRT), which no `catch_unwind` sees.
//!
//! Tests load it only out of process (the host's `--out-of-process ExecAbort`): in-process it
//! would kill the test.

bp_test_exec_fault_support::exec_fault_plugin!("ExecAbort", "aborting", || std::process::abort());
