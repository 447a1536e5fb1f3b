//! Test plugin `ExecSegv` (vendor `Test`): a working ReLU backend (see
//! `bp_test_exec_fault_support`) whose third `execute` call in the process writes to read-only
//! memory, a real segmentation fault (SIGSEGV), not a panic.
//!
//! Nothing in a process survives this, so tests load it only out of process (the host's
//! `--out-of-process ExecSegv`): in-process it would kill the test.

/// Stores into a string literal (read-only data).
fn segfault() {
    let target = std::hint::black_box(b"read-only".as_ptr().cast_mut());
    // SAFETY: none: this is the fault this plugin exists for. The pointer is non-null and
    // aligned, so the store reaches the hardware, which refuses it (the page is read-only).
    unsafe { target.write_volatile(0) };
}

bp_test_exec_fault_support::exec_fault_plugin!("ExecSegv", "writing to read-only memory", segfault);
