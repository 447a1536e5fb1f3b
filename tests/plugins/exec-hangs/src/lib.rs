//! Test plugin `ExecHang` (vendor `Test`): a working ReLU backend (see
//! `bp_test_exec_fault_support`) whose third `execute` call in the process never returns
//! (it sleeps forever).
//!
//! Tests load it only out of process (the host's `--out-of-process ExecHang`), where the host
//! kills the child when the run's time is up: in-process it would hang the test.

bp_test_exec_fault_support::exec_fault_plugin!("ExecHang", "sleeping forever", || loop {
    std::thread::sleep(std::time::Duration::from_secs(3600));
});
