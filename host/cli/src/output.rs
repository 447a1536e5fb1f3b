//! Writing to stdout: a reader that went away ends the program quietly ([`emit`]), a large
//! JSON report streams in large blocks ([`emit_json`]), and `out!`/`outln!` are `print!` and
//! `println!` through them.

/// Writes to stdout. A reader that went away (`backplane backends --json | head`) ends the
/// program quietly with status 0 instead of a panic.
pub(crate) fn emit(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("backplane: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Writes pretty JSON (made by `write`, which streams it in large blocks of its own, as
/// `Runtime::write_report_json` does) and a newline to stdout: the report of a crowded
/// directory is megabytes, and building it as one string, then copying it through
/// `format!`, cost more than discovering it (docs/PERFORMANCE.md). A reader that went away
/// ends the program as in [`emit`].
pub(crate) fn emit_json(write: impl FnOnce(&mut dyn std::io::Write) -> serde_json::Result<()>) {
    use std::{io::Write, os::fd::AsFd};
    enlarge_stdout_pipe();
    let stdout = std::io::stdout().lock();
    // Straight to the descriptor (held under the lock): stdout's line buffering would cut
    // each block at its last line break, two `write`s a block.
    let mut out: Box<dyn Write> = match stdout.as_fd().try_clone_to_owned() {
        Ok(fd) => Box::new(std::fs::File::from(fd)),
        Err(_) => Box::new(stdout),
    };
    let written = match write(&mut out) {
        Err(e) if !e.is_io() => {
            eprintln!("backplane: cannot write the report as JSON: {e}");
            std::process::exit(1);
        }
        r => r.map_err(std::io::Error::from),
    };
    if let Err(e) = written
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("backplane: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Size [`enlarge_stdout_pipe`] asks for: Linux's limit for an unprivileged process.
const STDOUT_PIPE_SIZE: usize = 1 << 20;

/// When stdout is a pipe smaller than 1 MiB, makes it 1 MiB (`F_SETPIPE_SZ`). The report of a
/// crowded directory is megabytes: through the default 64 KiB pipe the writer stops and the
/// reader is woken about 45 times for 3 MB, and those switches cost a millisecond on 2
/// cores (docs/PERFORMANCE.md); with 1 MiB a reader that reads large blocks is woken a few
/// times. Nothing else changes for the reader. Not a pipe, or refused (the user's pipe
/// memory is over its limit): nothing happens.
fn enlarge_stdout_pipe() {
    let stdout = std::io::stdout();
    if let Ok(size) = rustix::pipe::fcntl_getpipe_size(&stdout)
        && size < STDOUT_PIPE_SIZE
    {
        let _ = rustix::pipe::fcntl_setpipe_size(&stdout, STDOUT_PIPE_SIZE);
    }
}

/// `print!` through [`emit`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::emit(&format!($($arg)*)) };
}
pub(crate) use out;

/// `println!` through [`emit`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::output::emit(&format!("{}\n", format!($($arg)*))) };
}
pub(crate) use outln;
