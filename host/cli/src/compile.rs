//! `backplane compile`: a model imported, optimised and prepared once, written as a compiled
//! network (`.bpn`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::{
    model::{LoadedModel, ModelArgs},
    output::outln,
};

#[derive(Args, Debug)]
pub(crate) struct CompileArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The compiled network file to write.
    #[arg(short = 'o', long = "output", value_name = "FILE.bpn")]
    output: PathBuf,
}

/// `compile`: the model's session (its plan made at load, as `run` makes it), written as a
/// compiled network.
pub(crate) fn run(args: &CompileArgs) -> Result<()> {
    anyhow::ensure!(
        !backplane::compiled::is_compiled_file(&args.model.model),
        "{} is already a compiled network",
        args.model.model.display()
    );
    let model = LoadedModel::load(&args.model)?;
    let plan = model.session.current_or_shapes_needed()?;
    let bytes = model
        .session
        .compile_to(&args.output)
        .with_context(|| format!("compiling {}", args.model.model.display()))?;
    let onnx = std::fs::metadata(&args.model.model).map_or(0, |m| m.len());
    // Read back: the file checks, and says what it holds.
    let written = backplane::compiled::CompiledNetwork::open(&args.output)?;
    outln!(
        "wrote {} ({bytes} bytes; the ONNX file has {onnx}): {} layers on {}, {} workloads \
         prepared ahead of time",
        args.output.display(),
        plan.optimized().network().layers().len(),
        plan.optimized().backends_used().join(", "),
        written.prepared_workloads()
    );
    model.session.unload()?;
    Ok(())
}
