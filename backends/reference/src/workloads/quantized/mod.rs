//! Quantised tensors (Backend API 1.2): the integer arithmetic CpuRef shares between its
//! quantised workloads, and one submodule per family of them.
//!
//! A quantised element `q` stands for `scale * (q - offset)` (see `backplane_api`'s
//! `Quantization`). Every formula here is onnxruntime's, so that a network imported from a
//! QDQ or `QLinear*` ONNX model gives onnxruntime's bytes:
//! - quantising `x` (ONNX `QuantizeLinear`) is `saturate(round_half_even(x / scale) + offset)`,
//!   the division in f32 ([`QType::quantize`]); a NaN quantises to the offset;
//! - dequantising `q` (ONNX `DequantizeLinear`) is `(q - offset) as f32 * scale`
//!   ([`dequantize`]);
//! - the products (`Convolution2d`, `DepthwiseConvolution2d`, `FullyConnected`,
//!   `BatchMatMul`) accumulate exactly in `i32` and then apply a [`Requantizer`].
//!
//! Submodules: [`convert`] (`Quantize`, `Dequantize`, `Requantize`), [`binary`] (`Add` and
//! `Mul` with onnxruntime's arithmetic), [`activation`] (table look-ups),
//! [`global_average`] (`Mean` in its `GlobalAveragePool` form), [`conv`] (the two
//! convolutions), [`matmul`] (`FullyConnected`, `BatchMatMul`), [`dynamic`] (the same with a
//! Float32 input quantised per call), [`real`] (the layers that
//! compute on dequantised values and quantise their result). The layers that only move
//! elements use the byte-moving workloads of the parent folder unchanged.
//!
//! This folder may use the parent's helpers (`ExpectedShapes`, `invalid_layer`, ...); the
//! parent's workload modules never name it, only the workload factory does.

pub mod activation;
pub mod binary;
pub mod conv;
pub mod convert;
pub mod dynamic;
pub mod global_average;
pub mod matmul;
pub mod real;
pub mod softmax;

use backplane_api::{
    BackendResult, BinaryOperation, DataType, LayerDescriptor, ROption, TensorInfo, Workload,
    WorkloadDesc,
};

use super::invalid_layer;

/// The storage of a quantised type: signed or unsigned bytes, with the range that
/// saturation clamps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QType {
    signed: bool,
}

impl QType {
    /// The storage of `data_type`, `None` for a type that is not quantised.
    pub(crate) fn of(data_type: DataType) -> Option<Self> {
        match data_type {
            DataType::QAsymmU8 => Some(Self { signed: false }),
            DataType::QAsymmS8 | DataType::QSymmS8 => Some(Self { signed: true }),
            _ => None,
        }
    }

    /// The smallest value.
    pub(crate) fn lo(self) -> i32 {
        if self.signed { -128 } else { 0 }
    }

    /// The largest value.
    pub(crate) fn hi(self) -> i32 {
        if self.signed { 127 } else { 255 }
    }

    /// The value a stored byte holds.
    #[inline]
    pub(crate) fn read(self, byte: u8) -> i32 {
        if self.signed {
            i32::from(byte as i8)
        } else {
            i32::from(byte)
        }
    }

    /// The byte that stores `v`, clamped to the type's range first.
    #[inline]
    pub(crate) fn write(self, v: i32) -> u8 {
        let v = v.clamp(self.lo(), self.hi());
        if self.signed { v as i8 as u8 } else { v as u8 }
    }

    /// `saturate(round_half_even(v) + offset)`: `v` is already divided by the scale. The
    /// clamp happens in f32 before the conversion to an integer, so a huge or infinite `v`
    /// saturates; a NaN gives the offset (Rust's `NaN as i32` is 0), which is what ONNX
    /// leaves unspecified.
    #[inline]
    pub(crate) fn saturate_round(self, v: f32, offset: i32) -> i32 {
        let r = v
            .round_ties_even()
            .clamp((self.lo() - offset) as f32, (self.hi() - offset) as f32);
        r as i32 + offset
    }

    /// ONNX `QuantizeLinear` of one value: `saturate(round_half_even(x / scale) + offset)`,
    /// the division in f32.
    #[inline]
    pub(crate) fn quantize(self, x: f32, scale: f32, offset: i32) -> i32 {
        self.saturate_round(x / scale, offset)
    }
}

/// How a result computed on real values becomes a quantised value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounding {
    /// ONNX `QuantizeLinear`: `saturate(round_half_even(x / scale) + offset)`.
    Onnx,
    /// onnxruntime's `QLinearAveragePool`: `saturate(round_half_even(x / scale + offset))`,
    /// the offset added in f32 before rounding.
    OffsetFirst,
}

/// ONNX `DequantizeLinear` of one value: `(q - offset) as f32 * scale`.
#[inline]
pub(crate) fn dequantize(q: i32, scale: f32, offset: i32) -> f32 {
    (q - offset) as f32 * scale
}

/// The quantisation of one tensor as the kernels use it: its storage, offset and one scale
/// per index of its quantisation axis (one scale for a per-tensor tensor).
#[derive(Debug, Clone)]
pub(crate) struct QParams {
    /// The storage.
    pub(crate) qtype: QType,
    /// The zero point.
    pub(crate) offset: i32,
    /// The scales: one, or one per index of `axis`.
    pub(crate) scales: Vec<f32>,
    /// The quantisation axis, for a per-axis tensor.
    pub(crate) axis: Option<usize>,
}

impl QParams {
    /// The parameters of `info`, a quantised tensor with checked parameters (an error about
    /// `desc`'s layer otherwise).
    pub(crate) fn of(desc: &WorkloadDesc<'_>, info: &TensorInfo) -> BackendResult<Self> {
        let (Some(qtype), ROption::RSome(q)) = (QType::of(info.data_type), &info.quantization)
        else {
            return Err(invalid_layer(
                desc,
                format_args!("{info} is not a quantized tensor with parameters"),
            ));
        };
        info.check_quantization()
            .map_err(|e| invalid_layer(desc, e))?;
        let (scales, axis) = match &q.per_axis {
            ROption::RSome(p) => (p.scales.to_vec(), Some(p.axis as usize)),
            ROption::RNone => (vec![q.scale], None),
        };
        Ok(Self {
            qtype,
            offset: q.offset,
            scales,
            axis,
        })
    }

    /// The parameters of `info`, which must be quantised per tensor.
    pub(crate) fn per_tensor(desc: &WorkloadDesc<'_>, info: &TensorInfo) -> BackendResult<Self> {
        let p = Self::of(desc, info)?;
        if p.axis.is_some() {
            return Err(invalid_layer(
                desc,
                format_args!("{info} must be quantized per tensor"),
            ));
        }
        Ok(p)
    }

    /// The one scale of a per-tensor tensor (the first of a per-axis one).
    pub(crate) fn scale(&self) -> f32 {
        self.scales[0]
    }

    /// The scale of element `flat` of a tensor of `shape` (row-major).
    pub(crate) fn scale_of(&self, shape: &[u32], flat: usize) -> f32 {
        match self.axis {
            None => self.scales[0],
            Some(axis) => {
                let inner: usize = shape[axis + 1..].iter().map(|&d| d as usize).product();
                self.scales[(flat / inner.max(1)) % self.scales.len()]
            }
        }
    }

    /// Dequantises every byte of `bytes` (a tensor of `shape`).
    pub(crate) fn dequantize_all(&self, shape: &[u32], bytes: &[u8]) -> Vec<f32> {
        bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| dequantize(self.qtype.read(b), self.scale_of(shape, i), self.offset))
            .collect()
    }

    /// Quantises every value of `values` (a tensor of `shape`) into `out`.
    pub(crate) fn quantize_all(&self, shape: &[u32], values: &[f32], out: &mut [u8]) {
        self.quantize_all_with(Rounding::Onnx, shape, values, out);
    }

    /// [`Self::quantize_all`] with the given rounding.
    pub(crate) fn quantize_all_with(
        &self,
        rounding: Rounding,
        shape: &[u32],
        values: &[f32],
        out: &mut [u8],
    ) {
        let t = self.qtype;
        for (i, (o, &x)) in out.iter_mut().zip(values).enumerate() {
            let s = self.scale_of(shape, i);
            *o = t.write(match rounding {
                Rounding::Onnx => t.quantize(x, s, self.offset),
                Rounding::OffsetFirst => t.saturate_round(x / s + self.offset as f32, 0),
            });
        }
    }
}

/// The last step of the quantised products, per output channel `c`:
/// `y = saturate(round_half_even(acc as f32 * m[c]) + y_offset)` with
/// `m[c] = (x_scale * w_scale[c]) / y_scale` computed in f32 in that order (multiply first,
/// then divide), as onnxruntime's `QLinearConv` and `QLinearMatMul` do.
#[derive(Debug, Clone)]
pub(crate) struct Requantizer {
    multipliers: Vec<f32>,
    offset: i32,
    qtype: QType,
}

impl Requantizer {
    /// The requantizer of products of `x` (per tensor) and `w` (per tensor or per output
    /// channel, `channels` of them) into `y` (per tensor).
    pub(crate) fn new(x: &QParams, w: &QParams, y: &QParams, channels: usize) -> Self {
        let multipliers = (0..channels)
            .map(|c| {
                let ws = if w.scales.len() == 1 {
                    w.scales[0]
                } else {
                    w.scales[c]
                };
                (x.scale() * ws) / y.scale()
            })
            .collect();
        Self {
            multipliers,
            offset: y.offset,
            qtype: y.qtype,
        }
    }

    /// The output byte of accumulator `acc` of channel `c`.
    #[inline]
    pub(crate) fn apply(&self, acc: i32, c: usize) -> u8 {
        self.qtype.write(
            self.qtype
                .saturate_round(acc as f32 * self.multipliers[c], self.offset),
        )
    }
}

/// The bias of a quantised product: `Signed32` values, one per output channel (zeros without
/// a bias).
pub(crate) fn bias_values(bias: Option<&[u8]>, channels: usize) -> Vec<i32> {
    match bias {
        Some(b) => b
            .chunks_exact(4)
            .map(|c| i32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        None => vec![0; channels],
    }
}

/// The checks before a quantised workload reads its buffers: the shapes it was made for, and
/// every input's and output's bytes those of its tensor.
pub(crate) fn check_buffers(
    shapes: &crate::workloads::ExpectedShapes,
    inputs: &[backplane_api::TensorView<'_>],
    outputs: &[backplane_api::TensorViewMut<'_>],
) -> backplane_api::BackendResult<()> {
    shapes.check(inputs, outputs)?;
    for v in inputs {
        check_len(v.info, v.data.as_slice())?;
    }
    for o in outputs {
        check_len(o.info, o.data.as_slice())?;
    }
    Ok(())
}

/// Checks that `data` holds exactly the bytes of `info`.
pub(crate) fn check_len(info: &TensorInfo, data: &[u8]) -> BackendResult<()> {
    match info.num_bytes() {
        Some(n) if n == data.len() => Ok(()),
        n => Err(backplane_api::BackendError::invalid_argument(format!(
            "tensor {info} needs {n:?} bytes, the buffer has {}",
            data.len()
        ))),
    }
}

#[cfg(test)]
pub(crate) mod test_support;

/// Creates the workload of a layer with quantised tensors (layer support has accepted it):
/// the conversions and products here, `Add`/`Mul` with onnxruntime's arithmetic, the layers
/// that move elements through `float`'s byte-moving workloads (they are generic over the
/// element size), and every other layer through [`real`].
pub fn create(
    desc: &WorkloadDesc<'_>,
    float: real::FloatFactory,
) -> BackendResult<Box<dyn Workload>> {
    match desc.layer {
        LayerDescriptor::Quantize(_)
        | LayerDescriptor::Dequantize
        | LayerDescriptor::Requantize(_) => convert::create(desc),
        LayerDescriptor::Convolution2d(_) | LayerDescriptor::DepthwiseConvolution2d(_) => {
            conv::create(desc)
        }
        LayerDescriptor::FullyConnected(_) | LayerDescriptor::BatchMatMul(_)
            if desc
                .inputs
                .first()
                .is_some_and(|x| x.data_type == DataType::Float32) =>
        {
            dynamic::create(desc)
        }
        LayerDescriptor::FullyConnected(_) | LayerDescriptor::BatchMatMul(_) => {
            matmul::create(desc)
        }
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add | BinaryOperation::Mul)
            if fused_by_onnxruntime(desc) =>
        {
            binary::create(desc)
        }
        LayerDescriptor::Activation(_) => activation::create(desc),
        LayerDescriptor::Softmax(_) => softmax::create(desc),
        layer
            if global_average::is_global_average(layer, &desc.inputs)
                && fused_by_onnxruntime(desc) =>
        {
            global_average::create(desc)
        }
        LayerDescriptor::Concat(_) if !same_parameters(&desc.inputs, &desc.outputs) => {
            real::create(desc, float)
        }
        layer if moves_elements(layer) => float(desc),
        _ => real::create(desc, float),
    }
}

/// Whether onnxruntime (x86-64 CPU, default session) runs this QDQ group as its fused integer
/// kernel: for `u8` tensors; for `i8` ones it leaves `Add`, `Mul`, `AveragePool` and
/// `GlobalAveragePool` as `DequantizeLinear` → float operator → `QuantizeLinear`, the QDQ
/// definition ([`real`]).
pub(crate) fn fused_by_onnxruntime(desc: &WorkloadDesc<'_>) -> bool {
    desc.inputs
        .iter()
        .chain(desc.outputs.iter())
        .all(|t| t.data_type != DataType::QAsymmS8)
}

/// The layers whose quantised form moves elements (bytes and parameters kept).
pub(crate) fn moves_elements(layer: &LayerDescriptor) -> bool {
    matches!(
        layer,
        LayerDescriptor::Input(_)
            | LayerDescriptor::Output(_)
            | LayerDescriptor::Constant(_)
            | LayerDescriptor::MemCopy
            | LayerDescriptor::Reshape(_)
            | LayerDescriptor::Flatten(_)
            | LayerDescriptor::Transpose(_)
            | LayerDescriptor::Slice(_)
            | LayerDescriptor::Concat(_)
            | LayerDescriptor::Gather(_)
            | LayerDescriptor::BroadcastTo(_)
    )
}

/// Whether every quantised tensor of `inputs` and `outputs` has the same parameters.
pub(crate) fn same_parameters(inputs: &[TensorInfo], outputs: &[TensorInfo]) -> bool {
    let mut quantized = inputs
        .iter()
        .chain(outputs)
        .filter(|t| t.data_type.is_quantized());
    match quantized.next() {
        Some(first) => quantized
            .all(|t| t.data_type == first.data_type && t.quantization == first.quantization),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ties round to even, then the offset is added, then the result saturates.
    #[test]
    fn quantize_rounds_ties_to_even_and_saturates() {
        let u8q = QType::of(DataType::QAsymmU8).unwrap();
        let s8q = QType::of(DataType::QAsymmS8).unwrap();
        assert_eq!(u8q.quantize(2.5, 1.0, 0), 2);
        assert_eq!(u8q.quantize(3.5, 1.0, 0), 4);
        assert_eq!(u8q.quantize(1.25, 0.5, 10), 12); // 2.5 -> 2, + 10
        assert_eq!(s8q.quantize(-2.5, 1.0, 0), -2);
        assert_eq!(s8q.quantize(-3.5, 1.0, 0), -4);
        assert_eq!(u8q.quantize(1000.0, 1.0, 3), 255);
        assert_eq!(u8q.quantize(-1000.0, 1.0, 3), 0);
        assert_eq!(s8q.quantize(1e30, 1e-3, -5), 127);
        assert_eq!(s8q.quantize(f32::NEG_INFINITY, 1.0, 0), -128);
        assert_eq!(s8q.quantize(f32::NAN, 1.0, 7), 7);
        assert_eq!(s8q.write(200), 127);
        assert_eq!(s8q.read(s8q.write(-128)), -128);
        assert_eq!(dequantize(130, 0.5, 128), 1.0);
    }
}
