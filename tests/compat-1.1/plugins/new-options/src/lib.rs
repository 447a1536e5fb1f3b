//! `NewOptions` (vendor `New`): a Backend API 1.1 plugin, built by a different compiler than
//! the host, that shows the 1.1 additions reaching a plugin:
//!
//! - it runs `ElementwiseUnary` `Neg` (a 1.1 layer kind) and `ElementwiseBinary` `Add`;
//! - `create_workload_factory_with_options` reads the backend option `Offset` (a number,
//!   default 0): every `Add` it runs computes `a + b + Offset`, so a caller sees in the numbers
//!   that the option arrived;
//! - `optimize_subgraph_with_options` reads `Decline`: when true, it returns every layer of
//!   the subgraph as failed, and the host re-assigns them to the next preferred backend.
//!
//! The plain 1.0 entries exist too (the trait requires them) and behave as with no options.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendOptions, BackendResult, BinaryOperation, Capabilities,
    DataType, LayerDescriptor, MemoryManager, OptimizationViews, SubgraphView, Support,
    TensorInfo, TensorView, TensorViewMut, UnaryOperation, Value, Workload, WorkloadDesc,
    WorkloadFactory, capabilities::names,
};

/// The id this plugin exports.
pub const ID: &str = "NewOptions";

/// The backend.
#[derive(Debug)]
pub struct NewOptions;

fn check(layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Result<(), String> {
    if let Some(t) = inputs.iter().chain(outputs).find(|t| t.data_type != DataType::Float32) {
        return Err(format!("{ID}: supports only Float32, got {}", t.data_type));
    }
    match layer {
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add)
            if inputs.len() == 2
                && outputs.len() == 1
                && inputs[0].shape == inputs[1].shape
                && inputs[0].shape == outputs[0].shape =>
        {
            Ok(())
        }
        LayerDescriptor::ElementwiseUnary(UnaryOperation::Neg)
            if inputs.len() == 1 && outputs.len() == 1 && inputs[0].shape == outputs[0].shape =>
        {
            Ok(())
        }
        other => Err(format!("{ID}: runs only same-shape Add and Neg, not this {}", other.kind())),
    }
}

impl Backend for NewOptions {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool(names::HOST_MEMORY, true)
    }

    fn is_layer_supported(&self, layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Support {
        match check(layer, inputs, outputs) {
            Ok(()) => Support::Supported,
            Err(why) => Support::unsupported(why),
        }
    }

    fn create_workload_factory(&self, memory: Option<Arc<dyn MemoryManager>>) -> BackendResult<Box<dyn WorkloadFactory>> {
        self.create_workload_factory_with_options(memory, &BackendOptions::new())
    }

    fn create_workload_factory_with_options(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
        options: &BackendOptions,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        let offset = match options.get("Offset") {
            None => 0.0,
            Some(Value::Int(i)) => *i as f32,
            Some(Value::Float(x)) => *x as f32,
            Some(other) => {
                return Err(BackendError::invalid_argument(format!("{ID}: option Offset={other} is not a number")));
            }
        };
        Ok(Box::new(Factory { offset }))
    }

    fn optimize_subgraph_with_options(
        &self,
        subgraph: &SubgraphView<'_>,
        options: &BackendOptions,
    ) -> BackendResult<OptimizationViews> {
        if options.is_enabled("Decline") {
            return Ok(OptimizationViews {
                failed: subgraph.layers.iter().map(|l| l.id).collect(),
                ..OptimizationViews::default()
            });
        }
        Ok(OptimizationViews::untouched(subgraph))
    }
}

struct Factory {
    offset: f32,
}

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        check(desc.layer, &desc.inputs, &desc.outputs)
            .map_err(|why| BackendError::unsupported(format!("layer {}: {why}", desc.name)))?;
        Ok(match desc.layer {
            LayerDescriptor::ElementwiseUnary(_) => Box::new(NegWorkload),
            _ => Box::new(AddWorkload { offset: self.offset }),
        })
    }
}

/// `a + b + offset`, element by element.
struct AddWorkload {
    offset: f32,
}

impl Workload for AddWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        let ([a, b], [out]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument("expected 2 inputs and 1 output"));
        };
        let (a, b, out) = (a.as_f32()?, b.as_f32()?, out.as_f32_mut()?);
        if a.len() != out.len() || b.len() != out.len() {
            return Err(BackendError::invalid_argument("tensor sizes differ"));
        }
        for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
            *o = x + y + self.offset;
        }
        Ok(())
    }
}

/// `-x`, element by element.
struct NegWorkload;

impl Workload for NegWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        let ([x], [out]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument("expected 1 input and 1 output"));
        };
        let (x, out) = (x.as_f32()?, out.as_f32_mut()?);
        if x.len() != out.len() {
            return Err(BackendError::invalid_argument("tensor sizes differ"));
        }
        for (o, v) in out.iter_mut().zip(x) {
            *o = -v;
        }
        Ok(())
    }
}

backplane_api::export_backend!(id: "NewOptions", vendor: "New", backend: || NewOptions);
