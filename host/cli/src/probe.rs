//! `backplane probe` (hidden): the child side of `--isolate`, one plugin file loaded in this
//! process.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub(crate) struct ProbeArgs {
    /// The plugin file.
    file: PathBuf,
}

/// Loads the file and ends the process: status 0 (loaded) or 3 (rejected).
pub(crate) fn run(args: &ProbeArgs) -> ! {
    std::process::exit(backplane::plugins::probe::probe_here(&args.file))
}
