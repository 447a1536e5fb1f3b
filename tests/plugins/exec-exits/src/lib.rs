//! Test plugin `ExecExit` (vendor `Test`): a working ReLU backend (see
//! `bp_test_exec_fault_support`) whose third `execute` call in the process calls
//! `std::process::exit(0)`: the process ends with a clean status in the middle of a run.
//!
//! Tests load it only out of process (the host's `--out-of-process ExecExit`): in-process it
//! would end the test, silently and "successfully".

bp_test_exec_fault_support::exec_fault_plugin!("ExecExit", "exiting with status 0", || {
    std::process::exit(0)
});
