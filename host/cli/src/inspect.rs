//! `backplane inspect`: one plugin file's symbols, id, version, compatibility, capabilities
//! and layer support, read in a child process (or in this one, as that child).

use std::{path::PathBuf, time::Duration};

use anyhow::{Result, bail};
use backplane::plugins::inspect;
use clap::Args;

use crate::{
    options::{isolation, seconds},
    output::{out, outln},
};

#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    /// The shared object to inspect (any file name).
    file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Seconds the child that loads the file may take before it is killed (at most a week).
    #[arg(long, value_name = "SECONDS", default_value = "5", value_parser = seconds)]
    timeout: Duration,
    /// Load the file in this process (the child side of inspect).
    #[arg(long, hide = true)]
    in_process: bool,
}

/// Inspects the file and prints the report; a file that failed to load is an error.
pub(crate) fn run(args: &InspectArgs) -> Result<()> {
    let report = if args.in_process {
        inspect::inspect(&args.file)
    } else {
        inspect::inspect_isolated(&args.file, &isolation(args.timeout)?)
            .map_err(anyhow::Error::msg)?
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.to_table());
    }
    if let Some((code, message)) = &report.error {
        bail!("{}: [{code}] {message}", args.file.display());
    }
    Ok(())
}
