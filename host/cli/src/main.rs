//! `backplane`: the command-line front end of the backplane host.
//!
//! This file parses the command line and dispatches; each subcommand lives in its own file
//! (`backends`, `inspect`, `install`, `run`, `compile`, `bench`, `conformance`, and the
//! hidden child sides `probe` and `serve`). What several share: the discovery flags and
//! value parsers (`options`), a model loaded with its inputs (`model`) and writing to stdout
//! (`output`).

mod backends;
mod bench;
mod compile;
mod conformance;
mod inspect;
mod install;
mod model;
mod options;
mod output;
mod probe;
mod run;
mod serve;

use anyhow::Result;
use clap::{Parser, Subcommand};

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
    Backends(backends::BackendsArgs),
    /// Run an ONNX model or a compiled network (.bpn) across the registered backends.
    Run(model::ModelArgs),
    /// Compile an ONNX model once (import, partition, fuse, and each backend's prepared
    /// workloads) into one .bpn file that `run`, `bench` and the bindings load without the
    /// importer or the optimizer.
    Compile(compile::CompileArgs),
    /// Time an ONNX model: median, p10 and p90 latency, and peak memory.
    ///
    /// Every run writes into output buffers made once, before the warm-up runs.
    Bench(bench::BenchArgs),
    /// Check a backend: its loader contract, and a case for every layer kind against the kit's own
    /// f64 definitions (an oracle that is no backend, CpuRef included).
    Conformance(conformance::ConformanceArgs),
    /// Inspect one plugin file: symbols, id, version, compatibility, capabilities, layer support.
    ///
    /// The file is loaded in a child process: a file that crashes, hangs or ends the process
    /// while it loads is an error, and this command survives it.
    Inspect(inspect::InspectArgs),
    /// Install a built cdylib as <Vendor>_<Name>_backend.so.<M.m.p> with .so, .so.M, .so.M.m links.
    Install(install::InstallArgs),
    /// The child side of --isolate: load one plugin file in this process and exit 0 (loaded)
    /// or 3 (rejected).
    #[command(hide = true)]
    Probe(probe::ProbeArgs),
    /// The child side of --out-of-process: serve one backend on the socket given as stdin.
    #[command(hide = true)]
    Serve(serve::ServeArgs),
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match cli.command {
        Command::Backends(args) => backends::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Run(args) => run::run(&args),
        Command::Compile(args) => compile::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Conformance(args) => conformance::run(&args),
        Command::Probe(args) => probe::run(&args),
        Command::Serve(args) => serve::run(args),
        Command::Install(args) => install::run(&args),
    }
}
