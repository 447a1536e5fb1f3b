//! Convolution2d and DepthwiseConvolution2d (ONNX `Conv`): explicit padding, strides,
//! dilation, groups and an optional bias, with NCHW or NHWC activations.
//!
//! Weights are always `[out, in / groups, kh, kw]`, whatever the layout. A depthwise
//! convolution is the grouped convolution with one group per input channel: weights
//! `[channels * multiplier, 1, kh, kw]`, output channel `o` reads input channel
//! `o / multiplier`.
//!
//! Float32 or Float64 (every tensor of one type), each sum accumulated in that type.
//!
//! Padding cells are zeros; the output size is the floor rule of
//! [`shapes::window_output`](backplane_api::shapes::window_output).

use std::ops::Range;

use backplane_api::{
    BackendResult, Convolution2dDescriptor, DataLayout, LayerDescriptor, TensorInfo, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, float_workload, invalid_layer, nchw_dims};

/// The element types a convolution computes in: `f32` and `f64` (each output accumulated in
/// its own type).
trait Real:
    backplane_api::Element + num_traits::Zero + std::ops::Mul<Output = Self> + std::ops::AddAssign
{
}

impl<T> Real for T where
    T: backplane_api::Element + num_traits::Zero + std::ops::Mul<Output = T> + std::ops::AddAssign
{
}

/// The tap positions of one kernel offset along one spatial axis: the outputs whose input
/// index (`o * stride + k * dilation - pad_begin`) falls inside the input, and the input
/// index of the first of them.
#[derive(Debug, Clone)]
struct Taps {
    outputs: Range<usize>,
    first_input: usize,
}

impl Taps {
    /// Taps of kernel offset `k` for `out_len` outputs over an input of `in_len`.
    fn new(out_len: usize, in_len: usize, stride: usize, offset: i64) -> Self {
        // Input index of output `o` is `o * stride + offset`; keep those in `0..in_len`.
        let s = stride as i64;
        let lo = if offset >= 0 {
            0
        } else {
            (-offset + s - 1) / s
        };
        let room = in_len as i64 - offset;
        let hi = if room <= 0 { 0 } else { (room + s - 1) / s };
        let hi = hi.min(out_len as i64);
        let lo = lo.min(hi);
        Self {
            outputs: lo as usize..hi as usize,
            first_input: (lo * s + offset).max(0) as usize,
        }
    }
}

/// Everything about one convolution fixed when the workload is created.
#[derive(Debug, Clone)]
struct Geometry {
    layout: DataLayout,
    batch: usize,
    channels: usize,
    height: usize,
    width: usize,
    out_channels: usize,
    out_height: usize,
    out_width: usize,
    kernel_h: usize,
    kernel_w: usize,
    stride_y: usize,
    stride_x: usize,
    dilation_y: usize,
    dilation_x: usize,
    pad_top: usize,
    pad_left: usize,
    groups: usize,
}

impl Geometry {
    /// Input channels per group.
    fn group_in(&self) -> usize {
        self.channels / self.groups
    }

    /// Output channels per group.
    fn group_out(&self) -> usize {
        self.out_channels / self.groups
    }
}

/// Output channels whose sums one NCHW tile holds (each input value loaded serves them all).
const CHANNEL_BLOCK: usize = 4;

/// Output pixels of one row whose sums one NCHW tile holds (contiguous input cells at stride 1,
/// so the compiler vectorises the multiply-adds over them).
const PIXEL_BLOCK: usize = 8;

/// The size of one zero-padded input plane of the NCHW path.
#[derive(Debug, Clone, Copy)]
struct Padded {
    height: usize,
    width: usize,
}

impl Padded {
    fn plane(&self) -> usize {
        self.height * self.width
    }
}

/// A 2-D convolution (plain, grouped or depthwise) with an optional bias.
#[derive(Debug)]
pub struct ConvolutionWorkload {
    geo: Geometry,
    /// Shapes of `[x, weights, bias?]` and of the output, checked at execution.
    shapes: ExpectedShapes,
    /// Row taps per `ky` and column taps per `kx`.
    rows: Vec<Taps>,
    cols: Vec<Taps>,
}

fn dims4(desc: &WorkloadDesc<'_>, what: &str, t: &TensorInfo) -> BackendResult<[usize; 4]> {
    match t.shape.as_slice() {
        &[a, b, c, d] => Ok([a as usize, b as usize, c as usize, d as usize]),
        s => Err(invalid_layer(
            desc,
            format_args!("{what} must have rank 4, got {s:?}"),
        )),
    }
}

/// Creates the workload of a `Convolution2d` or `DepthwiseConvolution2d` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (d, depthwise): (&Convolution2dDescriptor, bool) = match desc.layer {
        LayerDescriptor::Convolution2d(d) => (d, false),
        LayerDescriptor::DepthwiseConvolution2d(d) => (d, true),
        other => {
            return Err(invalid_layer(
                desc,
                format_args!("{} is not a convolution", other.kind()),
            ));
        }
    };
    let n_in = if d.bias_enabled { 3 } else { 2 };
    expect_counts(desc.inputs.len(), desc.outputs.len(), n_in, 1)?;
    let x = dims4(desc, "input", &desc.inputs[0])?;
    let w = dims4(desc, "weights", &desc.inputs[1])?;
    let y = dims4(desc, "output", &desc.outputs[0])?;
    let [batch, channels, height, width] = nchw_dims(d.layout, x);
    let [_, out_channels, out_height, out_width] = nchw_dims(d.layout, y);
    let groups = if depthwise {
        channels
    } else {
        d.groups as usize
    };
    let geo = Geometry {
        layout: d.layout,
        batch,
        channels,
        height,
        width,
        out_channels,
        out_height,
        out_width,
        kernel_h: w[2],
        kernel_w: w[3],
        stride_y: d.stride_y as usize,
        stride_x: d.stride_x as usize,
        dilation_y: d.dilation_y as usize,
        dilation_x: d.dilation_x as usize,
        pad_top: d.padding.top as usize,
        pad_left: d.padding.left as usize,
        groups,
    };
    // Layer support has checked all of this against `shapes`; a workload never indexes
    // outside its buffers even if it is created for inconsistent tensors.
    let consistent = groups > 0
        && channels % groups == 0
        && out_channels % groups == 0
        && w[0] == out_channels
        && w[1] * groups == channels
        && y[0] == batch
        && desc
            .inputs
            .get(2)
            .is_none_or(|b| b.shape.as_slice() == [out_channels as u32])
        && geo.stride_y > 0
        && geo.stride_x > 0
        && geo.dilation_y > 0
        && geo.dilation_x > 0;
    if !consistent {
        return Err(invalid_layer(desc, "inconsistent convolution tensors"));
    }
    let rows = (0..geo.kernel_h)
        .map(|ky| {
            let offset = (ky * geo.dilation_y) as i64 - geo.pad_top as i64;
            Taps::new(out_height, height, geo.stride_y, offset)
        })
        .collect();
    let cols = (0..geo.kernel_w)
        .map(|kx| {
            let offset = (kx * geo.dilation_x) as i64 - geo.pad_left as i64;
            Taps::new(out_width, width, geo.stride_x, offset)
        })
        .collect();
    Ok(Box::new(ConvolutionWorkload {
        geo,
        shapes: ExpectedShapes::of(desc),
        rows,
        cols,
    }))
}

impl ConvolutionWorkload {
    /// NCHW: each image is first copied into a zero-padded buffer (unless it has no
    /// padding), so every tap of every output reads an ordinary cell and the loops have no
    /// edge cases. Then, for blocks of [`CHANNEL_BLOCK`] output channels of one group and
    /// tiles of [`PIXEL_BLOCK`] output pixels of one row, the tile's sums are held in a small
    /// array (registers) while the loops run over input channels, kernel rows and kernel
    /// columns: each input value is loaded once per tile and multiplied by the block's
    /// weights. Remainders use blocks of one channel and tiles of `PIXEL_BLOCK / 2` and of
    /// one pixel. Every output is its bias (or 0) plus the products in the order `ic`, `ky`,
    /// `kx`, each added in the tensors' type; a padding cell adds `w * 0`.
    fn run_nchw<T: Real>(&self, x: &[T], w: &[T], bias: Option<&[T]>, out: &mut [T]) {
        let g = &self.geo;
        if g.out_height == 0 || g.out_width == 0 || g.out_channels == 0 {
            return;
        }
        // The padded rows and columns that some tap reads (the floor rule never reads past
        // them).
        let extent = |out: usize, stride: usize, kernel: usize, dilation: usize| {
            (out - 1) * stride + kernel.saturating_sub(1) * dilation + 1
        };
        let padded_h = extent(g.out_height, g.stride_y, g.kernel_h, g.dilation_y);
        let padded_w = extent(g.out_width, g.stride_x, g.kernel_w, g.dilation_x);
        let padded = Padded {
            height: padded_h,
            width: padded_w,
        };
        let (in_image, out_plane) = (g.channels * g.height * g.width, g.out_height * g.out_width);
        let (cg, mg) = (g.group_in(), g.group_out());
        // Without padding, and when every input row and column is read, the input already
        // has the padded layout: no copy.
        let as_is = g.pad_top == 0
            && g.pad_left == 0
            && (padded.height, padded.width) == (g.height, g.width);
        let padded_len = if as_is {
            0
        } else {
            g.channels * padded.plane()
        };
        let mut xp = vec![T::zero(); padded_len];
        for (x_n, out_n) in x
            .chunks_exact(in_image)
            .zip(out.chunks_exact_mut(g.out_channels * out_plane))
            .take(g.batch)
        {
            let xn = if as_is {
                x_n
            } else {
                self.pad_image(x_n, padded, &mut xp);
                &xp
            };
            for group in 0..g.groups {
                let xg = &xn[group * cg * padded.plane()..][..cg * padded.plane()];
                let mut o = group * mg;
                while o < (group + 1) * mg {
                    let block = if (group + 1) * mg - o >= CHANNEL_BLOCK {
                        CHANNEL_BLOCK
                    } else {
                        1
                    };
                    let planes = &mut out_n[o * out_plane..][..block * out_plane];
                    let bias = bias.map(|b| &b[o..o + block]);
                    let w = &w[o * cg * g.kernel_h * g.kernel_w..];
                    if block == CHANNEL_BLOCK {
                        self.channel_block::<T, CHANNEL_BLOCK>(xg, padded, w, bias, planes);
                    } else {
                        self.channel_block::<T, 1>(xg, padded, w, bias, planes);
                    }
                    o += block;
                }
            }
        }
    }

    /// Copies image `x_n` (`[channels, height, width]`) into `xp`, whose planes are
    /// `padded`, at row `pad_top` and column `pad_left`; the rest of `xp` stays 0.
    fn pad_image<T: Real>(&self, x_n: &[T], padded: Padded, xp: &mut [T]) {
        let g = &self.geo;
        // Input rows and columns that fall inside the padded plane.
        let rows = g.height.min(padded.height.saturating_sub(g.pad_top));
        let cols = g.width.min(padded.width.saturating_sub(g.pad_left));
        if rows == 0 || cols == 0 {
            return;
        }
        for (x_c, xp_c) in x_n
            .chunks_exact(g.height * g.width)
            .zip(xp.chunks_exact_mut(padded.plane()))
        {
            for iy in 0..rows {
                let src = &x_c[iy * g.width..][..cols];
                let dst = &mut xp_c[(g.pad_top + iy) * padded.width + g.pad_left..][..cols];
                dst.copy_from_slice(src);
            }
        }
    }

    /// Output channels `o..o + B` of one group: `xg` is the group's padded input channels,
    /// `w` starts at channel `o`'s weights, `planes` holds the `B` output planes.
    fn channel_block<T: Real, const B: usize>(
        &self,
        xg: &[T],
        padded: Padded,
        w: &[T],
        bias: Option<&[T]>,
        planes: &mut [T],
    ) {
        let g = &self.geo;
        let (cg, taps) = (g.group_in(), g.kernel_h * g.kernel_w);
        // The block's weights tap by tap: wb[ic * taps + ky * kw + kx][b] = w[o + b, ic, ky, kx].
        let wb: Vec<[T; B]> = (0..cg * taps)
            .map(|t| std::array::from_fn(|b| w[b * cg * taps + t]))
            .collect();
        let start: [T; B] = std::array::from_fn(|b| bias.map_or(T::zero(), |bias| bias[b]));
        let out_plane = g.out_height * g.out_width;
        for oy in 0..g.out_height {
            let mut ox = 0;
            while ox < g.out_width {
                let (rest, at) = (g.out_width - ox, oy * g.out_width + ox);
                ox += if rest >= PIXEL_BLOCK {
                    let sums = self.tile::<T, B, PIXEL_BLOCK>(xg, padded, &wb, start, oy, ox);
                    store(&sums, planes, out_plane, at)
                } else if rest >= PIXEL_BLOCK / 2 {
                    let sums =
                        self.tile::<T, B, { PIXEL_BLOCK / 2 }>(xg, padded, &wb, start, oy, ox);
                    store(&sums, planes, out_plane, at)
                } else {
                    let sums = self.tile::<T, B, 1>(xg, padded, &wb, start, oy, ox);
                    store(&sums, planes, out_plane, at)
                };
            }
        }
    }

    /// The sums of `B` output channels at output pixels `(oy, ox..ox + P)`: `sums[b][p]`.
    // Inlined into each caller so that the sums stay in registers (measured: without it the
    // tile of 8 pixels lost a few percent once the tile of 4 was added).
    #[inline(always)]
    fn tile<T: Real, const B: usize, const P: usize>(
        &self,
        xg: &[T],
        padded: Padded,
        wb: &[[T; B]],
        start: [T; B],
        oy: usize,
        ox: usize,
    ) -> [[T; P]; B] {
        let g = &self.geo;
        let mut sums: [[T; P]; B] = std::array::from_fn(|b| [start[b]; P]);
        let mut weights = wb.iter();
        for x_c in xg.chunks_exact(padded.plane()) {
            for ky in 0..g.kernel_h {
                let row =
                    &x_c[(oy * g.stride_y + ky * g.dilation_y) * padded.width..][..padded.width];
                for kx in 0..g.kernel_w {
                    let first = ox * g.stride_x + kx * g.dilation_x;
                    // The P input cells under output pixels ox..ox + P for this tap.
                    let xs: [T; P] = if g.stride_x == 1 {
                        let cells = &row[first..first + P];
                        std::array::from_fn(|p| cells[p])
                    } else {
                        std::array::from_fn(|p| row[first + p * g.stride_x])
                    };
                    let wv = weights.next().expect("one weight array per tap");
                    for (s, &wv) in sums.iter_mut().zip(wv) {
                        for (s, &xv) in s.iter_mut().zip(&xs) {
                            *s += wv * xv;
                        }
                    }
                }
            }
        }
        sums
    }

    /// NHWC: for each output pixel, multiply-adds over the contiguous output channels with
    /// the weights re-laid out as `[kh, kw, in / groups, out]`.
    fn run_nhwc<T: Real>(&self, x: &[T], w: &[T], bias: Option<&[T]>, out: &mut [T]) {
        let g = &self.geo;
        let (cg, mg, m) = (g.group_in(), g.group_out(), g.out_channels);
        let (kh, kw) = (g.kernel_h, g.kernel_w);
        if m == 0 {
            return;
        }
        // wt[((ky * kw + kx) * cg + ic) * m + o] = w[((o * cg + ic) * kh + ky) * kw + kx]
        let mut wt = vec![T::zero(); w.len()];
        for o in 0..m {
            for ic in 0..cg {
                for ky in 0..kh {
                    for kx in 0..kw {
                        wt[((ky * kw + kx) * cg + ic) * m + o] =
                            w[((o * cg + ic) * kh + ky) * kw + kx];
                    }
                }
            }
        }
        let pixels = g.out_height * g.out_width;
        for (p, acc) in out.chunks_exact_mut(m).enumerate() {
            let (n, oy, ox) = (p / pixels, (p % pixels) / g.out_width, p % g.out_width);
            match bias {
                Some(b) => acc.copy_from_slice(b),
                None => acc.fill(T::zero()),
            }
            for (ky, row) in self.rows.iter().enumerate() {
                if !row.outputs.contains(&oy) {
                    continue;
                }
                let iy = row.first_input + (oy - row.outputs.start) * g.stride_y;
                for (kx, col) in self.cols.iter().enumerate() {
                    if !col.outputs.contains(&ox) {
                        continue;
                    }
                    let ix = col.first_input + (ox - col.outputs.start) * g.stride_x;
                    let px = &x[((n * g.height + iy) * g.width + ix) * g.channels..][..g.channels];
                    let wk = &wt[(ky * kw + kx) * cg * m..][..cg * m];
                    for (grp, acc_g) in acc.chunks_exact_mut(mg).enumerate() {
                        for ic in 0..cg {
                            let xv = px[grp * cg + ic];
                            let w_row = &wk[ic * m + grp * mg..][..mg];
                            for (a, &wv) in acc_g.iter_mut().zip(w_row) {
                                *a += xv * wv;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Writes a tile's sums (`sums[b][p]`) at offset `at` of each of the `B` output planes of
/// `planes`; returns `P`.
fn store<T: Real, const B: usize, const P: usize>(
    sums: &[[T; P]; B],
    planes: &mut [T],
    out_plane: usize,
    at: usize,
) -> usize {
    for (plane, s) in planes.chunks_exact_mut(out_plane).zip(sums) {
        plane[at..at + P].copy_from_slice(s);
    }
    P
}

impl ConvolutionWorkload {
    /// The convolution in `T` (`f32` or `f64`, the tensors' type).
    fn run<T: Real>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let x = inputs[0].as_slice::<T>()?;
        let w = inputs[1].as_slice::<T>()?;
        let bias = inputs.get(2).map(TensorView::as_slice::<T>).transpose()?;
        let out = outputs[0].as_mut_slice::<T>()?;
        match self.geo.layout {
            DataLayout::Nchw => self.run_nchw(x, w, bias, out),
            DataLayout::Nhwc => self.run_nhwc(x, w, bias, out),
        }
        Ok(())
    }
}

float_workload!(ConvolutionWorkload);

#[cfg(test)]
#[path = "convolution_tests.rs"]
mod tests;
