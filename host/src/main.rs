//! `backplane`: the command-line front end of the backplane host.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use backplane::{
    CreationOptions, Runtime, TrustPolicy, inspect, install, paths::PathSource, trust,
};
use clap::{Args, Parser, Subcommand};

/// backplane: a Rust inference host with pluggable backends.
///
/// Logs go to stderr; set RUST_LOG (for example RUST_LOG=info) to see them.
#[derive(Parser, Debug)]
#[command(name = "backplane", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Discover backends and print the discovery report (paths, every candidate, backends).
    Backends(BackendsArgs),
    /// Inspect one plugin file: symbols, id, version, compatibility, capabilities, layer support.
    Inspect {
        /// The shared object to inspect (any file name).
        file: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Install a built cdylib as <Vendor>_<Name>_backend.so.<M.m.p> with .so, .so.M, .so.M.m links.
    Install {
        /// The built library (for example target/release/libmy_backend.so).
        file: PathBuf,
        /// The directory to install into (created if missing).
        #[arg(long)]
        dir: PathBuf,
        /// Vendor name (default: the metadata embedded by export_backend!).
        #[arg(long)]
        vendor: Option<String>,
        /// Release version M.m.p (default: the plugin crate's version embedded by export_backend!).
        #[arg(long)]
        release: Option<String>,
    },
}

/// Options shared by commands that discover backends.
#[derive(Args, Debug)]
struct DiscoveryArgs {
    /// Search this directory for plugins (repeatable; replaces DYNAMIC_BACKEND_PATHS and the
    /// build-time default). Relative paths are taken from the current directory.
    #[arg(long = "path", value_name = "DIR")]
    paths: Vec<PathBuf>,
    /// Register no built-in backend.
    #[arg(long)]
    no_builtin: bool,
    /// Load only files with this SHA-256 digest (hex; repeatable).
    #[arg(long = "pin-sha256", value_name = "HEX")]
    pins: Vec<String>,
    /// Do not refuse group- or world-writable plugin files and directories.
    #[arg(long)]
    allow_insecure_permissions: bool,
}

#[derive(Args, Debug)]
struct BackendsArgs {
    #[command(flatten)]
    discovery: DiscoveryArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

impl DiscoveryArgs {
    fn runtime(&self) -> Result<Runtime> {
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
        if self.paths.is_empty() {
            return Ok(Runtime::new(options));
        }
        let mut list = Vec::new();
        for p in &self.paths {
            let abs = std::path::absolute(p).with_context(|| format!("--path {}", p.display()))?;
            let s = abs
                .to_str()
                .with_context(|| format!("--path {} is not UTF-8", p.display()))?;
            if s.contains(':') {
                bail!("--path {s:?} contains ':', which separates search paths");
            }
            list.push(s.to_owned());
        }
        Ok(Runtime::with_path_list(
            options,
            PathSource::Option,
            &list.join(":"),
        ))
    }
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Backends(args) => {
            let runtime = args.discovery.runtime()?;
            if args.json {
                println!("{}", runtime.report().to_json());
            } else {
                print!("{}", runtime.report().to_table());
            }
        }
        Command::Inspect { file, json } => {
            let report = inspect::inspect(&file);
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", report.to_table());
            }
            if let Some((code, message)) = &report.error {
                bail!("{}: [{code}] {message}", file.display());
            }
        }
        Command::Install {
            file,
            dir,
            vendor,
            release,
        } => {
            let done = install::install(&file, &dir, vendor.as_deref(), release.as_deref())?;
            println!(
                "installed backend {} as {}",
                done.backend_id,
                done.file.display()
            );
            for l in &done.links {
                println!(
                    "  link {} -> {}",
                    l.display(),
                    done.file.file_name().unwrap_or_default().to_string_lossy()
                );
            }
        }
    }
    Ok(())
}
