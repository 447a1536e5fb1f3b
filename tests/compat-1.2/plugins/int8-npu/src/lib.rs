//! `OldNpu` (vendor `Compat`): a Backend API 1.2 plugin, built by a different compiler than
//! the host, standing for an int8 accelerator that computes in host memory (its capabilities
//! declare `HostMemory`). It shows 1.2's quantized tensors reaching a plugin:
//!
//! - it runs `ElementwiseBinary` `Add` on `QAsymmU8` tensors of one shape (no broadcasting),
//!   each quantized per tensor with its own scale and zero point, which reach it in every
//!   `TensorInfo` (support query and workload creation);
//! - it runs a Float32 `Activation` `ReLU`;
//! - it refuses everything else, saying why.
//!
//! The `Add` is onnxruntime's `QLinearAdd`: it means "dequantize both inputs, add in f32,
//! quantize the sum with the output's parameters, rounding half to even and saturating", and
//! onnxruntime's x86-64 kernel (MLAS `qladd_avx2.cpp`) evaluates that in f32 as
//! `ra = a_scale / c_scale`, `rb = b_scale / c_scale`,
//! `fixed = c_offset - (ra * a_offset + rb * b_offset)`,
//! `c = saturate(round_half_even(fma(a, ra, fma(b, rb, fixed))))` on the raw bytes `a`, `b`.
//! This plugin computes that form, as CpuRef does, so its bytes are onnxruntime's: dequantizing
//! and adding literally in f32 rounds differently at a few percent of the input pairs (the
//! sums that land near a half step).

use std::sync::Arc;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, Backend, BackendError, BackendResult, BinaryOperation, Capabilities,
    DataType, LayerDescriptor, MemoryManager, ROption, Support, TensorInfo, TensorView, TensorViewMut, Workload,
    WorkloadDesc, WorkloadFactory, capabilities::names,
};

/// The id this plugin exports.
pub const ID: &str = "OldNpu";

/// The backend.
#[derive(Debug)]
pub struct OldNpu;

/// The scale and zero point of `t`, a `QAsymmU8` tensor quantized per tensor.
fn per_tensor_u8(t: &TensorInfo) -> Result<(f32, i32), String> {
    if t.data_type != DataType::QAsymmU8 {
        return Err(format!("{ID}: runs Add on QAsymmU8 tensors only, got {t}"));
    }
    t.check_quantization().map_err(|e| format!("{ID}: {e}"))?;
    match &t.quantization {
        ROption::RSome(q) if q.per_axis.is_none() => Ok((q.scale, q.offset)),
        ROption::RSome(_) => Err(format!(
            "{ID}: runs Add on per-tensor quantization only, {t} is quantized per axis"
        )),
        ROption::RNone => Err(format!("{ID}: {t} has no quantization parameters")),
    }
}

/// What the layer is, when this backend runs it.
enum Plan {
    /// A quantized `Add`: the kernel's constants (see the module doc).
    Add { ra: f32, rb: f32, fixed: f32 },
    /// A Float32 `ReLU`.
    Relu(ActivationDescriptor),
}

fn plan(layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Result<Plan, String> {
    match layer {
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add) => {
            let ([a, b], [c]) = (inputs, outputs) else {
                return Err(format!("{ID}: Add needs 2 inputs and 1 output"));
            };
            let ((a_scale, a_offset), (b_scale, b_offset), (c_scale, c_offset)) =
                (per_tensor_u8(a)?, per_tensor_u8(b)?, per_tensor_u8(c)?);
            if a.shape != b.shape || a.shape != c.shape {
                return Err(format!(
                    "{ID}: runs Add on tensors of one shape only (no broadcasting), got {a} + {b} -> {c}"
                ));
            }
            let (ra, rb) = (a_scale / c_scale, b_scale / c_scale);
            let fixed = c_offset as f32 - (ra * a_offset as f32 + rb * b_offset as f32);
            Ok(Plan::Add { ra, rb, fixed })
        }
        LayerDescriptor::Activation(d) if d.function == ActivationFunction::ReLU => {
            let ([x], [y]) = (inputs, outputs) else {
                return Err(format!("{ID}: ReLU needs 1 input and 1 output"));
            };
            if x.data_type != DataType::Float32 || y.data_type != DataType::Float32 {
                return Err(format!("{ID}: runs ReLU on Float32 only, got {x} -> {y}"));
            }
            if x.shape != y.shape {
                return Err(format!("{ID}: ReLU's output {y} differs in shape from its input {x}"));
            }
            Ok(Plan::Relu(*d))
        }
        LayerDescriptor::Activation(d) => Err(format!(
            "{ID}: runs ReLU only among the activations, not {:?}",
            d.function
        )),
        other => Err(format!(
            "{ID}: runs only a QAsymmU8 Add and a Float32 ReLU, not this {}",
            other.kind()
        )),
    }
}

impl Backend for OldNpu {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new().with_bool(names::HOST_MEMORY, true)
    }

    fn is_layer_supported(&self, layer: &LayerDescriptor, inputs: &[TensorInfo], outputs: &[TensorInfo]) -> Support {
        match plan(layer, inputs, outputs) {
            Ok(_) => Support::Supported,
            Err(why) => Support::unsupported(why),
        }
    }

    fn create_workload_factory(
        &self,
        _memory: Option<Arc<dyn MemoryManager>>,
    ) -> BackendResult<Box<dyn WorkloadFactory>> {
        Ok(Box::new(Factory))
    }
}

struct Factory;

impl WorkloadFactory for Factory {
    fn create_workload(&self, desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
        let plan = plan(desc.layer, &desc.inputs, &desc.outputs)
            .map_err(|why| BackendError::unsupported(format!("layer {}: {why}", desc.name)))?;
        Ok(match plan {
            Plan::Add { ra, rb, fixed } => Box::new(QAddWorkload { ra, rb, fixed }),
            Plan::Relu(d) => Box::new(ReluWorkload(d)),
        })
    }
}

/// onnxruntime's `QLinearAdd` of two same-shape `QAsymmU8` tensors (see the module doc).
struct QAddWorkload {
    ra: f32,
    rb: f32,
    fixed: f32,
}

impl Workload for QAddWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        let ([a, b], [out]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument("expected 2 inputs and 1 output"));
        };
        let (a, b, out) = (a.as_slice::<u8>()?, b.as_slice::<u8>()?, out.as_mut_slice::<u8>()?);
        if a.len() != out.len() || b.len() != out.len() {
            return Err(BackendError::invalid_argument("tensor sizes differ"));
        }
        for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
            let c = f32::from(x).mul_add(self.ra, f32::from(y).mul_add(self.rb, self.fixed));
            // Whole and in 0..=255 after the clamp; `as` would map a NaN (only from absurd
            // scale ratios) to 0, as CpuRef's conversion does.
            *o = c.round_ties_even().clamp(0.0, 255.0) as u8;
        }
        Ok(())
    }
}

/// Float32 ReLU, with the API's shared kernel.
struct ReluWorkload(ActivationDescriptor);

impl Workload for ReluWorkload {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorViewMut<'_>]) -> BackendResult<()> {
        let ([x], [out]) = (inputs, outputs) else {
            return Err(BackendError::invalid_argument("expected 1 input and 1 output"));
        };
        let (x, out) = (x.as_f32()?, out.as_f32_mut()?);
        if x.len() != out.len() {
            return Err(BackendError::invalid_argument("tensor sizes differ"));
        }
        out.copy_from_slice(x);
        self.0.apply_in_place(out);
        Ok(())
    }
}

backplane_api::export_backend!(id: "OldNpu", vendor: "Compat", backend: || OldNpu);
