//! The convolution kernel (NCHW): im2col + GEMM per image, group and block of output rows
//! (sized so that a block's im2col matrix stays in the cache), with CpuRef's
//! semantics (explicit zero padding, strides, dilation, groups; weights
//! `[out, in / groups, kh, kw]`).
//!
//! For group `g` of image `n`, the im2col matrix has one row per `(ic, ky, kx)` of the group
//! and one column per output pixel; the output channels of the group are then
//! `W_g [mg × cg·kh·kw] · cols [cg·kh·kw × oh·ow]`. A 1x1, stride-1, unpadded convolution
//! needs no im2col: the input planes are that matrix, taken in blocks of output pixels. The
//! bias and the fused activation are applied to each block's outputs right after its product,
//! while they are in the cache ([`finish`]). A convolution with one input channel per group
//! (depthwise, any multiplier) runs the direct kernels of `depthwise.rs` instead (bias and
//! activation per output row).
//!
//! The geometry and what this file shares with `depthwise.rs` live in `conv_geometry.rs`.
//!
//! On several threads, a block whose product the GEMM splits between them has its im2col
//! matrix filled by them too, each a disjoint range of its rows, before the product.

use std::ops::Range;

use super::{
    activation::{Epilogue, add_then},
    conv_geometry::{ConvGeometry, inside, split_columns},
    depthwise,
};

use crate::{
    cache::CacheSizes,
    gemm::{Accum, MIN_PARALLEL_WORK, Operand, for_each_part, gemm, worth},
};

impl ConvGeometry {
    /// One input channel per group: the direct depthwise kernel runs it.
    fn is_depthwise(&self) -> bool {
        self.group_in() == 1 && self.groups > 1
    }

    /// 1x1, stride 1, no padding: the input planes are the im2col matrix already.
    fn is_pointwise(&self) -> bool {
        (self.kernel_h, self.kernel_w, self.stride_y, self.stride_x) == (1, 1, 1, 1)
            && (self.pad_top, self.pad_left) == (0, 0)
            && (self.out_height, self.out_width) == (self.height, self.width)
    }

    /// Output rows per im2col block: the block's matrix (`taps` rows of `rows × out_width`)
    /// stays within [`CacheSizes::im2col_elements`], so that it is still in the cache when
    /// the GEMM reads it; at least one row.
    fn block_rows(&self) -> usize {
        (CacheSizes::get().im2col_elements() / (self.taps() * self.out_width).max(1))
            .clamp(1, self.out_height.max(1))
    }

    /// Whether im2col reads a copy of the group's input with each row split into its even
    /// and odd columns ([`split_columns`]): for stride 2 across without dilation, every tap's
    /// row is then a contiguous run of one half instead of a strided gather (ResNet-50's
    /// first layer, 7x7 stride 2, on one thread: 3.4 -> 2.5 ms; its 3x3 stride-2 layers
    /// 2.8 -> 2.3 ms and 2.6 -> 2.4 ms).
    fn splits_columns(&self) -> bool {
        self.stride_x == 2 && self.dilation_x == 1 && self.height * self.width > 0
    }

    /// Whether a tap's im2col row over consecutive output rows is one contiguous run of its
    /// input plane: a kernel one column wide, stride 1 both ways and no column padding, so an
    /// output row reads a whole input row (magika's `5×1` convolution over a one-column
    /// image: one copy per tap instead of one per output row and tap).
    fn copies_whole_rows(&self) -> bool {
        (self.kernel_w, self.stride_x, self.stride_y, self.pad_left) == (1, 1, 1, 0)
            && self.out_width == self.width
    }

    /// Elements of the im2col matrix of one block.
    fn im2col_len(&self) -> usize {
        self.taps() * self.block_rows() * self.out_width
    }

    /// Scratch elements one execution on `threads` threads needs (the im2col matrix of one
    /// block of one group and, when it [`splits_columns`](Self::splits_columns), the group's
    /// input split; or what the depthwise kernel needs).
    pub(crate) fn scratch_len(&self, threads: usize) -> usize {
        if self.is_depthwise() {
            depthwise::scratch_len(self, threads)
        } else if self.is_pointwise() {
            0
        } else if self.splits_columns() {
            self.im2col_len() + self.group_in() * self.height * self.width
        } else {
            self.im2col_len()
        }
    }

    /// The im2col matrix of output rows `oys` of one group of one image: `x` holds the
    /// group's input planes. With `threads > 1` the pool's threads fill disjoint ranges of its
    /// rows (taps).
    fn im2col(&self, x: &[f32], oys: Range<usize>, cols: &mut [f32], threads: usize) {
        let plane = oys.len() * self.out_width;
        if self.height * self.width == 0 || plane == 0 {
            // An empty input reads only padding (and an empty output needs nothing).
            cols.fill(0.0);
            return;
        }
        let rows = &mut cols[..self.taps() * plane];
        let per = self.taps().div_ceil(threads.max(1));
        for_each_part(
            threads,
            rows.chunks_mut(per * plane).enumerate(),
            |(i, part)| {
                self.im2col_rows(x, &oys, i * per, part);
            },
        );
    }

    /// Rows `first..` of the im2col matrix of output rows `oys` (as many as `rows` holds, each
    /// `oys.len() × out_width` elements): row `t` is tap `(ic, ky, kx)` in row-major order. The
    /// input is not empty, and its rows are split when this convolution
    /// [`splits_columns`](Self::splits_columns).
    fn im2col_rows(&self, x: &[f32], oys: &Range<usize>, first: usize, rows: &mut [f32]) {
        let ow = self.out_width;
        let in_plane = self.height * self.width;
        let kernel = self.kernel_h * self.kernel_w;
        for (t, row) in (first..).zip(rows.chunks_exact_mut(oys.len() * ow)) {
            let (ky, kx) = (t % kernel / self.kernel_w, t % self.kernel_w);
            let x_c = &x[t / kernel * in_plane..][..in_plane];
            let dy = (ky * self.dilation_y) as i64 - self.pad_top as i64;
            let valid_y = inside(self.out_height, self.height, self.stride_y, dy);
            let dx = (kx * self.dilation_x) as i64 - self.pad_left as i64;
            let valid_x = inside(ow, self.width, self.stride_x, dx);
            let first_x = (valid_x.start as i64 * self.stride_x as i64 + dx).max(0) as usize;
            if self.copies_whole_rows() {
                // Output rows `lo..hi` read input rows `lo + dy..hi + dy`, one run.
                let lo = valid_y.start.clamp(oys.start, oys.end);
                let hi = valid_y.end.clamp(lo, oys.end);
                let (a, b) = ((lo - oys.start) * ow, (hi - oys.start) * ow);
                row[..a].fill(0.0);
                row[b..].fill(0.0);
                if b > a {
                    let iy = (lo as i64 + dy) as usize;
                    row[a..b].copy_from_slice(&x_c[iy * self.width..][..b - a]);
                }
                continue;
            }
            for (oy, seg) in oys.clone().zip(row.chunks_exact_mut(ow)) {
                if !valid_y.contains(&oy) || valid_x.is_empty() {
                    // The tap reads only padding on this row (with an empty `valid_x`, a
                    // kernel wider than the input: `first_x` may lie past the row).
                    seg.fill(0.0);
                    continue;
                }
                let iy = (oy as i64 * self.stride_y as i64 + dy) as usize;
                let x_row = &x_c[iy * self.width..][..self.width];
                // (Most rows have no padding: no call for an empty range.)
                if valid_x.start > 0 {
                    seg[..valid_x.start].fill(0.0);
                }
                if valid_x.end < ow {
                    seg[valid_x.end..].fill(0.0);
                }
                let dst = &mut seg[valid_x.clone()];
                if self.stride_x == 1 {
                    dst.copy_from_slice(&x_row[first_x..][..dst.len()]);
                } else if self.splits_columns() {
                    // Column `first_x + 2j` is element `first_x / 2 + j` of its half.
                    let half = if first_x.is_multiple_of(2) {
                        0
                    } else {
                        self.width.div_ceil(2)
                    };
                    dst.copy_from_slice(&x_row[half + first_x / 2..][..dst.len()]);
                } else {
                    for (d, &v) in dst
                        .iter_mut()
                        .zip(x_row[first_x..].iter().step_by(self.stride_x))
                    {
                        *d = v;
                    }
                }
            }
        }
    }

    /// `out = activation(conv(x, w) + bias)` over the whole batch on up to `threads` threads;
    /// `scratch` has [`Self::scratch_len`] elements for `threads`.
    #[allow(
        clippy::too_many_arguments,
        reason = "operands, bias, fused activation, scratch and threads"
    )]
    pub(crate) fn run(
        &self,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
        activation: Option<&Epilogue>,
        out: &mut [f32],
        scratch: &mut [f32],
        threads: usize,
    ) {
        let plane = self.out_plane();
        let in_image = self.channels * self.height * self.width;
        let out_image = self.out_channels * plane;
        if out_image == 0 {
            return;
        }
        let (cg, mg, taps) = (self.group_in(), self.group_out(), self.taps());
        let in_group = cg * self.height * self.width;
        for (n, out_n) in out.chunks_exact_mut(out_image).enumerate().take(self.batch) {
            let x_n = &x[n * in_image..][..in_image];
            let res_n = residual.map(|r| &r[n * out_image..][..out_image]);
            if self.is_depthwise() {
                // The depthwise kernel finishes rows itself: a residual goes after it.
                match res_n {
                    None => depthwise::run(self, x_n, w, bias, activation, out_n, scratch, threads),
                    Some(r) => {
                        depthwise::run(self, x_n, w, bias, None, out_n, scratch, threads);
                        add_then(out_n, r, activation);
                    }
                }
                continue;
            }
            for g in 0..self.groups {
                let x_g = &x_n[g * in_group..][..in_group];
                let w_g = &w[g * mg * taps..][..mg * taps];
                let out_g = &mut out_n[g * mg * plane..][..mg * plane];
                let bias_g = bias.map(|b| &b[g * mg..][..mg]);
                let res_g = res_n.map(|r| &r[g * mg * plane..][..mg * plane]);
                if self.is_pointwise() {
                    self.pointwise(x_g, w_g, bias_g, res_g, activation, out_g, threads);
                    continue;
                }
                // Blocks of output rows: im2col, then the block's columns of the output.
                let (scratch, split_x) = scratch.split_at_mut(self.im2col_len());
                let x_g = if self.splits_columns() {
                    let split_x = &mut split_x[..in_group];
                    for (row, split) in x_g
                        .chunks_exact(self.width)
                        .zip(split_x.chunks_exact_mut(self.width))
                    {
                        let (even, odd) = split.split_at_mut(self.width.div_ceil(2));
                        split_columns(row, even, odd);
                    }
                    split_x
                } else {
                    x_g
                };
                let step = self.block_rows();
                for oy in (0..self.out_height).step_by(step) {
                    let oys = oy..(oy + step).min(self.out_height);
                    let cols = oys.len() * self.out_width;
                    // The im2col is split like the GEMM: only when that is.
                    let split = worth(mg * taps * cols, MIN_PARALLEL_WORK, threads).min(mg);
                    self.im2col(x_g, oys, scratch, split);
                    let first = oy * self.out_width;
                    let (im2col, cols) = (&scratch[..taps * cols], first..first + cols);
                    // Each thread multiplies and finishes a range of the output channels (all
                    // of the block's pixels), so the finish is split too.
                    let rows = mg.div_ceil(split);
                    let part = |(i, out_p): (usize, &mut [f32])| {
                        let m = out_p.len() / plane;
                        gemm(
                            m,
                            taps,
                            cols.len(),
                            Operand::RowMajor(&w_g[i * rows * taps..][..m * taps]),
                            Operand::RowMajor(im2col),
                            &mut out_p[cols.start..],
                            plane,
                            1,
                            Accum::Replace,
                        );
                        let bias_p = bias_g.map(|b| &b[i * rows..][..m]);
                        let res_p = res_g.map(|r| &r[i * rows * plane..][..m * plane]);
                        finish(out_p, plane, cols.clone(), bias_p, res_p, activation);
                    };
                    for_each_part(split, out_g.chunks_mut(rows * plane).enumerate(), part);
                }
            }
        }
    }

    /// One group of a pointwise convolution: `out_g = activation(w_g · x_g + bias_g + res_g)`, in
    /// blocks of output pixels, each finished while it is in the cache. On several threads
    /// (for a product worth splitting), each thread takes a range of the output channels, all
    /// pixels.
    #[allow(
        clippy::too_many_arguments,
        reason = "operands, bias, residual, fused activation, output and threads"
    )]
    fn pointwise(
        &self,
        x_g: &[f32],
        w_g: &[f32],
        bias_g: Option<&[f32]>,
        res_g: Option<&[f32]>,
        activation: Option<&Epilogue>,
        out_g: &mut [f32],
        threads: usize,
    ) {
        let (mg, taps, plane) = (self.group_out(), self.taps(), self.out_plane());
        let workers = worth(mg * taps * plane, MIN_PARALLEL_WORK, threads).min(mg);
        let rows = mg.div_ceil(workers);
        let part = |(i, out_p): (usize, &mut [f32])| {
            let m = out_p.len() / plane;
            let w_p = &w_g[i * rows * taps..][..m * taps];
            let bias_p = bias_g.map(|b| &b[i * rows..][..m]);
            let res_p = res_g.map(|r| &r[i * rows * plane..][..m * plane]);
            let step = if plane <= WHOLE_PLANE {
                plane
            } else {
                (CacheSizes::get().finish_elements() / m.max(1)).clamp(1, plane)
            };
            for first in (0..plane).step_by(step) {
                let cols = first..(first + step).min(plane);
                gemm(
                    m,
                    taps,
                    cols.len(),
                    Operand::RowMajor(w_p),
                    Operand::Strided(&x_g[first..], plane),
                    &mut out_p[first..],
                    plane,
                    1,
                    Accum::Replace,
                );
                finish(out_p, plane, cols, bias_p, res_p, activation);
            }
        };
        for_each_part(workers, out_g.chunks_mut(rows * plane).enumerate(), part);
    }
}

/// Adds the bias and the residual (laid out as `out`) to, and applies the activation to,
/// columns `cols` of every row (output channel) of `out`, whose rows are `ld` elements apart.
pub(crate) fn finish(
    out: &mut [f32],
    ld: usize,
    cols: Range<usize>,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    activation: Option<&Epilogue>,
) {
    if bias.is_none() && residual.is_none() && activation.is_none() {
        return;
    }
    for (o, row) in out.chunks_mut(ld).enumerate() {
        let seg = &mut row[cols.clone()];
        if let Some(b) = bias {
            let b = b[o];
            seg.iter_mut().for_each(|v| *v += b);
        }
        if let Some(r) = residual {
            let r = &r[o * ld..][cols.clone()];
            seg.iter_mut().zip(r).for_each(|(v, &r)| *v += r);
        }
    }
    if let Some(a) = activation {
        a.apply_rows(out, ld, cols);
    }
}

/// A 1×1 convolution's output plane up to this size is one product, not blocks of
/// `CacheSizes::finish_elements() / m` columns: with many channels those blocks were a few dozen columns
/// (ResNet-50's 7×7 stage with 2048 channels: 32 and 17), the GEMM kernel's rows, mostly
/// edge tiles. The whole plane's output (2048 × 49 floats) still fits in L2 for the
/// epilogue.
const WHOLE_PLANE: usize = 256;
