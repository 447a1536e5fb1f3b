//! Dynamically quantised `FullyConnected` and `BatchMatMul` (Backend API 1.2: a Float32
//! input, constant quantised weights, an optional Float32 bias, a Float32 output; what
//! onnxruntime's `quantize_dynamic` writes as `DynamicQuantizeLinear` + `MatMulInteger`).
//!
//! Every call quantises the whole input to `u8` as ONNX's `DynamicQuantizeLinear` defines it
//! (and onnxruntime computes it: the range widened to hold 0, `scale = (hi - lo) / 255`, 1
//! for an all-zero input, the zero point and every value by a true f32 division, clamped,
//! rounded half to even), multiplies it by the packed weights on the same product tile as the
//! static products (`u8 × i8` accumulated exactly in `i32`), and writes
//! `y = (acc as f32) · (scale · w_scale[c])`, then `+ bias[c]`, each step rounded in f32 in
//! that order: CpuRef's and onnxruntime's results bit for bit.

use std::cell::RefCell;

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, TensorInfo, TensorView, TensorViewMut,
    Workload, WorkloadDesc,
};

use super::{
    QTensor,
    kernels::{Acc, Isa, NR},
    pack::{PackedWeights, pack_columns},
    product::{Kind, geometry, multiply_tiles},
};
use crate::{
    prepared::floats,
    workloads::{Signature, invalid_layer},
};

thread_local! {
    /// The quantised input and its packed tiles.
    static QUANTIZED: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// The product before its transposition, channel-major.
    static PRODUCT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Whether `layer` is a product with a Float32 input and quantised weights: a dynamically
/// quantised one, the business of this module.
pub(crate) fn is_dynamic(layer: &LayerDescriptor, inputs: &[TensorInfo]) -> bool {
    matches!(
        layer,
        LayerDescriptor::FullyConnected(_) | LayerDescriptor::BatchMatMul(_)
    ) && matches!(inputs, [x, w, ..] if x.data_type == DataType::Float32 && w.data_type.is_quantized())
}

/// The checked geometry of a dynamically quantised product.
struct Plan {
    rows: usize,
    k: usize,
    n: usize,
    transpose_w: bool,
    w: QTensor,
    bias: bool,
}

impl Plan {
    fn new(
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Self, String> {
        let bias = matches!(layer, LayerDescriptor::FullyConnected(d) if d.bias_enabled);
        let ([x, w, rest @ ..], [y]) = (inputs, outputs) else {
            return Err("a product has two or three inputs and one output".to_owned());
        };
        if rest.len() != usize::from(bias) {
            return Err(format!(
                "{} expects {} inputs, got {}",
                layer.kind(),
                2 + usize::from(bias),
                inputs.len()
            ));
        }
        let (
            Kind::Matmul {
                rows,
                k,
                n,
                transpose_w,
            },
            axis,
            _,
        ) = geometry(layer, x, w, y)?
        else {
            return Err("dynamic quantization is defined for products only".to_owned());
        };
        for (what, t) in [("input", x), ("output", y)]
            .into_iter()
            .chain(rest.first().map(|b| ("bias", b)))
        {
            if t.data_type != DataType::Float32 {
                return Err(format!(
                    "a dynamically quantized product needs a Float32 {what}, got {t}"
                ));
            }
        }
        if let Some(b) = rest.first()
            && b.shape.as_slice() != [n as u32]
        {
            return Err(format!("the bias {b} must have shape [{n}]"));
        }
        Ok(Self {
            rows,
            k,
            n,
            transpose_w,
            w: QTensor::weights(w, axis)?,
            bias,
        })
    }
}

/// Why CpuFast cannot run the dynamically quantised `layer`, or `Ok`.
pub(crate) fn check(
    layer: &LayerDescriptor,
    inputs: &[TensorInfo],
    outputs: &[TensorInfo],
) -> Result<(), String> {
    Plan::new(layer, inputs, outputs).map(drop)
}

/// The workload of a dynamically quantised product [`check`] accepted.
pub(crate) fn create(desc: &WorkloadDesc<'_>, threads: usize) -> BackendResult<Box<dyn Workload>> {
    let plan =
        Plan::new(desc.layer, &desc.inputs, &desc.outputs).map_err(|e| invalid_layer(desc, e))?;
    let wb = desc
        .constant(1)
        .map(|v| v.data.as_slice())
        .ok_or_else(|| invalid_layer(desc, "the weights must be constant"))?;
    if Some(wb.len()) != desc.inputs[1].num_bytes() {
        return Err(invalid_layer(
            desc,
            "the weights' bytes do not match their shape",
        ));
    }
    let (k, n) = (plan.k, plan.n);
    // `u8` weights as `i8` minus 128, their zero point moved the same way (as the static
    // products store them).
    let (flip, zp) = if plan.w.signed {
        (0, plan.w.zp)
    } else {
        (0x80, plan.w.zp - 128)
    };
    let zp = i8::try_from(zp).map_err(|_| {
        invalid_layer(
            desc,
            format_args!("weight zero point {} out of range", plan.w.zp),
        )
    })?;
    let weights = PackedWeights::new(n, k, zp, |r, kk| {
        (wb[if plan.transpose_w {
            r * k + kk
        } else {
            kk * n + r
        }] ^ flip) as i8
    });
    Ok(Box::new(DynamicProduct {
        rows: plan.rows,
        k,
        scales: (0..n).map(|c| plan.w.scale(c)).collect(),
        weights,
        bias: plan.bias,
        isa: Isa::detect(),
        signature: Signature::of(desc),
        threads,
    }))
}

/// `DynamicQuantizeLinear`'s parameters of `x`: its scale and zero point.
fn parameters(x: &[f32]) -> (f32, i32) {
    let (lo, hi) = x
        .iter()
        .fold((0.0f32, 0.0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).round_ties_even().clamp(0.0, 255.0) as i32;
    (scale, zp)
}

/// `saturate_u8(round_half_even(v / scale) + zp)`, the division in f32 (NaN gives `zp`).
#[inline]
fn quantize(v: f32, scale: f32, zp: i32) -> u8 {
    let low = -zp as f32;
    ((v / scale).round_ties_even().clamp(low, low + 255.0) as i32 + zp) as u8
}

/// A dynamically quantised `FullyConnected` or `BatchMatMul` on the product kernel.
#[derive(Debug)]
struct DynamicProduct {
    /// Rows of the input (the product's columns).
    rows: usize,
    /// The reduction length.
    k: usize,
    /// The weights' scale per output channel.
    scales: Vec<f32>,
    weights: PackedWeights,
    /// Whether input 2 is a bias.
    bias: bool,
    isa: Isa,
    signature: Signature,
    threads: usize,
}

impl Workload for DynamicProduct {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (rows, k, n) = (self.rows, self.k, self.weights.m);
        let xb = inputs[0].data.as_slice();
        let y = outputs[0].data.as_mut_slice();
        if xb.len() != rows * k * 4 || y.len() != rows * n * 4 {
            return Err(BackendError::invalid_argument(
                "buffer sizes differ from the tensors'",
            ));
        }
        let bias: Option<Vec<f32>> = self.bias.then(|| floats(inputs[2].data.as_slice()));
        if bias.as_ref().is_some_and(|b| b.len() != n) {
            return Err(BackendError::invalid_argument(
                "the bias' size differs from its tensor's",
            ));
        }
        let x = floats(xb);
        let (scale, x_zp) = parameters(&x);
        // `acc - x_zp · Σ w` per channel makes `Σ (x - x_zp) (w - w_zp)`.
        let corr: Vec<i32> = self
            .weights
            .sums
            .iter()
            .map(|&s| 0i32.wrapping_sub(x_zp.wrapping_mul(s)))
            .collect();
        let mult: Vec<f32> = self.scales.iter().map(|&s| scale * s).collect();
        let panel_len = self.weights.k4 * NR * 4;
        let tiles = rows.div_ceil(NR);
        QUANTIZED.with_borrow_mut(|(q, packed)| {
            q.clear();
            q.extend(x.iter().map(|&v| quantize(v, scale, x_zp)));
            packed.resize(tiles * panel_len, 0);
            for (t, panel) in packed.chunks_exact_mut(panel_len).enumerate() {
                pack_columns(q, k, t * NR, (rows - t * NR).min(NR), 0, panel);
            }
            PRODUCT.with_borrow_mut(|product| {
                product.resize(n * rows, 0.0);
                let store = |acc: &Acc, r0: usize, count: usize, cols: usize, out: &mut [f32]| {
                    for (r, row) in acc.iter().enumerate().take(count) {
                        let (c, m) = (corr[r0 + r], mult[r0 + r]);
                        let b = bias.as_ref().map(|b| b[r0 + r]);
                        for (o, &a) in out[r * rows..r * rows + cols].iter_mut().zip(row) {
                            let v = a.wrapping_add(c) as f32 * m;
                            *o = match b {
                                Some(b) => v + b,
                                None => v,
                            };
                        }
                    }
                };
                multiply_tiles(
                    self.isa,
                    &self.weights,
                    k,
                    self.threads,
                    packed,
                    rows,
                    product,
                    rows,
                    store,
                );
                for (r, out) in y.chunks_exact_mut(n * 4).enumerate() {
                    for (c, o) in out.chunks_exact_mut(4).enumerate() {
                        o.copy_from_slice(&product[c * rows + r].to_ne_bytes());
                    }
                }
            });
        });
        Ok(())
    }
}
