//! Quantised layers (Backend API 1.2): `Convolution2d` (groups 1), `DepthwiseConvolution2d`,
//! `FullyConnected` and `BatchMatMul` with a constant `b`, on `u8 × s8` products accumulated
//! exactly in `i32` and requantised as onnxruntime (and CpuRef) do — see `backplane_api`'s
//! "Quantised tensors" and `kernels/mod.rs`.
//!
//! What CpuFast takes ([`check`]; everything else is refused with a reason, and the next
//! backend runs it):
//! - activations (`x` and `y`) `QAsymmU8` or `QAsymmS8`, per tensor (an `s8` input is packed
//!   as `u8` plus 128, its zero point moved by 128);
//! - constant weights `QSymmS8`, `QAsymmS8` or `QAsymmU8` (any zero point), per tensor or per
//!   output channel (axis 0 of the convolutions' weights, the output axis of
//!   `FullyConnected`'s and `BatchMatMul`'s `b`): `u8` weights are packed as `i8` minus 128
//!   (their zero point moved the same way), and a weight zero point `z` takes
//!   `z · Σ_k x[k, j]` off each column's sums (`pack::column_sums`), the panels padded with `z`;
//! - a constant `Signed32` bias, one per output channel;
//! - NCHW convolutions; `BatchMatMul` without `transpose_a`, `b` of rank 2 (or leading 1s),
//!   or of two activations (`batched.rs`: any batch, either operand transposed);
//! - `Softmax` (`softmax.rs`, onnxruntime's table form); `Mean` in its `GlobalAveragePool`
//!   form on `u8` tensors and `Pooling2d` `Average` without padding (`average.rs`);
//! - dynamically quantised `FullyConnected` and `BatchMatMul` (a Float32 input quantised per
//!   call, `dynamic.rs`), on the same panels and tile.
//!
//! Files: `kernels/` (the only `unsafe` of the crate: the SIMD product tile, depthwise
//! rows, requantisation), `pack.rs` (panels), `product.rs` (convolution, fully connected,
//! batch matmul), `dynamic.rs` (their dynamically quantised forms), `depthwise.rs`,
//! `batched.rs` (products of two activations), `softmax.rs`, `average.rs` (`Mean`, average
//! pooling). This
//! folder uses `crate::gemm`'s thread splits and `crate::workloads`' geometry and helpers;
//! nothing outside it but the layer support, the workload factory and `fusion.rs` names it.

mod average;
mod batched;
pub(crate) mod clamp;
mod depthwise;
mod dynamic;
#[cfg(test)]
mod dynamic_tests;
mod elementwise;
pub(crate) mod island;
#[allow(
    unsafe_code,
    reason = "the SIMD kernels; every unsafe block has its SAFETY note"
)]
pub(crate) mod kernels;
mod movement;
mod pack;
mod product;
mod softmax;
#[cfg(test)]
mod tests;

use backplane_api::{
    BackendResult, DataType, LayerDescriptor, ROption, TensorInfo, Workload, WorkloadDesc,
};

use crate::workloads::{Signature, invalid_layer};

pub(crate) use product::Plan;

/// The quantisation of one tensor as the kernels use it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QTensor {
    /// `i8` storage (else `u8`).
    pub(crate) signed: bool,
    /// The zero point.
    pub(crate) zp: i32,
    /// One scale, or one per index of `axis`.
    pub(crate) scales: Vec<f32>,
    /// The axis of per-axis scales.
    pub(crate) axis: Option<usize>,
}

impl QTensor {
    /// The parameters of `t`, checked.
    pub(crate) fn of(t: &TensorInfo) -> Result<Self, String> {
        let signed = match t.data_type {
            DataType::QAsymmU8 => false,
            DataType::QAsymmS8 | DataType::QSymmS8 => true,
            other => return Err(format!("{t}: {other} is not a quantized 8-bit type")),
        };
        t.check_quantization()?;
        let ROption::RSome(q) = &t.quantization else {
            return Err(format!("{t} has no quantization parameters"));
        };
        let (scales, axis) = match &q.per_axis {
            ROption::RSome(p) => (p.scales.to_vec(), Some(p.axis as usize)),
            ROption::RNone => (vec![q.scale], None),
        };
        Ok(Self {
            signed,
            zp: q.offset,
            scales,
            axis,
        })
    }

    /// How the kernels read this tensor's bytes as `u8`: `(flip, zero point)`, where
    /// `stored ^ flip` is the byte as `u8` (an `i8` plus 128) and the zero point is moved the
    /// same way, so that `(stored ^ flip) - zero point` is the stored value minus its own.
    pub(crate) fn as_u8(&self) -> (u8, i32) {
        if self.signed {
            (0x80, self.zp + 128)
        } else {
            (0, self.zp)
        }
    }

    /// How the kernels read this tensor's bytes as `i8`: `(flip, zero point)`, where
    /// `(stored ^ flip) as i8` is the byte as `i8` (a `u8` minus 128) and the zero point is moved
    /// the same way.
    pub(crate) fn as_i8(&self) -> (u8, i32) {
        if self.signed {
            (0, self.zp)
        } else {
            (0x80, self.zp - 128)
        }
    }

    /// An activation: `QAsymmU8` or `QAsymmS8` per tensor.
    pub(crate) fn activation(t: &TensorInfo) -> Result<Self, String> {
        if !matches!(t.data_type, DataType::QAsymmU8 | DataType::QAsymmS8) {
            return Err(format!("activations must be QAsymmU8 or QAsymmS8, got {t}"));
        }
        let q = Self::of(t)?;
        if q.axis.is_some() {
            return Err(format!("{t} must be quantized per tensor"));
        }
        Ok(q)
    }

    /// Constant weights, per tensor or along `axis`.
    pub(crate) fn weights(t: &TensorInfo, axis: usize) -> Result<Self, String> {
        if !t.is_constant {
            return Err(format!("the weights {t} must be constant"));
        }
        if !matches!(
            t.data_type,
            DataType::QSymmS8 | DataType::QAsymmS8 | DataType::QAsymmU8
        ) {
            return Err(format!(
                "weights must be QSymmS8, QAsymmS8 or QAsymmU8, got {t}"
            ));
        }
        let q = Self::of(t)?;
        if q.axis.is_some_and(|a| a != axis) {
            return Err(format!(
                "{t} must be quantized per tensor or along axis {axis}"
            ));
        }
        Ok(q)
    }

    /// The value of stored byte `b`, minus the zero point.
    pub(crate) fn value(&self, b: u8) -> i32 {
        let v = if self.signed {
            i32::from(b as i8)
        } else {
            i32::from(b)
        };
        v - self.zp
    }

    /// The smallest and largest stored value.
    pub(crate) fn range(&self) -> (i32, i32) {
        if self.signed { (-128, 127) } else { (0, 255) }
    }

    /// The scale of index `i` of the quantisation axis (the one scale per tensor).
    pub(crate) fn scale(&self, i: usize) -> f32 {
        if self.scales.len() == 1 {
            self.scales[0]
        } else {
            self.scales[i]
        }
    }
}

/// The output side of a product: multipliers per output channel, zero point and clamp.
#[derive(Debug, Clone)]
pub(crate) struct Output {
    /// `(x_scale · w_scale[c]) / y_scale`, in f32 in that order.
    pub(crate) mult: Vec<f32>,
    /// The output zero point.
    pub(crate) zp: i32,
    /// The output range, narrowed by a fused clamp.
    pub(crate) lo: i32,
    /// See `lo`.
    pub(crate) hi: i32,
}

impl Output {
    /// The output of products of `x` and `w` (`channels` output channels) into `y`, clamped
    /// to `clamp` (stored values) when given.
    pub(crate) fn new(
        x: &QTensor,
        w: &QTensor,
        y: &QTensor,
        channels: usize,
        clamp: Option<(i32, i32)>,
    ) -> Self {
        let (mut lo, mut hi) = y.range();
        if let Some((a, b)) = clamp {
            lo = lo.max(a);
            hi = hi.min(b).max(lo);
        }
        Self {
            mult: (0..channels)
                .map(|c| (x.scales[0] * w.scale(c)) / y.scales[0])
                .collect(),
            zp: y.zp,
            lo,
            hi,
        }
    }
}

/// Whether any tensor of a layer is quantised: the layer is then CpuFast's only through this
/// module.
pub(crate) fn is_quantized(inputs: &[TensorInfo], outputs: &[TensorInfo]) -> bool {
    inputs
        .iter()
        .chain(outputs)
        .any(|t| t.data_type.is_quantized())
}

/// Why CpuFast cannot run the quantised `layer`, or `Ok`.
pub(crate) fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    match layer {
        _ if dynamic::is_dynamic(layer, inputs) => dynamic::check(layer, inputs, outputs),
        LayerDescriptor::BatchMatMul(d) if batched::is_batched(inputs) => {
            batched::check(d, inputs, outputs)
        }
        LayerDescriptor::Convolution2d(_)
        | LayerDescriptor::DepthwiseConvolution2d(_)
        | LayerDescriptor::FullyConnected(_)
        | LayerDescriptor::BatchMatMul(_) => Plan::new(layer, inputs, outputs, None).map(drop),
        _ if average::is_average(layer) => average::check(layer, inputs, outputs),
        LayerDescriptor::Concat(_) | LayerDescriptor::Resize(_) | LayerDescriptor::Pooling2d(_) => {
            movement::check(layer, inputs, outputs)
        }
        LayerDescriptor::Softmax(d) => softmax::check(d, inputs, outputs),
        other => elementwise::check(other, inputs, outputs),
    }
}

/// Creates the workload of a quantised layer [`check`] accepted, with an optional fused
/// clamp (stored values of the output).
pub(crate) fn create(
    desc: &WorkloadDesc<'_>,
    layer: &LayerDescriptor,
    clamp: Option<(i32, i32)>,
    threads: usize,
) -> BackendResult<Box<dyn Workload>> {
    match layer {
        _ if dynamic::is_dynamic(layer, &desc.inputs) && clamp.is_none() => {
            dynamic::create(desc, threads)
        }
        LayerDescriptor::BatchMatMul(d) if batched::is_batched(&desc.inputs) && clamp.is_none() => {
            batched::create(d, &desc.inputs, &desc.outputs, Signature::of(desc), threads)
                .map_err(|e| invalid_layer(desc, e))
        }
        LayerDescriptor::Convolution2d(_)
        | LayerDescriptor::DepthwiseConvolution2d(_)
        | LayerDescriptor::FullyConnected(_)
        | LayerDescriptor::BatchMatMul(_) => Plan::new(layer, &desc.inputs, &desc.outputs, clamp)
            .map_err(|e| invalid_layer(desc, e))?
            .into_workload(desc, threads),
        _ if average::is_average(layer) => average::create(
            layer,
            &desc.inputs,
            &desc.outputs,
            Signature::of(desc),
            threads,
        )
        .map_err(|e| invalid_layer(desc, e)),
        LayerDescriptor::Concat(_) | LayerDescriptor::Resize(_) | LayerDescriptor::Pooling2d(_) => {
            movement::create(layer, &desc.inputs, &desc.outputs, Signature::of(desc))
                .map_err(|e| invalid_layer(desc, e))
        }
        LayerDescriptor::Softmax(d) => {
            softmax::create(d, &desc.inputs, &desc.outputs, Signature::of(desc), threads)
                .map_err(|e| invalid_layer(desc, e))
        }
        _ => {
            // A binary layer's operand that is one constant byte (a learnable affine block's
            // scale or bias): the layer is then a function of the other operand's byte.
            let scalar = (0..2).find_map(|slot| {
                let c = desc.constant(slot)?;
                (c.data.len() == 1).then(|| (slot, c.data[0]))
            });
            elementwise::create(
                layer,
                &desc.inputs,
                &desc.outputs,
                scalar,
                Signature::of(desc),
                threads,
            )
            .map_err(|e| invalid_layer(desc, e))
        }
    }
}
