//! Test plugin `TestAlpha` (vendor `Test`): a small but real backend, like Arm NN's sample
//! dynamic backend.
//!
//! It supports Input and Output (a copy) and ElementwiseBinary `Add` in Float32 with numpy
//! broadcasting, and refuses everything else with a reason naming the layer kind. Capabilities:
//! `NonConstWeights = false` and the custom `TestAlphaCapability = true`. Its constructor logs
//! one `info` line (`"TestAlpha backend created"`), to test log forwarding.
//!
//! Failure mode: none. The host must load it and report it `registered` as `TestAlpha`.

use std::sync::Arc;

use backplane_api::{
    Backend, BackendError, BackendResult, BinaryOperation, Capabilities, DataType, LayerDescriptor,
    MemoryManager, Support, TensorInfo, TensorView, TensorViewMut, Workload, WorkloadDesc,
    WorkloadFactory, capabilities::names,
};

/// The id this plugin exports.
pub const ID: &str = "TestAlpha";

/// The custom capability only this backend reports (as `true`).
pub const CAPABILITY: &str = "TestAlphaCapability";

/// The `TestAlpha` backend.
#[derive(Debug)]
pub struct TestAlpha;

impl TestAlpha {
    /// A new instance; logs one `info` line.
    pub fn new() -> Self {
        log::info!("{ID} backend created");
        Self
    }
}

impl Default for TestAlpha {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for TestAlpha {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_bool(names::NON_CONST_WEIGHTS, false)
            .with_bool(CAPABILITY, true)
    }

    fn is_layer_supported(
        &self,
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Support {
        check(layer, inputs, outputs)
            .err()
            .unwrap_or(Support::Supported)
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(AlphaWorkloadFactory))
    }
}

fn unsupported(reason: String) -> Support {
    Support::unsupported(format!("{ID}: {reason}"))
}

fn check_tensors(
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
    n_in: usize,
    n_out: usize,
) -> Result<(), Support> {
    if inputs.len() != n_in || outputs.len() != n_out {
        return Err(unsupported(format!(
            "expected {n_in} input(s) and {n_out} output(s), got {} and {}",
            inputs.len(),
            outputs.len()
        )));
    }
    match inputs
        .iter()
        .chain(outputs)
        .find(|t| t.data_type != DataType::Float32)
    {
        Some(t) => Err(unsupported(format!(
            "supports only Float32, got {}",
            t.data_type
        ))),
        None => Ok(()),
    }
}

fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), Support> {
    match layer {
        LayerDescriptor::Input(_) | LayerDescriptor::Output(_) => {
            check_tensors(inputs, outputs, 1, 1)?;
            if inputs[0].shape != outputs[0].shape {
                return Err(unsupported(format!(
                    "{}: input and output shapes differ",
                    layer.kind()
                )));
            }
            Ok(())
        }
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add) => {
            check_tensors(inputs, outputs, 2, 1)?;
            match backplane_api::shapes::broadcast(&inputs[0].shape, &inputs[1].shape) {
                Ok(s) if s.as_slice() == outputs[0].shape.as_slice() => Ok(()),
                Ok(s) => Err(unsupported(format!(
                    "Add output shape {:?} is not the broadcast shape {s:?}",
                    outputs[0].shape.as_slice()
                ))),
                Err(why) => Err(unsupported(format!("Add: {why}"))),
            }
        }
        LayerDescriptor::ElementwiseBinary(op) => Err(unsupported(format!(
            "does not support ElementwiseBinary {op:?} (only Add)"
        ))),
        other => Err(unsupported(format!("does not support {}", other.kind()))),
    }
}

/// Element strides of `shape` seen as a tensor of `rank` dimensions (aligned to the right),
/// with 0 for every broadcast dimension (size 1 or absent).
fn broadcast_strides(shape: &[u32], rank: usize) -> Vec<usize> {
    let mut strides = vec![0; rank];
    let mut stride = 1usize;
    for (k, &d) in shape.iter().enumerate().rev() {
        strides[rank - shape.len() + k] = if d == 1 { 0 } else { stride };
        stride *= d as usize;
    }
    strides
}

/// Creates `TestAlpha` workloads.
#[derive(Debug)]
pub struct AlphaWorkloadFactory;

impl WorkloadFactory for AlphaWorkloadFactory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        let (inputs, outputs) = (desc.inputs.as_slice(), desc.outputs.as_slice());
        if let Err(Support::Unsupported(reason)) = check(desc.layer, inputs, outputs) {
            return Err(BackendError::unsupported(format!(
                "layer {}: {reason}",
                desc.name
            )));
        }
        match desc.layer {
            LayerDescriptor::Input(_) | LayerDescriptor::Output(_) => Ok(Box::new(CopyWorkload)),
            LayerDescriptor::ElementwiseBinary(BinaryOperation::Add) => Ok(Box::new(
                AddWorkload::new(&inputs[0], &inputs[1], &outputs[0]),
            )),
            other => Err(BackendError::unsupported(format!(
                "{ID} has no workload for {}",
                other.kind()
            ))),
        }
    }
}

fn expect_counts(inputs: usize, outputs: usize, n_in: usize, n_out: usize) -> BackendResult<()> {
    if inputs != n_in || outputs != n_out {
        return Err(BackendError::invalid_argument(format!(
            "expected {n_in} input(s) and {n_out} output(s), got {inputs} and {outputs}"
        )));
    }
    Ok(())
}

/// Input and Output: copies its one input to its one output.
#[derive(Debug)]
pub struct CopyWorkload;

impl Workload for CopyWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 1, 1)?;
        let (src, dst) = (inputs[0].as_f32()?, outputs[0].as_f32_mut()?);
        if src.len() != dst.len() {
            return Err(BackendError::invalid_argument(format!(
                "copy of {} elements into {}",
                src.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(src);
        Ok(())
    }
}

/// ElementwiseBinary Add: `out = a + b` in Float32 with numpy broadcasting.
#[derive(Debug)]
pub struct AddWorkload {
    /// Output dimensions.
    out: Vec<usize>,
    /// Strides of `a` per output dimension (0 where broadcast).
    a_strides: Vec<usize>,
    /// Strides of `b` per output dimension (0 where broadcast).
    b_strides: Vec<usize>,
    /// Element counts of `a`, `b` and the output.
    lens: [usize; 3],
}

impl AddWorkload {
    /// A workload for shapes already checked by layer support (`out` is the broadcast shape).
    pub fn new(a: &TensorInfo, b: &TensorInfo, out: &TensorInfo) -> Self {
        let rank = out.shape.len();
        let count = |t: &TensorInfo| t.shape.iter().map(|&d| d as usize).product();
        Self {
            out: out.shape.iter().map(|&d| d as usize).collect(),
            a_strides: broadcast_strides(&a.shape, rank),
            b_strides: broadcast_strides(&b.shape, rank),
            lens: [count(a), count(b), count(out)],
        }
    }
}

impl Workload for AddWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 2, 1)?;
        let (a, b) = (inputs[0].as_f32()?, inputs[1].as_f32()?);
        let out = outputs[0].as_f32_mut()?;
        let lens = [a.len(), b.len(), out.len()];
        if lens != self.lens {
            return Err(BackendError::invalid_argument(format!(
                "Add expects {:?} elements (a, b, out), got {lens:?}",
                self.lens
            )));
        }
        for (i, o) in out.iter_mut().enumerate() {
            let (mut rest, mut ia, mut ib) = (i, 0, 0);
            for d in (0..self.out.len()).rev() {
                let idx = rest % self.out[d];
                rest /= self.out[d];
                ia += idx * self.a_strides[d];
                ib += idx * self.b_strides[d];
            }
            *o = a[ia] + b[ib];
        }
        Ok(())
    }
}

backplane_api::export_backend!(id: "TestAlpha", vendor: "Test", backend: TestAlpha::new);

#[cfg(test)]
mod tests {
    use backplane_api::{LayerKind, bytemuck};

    use super::*;

    fn f32t(shape: &[u32]) -> TensorInfo {
        TensorInfo::new(shape, DataType::Float32)
    }

    #[test]
    fn add_broadcasts_like_numpy() {
        let (ia, ib, io) = (f32t(&[2, 1, 3]), f32t(&[2, 1]), f32t(&[2, 2, 3]));
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        let backend = TestAlpha::new();
        assert_eq!(
            backend.is_layer_supported(&add, &[ia.clone(), ib.clone()], std::slice::from_ref(&io)),
            Support::Supported
        );
        let a: Vec<f32> = (0..6).map(|x| x as f32).collect();
        let b = [100.0f32, 200.0];
        let mut out = [0u8; 48];
        let w = AddWorkload::new(&ia, &ib, &io);
        w.execute(
            &[
                TensorView::new(&ia, bytemuck::cast_slice(&a)),
                TensorView::new(&ib, bytemuck::cast_slice(&b)),
            ],
            &mut [TensorViewMut::new(&io, &mut out)],
        )
        .unwrap();
        let got: Vec<f32> = out
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        // out[i][j][k] = a[i][0][k] + b[j][0]: for each row of a, each b
        let mut want = Vec::new();
        for row in a.chunks_exact(3) {
            for y in b {
                want.extend(row.iter().map(|x| x + y));
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn refusals_name_the_layer_kind() {
        let backend = TestAlpha::new();
        let s = backend.is_layer_supported(&LayerDescriptor::MemCopy, &[f32t(&[1])], &[f32t(&[1])]);
        assert_eq!(
            s,
            Support::unsupported(format!(
                "TestAlpha: does not support {}",
                LayerKind::MemCopy
            ))
        );
        let mul = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);
        let s = backend.is_layer_supported(&mul, &[f32t(&[1]), f32t(&[1])], &[f32t(&[1])]);
        assert_eq!(
            s,
            Support::unsupported("TestAlpha: does not support ElementwiseBinary Mul (only Add)")
        );
    }
}
