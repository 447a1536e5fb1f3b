//! Assignment passes: each layer to a backend by preference and support, then MemCopy
//! layers where two backends cannot share memory.

use std::collections::BTreeMap;

use backplane_api::{LayerDescriptor, LayerKind, capabilities::names};

use super::{
    Assignment, Boundary, HOST, OptimizeError, OptimizedNetwork, OptimizerOptions, Refusal,
    Strategy, UnsupportedLayer, infos,
};
use crate::{
    graph::network::{Network, TensorRef},
    plugins::registry::BackendRegistry,
};

/// One assignment pass: each layer to the first usable backend that supports it and that did
/// not return it as failed (`skips`).
pub(super) fn assign(
    network: &Network,
    registry: &BackendRegistry,
    usable: &[&str],
    options: &OptimizerOptions,
    skips: &[Vec<String>],
) -> Result<Vec<Assignment>, OptimizeError> {
    let mut assignments = Vec::with_capacity(network.layers().len());
    let mut unsupported = Vec::new();
    for (index, layer) in network.layers().iter().enumerate() {
        let inputs = infos(network, layer);
        // A backend is asked about a constant with its value in the descriptor: one mapped
        // from a compiled network (optimised again) is copied for the question.
        let full = layer.shared.is_some().then(|| layer.full_descriptor());
        let descriptor = full.as_ref().unwrap_or(&layer.descriptor);
        let ask = |id: &str| -> Result<(), String> {
            let b = registry
                .get(id)
                .ok_or_else(|| "not registered".to_owned())?;
            if skips[index].iter().any(|s| s == id) {
                return Err(match b.fault_reason() {
                    Some(why) => format!("faulted ({why})"),
                    None => "its optimize_subgraph returned the layer as failed".to_owned(),
                });
            }
            if b.is_device()
                && matches!(
                    layer.kind(),
                    LayerKind::Input | LayerKind::Output | LayerKind::Constant
                )
            {
                return Err(format!(
                    "{id} computes in its own memory; network inputs, outputs and constants \
                     stay in host memory"
                ));
            }
            b.supports(descriptor, &inputs, &layer.outputs)
        };
        if let Some((_, pinned)) = options.pins.iter().find(|(l, _)| *l == layer.name) {
            ask(pinned).map_err(|reason| OptimizeError::PinFailed {
                layer: layer.name.clone(),
                backend: pinned.clone(),
                reason,
            })?;
            assignments.push(Assignment {
                backend: pinned.clone(),
                why: "pinned".into(),
                refusals: vec![],
                replaced: vec![],
                boundary: None,
                origins: vec![],
            });
            continue;
        }
        let mut refusals = Vec::new();
        let mut chosen = None;
        for (rank, id) in usable.iter().enumerate() {
            match ask(id) {
                Ok(()) => {
                    let why = if rank == 0 {
                        "first preference".to_owned()
                    } else {
                        format!(
                            "preference {} of {}; earlier ones refused",
                            rank + 1,
                            usable.len()
                        )
                    };
                    chosen = Some(Assignment {
                        backend: id.to_string(),
                        why,
                        refusals: std::mem::take(&mut refusals),
                        replaced: vec![],
                        boundary: None,
                        origins: vec![],
                    });
                    break;
                }
                Err(reason) if options.no_fallback && rank == 0 => {
                    return Err(OptimizeError::FallbackDisabled {
                        layer: layer.name.clone(),
                        backend: id.to_string(),
                        reason,
                    });
                }
                Err(reason) => refusals.push(Refusal {
                    backend: id.to_string(),
                    reason,
                }),
            }
        }
        match chosen {
            Some(a) => assignments.push(a),
            None => {
                unsupported.push(UnsupportedLayer {
                    layer: layer.name.clone(),
                    kind: layer.kind(),
                    refusals,
                });
                assignments.push(Assignment {
                    backend: String::new(),
                    why: String::new(),
                    refusals: vec![],
                    replaced: vec![],
                    boundary: None,
                    origins: vec![],
                });
            }
        }
    }
    if !unsupported.is_empty() {
        return Err(OptimizeError::Unsupported(unsupported));
    }
    Ok(assignments)
}

/// Backends that keep tensors in host memory can read each other's tensors; any other pair
/// gets a MemCopy layer between them, run by the consumer's backend, else the producer's, else
/// the first preferred backend that supports MemCopy (an error names them all if none does).
pub(super) fn insert_mem_copies(
    network: &Network,
    assignments: Vec<Assignment>,
    registry: &BackendRegistry,
    usable: &[&str],
) -> Result<OptimizedNetwork, OptimizeError> {
    let host_memory = |id: &str| {
        registry
            .capabilities(id)
            .is_some_and(|c| c.is_enabled(names::HOST_MEMORY))
    };
    let device = |id: &str| registry.get(id).is_some_and(|b| b.is_device());
    let needs_copy = |a: &str, b: &str| a != b && !(host_memory(a) && host_memory(b));
    // Where a layer's tensor lives: a device backend's memory, else the host's.
    fn memory_of(id: &str, device: impl Fn(&str) -> bool) -> &str {
        if device(id) { id } else { HOST }
    }
    let any_copy = network.layers().iter().enumerate().any(|(i, l)| {
        l.inputs
            .iter()
            .any(|t| needs_copy(&assignments[t.layer].backend, &assignments[i].backend))
    });
    if !any_copy {
        return Ok(OptimizedNetwork {
            network: network.clone(),
            assignments,
            notes: vec![],
            backend_options: BTreeMap::new(),
            source: None,
            prepared: Vec::new(),
        });
    }
    let mut builder = crate::graph::network::NetworkBuilder::new();
    let mut new_assignments = Vec::new();
    let mut map: Vec<Option<TensorRef>> = vec![None; network.layers().len()];
    for (i, l) in network.layers().iter().enumerate() {
        let mut inputs = Vec::with_capacity(l.inputs.len());
        for (slot, t) in l.inputs.iter().enumerate() {
            let src = map[t.layer].expect("topological order");
            let (from, to) = (&assignments[t.layer].backend, &assignments[i].backend);
            // A device backend gets its constants at workload creation, not in its memory
            // (their `DeviceTensor`s carry `NO_BUFFER`), in process or out: no copy.
            let producer = &network.layers()[t.layer];
            let constant_for_device = producer.kind() == LayerKind::Constant
                && registry
                    .get(to)
                    .is_some_and(|b| b.computes_in_device_memory());
            if needs_copy(from, to) && !constant_for_device {
                // A name no layer of the network has (a user may have used the obvious one).
                let mut name = format!("{}_memcopy_{slot}", l.name);
                let mut k = 1;
                while network.layers().iter().any(|x| x.name == name) {
                    name = format!("{}_memcopy_{slot}_{k}", l.name);
                    k += 1;
                }
                let copy = builder
                    .add_layer(&name, LayerDescriptor::MemCopy, &[src])
                    .expect("MemCopy keeps the shape");
                let (from_memory, to_memory) = (memory_of(from, device), memory_of(to, device));
                if from_memory != to_memory {
                    // A device boundary: the host moves the tensor itself, through the device
                    // backend's memory manager (the consumer's when it has one).
                    let strategy = match producer.kind() {
                        LayerKind::Input
                            if registry.get(to).is_some_and(|b| b.imports_host_memory()) =>
                        {
                            Strategy::Import
                        }
                        _ => Strategy::Copy,
                    };
                    let runs_on = if device(to) { to } else { from };
                    new_assignments.push(Assignment {
                        backend: runs_on.to_owned(),
                        why: format!(
                            "inserted: {from} and {to} cannot share memory ({from_memory} -> \
                             {to_memory}, {strategy})"
                        ),
                        refusals: vec![],
                        replaced: vec![],
                        boundary: Some(Boundary {
                            from: from_memory.to_owned(),
                            to: to_memory.to_owned(),
                            strategy,
                        }),
                        origins: vec![],
                    });
                    inputs.push(copy);
                    continue;
                }
                let info = builder.tensor_info(copy).expect("just added").clone();
                // The consumer, else the producer, else any preferred backend that copies.
                let mut refusals = Vec::new();
                let mut runs_on = None;
                for id in [to.as_str(), from.as_str()]
                    .into_iter()
                    .chain(usable.iter().copied())
                    // Between two host memories: not on a device backend.
                    .filter(|id| !device(id))
                {
                    // Each backend is asked once (the consumer and producer are preferences too).
                    if refusals.iter().any(|x: &Refusal| x.backend == id) {
                        continue;
                    }
                    let Some(b) = registry.get(id) else { continue };
                    let info = std::slice::from_ref(&info);
                    match b.supports(&LayerDescriptor::MemCopy, info, info) {
                        Ok(()) => {
                            runs_on = Some(id.to_owned());
                            break;
                        }
                        Err(reason) => refusals.push(Refusal {
                            backend: id.to_owned(),
                            reason,
                        }),
                    }
                }
                let Some(runs_on) = runs_on else {
                    return Err(OptimizeError::Unsupported(vec![UnsupportedLayer {
                        layer: name,
                        kind: LayerKind::MemCopy,
                        refusals,
                    }]));
                };
                new_assignments.push(Assignment {
                    backend: runs_on,
                    why: format!("inserted: {from} and {to} cannot share memory"),
                    refusals: vec![],
                    replaced: vec![],
                    boundary: None,
                    origins: vec![],
                });
                inputs.push(copy);
            } else {
                inputs.push(src);
            }
        }
        let out = builder
            .re_add(l, &inputs)
            .expect("a valid network stays valid");
        map[i] = Some(out);
        new_assignments.push(assignments[i].clone());
    }
    let network = builder.build().expect("a valid network stays valid");
    Ok(OptimizedNetwork {
        network,
        assignments: new_assignments,
        notes: vec![],
        backend_options: BTreeMap::new(),
        source: None,
        prepared: Vec::new(),
    })
}
