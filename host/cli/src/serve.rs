//! `backplane serve` (hidden): the child side of `--out-of-process`, one backend served on the
//! socket given as stdin.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

#[derive(Args, Debug)]
pub(crate) struct ServeArgs {
    /// The plugin file to serve.
    #[arg(long, conflicts_with = "builtin", required_unless_present = "builtin")]
    file: Option<PathBuf>,
    /// The built-in backend to serve.
    #[arg(long)]
    builtin: Option<String>,
    /// The host's process id: the server dies with it.
    #[arg(long)]
    parent: u32,
}

/// Serves the backend until the host goes away, then ends the process with the server's
/// status.
pub(crate) fn run(args: ServeArgs) -> Result<()> {
    let target = match (args.file, args.builtin) {
        (Some(f), _) => backplane::serve::Target::File(f),
        (None, Some(id)) => backplane::serve::Target::Builtin(id),
        (None, None) => bail!("serve needs --file or --builtin"),
    };
    std::process::exit(backplane::serve::serve(&target, args.parent))
}
