//! What the Backend API 1.0 compat plugins run, written against the frozen 1.0 API:
//! `ElementwiseBinary` (every 1.0 operation, numpy broadcasting) and `Activation` ReLU, in
//! Float32, plus the fused Add→ReLU that `OldFull` substitutes.
//!
//! The `match` on [`BinaryOperation`] below is exhaustive over the six 1.0 operations: a
//! newer host that handed this code an operation added later would make it read a
//! discriminant its enum does not have. The host's version gating is what prevents that.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendError, BackendResult, BinaryOperation,
    DataType, LayerDescriptor, Support, TensorInfo, TensorView, TensorViewMut, Workload,
    WorkloadDesc,
};

/// The `operation` name of the fused layer `OldFull` substitutes for Add→ReLU.
pub const ADD_RELU: &str = "AddReLU";

/// Whether `backend` runs `layer`: `Err` carries the reason.
pub fn check(
    backend: &str,
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    if let Some(t) = inputs
        .iter()
        .chain(outputs)
        .find(|t| t.data_type != DataType::Float32)
    {
        return Err(format!("{backend}: supports only Float32, got {}", t.data_type));
    }
    let counts = |n_in: usize| {
        if inputs.len() == n_in && outputs.len() == 1 {
            Ok(())
        } else {
            Err(format!(
                "{backend}: {} expects {n_in} input(s) and 1 output",
                layer.kind()
            ))
        }
    };
    match layer {
        LayerDescriptor::ElementwiseBinary(_) => {
            counts(2)?;
            let shape = backplane_api::shapes::broadcast(&inputs[0].shape, &inputs[1].shape)
                .map_err(|e| format!("{backend}: {e}"))?;
            if shape.as_slice() != outputs[0].shape.as_slice() {
                return Err(format!("{backend}: output is not the broadcast shape"));
            }
            Ok(())
        }
        LayerDescriptor::Activation(a) if a.function == ActivationFunction::ReLU => counts(1),
        LayerDescriptor::PreCompiled(p) if p.backend.as_str() == backend => {
            if p.operation.as_str() == ADD_RELU {
                counts(2)
            } else {
                Err(format!("{backend}: unknown fused operation {}", p.operation))
            }
        }
        other => Err(format!("{backend}: does not support {}", other.kind())),
    }
}

/// The workload of one layer that [`check`] accepted.
pub fn create_workload(backend: &str, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (inputs, outputs) = (desc.inputs.as_slice(), desc.outputs.as_slice());
    check(backend, desc.layer, inputs, outputs)
        .map_err(|why| BackendError::unsupported(format!("layer {}: {why}", desc.name)))?;
    Ok(match desc.layer {
        LayerDescriptor::ElementwiseBinary(op) => {
            Box::new(BinaryWorkload::new(*op, &inputs[0], &inputs[1], &outputs[0], false))
        }
        LayerDescriptor::PreCompiled(_) => Box::new(BinaryWorkload::new(
            BinaryOperation::Add,
            &inputs[0],
            &inputs[1],
            &outputs[0],
            true,
        )),
        _ => Box::new(ReluWorkload),
    })
}

fn relu() -> ActivationDescriptor {
    ActivationDescriptor {
        function: ActivationFunction::ReLU,
        a: 0.0,
        b: 0.0,
    }
}

/// Element strides of `shape` seen with `rank` dimensions (aligned right), 0 where broadcast.
fn broadcast_strides(shape: &[u32], rank: usize) -> Vec<usize> {
    let mut strides = vec![0; rank];
    let mut stride = 1usize;
    for (k, &d) in shape.iter().enumerate().rev() {
        strides[rank - shape.len() + k] = if d == 1 { 0 } else { stride };
        stride *= d as usize;
    }
    strides
}

/// An element-wise binary operation, optionally followed by ReLU.
#[derive(Debug)]
pub struct BinaryWorkload {
    op: BinaryOperation,
    out: Vec<usize>,
    a_strides: Vec<usize>,
    b_strides: Vec<usize>,
    then_relu: bool,
}

impl BinaryWorkload {
    fn new(op: BinaryOperation, a: &TensorInfo, b: &TensorInfo, out: &TensorInfo, then_relu: bool) -> Self {
        let rank = out.shape.len();
        Self {
            op,
            out: out.shape.iter().map(|&d| d as usize).collect(),
            a_strides: broadcast_strides(&a.shape, rank),
            b_strides: broadcast_strides(&b.shape, rank),
            then_relu,
        }
    }
}

impl Workload for BinaryWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        let ([a, b], [out]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument("expected 2 inputs and 1 output"));
        };
        let (a, b, out) = (a.as_f32()?, b.as_f32()?, out.as_f32_mut()?);
        let f: fn(f32, f32) -> f32 = match self.op {
            BinaryOperation::Add => |x, y| x + y,
            BinaryOperation::Sub => |x, y| x - y,
            BinaryOperation::Mul => |x, y| x * y,
            BinaryOperation::Div => |x, y| x / y,
            BinaryOperation::Maximum => f32::max,
            BinaryOperation::Minimum => f32::min,
        };
        for (i, o) in out.iter_mut().enumerate() {
            let (mut rest, mut ia, mut ib) = (i, 0, 0);
            for d in (0..self.out.len()).rev() {
                let idx = rest % self.out[d];
                rest /= self.out[d];
                ia += idx * self.a_strides[d];
                ib += idx * self.b_strides[d];
            }
            let (x, y) = (a.get(ia), b.get(ib));
            *o = f(*x.ok_or_else(short)?, *y.ok_or_else(short)?);
        }
        if self.then_relu {
            relu().apply_in_place(out);
        }
        Ok(())
    }
}

fn short() -> BackendError {
    BackendError::invalid_argument("an input is shorter than its shape")
}

/// ReLU, with the API's own activation kernel.
#[derive(Debug)]
pub struct ReluWorkload;

impl Workload for ReluWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        let ([x], [out]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument("expected 1 input and 1 output"));
        };
        let (x, out) = (x.as_f32()?, out.as_f32_mut()?);
        if x.len() != out.len() {
            return Err(BackendError::invalid_argument("input and output sizes differ"));
        }
        out.copy_from_slice(x);
        relu().apply_in_place(out);
        Ok(())
    }
}

/// `Supported`, or `Unsupported` with the reason of [`check`].
pub fn support(backend: &str, layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Support {
    match check(backend, layer, inputs, outputs) {
        Ok(()) => Support::Supported,
        Err(why) => Support::unsupported(why),
    }
}
