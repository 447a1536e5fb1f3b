//! The layer suite's runner: a case's network built, run on the backend under test (with
//! CpuRef as the fallback) and checked against the oracle, or against CpuRef where the oracle
//! defines nothing.

use std::collections::HashMap;

use backplane::{
    InputTensor, OutputTensor,
    graph::{
        network::{NetworkBuilder, TensorRef},
        optimizer::{OptimizedNetwork, OptimizerOptions},
    },
    runtime::Runtime,
};
use backplane_api::{ConstTensor, DataType, LayerDescriptor, TensorInfo};

use crate::{cases::seeded_bytes, options::KitOptions, oracle, quantized_oracle, report::Outcome};

/// Loads `optimized`, runs it once with `feeds` (each input's bytes, by input name) and
/// unloads it; returns every output in network order as `(name, info, bytes)`.
pub(crate) fn run_optimized(
    rt: &Runtime,
    optimized: &OptimizedNetwork,
    feeds: &HashMap<String, Vec<u8>>,
) -> Result<Vec<(String, TensorInfo, Vec<u8>)>, String> {
    let network = optimized.network();
    let mut inputs = Vec::new();
    for (name, info) in network.inputs() {
        let bytes = feeds
            .get(name)
            .ok_or_else(|| format!("no data for input {name}"))?;
        inputs.push((name, info, bytes));
    }
    let outputs: Vec<(String, TensorInfo)> = network
        .outputs()
        .into_iter()
        .map(|(name, info)| (name.to_owned(), info.clone()))
        .collect();
    let mut buffers: Vec<Vec<u8>> = outputs
        .iter()
        .map(|(_, info)| vec![0u8; info.num_bytes().unwrap_or(0)])
        .collect();
    let id = rt
        .load_network(optimized)
        .map_err(|e| format!("load: {e}"))?;
    let bound: Vec<InputTensor<'_>> = inputs
        .iter()
        .map(|(name, info, data)| InputTensor { name, info, data })
        .collect();
    let mut bound_outputs: Vec<OutputTensor<'_>> = outputs
        .iter()
        .zip(buffers.iter_mut())
        .map(|((name, info), data)| OutputTensor { name, info, data })
        .collect();
    let run = rt.enqueue(id, &bound, &mut bound_outputs);
    drop(bound_outputs);
    let unload = rt.unload_network(id);
    run.map_err(|e| format!("enqueue: {e}"))?;
    unload.map_err(|e| format!("unload: {e}"))?;
    Ok(outputs
        .into_iter()
        .zip(buffers)
        .map(|((name, info), bytes)| (name, info, bytes))
        .collect())
}

/// Float32 values from their little-endian bytes.
pub(crate) fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The reason a case that [`oracle::evaluate`] does not define is skipped for CpuRef, and
/// checked against CpuRef only for other backends.
const NO_ORACLE: &str = "no independent oracle";

/// Runs one case on `backend` (pinned) and checks its output against [`oracle::evaluate`] of
/// the same inputs, with [`oracle::compare`]'s tolerances. A case the oracle does not define
/// is [`NO_ORACLE`]: skipped for CpuRef, and compared with CpuRef's output (within 1e-4
/// relative) for any other backend, which says so in its detail.
pub(crate) fn run_case(
    rt: &Runtime,
    backend: &str,
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    output: &TensorInfo,
    kit: &KitOptions,
) -> Result<(Outcome, String), String> {
    let quantized = inputs
        .iter()
        .chain([output])
        .any(|t| t.data_type.is_quantized());
    if quantized {
        return run_quantized_case(rt, backend, layer, inputs, output, kit);
    }
    let mut n = NetworkBuilder::new();
    let mut refs: Vec<TensorRef> = Vec::new();
    let mut feeds = HashMap::new();
    let mut tensors = Vec::new();
    for (i, info) in inputs.iter().enumerate() {
        let values = seeded_bytes(info, 7 + i as u64)?;
        tensors.push(oracle::Tensor::from_bytes(info, &values)?);
        if info.is_constant {
            let constant = ConstTensor {
                info: info.clone(),
                data: values.into_iter().collect(),
            };
            refs.push(
                n.add_constant(&format!("const{i}"), constant)
                    .map_err(|e| e.to_string())?,
            );
        } else {
            let name = format!("in{i}");
            refs.push(
                n.add_input(&name, info.clone())
                    .map_err(|e| e.to_string())?,
            );
            feeds.insert(name, values);
        }
    }
    let out = match layer {
        LayerDescriptor::Constant(c) => n.add_constant("case", c.clone()),
        _ => n.add_layer("case", layer.clone(), &refs),
    }
    .map_err(|e| e.to_string())?;
    n.add_output("out", out).map_err(|e| e.to_string())?;
    let network = n.build().map_err(|e| e.to_string())?;
    let types: Vec<_> = inputs.iter().map(|t| t.data_type).collect();
    let want = oracle::evaluate_typed(layer, &tensors, &types);
    if want.is_err() && backend == "CpuRef" {
        let why = want.err().unwrap_or_default();
        return Ok((Outcome::Skipped, format!("{NO_ORACLE}: {why}")));
    }
    let run_on = |prefs: &[&str], pin: Option<&str>| -> Result<_, String> {
        let options = OptimizerOptions {
            pins: pin
                .map(|b| vec![("case".to_owned(), b.to_owned())])
                .unwrap_or_default(),
            ..kit.optimizer_options(backend)
        };
        let optimized = rt
            .optimize(&network, prefs, &options)
            .map_err(|e| e.to_string())?;
        let mut outputs = run_optimized(rt, &optimized, &feeds)?;
        outputs.pop().ok_or_else(|| "no output".to_owned())
    };
    let (_, info, got) = run_on(&[backend, "CpuRef"], Some(backend))?;
    match want {
        Ok(want) => {
            let worst = oracle::compare(&info, &got, &want)?;
            Ok((Outcome::Passed, format!("max |diff| vs oracle {worst:.2e}")))
        }
        Err(why) => {
            let (_, _, reference) = run_on(&["CpuRef"], None)?;
            let worst = compare_with_cpu_ref(&info, &got, &reference)?;
            Ok((
                Outcome::Passed,
                format!("{NO_ORACLE} ({why}): max |diff| vs CpuRef only {worst:.2e}"),
            ))
        }
    }
}

/// The network of one case: its inputs (constants, or network inputs fed with seeded data),
/// the layer (its output quantised with `output`'s parameters when they are given) and the
/// output. Returns the network and the feeds.
fn case_network(
    layer: &LayerDescriptor,
    inputs: &[(TensorInfo, Vec<u8>)],
    output: &TensorInfo,
) -> Result<(backplane::graph::network::Network, HashMap<String, Vec<u8>>), String> {
    let mut n = NetworkBuilder::new();
    let mut refs: Vec<TensorRef> = Vec::new();
    let mut feeds = HashMap::new();
    for (i, (info, values)) in inputs.iter().enumerate() {
        if info.is_constant {
            let constant = ConstTensor {
                info: info.clone(),
                data: values.iter().copied().collect(),
            };
            refs.push(
                n.add_constant(&format!("const{i}"), constant)
                    .map_err(|e| e.to_string())?,
            );
        } else {
            let name = format!("in{i}");
            refs.push(
                n.add_input(&name, info.clone())
                    .map_err(|e| e.to_string())?,
            );
            feeds.insert(name, values.clone());
        }
    }
    let out = match output.quantization.as_ref().into_option() {
        Some(q) if output.data_type.is_quantized() => {
            n.add_quantized_layer("case", layer.clone(), &refs, q.clone())
        }
        _ => n.add_layer("case", layer.clone(), &refs),
    }
    .map_err(|e| e.to_string())?;
    n.add_output("out", out).map_err(|e| e.to_string())?;
    Ok((n.build().map_err(|e| e.to_string())?, feeds))
}

/// Runs a case with quantised tensors on `backend` (pinned) and checks its output against
/// [`quantized_oracle::evaluate`] with [`quantized_oracle::compare`] (exactly, or within one
/// step where the definition computes on real values in f32). A case that oracle does not
/// define fails: every quantised case of the suite has one (a unit test says so).
fn run_quantized_case(
    rt: &Runtime,
    backend: &str,
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    output: &TensorInfo,
    kit: &KitOptions,
) -> Result<(Outcome, String), String> {
    let data: Vec<(TensorInfo, Vec<u8>)> = inputs
        .iter()
        .enumerate()
        .map(|(i, info)| Ok((info.clone(), seeded_bytes(info, 7 + i as u64)?)))
        .collect::<Result<_, String>>()?;
    let pairs: Vec<(&TensorInfo, &[u8])> = data.iter().map(|(i, b)| (i, b.as_slice())).collect();
    let want = quantized_oracle::evaluate(layer, &pairs, output)
        .map_err(|e| format!("{NO_ORACLE}: {e}"))?;
    let (network, feeds) = case_network(layer, &data, output)?;
    let options = OptimizerOptions {
        pins: vec![("case".to_owned(), backend.to_owned())],
        ..kit.optimizer_options(backend)
    };
    let optimized = rt
        .optimize(&network, &[backend, "CpuRef"], &options)
        .map_err(|e| e.to_string())?;
    let (_, info, got) = run_optimized(rt, &optimized, &feeds)?
        .pop()
        .ok_or_else(|| "no output".to_owned())?;
    let worst = quantized_oracle::compare(&info, &got, &want)?;
    let unit = if info.data_type.is_quantized() {
        format!(
            " step(s), {}",
            match want.tolerance {
                quantized_oracle::Tolerance::Exact => "exact required",
                quantized_oracle::Tolerance::OneStep => "one allowed",
            }
        )
    } else {
        " (Float32, bit-exact required)".to_owned()
    };
    Ok((
        Outcome::Passed,
        format!("max |diff| vs quantized oracle {worst}{unit}"),
    ))
}

/// The check of a case [`oracle::evaluate`] does not define, on a backend other than CpuRef:
/// its output against CpuRef's, exactly for integers and booleans, within 1e-4 relative for
/// Float32.
fn compare_with_cpu_ref(info: &TensorInfo, got: &[u8], want: &[u8]) -> Result<f32, String> {
    if info.data_type != DataType::Float32 {
        return if got == want {
            Ok(0.0)
        } else {
            Err(format!("{} differs from CpuRef's", info.data_type))
        };
    }
    let mut worst = 0f32;
    for (got, want) in f32_values(got).iter().zip(&f32_values(want)) {
        if got.is_nan() && want.is_nan() {
            continue;
        }
        let diff = (got - want).abs();
        if !got.is_finite() && got.to_bits() != want.to_bits() || diff > 1e-4 * (1.0 + want.abs()) {
            return Err(format!("differs from CpuRef: {got} vs {want}"));
        }
        worst = worst.max(diff);
    }
    Ok(worst)
}
