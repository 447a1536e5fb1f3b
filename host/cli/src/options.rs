//! What several subcommands share on their command line: the flags that choose and discover
//! backends ([`DiscoveryArgs`]) and the value parsers of time limits, shapes and backend options.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context, Result};
use backplane::{
    CreationOptions, Runtime, TrustPolicy, plugins::paths::PathSource, plugins::trust,
};
use clap::Args;

/// The longest time limit a flag accepts: a week.
const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// A time limit flag's value: a number of seconds, more than 0 and at most a week. Refused
/// values are usage errors (exit status 2), reported by clap with the flag's name.
pub(crate) fn seconds(text: &str) -> Result<Duration, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(value > 0.0 && value <= MAX_SECONDS) {
        return Err(format!(
            "{text} is not a number of seconds greater than 0 and at most {MAX_SECONDS} (a week)"
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

/// A `--shape` value, checked as the session will take it (`NAME=D1,D2,...`, a bounded
/// element count); a refused one is a usage error.
pub(crate) fn shape_spec(text: &str) -> Result<String, String> {
    backplane::SessionOptions::default().add_input_shape_text(text)?;
    Ok(text.to_owned())
}

/// A `--backend-option` value, checked as the session will take it (`ID:KEY=VALUE`); a
/// refused one is a usage error.
pub(crate) fn backend_option_spec(text: &str) -> Result<String, String> {
    backplane::SessionOptions::default().add_backend_option_text(text)?;
    Ok(text.to_owned())
}

/// Child processes of this executable with a time limit of `timeout`.
pub(crate) fn isolation(timeout: Duration) -> Result<backplane::plugins::isolation::Isolation> {
    let mut isolation = backplane::plugins::isolation::Isolation::current_exe()
        .context("locating this executable to run it as a child")?;
    isolation.timeout = timeout;
    Ok(isolation)
}

/// Options shared by commands that discover backends.
#[derive(Args, Debug)]
pub(crate) struct DiscoveryArgs {
    /// Search this directory for plugins (repeatable; replaces DYNAMIC_BACKEND_PATHS and the
    /// build-time default). Relative paths are taken from the current directory.
    #[arg(long = "path", value_name = "DIR")]
    pub(crate) paths: Vec<PathBuf>,
    /// Register no built-in backend.
    #[arg(long)]
    pub(crate) no_builtin: bool,
    /// Load only files with this SHA-256 digest (hex; repeatable).
    #[arg(long = "pin-sha256", value_name = "HEX")]
    pub(crate) pins: Vec<String>,
    /// Do not refuse group- or world-writable plugin files and directories.
    #[arg(long)]
    pub(crate) allow_insecure_permissions: bool,
    /// Load each plugin in a child process first; one that crashes there, or takes longer than
    /// --isolate-timeout, is rejected as `crashed` and never loaded here.
    #[arg(long)]
    pub(crate) isolate: bool,
    /// Seconds a plugin may take to load under --isolate (at most a week).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    pub(crate) isolate_timeout: Duration,
    /// Run this backend in a child process of its own (repeatable): a crash, exit or hang in
    /// it fails the inference and faults the backend, and the command goes on without it. A
    /// plugin is chosen by its file name's <Name> part; CpuRef by its id.
    #[arg(long = "out-of-process", value_name = "ID")]
    pub(crate) out_of_process: Vec<String>,
    /// Seconds one call into an out-of-process backend may take before its process is killed
    /// (at most a week).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = seconds)]
    pub(crate) call_timeout: Duration,
}

impl DiscoveryArgs {
    pub(crate) fn runtime(&self) -> Result<Runtime> {
        let options = self.creation_options()?;
        if self.paths.is_empty() {
            return Ok(Runtime::new(options));
        }
        let list = backplane::plugins::paths::join_dirs(&self.paths)
            .map_err(|e| anyhow::anyhow!("--path {e}"))?;
        Ok(Runtime::with_path_list(options, PathSource::Option, &list))
    }

    /// The options these flags give (the search paths aside).
    pub(crate) fn creation_options(&self) -> Result<CreationOptions> {
        let mut options = CreationOptions {
            register_builtins: !self.no_builtin,
            ..CreationOptions::default()
        };
        let mut trust = TrustPolicy {
            check_permissions: !self.allow_insecure_permissions,
            pinned_sha256: None,
        };
        if !self.pins.is_empty() {
            let pins = self
                .pins
                .iter()
                .map(|h| {
                    trust::parse_sha256(h)
                        .with_context(|| format!("--pin-sha256 {h:?} is not 64 hex digits"))
                })
                .collect::<Result<Vec<_>>>()?;
            trust.pinned_sha256 = Some(pins);
        }
        options.trust = trust;
        if self.isolate {
            options.isolation = Some(isolation(self.isolate_timeout)?);
        }
        if !self.out_of_process.is_empty() {
            let mut oop = backplane::OutOfProcess::current_exe(self.out_of_process.clone())
                .context("--out-of-process: locating this executable")?;
            oop.call_timeout = self.call_timeout;
            options.out_of_process = Some(oop);
        }
        Ok(options)
    }
}
