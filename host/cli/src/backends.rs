//! `backplane backends`: discovery, and its report as a table or JSON.

use anyhow::Result;
use clap::Args;

use crate::{
    options::DiscoveryArgs,
    output::{emit_json, out},
};

#[derive(Args, Debug)]
pub(crate) struct BackendsArgs {
    #[command(flatten)]
    discovery: DiscoveryArgs,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// Discovers the backends and prints the report.
pub(crate) fn run(args: &BackendsArgs) -> Result<()> {
    let runtime = args.discovery.runtime()?;
    if args.json {
        emit_json(|out| runtime.write_report_json(out));
    } else {
        out!("{}", runtime.report().to_table());
    }
    Ok(())
}
