//! Test plugin `SegfaultId` (vendor `Test`): `GetBackendId` writes to read-only memory, a real
//! segmentation fault (SIGSEGV), not a panic.
//!
//! Nothing in a process survives this, so tests load it only with isolation
//! (`CreationOptions::isolation`, CLI `--isolate`): the probe child dies of signal 11 and the
//! host rejects the file as `crashed`, quoting the line this plugin prints first, and goes on.

use std::ffi::c_char;

/// Prints a line on stderr, then stores into a string literal (read-only data).
fn segfault() -> *const c_char {
    eprintln!("SegfaultId: writing to read-only memory");
    let target = std::hint::black_box(b"read-only".as_ptr().cast_mut());
    // SAFETY: none: this is the fault this plugin exists for. The pointer is non-null and
    // aligned, so the store reaches the hardware, which refuses it (the page is read-only).
    unsafe { target.write_volatile(0) };
    c"SegfaultId".as_ptr()
}

bp_test_raw_exports::get_backend_id!(segfault());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR);
bp_test_raw_exports::null_backend_factory!();
