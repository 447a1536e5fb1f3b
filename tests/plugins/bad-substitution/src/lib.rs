//! Test plugin `BadSubst` (vendor `Test`): supports ReLU (with a real workload), and its
//! `optimize_subgraph` returns only malformed substitutions:
//!
//! 1. a replacement whose inputs are not the tensors the replaced layers read from outside;
//! 2. a replacement that replaces a layer id it was not given;
//! 3. a replacement that is not a `PreCompiled` layer.
//!
//! Failure mode: malformed substitutions. The host must refuse each with a warning, treat the
//! subgraph as untouched, and still run the network.

use std::sync::Arc;

use backplane_api::{
    ActivationFunction, Backend, BackendError, BackendResult, LayerDescriptor, MemoryManager,
    OptimizationViews, PreCompiledDescriptor, SubgraphLayer, SubgraphView, Substitution, Support,
    TensorInfo, TensorView, TensorViewMut, Workload, WorkloadDesc, WorkloadFactory,
};

/// The id this plugin exports.
pub const ID: &str = "BadSubst";

/// The backend.
#[derive(Debug, Default)]
pub struct BadSubst;

/// Builds ReLU workloads.
#[derive(Debug)]
pub struct Factory;

/// `max(0, x)`.
#[derive(Debug)]
pub struct Relu;

fn is_relu(d: &LayerDescriptor) -> bool {
    matches!(d, LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU)
}

impl Backend for BadSubst {
    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        _: &[TensorInfo],
        _: &[TensorInfo],
    ) -> Support {
        if is_relu(layer) {
            Support::Supported
        } else {
            Support::unsupported(format!("{ID} runs only ReLU"))
        }
    }

    fn create_workload_factory(
        &self,
        _: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(Factory))
    }

    fn optimize_subgraph(&self, subgraph: &SubgraphView<'_>) -> BackendResult<OptimizationViews> {
        let Some(first) = subgraph.layers.first() else {
            return Ok(OptimizationViews::untouched(subgraph));
        };
        let fused =
            |inputs: Vec<u32>, replaced: Vec<u32>, descriptor: LayerDescriptor| Substitution {
                replaced: replaced.into(),
                replacement: SubgraphLayer {
                    id: 0,
                    name: "bogus".into(),
                    descriptor,
                    inputs: inputs.into(),
                    outputs: subgraph.outputs.clone(),
                },
            };
        let pre = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
            backend: ID.into(),
            operation: "Bogus".into(),
            payload: Default::default(),
        });
        let all: Vec<u32> = subgraph.layers.iter().map(|l| l.id).collect();
        Ok(OptimizationViews {
            substitutions: vec![
                fused(first.outputs.to_vec(), all.clone(), pre.clone()),
                fused(subgraph.inputs.to_vec(), vec![9999], pre),
                fused(subgraph.inputs.to_vec(), all, LayerDescriptor::MemCopy),
            ]
            .into(),
            ..OptimizationViews::untouched(subgraph)
        })
    }
}

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        if is_relu(desc.layer) {
            Ok(Box::new(Relu))
        } else {
            Err(BackendError::unsupported(format!(
                "{ID} cannot build {}",
                desc.name
            )))
        }
    }
}

impl Workload for Relu {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let ([input], [output]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument(
                "ReLU takes 1 input and writes 1 output",
            ));
        };
        for (d, s) in output.as_f32_mut()?.iter_mut().zip(input.as_f32()?) {
            *d = s.max(0.0);
        }
        Ok(())
    }
}

backplane_api::export_backend!(id: "BadSubst", vendor: "Test", backend: BadSubst::default);
