//! `backplane bench`: a model timed over many runs (median, p10, p90), its memory, and with
//! `--profile` the time per layer.

use std::collections::BTreeMap;

use anyhow::Result;
use clap::Args;

use crate::{
    model::{LoadedModel, ModelArgs, peak_rss_bytes, warn_faulted},
    output::outln,
};

#[derive(Args, Debug)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Timed runs (1 to 1,000,000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    iterations: u32,
    /// Untimed runs first (0 to 1,000,000).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    warmup: u32,
    /// Also time every layer over the timed runs (two clock reads per layer): the time per
    /// backend and layer kind, and the slowest layers (with --json: every layer).
    #[arg(long)]
    profile: bool,
}

/// Times the model and prints the latencies, the memory and (`--profile`) the layers.
pub(crate) fn run(args: &BenchArgs) -> Result<()> {
    let mut model = LoadedModel::load(&args.model)?;
    let mut retried = false;
    // Every run writes into the same output buffers (one set per shape), as an application
    // that reuses them would: the timing is the inference, not fresh pages for its outputs.
    let sets = model.sets.len();
    let mut buffers = (0..sets)
        .map(|set| Ok(model.plan(set)?.output_buffers()?))
        .collect::<Result<Vec<_>>>()?;
    for i in 0..args.warmup as usize {
        let set = i % sets;
        model.run_or_retry(&mut retried, |m| m.run_into(set, &mut buffers[set]))?;
    }
    let trips_before = model.round_trips();
    if let Some(plan) = model.session.current() {
        plan.set_profiling(args.profile);
    }
    let mut ms: Vec<f64> = Vec::with_capacity(args.iterations as usize);
    for i in 0..args.iterations as usize {
        let set = i % sets;
        ms.push(
            model
                .run_or_retry(&mut retried, |m| m.run_into(set, &mut buffers[set]))?
                .as_secs_f64()
                * 1e3,
        );
    }
    // Round trips per inference to each out-of-process backend.
    let trips: BTreeMap<String, f64> = model
        .round_trips()
        .into_iter()
        .map(|(id, after)| {
            let before = trips_before.get(&id).copied().unwrap_or(0);
            (id, (after - before) as f64 / args.iterations as f64)
        })
        .collect();
    warn_faulted(model.runtime());
    let plan = model.session.current_or_shapes_needed()?;
    let profile = plan.profile();
    if args.profile && profile.is_none() {
        eprintln!("warning: no layer profile: the network was optimised again during the runs");
    }
    ms.sort_by(f64::total_cmp);
    let pick = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    let (median, p10, p90) = (pick(0.5), pick(0.1), pick(0.9));
    let (plan_bytes, naive) = model
        .runtime()
        .network_memory(plan.id())
        .unwrap_or_default();
    let rss = peak_rss_bytes();
    let cache = model.session.cache_stats();
    if args.model.json {
        let report = serde_json::json!({
            "model": args.model.model,
            "iterations": args.iterations,
            "warmup": args.warmup,
            "median_ms": median,
            "p10_ms": p10,
            "p90_ms": p90,
            "layers_per_backend": plan.layers_per_backend(),
            "memory_plan_bytes": plan_bytes,
            "memory_naive_bytes": naive,
            "peak_rss_bytes": rss,
            "shapes_cycled": sets,
            "plans_cached": cache.entries,
            "plans_cached_bytes": cache.bytes,
            "out_of_process_round_trips_per_run": trips,
        });
        let mut report = report;
        if let Some(layers) = &profile {
            report["profile"] = layers
                .iter()
                .map(|l| {
                    serde_json::json!({
                        "layer": l.layer,
                        "origins": l.origins,
                        "kind": l.kind.to_string(),
                        "backend": l.backend,
                        "runs": l.runs,
                        "mean_us": mean_us(l),
                    })
                })
                .collect();
        }
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "{} iterations after {} warm-up: median {median:.3} ms, p10 {p10:.3} ms, p90 {p90:.3} ms",
            args.iterations,
            args.warmup
        );
        if sets > 1 {
            outln!(
                "{sets} sets of shapes cycled; {} plans cached ({} bytes)",
                cache.entries,
                cache.bytes
            );
        }
        outln!(
            "memory: intermediate plan {plan_bytes} bytes ({naive} naive); process peak RSS {}",
            rss.map_or("unknown".to_owned(), |b| format!("{b} bytes"))
        );
        for (id, n) in &trips {
            outln!("out of process: {id}: {n:.1} round trips per inference");
        }
        if let Some(layers) = &profile {
            print_profile(layers, ms.iter().sum::<f64>() / ms.len() as f64);
        }
    }
    model.session.unload()?;
    Ok(())
}

/// A profiled layer's mean time per run, in microseconds.
fn mean_us(l: &backplane::LayerProfile) -> f64 {
    l.total.as_secs_f64() * 1e6 / l.runs.max(1) as f64
}

/// `bench --profile`'s tables: time per backend and layer kind, then the slowest layers,
/// each with its share of the mean inference (the layers' times are means too).
fn print_profile(layers: &[backplane::LayerProfile], mean_ms: f64) {
    let share = |us: f64| 100.0 * us / (mean_ms * 1e3);
    let mut by_kind: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
    for l in layers {
        let e = by_kind
            .entry((l.backend.clone(), l.kind.to_string()))
            .or_default();
        e.0 += 1;
        e.1 += mean_us(l);
    }
    let mut by_kind: Vec<_> = by_kind.into_iter().collect();
    by_kind.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    let total: f64 = layers.iter().map(mean_us).sum();
    outln!(
        "layers: {total:.1} us per run in {} layers ({:.1}% of the mean inference; the rest is the host's binding and copies)",
        layers.len(),
        share(total)
    );
    outln!(
        "{:>10} {:>6} {:>6}  {:<16} kind",
        "us/run",
        "share",
        "layers",
        "backend"
    );
    let copies: Vec<&backplane::LayerProfile> = layers
        .iter()
        .filter(|l| l.kind == backplane::api::LayerKind::MemCopy)
        .collect();
    if !copies.is_empty() {
        let us: f64 = copies.iter().map(|l| mean_us(l)).sum();
        outln!(
            "memory copies: {us:.1} us per run in {} copies ({:.1}%)",
            copies.len(),
            share(us)
        );
    }
    for ((backend, kind), (count, us)) in &by_kind {
        outln!(
            "{us:>10.1} {:>5.1}% {count:>6}  {backend:<16} {kind}",
            share(*us)
        );
    }
    let mut slowest: Vec<&backplane::LayerProfile> = layers.iter().collect();
    slowest.sort_by(|a, b| mean_us(b).total_cmp(&mean_us(a)));
    outln!("slowest layers:");
    outln!(
        "{:>10} {:>6}  {:<16} {:<24} layer",
        "us/run",
        "share",
        "backend",
        "kind"
    );
    for l in slowest.iter().take(PROFILE_SLOWEST) {
        let us = mean_us(l);
        let origins = match l.origins.as_slice() {
            [] => String::new(),
            names => format!(" {}", backplane::graph::optimizer::fused_from(names)),
        };
        outln!(
            "{us:>10.1} {:>5.1}%  {:<16} {:<24} {}{origins}",
            share(us),
            l.backend,
            l.kind.to_string(),
            l.layer
        );
    }
}

/// How many of the slowest layers `bench --profile` lists (`--json` lists all).
const PROFILE_SLOWEST: usize = 20;
