//! `backplane install`: a built cdylib installed under the conventional plugin name, with its
//! version links.

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use backplane::plugins::install;
use clap::Args;

use crate::{
    options::{isolation, seconds},
    output::outln,
};

#[derive(Args, Debug)]
pub(crate) struct InstallArgs {
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
    /// Seconds the child that loads the file (to read its id and metadata) may take before
    /// it is killed (at most a week).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    timeout: Duration,
}

/// Installs the file and prints where, and its links.
pub(crate) fn run(args: &InstallArgs) -> Result<()> {
    let done = install::install_isolated(
        &args.file,
        &args.dir,
        args.vendor.as_deref(),
        args.release.as_deref(),
        &isolation(args.timeout)?,
    )?;
    outln!(
        "installed backend {} as {}",
        done.backend_id,
        done.file.display()
    );
    for l in &done.links {
        outln!(
            "  link {} -> {}",
            l.display(),
            done.file.file_name().unwrap_or_default().to_string_lossy()
        );
    }
    Ok(())
}
