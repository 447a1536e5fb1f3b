//! Crash isolation (`--isolate`, [`crate::CreationOptions::isolation`]).
//!
//! A plugin can do what no guard in the host's process survives: abort, fault on a bad
//! pointer, or never return from its initialisers or factory. With isolation, each candidate
//! that passed the trust checks is first loaded in a child process, which runs the whole
//! in-process load of that one file ([`super::probe::probe_here`]: `dlopen`, the symbols, id, version, the
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
//! The same supervision (`crate::child::run_child`: timeout, signal, exit status, stderr
//! tail) runs the child of [`super::inspect::inspect_isolated`], which `inspect` and `install`
//! use.

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    child::{Child, cli_from_environment, run_child},
    report::{ReasonCode, Rejection},
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
    /// [`super::probe::probe_here`] does and exit with its status (the CLI: `backplane probe FILE`).
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

#[cfg(test)]
mod tests {
    use super::*;

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
