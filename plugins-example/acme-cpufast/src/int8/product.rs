//! Quantised `Convolution2d` (groups 1: most read the input interleaved by groups of four
//! channels, split by phase of the stride, each tap a shifted window of it ([`Phases`]); a
//! 1×1 stride-1 unpadded convolution packs its input rows as they are; a 1×1 unpadded one with
//! a stride goes through im2col packed straight into the kernel's panels), `FullyConnected` and
//! `BatchMatMul` with a constant `b` (the rows of `x` are the product's columns), and the
//! [`Plan`] every quantised layer is checked against (the depthwise convolution's kernel is
//! in `depthwise.rs`).
//!
//! An execution packs every column tile of the activations (split between threads), then
//! multiplies them by the weight panels, each thread taking a band of output channels (so it
//! writes its own rows of the output).

use std::cell::RefCell;

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, TensorInfo, TensorView, TensorViewMut,
    Workload, WorkloadDesc, shapes,
};

use super::{
    Output, QTensor,
    depthwise::DepthwiseWorkload,
    kernels::{Acc, Isa, MR, NR, Requant, interleave4, tile_acc, tile_acc_runs, tile_store},
    pack::{PackedWeights, column_sums, pack_columns, pack_rows},
};
use crate::{
    cache::CacheSizes,
    gemm::{MIN_PARALLEL_WORK, for_each_part, worth},
    workloads::{
        Signature,
        conv_geometry::{ConvGeometry, inside},
        invalid_layer,
    },
};

/// From this many packed bytes the packing is split between threads.
const MIN_PARALLEL_PACK: usize = 1 << 16;

/// What a quantised product computes.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// A convolution with one group.
    Convolution(ConvGeometry),
    /// A depthwise convolution (channel multiplier allowed).
    Depthwise(ConvGeometry),
    /// `y [rows, n] = x [rows, k] · w`, `w` `[k, n]` (or `[n, k]` when `transpose_w`).
    Matmul {
        rows: usize,
        k: usize,
        n: usize,
        transpose_w: bool,
    },
}

/// A quantised product CpuFast runs: its geometry and parameters, checked.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) kind: Kind,
    pub(crate) x: QTensor,
    /// The weights' parameters.
    pub(crate) w: QTensor,
    pub(crate) out: Output,
    /// Input slot of the bias.
    pub(crate) bias: Option<usize>,
}

fn check_bias(b: &TensorInfo, channels: usize) -> Result<(), String> {
    if b.data_type != DataType::Signed32 || !b.is_constant {
        return Err(format!("the bias {b} must be a constant Signed32 tensor"));
    }
    if b.shape.as_slice() != [channels as u32] {
        return Err(format!("the bias {b} must have shape [{channels}]"));
    }
    Ok(())
}

/// What `layer` computes on `x` and `w` into `y`: the product's kind, the weights' output
/// axis (of per-channel parameters) and the number of output channels, or why CpuFast cannot
/// run it.
pub(crate) fn geometry(
    layer: &LayerDescriptor,
    x: &TensorInfo,
    w: &TensorInfo,
    y: &TensorInfo,
) -> Result<(Kind, usize, usize), String> {
    Ok(match layer {
        LayerDescriptor::Convolution2d(_) | LayerDescriptor::DepthwiseConvolution2d(_) => {
            let g = ConvGeometry::new(layer, x, w, y)?;
            let channels = g.out_channels;
            if matches!(layer, LayerDescriptor::DepthwiseConvolution2d(_)) {
                if g.channels == 0 || !channels.is_multiple_of(g.channels) {
                    return Err(
                        "depthwise output channels must be a multiple of the input's".to_owned(),
                    );
                }
                (Kind::Depthwise(g), 0, channels)
            } else if g.groups != 1 {
                return Err(format!(
                    "quantized convolutions with {} groups (only 1, or depthwise)",
                    g.groups
                ));
            } else {
                (Kind::Convolution(g), 0, channels)
            }
        }
        LayerDescriptor::FullyConnected(d) => {
            let plain = LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
                bias_enabled: false,
                ..d.clone()
            });
            let expected = shapes::output_shapes(&plain, &[x.clone(), w.clone()])?;
            if [y.shape.to_vec()] != expected.as_slice() {
                return Err(format!(
                    "fully connected output {:?} differs from the expected {:?}",
                    y.shape.as_slice(),
                    expected[0]
                ));
            }
            let (&[rows, k], &[_, n]) = (x.shape.as_slice(), y.shape.as_slice()) else {
                return Err("fully connected tensors must have rank 2".to_owned());
            };
            let kind = Kind::Matmul {
                rows: rows as usize,
                k: k as usize,
                n: n as usize,
                transpose_w: d.transpose_weights,
            };
            (kind, usize::from(!d.transpose_weights), n as usize)
        }
        LayerDescriptor::BatchMatMul(d) => {
            if d.transpose_a {
                return Err("quantized BatchMatMul with transpose_a".to_owned());
            }
            let ws = w.shape.as_slice();
            if ws.len() < 2 || ws[..ws.len() - 2].iter().any(|&v| v != 1) {
                return Err(format!(
                    "quantized BatchMatMul needs b of rank 2 (or leading 1s), got {ws:?}"
                ));
            }
            let expected = shapes::batch_matmul(d, &x.shape, ws)?;
            if expected != y.shape.as_slice() {
                return Err(format!(
                    "BatchMatMul output {:?} differs from the expected {expected:?}",
                    y.shape.as_slice()
                ));
            }
            let (k, n) = (
                *x.shape.last().unwrap_or(&0) as usize,
                *y.shape.last().unwrap_or(&0) as usize,
            );
            let rows = x.num_elements().unwrap_or(0) / k.max(1);
            let axis = ws.len() - if d.transpose_b { 2 } else { 1 };
            let kind = Kind::Matmul {
                rows,
                k,
                n,
                transpose_w: d.transpose_b,
            };
            (kind, axis, n)
        }
        _ => unreachable!("matched above"),
    })
}

impl Plan {
    /// The plan of `layer` over `inputs` into `outputs` with an optional clamp, or why CpuFast
    /// cannot run it.
    pub(crate) fn new(
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
        clamp: Option<(i32, i32)>,
    ) -> Result<Self, String> {
        let [y] = outputs else {
            return Err("a product has one output".to_owned());
        };
        let (bias_enabled, expected_inputs) = match layer {
            LayerDescriptor::Convolution2d(d) | LayerDescriptor::DepthwiseConvolution2d(d) => {
                (d.bias_enabled, 2 + usize::from(d.bias_enabled))
            }
            LayerDescriptor::FullyConnected(d) => (d.bias_enabled, 2 + usize::from(d.bias_enabled)),
            LayerDescriptor::BatchMatMul(_) => (false, 2),
            other => return Err(format!("{} is not a product", other.kind())),
        };
        if inputs.len() != expected_inputs {
            return Err(format!(
                "{} expects {expected_inputs} inputs, got {}",
                layer.kind(),
                inputs.len()
            ));
        }
        let (x, w) = (&inputs[0], &inputs[1]);
        let xq = QTensor::activation(x)?;
        let yq = QTensor::activation(y)?;
        let (kind, axis, channels) = geometry(layer, x, w, y)?;
        let wq = QTensor::weights(w, axis)?;
        if bias_enabled {
            check_bias(&inputs[2], channels)?;
        }
        Ok(Self {
            out: Output::new(&xq, &wq, &yq, channels, clamp),
            kind,
            x: xq,
            w: wq,
            bias: bias_enabled.then_some(2),
        })
    }

    /// The workload: weights packed, bias and zero point folded.
    pub(crate) fn into_workload(
        self,
        desc: &WorkloadDesc<'_>,
        threads: usize,
    ) -> BackendResult<Box<dyn Workload>> {
        let constant = |slot: usize| {
            desc.constant(slot)
                .map(|v| v.data.as_slice())
                .ok_or_else(|| invalid_layer(desc, format_args!("input {slot} must be constant")))
        };
        let wb = constant(1)?;
        if Some(wb.len()) != desc.inputs[1].num_bytes() {
            return Err(invalid_layer(
                desc,
                "the weights' bytes do not match their shape",
            ));
        }
        let channels = self.out.mult.len();
        let bias: Vec<i32> = match self.bias {
            Some(slot) => {
                let b = constant(slot)?;
                if b.len() != channels * 4 {
                    return Err(invalid_layer(
                        desc,
                        "the bias' bytes do not match its shape",
                    ));
                }
                b.chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            }
            None => vec![0; channels],
        };
        let isa = Isa::detect();
        let signature = Signature::of(desc);
        // The input as the kernels see it: `u8`, shifted by 128 from `i8`.
        let (flip, x_zp) = self.x.as_u8();
        // The zero point's stored byte (two's complement for `i8`).
        let zp_byte = self.x.zp as u8;
        // The weights as the kernels read them: `i8`, a `u8` stored minus 128 and its zero
        // point moved the same way (so `stored - zp` is unchanged, within -255..=255).
        let (w_flip, w_zp) = self.w.as_i8();
        let w_zp = i8::try_from(w_zp).map_err(|_| {
            invalid_layer(
                desc,
                format_args!("weight zero point {} out of range", self.w.zp),
            )
        })?;
        let wv = |i: usize| (wb[i] ^ w_flip) as i8;
        match self.kind {
            Kind::Depthwise(g) => Ok(Box::new(DepthwiseWorkload::new(
                g,
                wb.iter().map(|&b| self.w.value(b)).collect(),
                bias,
                self.x,
                self.out,
                signature,
                isa,
                threads,
            ))),
            Kind::Convolution(g) if implicit(&g) => {
                // Reduction order (tap, channel), the channels padded to a multiple of 4: each
                // tap's groups read one shifted window of the interleaved image.
                let (c, taps) = (g.channels, g.kernel_h * g.kernel_w);
                let c4 = c.div_ceil(4);
                let k = taps * c4 * 4;
                // The channels past `c` are weights of value 0 (stored as the zero point).
                let weights = PackedWeights::new(g.out_channels, k, w_zp, |r, kk| {
                    let (tap, ci) = (kk / (c4 * 4), kk % (c4 * 4));
                    if ci < c {
                        wv((r * c + ci) * taps + tap)
                    } else {
                        w_zp
                    }
                });
                let corr = correction(&bias, &weights.sums, x_zp);
                let phases = Phases::of(&g);
                Ok(Box::new(ProductWorkload {
                    shape: Shape::Implicit { g, c4, phases },
                    k,
                    weights,
                    corr,
                    out: self.out,
                    flip,
                    zp_byte,
                    isa,
                    signature,
                    threads,
                }))
            }
            Kind::Convolution(g) => {
                let k = g.channels * g.kernel_h * g.kernel_w;
                let weights = PackedWeights::of_stored(g.out_channels, k, w_zp, w_flip, wb, false);
                let corr = correction(&bias, &weights.sums, x_zp);
                Ok(Box::new(ProductWorkload {
                    shape: Shape::Convolution(g),
                    k,
                    weights,
                    corr,
                    out: self.out,
                    flip,
                    zp_byte,
                    isa,
                    signature,
                    threads,
                }))
            }
            Kind::Matmul {
                rows,
                k,
                n,
                transpose_w,
            } => {
                let weights = PackedWeights::of_stored(n, k, w_zp, w_flip, wb, !transpose_w);
                let corr = correction(&bias, &weights.sums, x_zp);
                Ok(Box::new(ProductWorkload {
                    shape: Shape::Matmul { rows },
                    k,
                    weights,
                    corr,
                    out: self.out,
                    flip,
                    zp_byte,
                    isa,
                    signature,
                    threads,
                }))
            }
        }
    }
}

/// Whether convolution `g` runs on the interleaved image: any but a 1×1 unpadded one (that
/// one packs its rows as they are, its tiles spanning output rows, or with a stride takes every
/// other column through im2col). With few input channels each tap is a group or two of the
/// reduction, but a tile's taps run with its accumulators in registers ([`tile_acc_runs`]):
/// ResNet-50's 3-channel 7×7 stride-2 stem reads its padded channel of zeros (196 products a
/// column for 147) in 0.67× the time of im2col, measured on the Intel Xeon of
/// docs/PERFORMANCE.md; the PP-OCR models' 3-channel stems 0.89×.
fn implicit(g: &ConvGeometry) -> bool {
    let pointwise = g.kernel_h == 1 && g.kernel_w == 1 && g.pad_top == 0 && g.pad_left == 0;
    !pointwise
}

/// How an implicit convolution's padded image is laid out: split by phase of the stride (the
/// padded positions `(qy · sy + py, qx · sx + px)` of phase `(py, px)` form one `hq × wq`
/// image), only the phases some tap reads, one after the other in each group of four
/// channels. A tap then reads one phase at a fixed shift, with stride 1, like a stride-1
/// convolution's taps on the whole padded image (its only phase): output `(oy, ox)` is column
/// `oy · wq + ox` of the product, and the columns past the output width are dropped.
#[derive(Debug, Clone)]
struct Phases {
    /// `(py, px)` of each phase laid out, in order.
    used: Vec<[usize; 2]>,
    /// Rows of one phase.
    hq: usize,
    /// Columns of one phase.
    wq: usize,
}

impl Phases {
    /// The layout of `g`'s padded image: the padded size `hp × wp` its output reads, each
    /// phase `ceil(hp / sy) × ceil(wp / sx)`, the phases its taps read in `(py, px)` order.
    fn of(g: &ConvGeometry) -> Self {
        let (sy, sx) = (g.stride_y, g.stride_x);
        let hp = (g.out_height - 1) * sy + (g.kernel_h - 1) * g.dilation_y + 1;
        let wp = (g.out_width - 1) * sx + (g.kernel_w - 1) * g.dilation_x + 1;
        let mut used = Vec::new();
        for ky in 0..g.kernel_h {
            for kx in 0..g.kernel_w {
                let phase = [ky * g.dilation_y % sy, kx * g.dilation_x % sx];
                if !used.contains(&phase) {
                    used.push(phase);
                }
            }
        }
        used.sort_unstable();
        Self {
            used,
            hq: hp.div_ceil(sy),
            wq: wp.div_ceil(sx),
        }
    }

    /// Bytes of one group of four channels: every phase laid out.
    fn plane(&self) -> usize {
        self.used.len() * self.hq * self.wq * 4
    }

    /// Where tap `(ky, kx)` starts reading in a group's bytes.
    fn shift(&self, g: &ConvGeometry, ky: usize, kx: usize) -> usize {
        let (a, b) = (ky * g.dilation_y, kx * g.dilation_x);
        let phase = [a % g.stride_y, b % g.stride_x];
        let i = self
            .used
            .iter()
            .position(|&p| p == phase)
            .expect("every tap's phase is laid out");
        (i * self.hq * self.wq + (a / g.stride_y) * self.wq + b / g.stride_x) * 4
    }
}

/// `acc[r][j] -= zp · sums[j]` in every tile of `accs` (wrapping, as the accumulators): the
/// weight zero point's share of the products, `sums` the tile's column sums.
fn subtract_weight_zero_point(accs: &mut [Acc], zp: i8, sums: &[i32; NR]) {
    let shares: [i32; NR] = std::array::from_fn(|j| i32::from(zp).wrapping_mul(sums[j]));
    for row in accs.iter_mut().flatten() {
        for (a, &s) in row.iter_mut().zip(&shares) {
            *a = a.wrapping_sub(s);
        }
    }
}

/// `bias - x_zp · Σ w` per output channel, wrapping as the accumulators do.
fn correction(bias: &[i32], sums: &[i32], x_zp: i32) -> Vec<i32> {
    bias.iter()
        .zip(sums)
        .map(|(&b, &s)| b.wrapping_sub(x_zp.wrapping_mul(s)))
        .collect()
}

/// The geometry of a [`ProductWorkload`].
#[derive(Debug)]
enum Shape {
    Convolution(ConvGeometry),
    /// A convolution on the image interleaved by groups of four channels (`[c4][phase][hq][wq]
    /// [4]`, padded with the zero point; see [`Phases`]), its output computed on the phases'
    /// grid (`oy · wq + ox`; the columns past the output width are dropped).
    Implicit {
        g: ConvGeometry,
        c4: usize,
        phases: Phases,
    },
    /// `rows` rows of `x`, each a column of the product.
    Matmul {
        rows: usize,
    },
}

/// A quantised convolution, fully connected layer or batch matmul on the product kernel.
#[derive(Debug)]
pub(crate) struct ProductWorkload {
    shape: Shape,
    /// The reduction length.
    k: usize,
    weights: PackedWeights,
    corr: Vec<i32>,
    out: Output,
    /// XORed into every input byte (0x80 for `i8` inputs).
    flip: u8,
    /// The stored byte of the input zero point (what padding reads).
    zp_byte: u8,
    isa: Isa,
    signature: Signature,
    threads: usize,
}

thread_local! {
    /// The accumulators of a band's panels for one tile.
    static ACCS: RefCell<Vec<Acc>> = const { RefCell::new(Vec::new()) };
    /// Packed activations of the executions on this thread.
    static PACKED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The interleaved, padded image of an implicit convolution.
    static IMAGE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// A convolution's im2col rows of one chunk of columns.
    static ROWS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// A fully connected layer's output before its transposition.
    static TRANSPOSED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Writes the columns `n0 .. n1` of `g`'s im2col matrix of image `x` (`k` rows) into `dst`,
/// row-major (`n1 - n0` bytes a row); padding reads `zp_byte`. Each row is a run of
/// contiguous copies (stride 1) or gathers, one per output row it crosses.
fn im2col_rows(
    g: &ConvGeometry,
    x: &[u8],
    zp_byte: u8,
    k: usize,
    n0: usize,
    n1: usize,
    dst: &mut [u8],
) {
    let (h, w, ow) = (g.height, g.width, g.out_width);
    let nc = n1 - n0;
    let taps = g.kernel_h * g.kernel_w;
    for kk in 0..k {
        let (c, ky, kx) = (kk / taps, (kk / g.kernel_w) % g.kernel_h, kk % g.kernel_w);
        let plane = &x[c * h * w..(c + 1) * h * w];
        let row = &mut dst[kk * nc..(kk + 1) * nc];
        let dy = (ky * g.dilation_y) as isize - g.pad_top as isize;
        let dx = (kx * g.dilation_x) as isize - g.pad_left as isize;
        let inside_x = inside(ow, w, g.stride_x, dx as i64);
        let mut n = n0;
        while n < n1 {
            let (oy, ox0) = (n / ow, n % ow);
            let ox1 = ow.min(ox0 + (n1 - n));
            let seg = &mut row[n - n0..n - n0 + (ox1 - ox0)];
            let iy = (oy * g.stride_y) as isize + dy;
            if iy < 0 || iy >= h as isize {
                seg.fill(zp_byte);
            } else {
                let src = &plane[iy as usize * w..(iy as usize + 1) * w];
                let lo = inside_x.start.clamp(ox0, ox1);
                let hi = inside_x.end.clamp(lo, ox1);
                seg[..lo - ox0].fill(zp_byte);
                seg[hi - ox0..].fill(zp_byte);
                let mid = &mut seg[lo - ox0..hi - ox0];
                let first = (lo * g.stride_x) as isize + dx;
                if g.stride_x == 1 {
                    mid.copy_from_slice(&src[first as usize..first as usize + (hi - lo)]);
                } else if let Some((last, body)) = mid.split_last_mut() {
                    let src = &src[first as usize..];
                    if g.stride_x == 2 {
                        // Pairs: a de-interleave the compiler vectorises.
                        for (v, pair) in body.iter_mut().zip(src.chunks_exact(2)) {
                            *v = pair[0];
                        }
                    } else {
                        for (i, v) in body.iter_mut().enumerate() {
                            *v = src[i * g.stride_x];
                        }
                    }
                    *last = src[body.len() * g.stride_x];
                }
            }
            n += ox1 - ox0;
        }
    }
}

/// Writes group `cg` (channels `4 · cg ..`) of image `x` interleaved and padded into `dst`,
/// laid out by `phases` (`phases.plane()` bytes: `dst[((i · hq + qy) · wq + qx) · 4 + r]` is
/// channel `4 · cg + r` at padded position `(qy · sy + py, qx · sx + px)` of phase `i`,
/// `(py, px)`; padding holds the zero point, channels past the image 0).
#[allow(
    clippy::too_many_arguments,
    reason = "the image, the group, the layout and the bytes"
)]
fn interleave_image(
    isa: Isa,
    g: &ConvGeometry,
    x: &[u8],
    cg: usize,
    phases: &Phases,
    zp_byte: u8,
    flip: u8,
    dst: &mut [u8],
) {
    let (h, w) = (g.height, g.width);
    let (hq, wq) = (phases.hq, phases.wq);
    let mut rows = [[0u8; NR]; 4];
    for (&[py, px], dst) in phases.used.iter().zip(dst.chunks_exact_mut(hq * wq * 4)) {
        for qy in 0..hq {
            let iy = (qy * g.stride_y + py) as isize - g.pad_top as isize;
            let out = &mut dst[qy * wq * 4..(qy + 1) * wq * 4];
            for (chunk, o) in out.chunks_mut(NR * 4).enumerate() {
                let qx0 = chunk * NR;
                let n = o.len() / 4;
                for (r, row) in rows.iter_mut().enumerate() {
                    let c = cg * 4 + r;
                    if c >= g.channels {
                        // Weights of these channels are 0; the byte XORed below is anything.
                        row.fill(flip);
                        continue;
                    }
                    if iy < 0 || iy >= h as isize {
                        row.fill(zp_byte);
                        continue;
                    }
                    let src = &x[(c * h + iy as usize) * w..(c * h + iy as usize + 1) * w];
                    gather_row(
                        src,
                        qx0 * g.stride_x + px,
                        g.pad_left,
                        g.stride_x,
                        zp_byte,
                        &mut row[..n],
                    );
                }
                if n == NR {
                    interleave4(
                        isa,
                        [&rows[0], &rows[1], &rows[2], &rows[3]],
                        flip,
                        o.try_into().expect("a group"),
                    );
                } else {
                    for (j, q) in o.chunks_exact_mut(4).enumerate() {
                        for r in 0..4 {
                            q[r] = rows[r][j] ^ flip;
                        }
                    }
                }
            }
        }
    }
}

/// Fills `row` with the padded image row `src` read from padded column `x0` every `step`
/// columns (`row[j]` is padded column `x0 + j · step`, source column that minus `pad`):
/// `zp_byte` where that falls outside `src`, the bytes copied in one run in between.
pub(super) fn gather_row(
    src: &[u8],
    x0: usize,
    pad: usize,
    step: usize,
    zp_byte: u8,
    row: &mut [u8],
) {
    // The first `j` whose column is inside the image (`x0 + j · step >= pad`), and the first
    // past its end (`x0 + j · step >= pad + src.len()`).
    let first_at = |edge: usize| edge.saturating_sub(x0).div_ceil(step).min(row.len());
    let lo = first_at(pad);
    let hi = first_at(pad + src.len()).max(lo);
    row[..lo].fill(zp_byte);
    row[hi..].fill(zp_byte);
    if lo < hi {
        let start = x0 + lo * step - pad;
        if step == 1 {
            row[lo..hi].copy_from_slice(&src[start..start + hi - lo]);
        } else {
            for (v, &b) in row[lo..hi]
                .iter_mut()
                .zip(src[start..].iter().step_by(step))
            {
                *v = b;
            }
        }
    }
}

/// Multiplies the activation tiles `packed` (`columns` columns, [`NR`] a tile) by `weights`
/// into `y` (`m` rows of `ld` elements), the output channels split between `threads` in bands
/// of panels; `store(acc, r0, rows, cols, out)` writes a tile's finished accumulators (`rows`
/// rows from channel `r0`, `cols` columns) at `out[0]` (row `r` at `out[r · ld]`). A weight
/// zero point's share is already taken off the accumulators.
#[allow(
    clippy::too_many_arguments,
    reason = "the weights, the tiles, the output and how a tile is stored"
)]
pub(crate) fn multiply_tiles<T: Send>(
    isa: Isa,
    weights: &PackedWeights,
    k: usize,
    threads: usize,
    packed: &[u8],
    columns: usize,
    y: &mut [T],
    ld: usize,
    store: impl Fn(&Acc, usize, usize, usize, &mut [T]) + Sync,
) {
    let k4 = weights.k4;
    let panel_len = k4 * NR * 4;
    let m = weights.m;
    let panels = weights.panel_count();
    let kc4 = CacheSizes::get().int8_reduction_groups();
    let tiles = columns.div_ceil(NR);
    let parts = worth(m * k * columns, MIN_PARALLEL_WORK, threads).min(panels);
    let per = panels.div_ceil(parts.max(1));
    let y = &mut y[..m * ld];
    for_each_part(
        parts,
        y.chunks_mut(per * MR * ld).enumerate(),
        |(part, band)| {
            let first = part * per;
            let last = (first + per).min(panels);
            // The reduction in blocks of `kc4` groups: a tile's block of activations
            // (`kc4 · 128` bytes) stays in L1 while every panel of the band multiplies it.
            ACCS.with_borrow_mut(|accs| {
                accs.resize(last - first, [[0; NR]; MR]);
                for t in 0..tiles {
                    let b = &packed[t * panel_len..(t + 1) * panel_len];
                    let cols = (columns - t * NR).min(NR);
                    for k0 in (0..k4).step_by(kc4) {
                        let kn = kc4.min(k4 - k0);
                        for (p, acc) in (first..last).zip(accs.iter_mut()) {
                            let a = &weights.panel(p)[k0 * MR * 4..];
                            tile_acc(isa, a, &b[k0 * NR * 4..], kn, NR * 4, acc, k0 > 0);
                        }
                    }
                    if weights.zp != 0 {
                        let mut sums = [0i32; NR];
                        column_sums(b, k4, NR * 4, &mut sums);
                        subtract_weight_zero_point(accs, weights.zp, &sums);
                    }
                    for (p, acc) in (first..last).zip(accs.iter()) {
                        let r0 = p * MR;
                        let at = (r0 - first * MR) * ld + t * NR;
                        store(acc, r0, (m - r0).min(MR), cols, &mut band[at..]);
                    }
                }
            });
        },
    );
}

impl ProductWorkload {
    /// Multiplies the packed tiles by the weights into `y` (`m` rows of `ld` bytes),
    /// requantised, the output channels split between threads.
    fn multiply(&self, packed: &[u8], columns: usize, y: &mut [u8], ld: usize) {
        let store = |acc: &Acc, r0: usize, rows: usize, cols: usize, out: &mut [u8]| {
            let rq = Requant {
                corr: &self.corr[r0..],
                mult: &self.out.mult[r0..],
                zp: self.out.zp,
                lo: self.out.lo,
                hi: self.out.hi,
            };
            tile_store(self.isa, acc, 0, rows, cols, &rq, out, ld);
        };
        multiply_tiles(
            self.isa,
            &self.weights,
            self.k,
            self.threads,
            packed,
            columns,
            y,
            ld,
            store,
        );
    }

    /// The product of an implicit convolution (see [`Shape::Implicit`]) into `y`, the output
    /// channels split between threads.
    fn multiply_implicit(
        &self,
        image: &[u8],
        g: &ConvGeometry,
        c4: usize,
        phases: &Phases,
        y: &mut [u8],
    ) {
        let m = self.weights.m;
        let wp = phases.wq;
        let (ow, hw_out) = (g.out_width, g.out_height * g.out_width);
        let columns = (g.out_height - 1) * wp + ow;
        let tiles = columns.div_ceil(NR);
        let panels = self.weights.panel_count();
        let plane = phases.plane();
        let parts = worth(m * self.k * columns, MIN_PARALLEL_WORK, self.threads).min(panels);
        let per = panels.div_ceil(parts.max(1));
        let y = &mut y[..m * hw_out];
        let taps: Vec<usize> = (0..g.kernel_h)
            .flat_map(|ky| (0..g.kernel_w).map(move |kx| phases.shift(g, ky, kx)))
            .collect();
        // Taps per run: the activations a run reads for one tile stay within
        // `CacheSizes::int8_tap_run_bytes` (re-read from L1 by every panel), in runs of equal
        // length.
        let run_bytes = CacheSizes::get().int8_tap_run_bytes();
        let fit = (run_bytes / (c4 * NR * 4).max(1)).clamp(1, taps.len().max(1));
        let per_run = taps.len().div_ceil(taps.len().div_ceil(fit).max(1)).max(1);
        for_each_part(
            parts,
            y.chunks_mut(per * MR * hw_out).enumerate(),
            |(part, band)| {
                let first = part * per;
                let last = (first + per).min(panels);
                ACCS.with_borrow_mut(|accs| {
                    accs.resize(last - first, [[0; NR]; MR]);
                    for t in 0..tiles {
                        let mut sums = [0i32; NR];
                        let b = &image[t * NR * 4..];
                        // Each panel multiplies a run of taps at a time, its accumulators
                        // held in registers across them.
                        for (j, run) in taps.chunks(per_run).enumerate() {
                            for (p, acc) in (first..last).zip(accs.iter_mut()) {
                                let a = &self.weights.panel(p)[j * per_run * c4 * MR * 4..];
                                tile_acc_runs(self.isa, a, b, run, c4, plane, acc, j > 0);
                            }
                        }
                        if self.weights.zp != 0 {
                            for &shift in &taps {
                                column_sums(&b[shift..], c4, plane, &mut sums);
                            }
                        }
                        if self.weights.zp != 0 {
                            subtract_weight_zero_point(accs, self.weights.zp, &sums);
                        }
                        // The tile's columns, row by row of the output (pad columns skipped).
                        let end = (t * NR + NR).min(columns);
                        let mut n = t * NR;
                        while n < end {
                            let (oy, ox) = (n / wp, n % wp);
                            if ox >= ow {
                                n += wp - ox;
                                continue;
                            }
                            let len = (ow - ox).min(end - n);
                            for (p, acc) in (first..last).zip(accs.iter()) {
                                let r0 = p * MR;
                                let rq = Requant {
                                    corr: &self.corr[r0..],
                                    mult: &self.out.mult[r0..],
                                    zp: self.out.zp,
                                    lo: self.out.lo,
                                    hi: self.out.hi,
                                };
                                let at = (r0 - first * MR) * hw_out + oy * ow + ox;
                                tile_store(
                                    self.isa,
                                    acc,
                                    n - t * NR,
                                    (m - r0).min(MR),
                                    len,
                                    &rq,
                                    &mut band[at..],
                                    hw_out,
                                );
                            }
                            n += len;
                        }
                    }
                });
            },
        );
    }

    /// Packs `chunks` chunks of `chunk_tiles` tiles each with `pack(chunk, its panels)`, split
    /// between threads ([`pack_parallel`]).
    fn pack(
        &self,
        packed: &mut [u8],
        chunks: usize,
        chunk_tiles: usize,
        pack: impl Fn(usize, &mut [u8]) + Sync,
    ) {
        let panel_len = match &self.shape {
            // One "tile" is one interleaved plane of four channels.
            Shape::Implicit { phases, .. } => phases.plane(),
            _ => self.weights.k4 * NR * 4,
        };
        pack_parallel(panel_len, self.threads, packed, chunks, chunk_tiles, pack);
    }
}

/// Packs `chunks` chunks of `chunk_tiles` tiles of `panel_len` bytes each (the last chunk may
/// have fewer, of the tiles in the buffer) with `pack(chunk, its panels)`, split between
/// `threads`.
fn pack_parallel(
    panel_len: usize,
    threads: usize,
    packed: &mut [u8],
    chunks: usize,
    chunk_tiles: usize,
    pack: impl Fn(usize, &mut [u8]) + Sync,
) {
    let parts = worth(chunks * chunk_tiles * panel_len, MIN_PARALLEL_PACK, threads).min(chunks);
    let per = chunks.div_ceil(parts.max(1));
    for_each_part(
        parts,
        packed
            .chunks_mut(per * chunk_tiles * panel_len)
            .take(parts)
            .enumerate(),
        |(part, band)| {
            for (i, panels) in band.chunks_mut(chunk_tiles * panel_len).enumerate() {
                if part * per + i < chunks {
                    pack(part * per + i, panels);
                }
            }
        },
    );
}

/// Packs image `x` (one batch entry, `u8` as stored, `flip` XORed into each byte) of the
/// one-group convolution `g` into `packed` as the product's tiles of its im2col matrix (`k`
/// rows, the output positions as columns; padding reads `zp_byte`), split between `threads`.
#[allow(
    clippy::too_many_arguments,
    reason = "the convolution, the image and its bytes' reading, the panels"
)]
pub(crate) fn pack_convolution(
    isa: Isa,
    g: &ConvGeometry,
    k: usize,
    threads: usize,
    x: &[u8],
    zp_byte: u8,
    flip: u8,
    packed: &mut Vec<u8>,
) {
    let hw_out = g.out_height * g.out_width;
    let panel_len = k.div_ceil(4) * NR * 4;
    let direct = g.kernel_h == 1
        && g.kernel_w == 1
        && g.stride_y == 1
        && g.stride_x == 1
        && g.pad_top == 0
        && g.pad_left == 0
        && hw_out == g.height * g.width;
    let tiles = hw_out.div_ceil(NR);
    if packed.len() < tiles * panel_len {
        packed.resize(tiles * panel_len, 0);
    }
    // Columns per im2col chunk: a multiple of NR, `CacheSizes::int8_im2col_bytes` of rows.
    let chunk_bytes = CacheSizes::get().int8_im2col_bytes();
    let chunk_tiles = (chunk_bytes / (k * NR).max(1)).clamp(1, tiles.max(1));
    let chunks = tiles.div_ceil(chunk_tiles);
    pack_parallel(
        panel_len,
        threads,
        packed,
        chunks,
        chunk_tiles,
        |chunk, panels| {
            let n0 = chunk * chunk_tiles * NR;
            let n1 = (n0 + chunk_tiles * NR).min(hw_out);
            if direct {
                let tiles = (n1 - n0).div_ceil(NR);
                for (t, panel) in panels.chunks_mut(panel_len).take(tiles).enumerate() {
                    let c0 = n0 + t * NR;
                    let cols = (n1 - c0).min(NR);
                    pack_rows(isa, x, hw_out, k, c0, cols, flip, panel);
                }
                return;
            }
            ROWS.with_borrow_mut(|rows| {
                let nc = n1 - n0;
                rows.resize(k * nc, 0);
                im2col_rows(g, x, zp_byte, k, n0, n1, rows);
                let tiles = nc.div_ceil(NR);
                for (t, panel) in panels.chunks_mut(panel_len).take(tiles).enumerate() {
                    let c0 = t * NR;
                    let cols = (nc - c0).min(NR);
                    pack_rows(isa, rows, nc, k, c0, cols, flip, panel);
                }
            });
        },
    );
}

impl Workload for ProductWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let x = inputs[0].data.as_slice();
        let y = outputs[0].data.as_mut_slice();
        let m = self.weights.m;
        let k = self.k;
        let panel_len = self.weights.k4 * NR * 4;
        match &self.shape {
            Shape::Convolution(g) => {
                let (chw, hw_out) = (g.channels * g.height * g.width, g.out_height * g.out_width);
                if x.len() != g.batch * chw || y.len() != g.batch * m * hw_out {
                    return Err(BackendError::invalid_argument(
                        "buffer sizes differ from the tensors'",
                    ));
                }
                PACKED.with_borrow_mut(|packed| {
                    for b in 0..g.batch {
                        let xi = &x[b * chw..(b + 1) * chw];
                        pack_convolution(
                            self.isa,
                            g,
                            k,
                            self.threads,
                            xi,
                            self.zp_byte,
                            self.flip,
                            packed,
                        );
                        let yi = &mut y[b * m * hw_out..(b + 1) * m * hw_out];
                        self.multiply(packed, hw_out, yi, hw_out);
                    }
                });
            }
            Shape::Implicit { g, c4, phases } => {
                let c4 = *c4;
                let (chw, hw_out) = (g.channels * g.height * g.width, g.out_height * g.out_width);
                if x.len() != g.batch * chw || y.len() != g.batch * m * hw_out {
                    return Err(BackendError::invalid_argument(
                        "buffer sizes differ from the tensors'",
                    ));
                }
                let plane = phases.plane();
                IMAGE.with_borrow_mut(|image| {
                    image.resize(c4 * plane + NR * 4, 0);
                    for b in 0..g.batch {
                        let xi = &x[b * chw..(b + 1) * chw];
                        self.pack(image, c4, 1, |cg, dst| {
                            interleave_image(
                                self.isa,
                                g,
                                xi,
                                cg,
                                phases,
                                self.zp_byte,
                                self.flip,
                                &mut dst[..plane],
                            );
                        });
                        let yi = &mut y[b * m * hw_out..(b + 1) * m * hw_out];
                        self.multiply_implicit(image, g, c4, phases, yi);
                    }
                });
            }
            &Shape::Matmul { rows } => {
                if x.len() != rows * k || y.len() != rows * m {
                    return Err(BackendError::invalid_argument(
                        "buffer sizes differ from the tensors'",
                    ));
                }
                let tiles = rows.div_ceil(NR);
                PACKED.with_borrow_mut(|packed| {
                    if packed.len() < tiles * panel_len {
                        packed.resize(tiles * panel_len, 0);
                    }
                    self.pack(packed, tiles, 1, |t, panel| {
                        let panel = &mut panel[..panel_len];
                        pack_columns(x, k, t * NR, (rows - t * NR).min(NR), self.flip, panel);
                    });
                    TRANSPOSED.with_borrow_mut(|tmp| {
                        tmp.resize(m * rows, 0);
                        self.multiply(packed, rows, tmp, rows);
                        for (r, row) in y.chunks_exact_mut(m).enumerate() {
                            for (c, v) in row.iter_mut().enumerate() {
                                *v = tmp[c * rows + r];
                            }
                        }
                    });
                });
            }
        }
        Ok(())
    }
}
