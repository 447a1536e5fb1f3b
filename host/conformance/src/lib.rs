//! The conformance kit: what a backend claims is checked against an oracle that does not
//! depend on any backend; what it refuses is recorded with its reason and never counted as a
//! pass. Each part has its own oracle:
//!
//! 1. **Loader checks** (for a plugin file): symbols, id, version, guarded thunks, factory and
//!    capabilities ([`loader_checks`]), against the loader contract (DESIGN §3).
//! 2. **Layer suite**: a case for every layer kind and its attributes, run on the backend
//!    under test (CpuRef included) and checked against [`oracle`], naive `f64` definitions of
//!    every layer written apart from every backend. CpuRef is not the oracle: it is checked
//!    like any other backend. Cases with quantised tensors (Backend API 1.2)
//!    are checked against [`quantized_oracle`], which says which layers must match exactly and
//!    which within one quantisation step. A backend that does not claim them records each as
//!    unsupported with its reason, never as a failure.
//! 3. **ONNX node tests** ([`onnx_tests`]): ONNX's own test models, checked against their
//!    stored outputs.
//! 4. **Expected failures** ([`expectations`]): declared per backend with a reason; only an
//!    undeclared failure fails the kit ([`ConformanceReport::undeclared`]).
//!
//! The kit is a crate of its own, apart from the host library that every application links;
//! the `backplane conformance` command (`backplane-cli`) runs it. It uses the host library's
//! public API only (`backplane`: the runtime, the ONNX importer, the graph and optimizer, plugin
//! inspection, `.npy` files and seeded data) and no backend's code.
//!
//! Files: [`run`] (this file) runs the parts in order with [`KitOptions`] (`options.rs`);
//! `loader.rs` holds the loader checks, `oracle/` the layer suite's oracle and its cases as
//! data (`oracle/<family>.rs` the definitions, `oracle/<family>.json` the cases), `cases.rs`
//! reads the case files and makes the seeded inputs, `suite.rs` runs one case and checks it,
//! `report.rs` makes the [`ConformanceReport`].

pub mod expectations;
pub mod onnx_tests;
pub mod oracle;
pub mod quantized_oracle;

mod cases;
mod loader;
mod options;
mod report;
mod suite;

use std::path::Path;

use backplane::runtime::Runtime;
use backplane_api::{Support, TensorInfo};

pub use expectations::Expectations;
pub use loader::loader_checks;
pub use options::KitOptions;
pub use report::{CaseResult, ConformanceReport, Outcome};

use crate::{
    cases::{all_cases, case_outputs},
    report::case,
    suite::run_case,
};

/// Runs the loader checks (for a plugin file) and the layer suite against backend `id` of
/// `runtime`, which must also have CpuRef registered: the kit's networks fall back to it for
/// what `id` does not run, and it is the comparison of a case [`oracle`] does not define.
pub fn run(
    runtime: &std::sync::Arc<Runtime>,
    id: &str,
    plugin: Option<&Path>,
    options: &KitOptions,
) -> Result<ConformanceReport, String> {
    let entry = runtime
        .registry()
        .get(id)
        .ok_or_else(|| format!("backend {id} is not registered"))?;
    if !runtime.registry().is_registered("CpuRef") {
        return Err("CpuRef (the kit's fallback backend) is not registered".into());
    }
    let mut cases = plugin.map(|p| loader_checks(p, id)).unwrap_or_default();
    let wanted = |name: &str| {
        options
            .filter
            .as_ref()
            .is_none_or(|f| name.contains(f.as_str()))
    };
    let all: Vec<_> = all_cases()
        .into_iter()
        .filter(|(name, _, _, _)| wanted(name))
        .collect();
    let total = all.len();
    for (done, (name, layer, inputs, quantization)) in all.into_iter().enumerate() {
        if entry.is_faulted() {
            let why = entry.fault_reason().unwrap_or_default();
            let rest = total - done;
            cases.push(case(
                "layer/remaining".into(),
                Outcome::Failed,
                format!("{rest} cases not run: the backend faulted ({why})"),
            ));
            break;
        }
        let outputs: Vec<TensorInfo> = match case_outputs(&layer, &inputs, quantization.as_ref()) {
            Ok(infos) => infos,
            Err(e) => {
                cases.push(case(
                    name,
                    Outcome::Failed,
                    format!("the kit's own case is invalid: {e}"),
                ));
                continue;
            }
        };
        match entry
            .instance()
            .is_layer_supported(&layer, &inputs, &outputs)
        {
            Ok(Support::Unsupported(reason)) => {
                cases.push(case(name, Outcome::Unsupported, reason.to_string()))
            }
            Err(e) => cases.push(case(
                name,
                Outcome::Failed,
                format!("is_layer_supported: {e}"),
            )),
            Ok(Support::Supported) => {
                match run_case(runtime, id, &layer, &inputs, &outputs[0], options) {
                    Ok((outcome, detail)) => cases.push(case(name, outcome, detail)),
                    Err(e) => cases.push(case(name, Outcome::Failed, e)),
                }
            }
        }
    }
    let mut suites = Vec::new();
    let mut peers = Vec::new();
    if let Some(dir) = &options.onnx_tests {
        let (node_cases, counts) =
            onnx_tests::run(runtime, id, dir, &wanted, &options.optimizer_options(id))?;
        cases.extend(node_cases);
        suites = counts.suites;
        // Beside onnxruntime's results on the same tests, for a whole run (a filtered one
        // would count the tests it left out as not passed).
        if options.filter.is_none() {
            peers = onnx_tests::peer_counts(dir, &cases)?.unwrap_or_default();
        }
    }
    let mut report = ConformanceReport::new(id, cases, &options.expectations, suites);
    report.peers = peers;
    Ok(report)
}
