//! Child processes of the host: start one, supervise it (a deadline, the end of its stderr,
//! its signal or exit status) and say what happened in a message. The isolation probe
//! ([`crate::plugins::isolation`]), `inspect`'s child and out-of-process servers
//! ([`crate::remote`]) use it.
//!
//! Imports: nothing.

use std::{
    ffi::OsStr,
    io::Read,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

/// A child process that [`run_child`] supervises, as its messages name it.
pub(crate) struct Child {
    /// What the messages call it ("the isolation probe").
    pub name: &'static str,
    /// The exit statuses with which it may have done its job; any other is an error.
    pub clean: &'static [i32],
    /// What was not over when it exited with a clean status but without its output ("its
    /// load was over"), for the message "exited with status N before ...".
    pub unfinished: &'static str,
}

/// Runs `program args` with stdin closed, reading its stdout and stderr on threads, and waits
/// at most `timeout` for it to exit (it is then killed). When it exits with one of
/// `child.clean` statuses, `accept(status, stdout)` says whether it did its job and with what
/// result.
///
/// # Errors
/// A message that says what happened and quotes the end of the child's stderr: it could not
/// be started, did not finish in time, was killed by a signal, exited with another status, or
/// `accept` found its output wanting (something ended the process early, such as a library
/// constructor calling `exit(0)`).
pub(crate) fn run_child<T>(
    program: &Path,
    args: &[&OsStr],
    timeout: Duration,
    child: &Child,
    accept: impl FnOnce(i32, &[u8]) -> Option<T>,
) -> Result<T, String> {
    let name = child.name;
    let mut process = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{name} {} could not be started: {e}", program.display()))?;
    let stdout = drain(process.stdout.take());
    let stderr = drain(process.stderr.take());
    let status = match wait_until(&mut process, deadline_after(timeout)) {
        Ok(status) => status,
        Err(e) => {
            let _ = process.kill();
            let _ = process.wait();
            return Err(format!("waiting for {name}: {e}"));
        }
    };
    if status.is_none() {
        let _ = process.kill();
        let _ = process.wait();
    }
    // What the child wrote before it exited is in the pipes already: this waits only briefly
    // for their ends, which a grandchild may hold open long after.
    let stdout = stdout.collect(Duration::from_millis(200));
    let tail = stderr_note(&String::from_utf8_lossy(
        &stderr.collect(Duration::from_millis(200)),
    ));
    let Some(status) = status else {
        return Err(format!(
            "loading it did not finish within {:.1} s in {name}, which was killed{tail}",
            timeout.as_secs_f64()
        ));
    };
    match (status.code(), status.signal()) {
        (Some(code), _) if child.clean.contains(&code) => accept(code, &stdout).ok_or_else(|| {
            format!(
                "{name} exited with status {code} before {} (the plugin, or a library \
                 constructor, ended the process){tail}",
                child.unfinished
            )
        }),
        (_, Some(signal)) => Err(format!(
            "loading it killed {name} with signal {signal} ({}){tail}",
            signal_name(signal)
        )),
        (code, _) => Err(format!(
            "loading it ended {name} with exit status {}{tail}",
            code.map_or("unknown".to_owned(), |c| c.to_string())
        )),
    }
}

/// The `backplane` CLI for a child process of an embedder (`what` names the feature in
/// messages): the path in `BACKPLANE_PROBE`, else the first `backplane` on `PATH`.
pub(crate) fn cli_from_environment(what: &str) -> Result<PathBuf, String> {
    let program = match std::env::var_os("BACKPLANE_PROBE") {
        Some(p) => PathBuf::from(p),
        None => std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("backplane"))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                format!(
                    "{what} needs the backplane CLI: set BACKPLANE_PROBE to its path or put it on PATH"
                )
            })?,
    };
    if !program.is_file() {
        return Err(format!(
            "{what}: BACKPLANE_PROBE={} is not a file",
            program.display()
        ));
    }
    Ok(program)
}

/// A child's pipe read to its end on a thread ([`drain`]).
struct Drained {
    /// What has been read so far.
    bytes: Arc<Mutex<Vec<u8>>>,
    /// Disconnected at the end of the pipe.
    end: std::sync::mpsc::Receiver<()>,
}

impl Drained {
    /// What was read, once the pipe has ended or after `wait` at most: a grandchild may hold
    /// the pipe open long after the child is gone.
    fn collect(self, wait: Duration) -> Vec<u8> {
        let _ = self.end.recv_timeout(wait);
        std::mem::take(&mut *self.bytes.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Reads a child's pipe to its end on a thread, so that a chatty child cannot block on a full
/// pipe.
fn drain(pipe: Option<impl Read + Send + 'static>) -> Drained {
    let bytes = Arc::new(Mutex::new(Vec::new()));
    let (sender, end) = std::sync::mpsc::channel::<()>();
    if let Some(mut pipe) = pipe {
        let bytes = Arc::clone(&bytes);
        std::thread::spawn(move || {
            let _sender = sender;
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => bytes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        });
    }
    Drained { bytes, end }
}

/// Waits for `process` to end, until `deadline`: its status, or `None` once the deadline has
/// passed (the process is left running). Polls from 100 µs, doubling up to 5 ms: a quick
/// child (a few ms) is seen soon after it ends, a slow one costs little CPU.
///
/// # Errors
/// `try_wait`'s.
pub(crate) fn wait_until(
    process: &mut std::process::Child,
    deadline: Instant,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let mut pause = Duration::from_micros(100);
    loop {
        if let Some(status) = process.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(5));
    }
}

/// The instant `timeout` from now; for a timeout too long for the clock (`1e19` seconds), an
/// instant more than a century away instead of an overflow.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(now)
}

/// `"; its stderr ended with: <the last lines of text>"`, or nothing for an empty `text`.
pub(crate) fn stderr_note(text: &str) -> String {
    let tail = last_lines(text);
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with: {tail}")
    }
}

/// The last two non-empty lines of `text`, joined, at most 300 characters.
pub(crate) fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(2)..].join(" / ");
    match tail.char_indices().nth(300) {
        Some((cut, _)) => format!("{}…", &tail[..cut]),
        None => tail,
    }
}

/// The usual name of a signal number (Linux, x86_64 and aarch64).
pub(crate) fn signal_name(signal: i32) -> &'static str {
    match signal {
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => "another signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeout the clock cannot add (the CLI refuses such values, a library caller may not)
    /// waits "forever" instead of panicking.
    #[test]
    fn deadlines_never_overflow() {
        let far = deadline_after(Duration::from_secs_f64(1e19));
        assert!(far > Instant::now() + Duration::from_secs(100 * 365 * 86_400));
        assert!(deadline_after(Duration::MAX) > Instant::now());
        let soon = deadline_after(Duration::from_millis(5));
        assert!(soon <= Instant::now() + Duration::from_millis(5));
    }

    #[test]
    fn stderr_tail() {
        assert_eq!(last_lines("a\n\nb\nc\n"), "b / c");
        assert_eq!(last_lines(""), "");
        assert_eq!(last_lines(&"x".repeat(400)).chars().count(), 301);
    }

    /// `run_child` hands a clean exit's status and stdout to `accept`, and names the child
    /// and what it had not done when `accept` refuses them.
    #[test]
    fn run_child_passes_stdout() {
        let child = Child {
            name: "the test child",
            clean: &[0, 1],
            unfinished: "it said hello",
        };
        let run = |script: &str| {
            run_child(
                Path::new("/bin/sh"),
                &[OsStr::new("-c"), OsStr::new(script)],
                Duration::from_secs(5),
                &child,
                |code, stdout| (stdout == b"hello\n").then_some(code),
            )
        };
        assert_eq!(run("echo hello; exit 1"), Ok(1));
        let e = run("echo bye >&2; exit 0").unwrap_err();
        assert_eq!(
            e,
            "the test child exited with status 0 before it said hello (the plugin, or a \
             library constructor, ended the process); its stderr ended with: bye"
        );
        let e = run("echo hello; exit 2").unwrap_err();
        assert_eq!(e, "loading it ended the test child with exit status 2");
    }
}
