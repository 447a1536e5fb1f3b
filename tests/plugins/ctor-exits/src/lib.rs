//! Test plugin `CtorExit` (vendor `Test`): a library constructor (`.init_array`) calls
//! `exit(0)`, so the process ends while `dlopen` is still opening the file, with a clean
//! status.
//!
//! Loaded in the host's own process it would end the host without a word, so tests load it
//! only with isolation: the probe child exits with status 0 but without the probe's last line,
//! and the host rejects the file as `crashed`.

/// Prints a line on stderr, then ends the process.
extern "C" fn exit_at_load() {
    eprintln!("CtorExit: exiting from a library constructor");
    std::process::exit(0)
}

/// Runs `exit_at_load` when the library is opened, before `dlopen` returns.
#[used]
#[unsafe(link_section = ".init_array")]
static EXIT_AT_LOAD: extern "C" fn() = exit_at_load;

bp_test_raw_exports::get_backend_id!(c"CtorExit".as_ptr());
bp_test_raw_exports::get_version!(backplane_api::API_MAJOR, backplane_api::API_MINOR);
bp_test_raw_exports::null_backend_factory!();
