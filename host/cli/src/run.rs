//! `backplane run`: a model run once, its outputs printed or written as `.npy` files.

use anyhow::{Context, Result};

use crate::{
    model::{LoadedModel, ModelArgs, peak_rss_bytes, warn_faulted},
    output::outln,
};

/// Runs the model once and prints (or writes) its outputs and a summary.
pub(crate) fn run(args: &ModelArgs) -> Result<()> {
    use backplane::npy;
    let mut model = LoadedModel::load(args)?;
    anyhow::ensure!(
        model.sets.len() == 1,
        "run takes one --shape per input (bench cycles through several)"
    );
    let mut retried = false;
    let (values, latency) = model.run_or_retry(&mut retried, LoadedModel::run)?;
    warn_faulted(model.runtime());
    let plan = model.plan(0)?;
    let mut summary = Vec::new();
    for (name, info, values) in &values {
        if let Some(dir) = &args.output_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            npy::write(
                &dir.join(npy::file_name_for_output(name)),
                &info.shape,
                values,
            )?;
        }
        if !args.json {
            let head = values.preview(8);
            let more = if values.len() > 8 { ", ..." } else { "" };
            outln!(
                "{name} {:?}: [{}{more}]",
                info.shape.as_slice(),
                head.join(", ")
            );
        }
        summary.push(serde_json::json!({ "name": name, "shape": info.shape.as_slice() }));
    }
    let (peak, naive) = model
        .runtime()
        .network_memory(plan.id())
        .unwrap_or_default();
    let layers = plan.optimized().network().layers().len();
    if args.json {
        let report = serde_json::json!({
            "model": args.model,
            "outputs": summary,
            "layers": layers,
            "layers_per_backend": plan.layers_per_backend(),
            "latency_ms": latency.as_secs_f64() * 1e3,
            // Constants copied into the network's own memory at load (0 when every one is
            // read in place: from its descriptor, or mapped from a compiled network).
            "constant_bytes_copied": model.runtime().network_own_bytes(plan.id()),
            "peak_rss_bytes": peak_rss_bytes(),
            "memory_plan_bytes": peak,
            "memory_naive_bytes": naive,
        });
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "{layers} layers on {:?}; one run took {:.3} ms; intermediate memory {peak} bytes planned ({naive} naive)",
            plan.optimized().backends_used(),
            latency.as_secs_f64() * 1e3
        );
    }
    drop(plan);
    model.session.unload()?;
    Ok(())
}
