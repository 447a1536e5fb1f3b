//! Crash isolation (`--isolate`, [`crate::CreationOptions::isolation`]).
//!
//! A plugin can do what no guard in the host's process survives: abort, fault on a bad
//! pointer, or never return from its initialisers or factory. With isolation, each candidate
//! that passed the trust checks is first loaded in a child process, which runs the whole
//! in-process load of that one file ([`probe_here`]: `dlopen`, the symbols, id, version, the
//! factory and the capabilities) and exits. Only if the child finished in time, by itself, is
//! the file loaded in the host. A child killed by a signal, one that exits in an unexpected
//! way, or one still running after the timeout (it is then killed) rejects the file with
//! reason `crashed`, and the message says which, with the end of the child's stderr.
//!
//! A file that the child rejects in the ordinary way (a missing symbol, a wrong version, …)
//! passes the probe: the host's own load then rejects it with the precise reason, which it
//! can do safely.
//!
//! The cost is one process per candidate (a fork and exec of the host binary, and a second
//! `dlopen`), so isolation is off by default.
//!
//! The same supervision (`run_child`: timeout, signal, exit status, stderr tail) runs the
//! child of [`crate::inspect::inspect_isolated`], which `inspect` and `install` use.

use std::{
    ffi::OsStr,
    io::Read,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use crate::{
    registry::BackendRegistry,
    report::{CandidateReport, ReasonCode, Rejection},
    runtime,
};

/// The probe child's exit status when the file loaded and its factory made a backend.
pub const PROBE_LOADED: i32 = 0;
/// The probe child's exit status when the file was rejected in the ordinary way.
pub const PROBE_REJECTED: i32 = 3;
/// The line the probe child prints on stdout once the load is over, before it exits. An exit
/// status without it means something else ended the child, such as a library constructor
/// calling `exit(0)`.
pub const PROBE_DONE: &str = "backplane-probe: done";

/// How to run the probe child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    /// The program; it is given `args`, then the file's canonical path, and must do what
    /// [`probe_here`] does and exit with its status (the CLI: `backplane probe FILE`).
    pub program: PathBuf,
    /// Arguments before the file.
    pub args: Vec<String>,
    /// How long the child may take before it is killed and the file rejected.
    pub timeout: Duration,
}

impl Isolation {
    /// The default time a probe may take.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// The running executable's hidden `probe` subcommand: what the `backplane` CLI uses.
    pub fn current_exe() -> std::io::Result<Self> {
        Ok(Self {
            program: std::env::current_exe()?,
            args: vec!["probe".to_owned()],
            timeout: Self::DEFAULT_TIMEOUT,
        })
    }

    /// For embedders (the Python and C bindings), whose executable has no `probe` command:
    /// the `backplane` CLI named by the environment variable `BACKPLANE_PROBE`, else the
    /// first `backplane` on `PATH`.
    ///
    /// # Errors
    /// A message saying where it looked, when neither gives an executable file.
    pub fn from_environment() -> Result<Self, String> {
        Ok(Self {
            program: cli_from_environment("isolation")?,
            args: vec!["probe".to_owned()],
            timeout: Self::DEFAULT_TIMEOUT,
        })
    }

    /// Loads `file` in a child process; `Err` (reason `crashed`) if the child did not
    /// finish in time by itself.
    pub fn check(&self, file: &Path) -> Result<(), Rejection> {
        let mut args: Vec<&OsStr> = self.args.iter().map(OsStr::new).collect();
        args.push(file.as_os_str());
        let child = Child {
            name: "the isolation probe",
            clean: &[PROBE_LOADED, PROBE_REJECTED],
            unfinished: "its load was over",
        };
        run_child(&self.program, &args, self.timeout, &child, |_, stdout| {
            stdout
                .split(|&b| b == b'\n')
                .any(|line| line == PROBE_DONE.as_bytes())
                .then_some(())
        })
        .map_err(|message| Rejection::new(ReasonCode::Crashed, message))
    }
}

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
    let status = match wait_until(&mut process, Instant::now() + timeout) {
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

/// The child's side: loads `file` in this process exactly as discovery does after its trust
/// checks (`runtime::load_plugin`: the loader's checks, the factory, the capabilities) and
/// returns the exit status for it:
/// [`PROBE_LOADED`] or [`PROBE_REJECTED`] (the reason is logged), after printing
/// [`PROBE_DONE`]. A crash or hang here is what the parent is there to see.
pub fn probe_here(file: &Path) -> i32 {
    let mut report = CandidateReport::registered(file.to_owned(), Some(file.to_owned()));
    let status = match runtime::load_plugin(file, &mut BackendRegistry::new(), &mut report) {
        Ok(()) => PROBE_LOADED,
        Err(r) => {
            log::info!("{}: rejected in the probe ({r})", file.display());
            PROBE_REJECTED
        }
    };
    println!("{PROBE_DONE}");
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tail() {
        assert_eq!(last_lines("a\n\nb\nc\n"), "b / c");
        assert_eq!(last_lines(""), "");
        assert_eq!(last_lines(&"x".repeat(400)).chars().count(), 301);
    }

    /// A child that finishes the probe passes; an early exit, signals, other statuses and
    /// timeouts are `crashed`, with what happened in the message (`sh` stands in for the
    /// probe).
    #[test]
    fn child_outcomes() {
        let sh = |script: &str, timeout_ms: u64| Isolation {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into(), "probe".into()],
            timeout: Duration::from_millis(timeout_ms),
        };
        let file = Path::new("/nonexistent/Test_X_backend.so");
        let done = |status: i32| format!("echo '{PROBE_DONE}'; exit {status}");
        assert_eq!(sh(&done(0), 5000).check(file), Ok(()));
        assert_eq!(sh(&done(3), 5000).check(file), Ok(()));
        // A clean status without the probe's last line: something ended the child early.
        let e = sh("exit 0", 5000).check(file).unwrap_err();
        assert_eq!(e.reason, ReasonCode::Crashed);
        assert!(
            e.message.contains("before its load was over"),
            "{}",
            e.message
        );
        let e = sh("echo boom >&2; kill -SEGV $$", 5000)
            .check(file)
            .unwrap_err();
        assert_eq!(e.reason, ReasonCode::Crashed);
        assert!(e.message.contains("signal 11 (SIGSEGV)"), "{}", e.message);
        assert!(e.message.contains("boom"), "{}", e.message);
        let e = sh("exit 7", 5000).check(file).unwrap_err();
        assert!(e.message.contains("exit status 7"), "{}", e.message);
        let e = sh("sleep 30", 200).check(file).unwrap_err();
        assert!(e.message.contains("within 0.2 s"), "{}", e.message);
        let e = Isolation {
            program: "/nonexistent/probe".into(),
            args: vec![],
            timeout: Duration::from_secs(1),
        }
        .check(file)
        .unwrap_err();
        assert!(e.message.contains("could not be started"), "{}", e.message);
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
