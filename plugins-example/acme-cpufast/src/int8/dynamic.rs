//! Dynamically quantised `FullyConnected` and `BatchMatMul` (Backend API 1.2: a Float32
//! input, constant quantised weights, an optional Float32 bias, a Float32 output; what
//! onnxruntime's `quantize_dynamic` writes as `DynamicQuantizeLinear` + `MatMulInteger`), and
//! `Convolution2d` (1.5, `DynamicQuantizeLinear` + `ConvInteger`, one group).
//!
//! Every call quantises the whole input to `u8` as ONNX's `DynamicQuantizeLinear` defines it
//! (and onnxruntime computes it: the range widened to hold 0, `scale = (hi - lo) / 255`, 1
//! for an all-zero input, the zero point and every value by a true f32 division, clamped,
//! rounded half to even), multiplies it by the packed weights on the same product tile as the
//! static products (`u8 × i8` accumulated exactly in `i32`), and writes
//! `y = (acc as f32) · (scale · w_scale[c])`, then `+ bias[c]`, each step rounded in f32 in
//! that order: CpuRef's and onnxruntime's results bit for bit. A convolution packs the
//! quantised image's im2col tiles as the static one does (padding reads the zero point) and
//! takes its bias into the accumulator: `acc + saturate_i32(floor(bias[c] / m[c]))`, then
//! `y = (acc as f32) · m[c]` with `m[c] = scale · w_scale[c]` (the layers doc).

use std::cell::RefCell;

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, TensorInfo, TensorView, TensorViewMut,
    Workload, WorkloadDesc,
};

use super::{
    QTensor,
    kernels::{Acc, Isa, NR},
    pack::{PackedWeights, pack_columns},
    product::{Kind, geometry, multiply_tiles, pack_convolution},
};
use crate::{
    prepared::floats,
    workloads::{Signature, conv_geometry::ConvGeometry, invalid_layer},
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
        LayerDescriptor::FullyConnected(_)
            | LayerDescriptor::BatchMatMul(_)
            | LayerDescriptor::Convolution2d(_)
    ) && matches!(inputs, [x, w, ..] if x.data_type == DataType::Float32 && w.data_type.is_quantized())
}

/// The checked geometry of a dynamically quantised product.
struct Plan {
    kind: Kind,
    w: QTensor,
    /// Output channels.
    n: usize,
    bias: bool,
}

impl Plan {
    fn new(
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Self, String> {
        let bias = matches!(layer, LayerDescriptor::FullyConnected(d) if d.bias_enabled)
            || matches!(layer, LayerDescriptor::Convolution2d(d) if d.bias_enabled);
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
        let (kind, axis, n) = geometry(layer, x, w, y)?;
        if matches!(kind, Kind::Depthwise(_)) {
            return Err("dynamic quantization is defined for products and convolutions".to_owned());
        }
        for (what, t) in [("input", x), ("output", y)]
            .into_iter()
            .chain(rest.first().map(|b| ("bias", b)))
        {
            if t.data_type != DataType::Float32 {
                let form = match kind {
                    Kind::Convolution(_) => "convolution",
                    _ => "product",
                };
                return Err(format!(
                    "a dynamically quantized {form} needs a Float32 {what}, got {t}"
                ));
            }
        }
        if let Some(b) = rest.first()
            && b.shape.as_slice() != [n as u32]
        {
            return Err(format!("the bias {b} must have shape [{n}]"));
        }
        Ok(Self {
            kind,
            w: QTensor::weights(w, axis)?,
            n,
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
    // `u8` weights as `i8` minus 128, their zero point moved the same way (as the static
    // products store them).
    let (flip, zp) = plan.w.as_i8();
    let zp = i8::try_from(zp).map_err(|_| {
        invalid_layer(
            desc,
            format_args!("weight zero point {} out of range", plan.w.zp),
        )
    })?;
    let n = plan.n;
    let (shape, k, weights) = match plan.kind {
        Kind::Matmul {
            rows,
            k,
            transpose_w,
            ..
        } => {
            let weights = PackedWeights::of_stored(n, k, zp, flip, wb, !transpose_w);
            (Shape::Matmul { rows }, k, weights)
        }
        Kind::Convolution(g) => {
            // `[out, in, kh, kw]` rows as the im2col rows run: channel, then tap.
            let k = g.channels * g.kernel_h * g.kernel_w;
            let weights = PackedWeights::of_stored(n, k, zp, flip, wb, false);
            (Shape::Convolution(g), k, weights)
        }
        Kind::Depthwise(_) => unreachable!("refused by the plan"),
    };
    Ok(Box::new(DynamicProduct {
        shape,
        k,
        scales: (0..n).map(|c| plan.w.scale(c)).collect(),
        weights,
        bias: plan.bias,
        isa: Isa::detect(),
        signature: Signature::of(desc),
        threads,
    }))
}

/// `DynamicQuantizeLinear`'s parameters of `x`: its scale and zero point. The range (widened
/// to hold 0, NaN ignored) is found in eight interleaved chains: the minimum and maximum do not
/// depend on the order, and one chain would wait on each comparison.
pub(super) fn parameters(x: &[f32]) -> (f32, i32) {
    let mut chains = [(0.0f32, 0.0f32); 8];
    let blocks = x.chunks_exact(8);
    let tail = blocks.remainder();
    for block in blocks {
        for ((lo, hi), &v) in chains.iter_mut().zip(block) {
            (*lo, *hi) = (lo.min(v), hi.max(v));
        }
    }
    let (lo, hi) = chains
        .into_iter()
        .chain(tail.iter().map(|&v| (v, v)))
        .fold((0.0f32, 0.0f32), |(lo, hi), (l, h)| (lo.min(l), hi.max(h)));
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = round_half_even((0.0 - lo / scale).clamp(0.0, 255.0)) as i32;
    (scale, zp)
}

/// `v` rounded half to even, for `|v| <= 2^22` (NaN stays NaN): adding and taking away
/// `1.5 · 2^23` leaves the nearest integer in the default rounding mode. The same as
/// `round_ties_even` there, but inlined and vectorised on every x86-64, where that is a libm
/// call without SSE4.1 (a quarter of ddddocr's recogniser's time was spent calling it).
#[inline(always)]
fn round_half_even(v: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    (v + SHIFT) - SHIFT
}

/// `saturate_u8(round_half_even(v / scale) + zp)`, the division in f32 (NaN gives `zp`):
/// clamped to the stored range first (its ends are whole, so rounding commutes with it).
#[inline]
pub(super) fn quantize(v: f32, scale: f32, zp: i32) -> u8 {
    let low = -zp as f32;
    (round_half_even((v / scale).clamp(low, low + 255.0)) as i32 + zp) as u8
}

/// What a [`DynamicProduct`] multiplies.
#[derive(Debug)]
enum Shape {
    /// `rows` rows of the input, each a column of the product (transposed into the output).
    Matmul { rows: usize },
    /// A one-group convolution: its im2col columns, channel-major as the output is.
    Convolution(ConvGeometry),
}

/// A dynamically quantised `FullyConnected`, `BatchMatMul` or `Convolution2d` on the product
/// kernel.
#[derive(Debug)]
struct DynamicProduct {
    shape: Shape,
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

impl DynamicProduct {
    /// Multiplies the packed tiles (`columns` columns) by the weights into `out` (`n` rows of
    /// `columns`, channel-major): `(acc + corr[c]) as f32 · mult[c]`, then `+ bias[c]` when
    /// `bias` is given.
    #[allow(
        clippy::too_many_arguments,
        reason = "the tiles, the output and the three per-channel terms"
    )]
    fn multiply(
        &self,
        packed: &[u8],
        columns: usize,
        corr: &[i32],
        mult: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
    ) {
        let store = |acc: &Acc, r0: usize, count: usize, cols: usize, out: &mut [f32]| {
            for (r, row) in acc.iter().enumerate().take(count) {
                let (c, m) = (corr[r0 + r], mult[r0 + r]);
                let b = bias.map(|b| b[r0 + r]);
                for (o, &a) in out[r * columns..r * columns + cols].iter_mut().zip(row) {
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
            self.k,
            self.threads,
            packed,
            columns,
            out,
            columns,
            store,
        );
    }
}

impl Workload for DynamicProduct {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (k, n) = (self.k, self.weights.m);
        let xb = inputs[0].data.as_slice();
        let y = outputs[0].data.as_mut_slice();
        let (x_len, y_len) = match &self.shape {
            Shape::Matmul { rows } => (rows * k, rows * n),
            Shape::Convolution(g) => (
                g.batch * g.channels * g.height * g.width,
                g.batch * n * g.out_height * g.out_width,
            ),
        };
        if xb.len() != x_len * 4 || y.len() != y_len * 4 {
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
        let mult: Vec<f32> = self.scales.iter().map(|&s| scale * s).collect();
        // A product's bias is added in f32 after the scaling; a convolution's enters the
        // accumulator as `floor(bias / m)`, saturated (`as`).
        let (init, after): (Vec<i32>, Option<&[f32]>) = match (&self.shape, &bias) {
            (Shape::Convolution(_), Some(b)) => (
                b.iter()
                    .zip(&mult)
                    .map(|(&b, &m)| (b / m).floor() as i32)
                    .collect(),
                None,
            ),
            (_, b) => (vec![0; n], b.as_deref()),
        };
        // `acc - x_zp · Σ w` per channel makes `Σ (x - x_zp) (w - w_zp)`.
        let corr: Vec<i32> = init
            .iter()
            .zip(&self.weights.sums)
            .map(|(&b, &s)| b.wrapping_sub(x_zp.wrapping_mul(s)))
            .collect();
        let panel_len = self.weights.k4 * NR * 4;
        QUANTIZED.with_borrow_mut(|(q, packed)| {
            q.clear();
            q.extend(x.iter().map(|&v| quantize(v, scale, x_zp)));
            PRODUCT.with_borrow_mut(|product| match &self.shape {
                &Shape::Matmul { rows } => {
                    let tiles = rows.div_ceil(NR);
                    packed.resize(tiles * panel_len, 0);
                    for (t, panel) in packed.chunks_exact_mut(panel_len).enumerate() {
                        pack_columns(q, k, t * NR, (rows - t * NR).min(NR), 0, panel);
                    }
                    product.resize(n * rows, 0.0);
                    self.multiply(packed, rows, &corr, &mult, after, product);
                    for (r, out) in y.chunks_exact_mut(n * 4).enumerate() {
                        for (c, o) in out.chunks_exact_mut(4).enumerate() {
                            o.copy_from_slice(&product[c * rows + r].to_ne_bytes());
                        }
                    }
                }
                Shape::Convolution(g) => {
                    let chw = g.channels * g.height * g.width;
                    let hw_out = g.out_height * g.out_width;
                    product.resize(n * hw_out, 0.0);
                    for (xi, yi) in q.chunks_exact(chw).zip(y.chunks_exact_mut(n * hw_out * 4)) {
                        pack_convolution(self.isa, g, k, self.threads, xi, x_zp as u8, 0, packed);
                        self.multiply(packed, hw_out, &corr, &mult, None, product);
                        for (o, v) in yi.chunks_exact_mut(4).zip(product.iter()) {
                            o.copy_from_slice(&v.to_ne_bytes());
                        }
                    }
                }
            });
        });
        Ok(())
    }
}
