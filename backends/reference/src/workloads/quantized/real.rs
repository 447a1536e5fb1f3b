//! The quantised layers that compute on real values: each quantised input is dequantised to
//! f32 with its own parameters, CpuRef's Float32 workload of the same layer runs on them,
//! and its result is quantised with the output's parameters (round half to even, saturate).
//!
//! This is the definition of ONNX's QDQ form (`DequantizeLinear` → float operator →
//! `QuantizeLinear`) and what onnxruntime runs when it leaves a QDQ group unfused. Its own
//! fused kernels, where they exist, round once more or in another order; the differences,
//! all within one quantisation step, are:
//! - `QLinearAveragePool` (`contrib_ops/cpu/quantization/qlinear_pool.cc`) sums the
//!   dequantised values in f32 in window order, divides by the count, then rounds
//!   `y / y_scale + y_offset` as one f32 expression (the offset added before rounding);
//! - `QLinearGlobalAveragePool` (MLAS `qlgavgpool.cpp`) sums the raw values as integers,
//!   subtracts `offset * count`, and multiplies by `x_scale / (y_scale * count)`;
//! - `QLinearSoftmax` (`contrib_ops/cpu/quantization/qlinear_softmax.cc`) reads `exp` from a
//!   256-entry table and scales by `floor(1 / y_scale)`;
//! - `QLinearSigmoid`/`QLinearLeakyRelu` (`qlinear_lookup_table.cc`) build a 256-entry table
//!   of exactly this dequantise–compute–quantise, so they agree.
//!
//! Used for `Activation`, `Pooling2d` (average and max), `Mean`, `Softmax`, `Resize`, `Pad`
//! and `Concat` with differing parameters. For the layers that only select elements
//! (`Pooling2d` max, `Pad`, `Resize` nearest) with equal input and output parameters, this
//! is the identity on the bytes: every quantised value survives the round trip through f32
//! exactly, and `Pad`'s fill value is quantised with the input's parameters (0.0 becomes
//! the zero point).

use backplane_api::{
    BackendResult, DataType, ROption, RSlice, TensorInfo, TensorView, TensorViewMut, Workload,
    WorkloadDesc, bytemuck,
};

use super::{QParams, check_len};
use crate::workloads::ExpectedShapes;

/// How a float workload is made: the workload factory's Float32 path.
pub type FloatFactory = fn(&WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>>;

/// A float workload between dequantised inputs and a quantised output.
pub struct ViaRealWorkload {
    inner: Box<dyn Workload>,
    /// Per input: its parameters when it is quantised, with its Float32 info.
    inputs: Vec<(Option<QParams>, TensorInfo)>,
    /// The output's parameters when it is quantised, with its Float32 info.
    outputs: Vec<(Option<QParams>, TensorInfo)>,
    shapes: ExpectedShapes,
}

impl std::fmt::Debug for ViaRealWorkload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViaRealWorkload")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

/// `info` as the float workload sees it, with its parameters when it is quantised.
fn as_real(
    desc: &WorkloadDesc<'_>,
    info: &TensorInfo,
) -> BackendResult<(Option<QParams>, TensorInfo)> {
    if !info.data_type.is_quantized() {
        return Ok((None, info.clone()));
    }
    let q = QParams::per_tensor(desc, info)?;
    Ok((Some(q), TensorInfo::new(&info.shape, DataType::Float32)))
}

/// "No constant value" for each input of the float workload (it reads its inputs at
/// execution).
static NO_CONSTANTS: [ROption<RSlice<'static, u8>>; 16] = [ROption::RNone; 16];

/// Creates `desc`'s layer as a float workload made by `float` between dequantised inputs and
/// a quantised output.
pub fn create(desc: &WorkloadDesc<'_>, float: FloatFactory) -> BackendResult<Box<dyn Workload>> {
    let inputs = (desc.inputs.iter())
        .map(|t| as_real(desc, t))
        .collect::<BackendResult<Vec<_>>>()?;
    let outputs = (desc.outputs.iter())
        .map(|t| as_real(desc, t))
        .collect::<BackendResult<Vec<_>>>()?;
    let in_infos: Vec<TensorInfo> = inputs.iter().map(|(_, t)| t.clone()).collect();
    let out_infos: Vec<TensorInfo> = outputs.iter().map(|(_, t)| t.clone()).collect();
    let Some(constants) = NO_CONSTANTS.get(..in_infos.len()) else {
        return Err(crate::workloads::invalid_layer(desc, "too many inputs"));
    };
    let inner = float(&WorkloadDesc {
        name: desc.name,
        layer: desc.layer,
        inputs: RSlice::from_slice(&in_infos),
        outputs: RSlice::from_slice(&out_infos),
        constants: RSlice::from_slice(constants),
    })?;
    Ok(Box::new(ViaRealWorkload {
        inner,
        inputs,
        outputs,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl Workload for ViaRealWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let mut real_inputs: Vec<Vec<f32>> = Vec::with_capacity(inputs.len());
        for (view, (q, _)) in inputs.iter().zip(&self.inputs) {
            check_len(view.info, view.data.as_slice())?;
            real_inputs.push(match q {
                Some(q) => q.dequantize_all(&view.info.shape, view.data.as_slice()),
                None => Vec::new(),
            });
        }
        let views: Vec<TensorView<'_>> = inputs
            .iter()
            .zip(&self.inputs)
            .zip(&real_inputs)
            .map(|((view, (q, info)), real)| match q {
                Some(_) => TensorView::new(info, bytemuck::cast_slice(real)),
                None => *view,
            })
            .collect();
        let mut real_outputs: Vec<Vec<f32>> = Vec::with_capacity(outputs.len());
        for (view, (q, info)) in outputs.iter().zip(&self.outputs) {
            check_len(view.info, view.data.as_slice())?;
            real_outputs.push(match q {
                Some(_) => vec![0.0; info.num_elements().unwrap_or(0)],
                None => Vec::new(),
            });
        }
        {
            let mut out_views: Vec<TensorViewMut<'_>> = Vec::with_capacity(outputs.len());
            for ((view, (q, info)), real) in outputs
                .iter_mut()
                .zip(&self.outputs)
                .zip(real_outputs.iter_mut())
            {
                out_views.push(match q {
                    Some(_) => TensorViewMut::new(info, bytemuck::cast_slice_mut(real)),
                    None => TensorViewMut::new(view.info, view.data.as_mut_slice()),
                });
            }
            self.inner.execute(&views, &mut out_views)?;
        }
        for ((view, (q, _)), real) in outputs.iter_mut().zip(&self.outputs).zip(&real_outputs) {
            if let Some(q) = q {
                let shape = view.info.shape.clone();
                q.quantize_all(&shape, real, view.data.as_mut_slice());
            }
        }
        Ok(())
    }
}
