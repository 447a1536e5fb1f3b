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

use std::{
    io::Read,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
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
        let crashed = |what: String| Rejection::new(ReasonCode::Crashed, what);
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .arg(file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                crashed(format!(
                    "the isolation probe {} could not be started: {e}",
                    self.program.display()
                ))
            })?;
        let done = watch_for_done(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let deadline = Instant::now() + self.timeout;
        // Polls from 100 us, doubling up to 5 ms: a quick probe (a few ms) is seen soon after
        // it ends, a slow one costs little CPU.
        let mut pause = Duration::from_micros(100);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() >= deadline => break None,
                Ok(None) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(5));
                }
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(crashed(format!("waiting for the isolation probe: {e}")));
                }
            }
        };
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The line was written before the child exited, so it is in the pipe already: this
        // does not wait for a grandchild that may hold the pipe open.
        let finished = done.recv_timeout(Duration::from_millis(200)) == Ok(true);
        let tail = stderr
            .recv_timeout(Duration::from_millis(200))
            .map(|text| last_lines(&text))
            .unwrap_or_default();
        let tail = if tail.is_empty() {
            String::new()
        } else {
            format!("; its stderr ended with: {tail}")
        };
        match status {
            None => Err(crashed(format!(
                "loading it did not finish within {:.1} s in the isolation probe, which was killed{tail}",
                self.timeout.as_secs_f64()
            ))),
            Some(s) => match (s.code(), s.signal()) {
                (Some(PROBE_LOADED | PROBE_REJECTED), _) if finished => Ok(()),
                (Some(code @ (PROBE_LOADED | PROBE_REJECTED)), _) => Err(crashed(format!(
                    "the isolation probe exited with status {code} before its load was over \
                     (the plugin, or a library constructor, ended the process){tail}"
                ))),
                (_, Some(signal)) => Err(crashed(format!(
                    "loading it killed the isolation probe with signal {signal} ({}){tail}",
                    signal_name(signal)
                ))),
                (code, _) => Err(crashed(format!(
                    "loading it ended the isolation probe with exit status {}{tail}",
                    code.map_or("unknown".to_owned(), |c| c.to_string())
                ))),
            },
        }
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

/// Reads a child's stdout on a thread, line by line: sends `true` as soon as the probe's last
/// line ([`PROBE_DONE`]) arrives, or `false` at the end of the pipe without it. It drains the
/// rest, so that a chatty child cannot block on a full pipe.
fn watch_for_done(pipe: Option<impl Read + Send + 'static>) -> std::sync::mpsc::Receiver<bool> {
    use std::io::BufRead;
    let (sender, done) = std::sync::mpsc::channel();
    if let Some(pipe) = pipe {
        std::thread::spawn(move || {
            let mut seen = false;
            for line in std::io::BufReader::new(pipe).split(b'\n') {
                let Ok(line) = line else { break };
                if !seen && line == PROBE_DONE.as_bytes() {
                    seen = true;
                    let _ = sender.send(true);
                }
            }
            if !seen {
                let _ = sender.send(false);
            }
        });
    }
    done
}

/// Reads a child's pipe to its end on a thread, so that a chatty child cannot block on a full
/// pipe. The text comes back through a channel, to be waited for only briefly once the child
/// is gone: a grandchild may hold the pipe open long after.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::sync::mpsc::Receiver<String> {
    let (sender, text) = std::sync::mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = sender.send(String::from_utf8_lossy(&bytes).into_owned());
        });
    }
    text
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
}
