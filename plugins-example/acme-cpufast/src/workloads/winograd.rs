//! 3×3 convolutions (stride 1, no dilation, one group) by Winograd's minimal filtering
//! F(4×4, 3×3): each 4×4 block of output pixels ("tile") comes from the 6×6 block of input
//! pixels under it with 36 multiplications per input/output channel pair instead of 144.
//!
//! For an input tile `d` (6×6, zeros outside the image) and a kernel `g` (3×3), the output
//! tile is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` (Lavin and Gray, "Fast Algorithms for Convolutional
//! Neural Networks", 2015), here with the interpolation points 0, 1, -1, 2, -1/2 and ∞: in
//! float32 their largest error on 64-channel sums was 2.4× smaller than with the usual
//! 0, ±1, ±2 (6.4e-5 against 1.5e-4 on outputs of about 8, numpy, 300 random tiles). `Bᵀ`
//! has small integer entries, `A`'s are powers of two, and every other factor is in `G`,
//! which is applied once, in f64. Summed over input channels, the element-wise product becomes 36 independent
//! products, one per position `ξ` of the 6×6 transformed tile:
//! `M_ξ [out × tiles] = U_ξ [out × in] · V_ξ [in × tiles]`, which the GEMM runs.
//!
//! - The weights are transformed once, when the workload is created (`U`, `[ξ][out][in]`,
//!   computed in f64).
//! - Per image, the tiles go in blocks sized so that a block's transformed input `V`
//!   (`[in][ξ][tile]`) and products `M` (`[out][ξ][tile]`) stay near the L2 cache. For each
//!   block: the input transform, the 36 products, the output transform (plus the bias and the
//!   fused activation) into the output planes.
//! - The transforms work on [`LANES`] tiles at a time, one tile per vector lane; `pulp` (through
//!   `faer`) compiles them for the best instruction set the CPU has.
//! - On several threads, the input transform is split by input channels and the products and
//!   output transform by output channels, so every thread writes its own part of `V`, `M` and
//!   the output.
//!
//! The transforms' rounding makes results differ from a direct convolution by a few units in
//! the last place of the larger partial sums (the tests bound it against an f64 oracle).

use super::activation::Epilogue;
use faer::traits::pulp::{Arch, Simd, WithSimd};

use super::conv_geometry::ConvGeometry;
use crate::{
    cache::CacheSizes,
    gemm::{Accum, MIN_PARALLEL_WORK, Operand, for_each_part, gemm, worth},
};

/// Tiles transformed together, one per vector lane.
const LANES: usize = 8;

/// Positions of a transformed tile (6×6).
const XI: usize = 36;

/// Output channels and input channels from which Winograd beats im2col + GEMM: below, the
/// transforms cost more than the multiplications they save.
const MIN_CHANNELS: usize = 16;

/// A convolution that [`Winograd::fits`], with its weights transformed.
#[derive(Debug)]
pub(crate) struct Winograd {
    g: ConvGeometry,
    /// `U`, `[ξ][out][in]` (shared, [`crate::prepared`]).
    u: std::sync::Arc<crate::prepared::Prepared>,
    tiles_y: usize,
    tiles_x: usize,
}

impl Winograd {
    /// Whether `g` is a convolution this kernel runs, and is worth running with it: 3×3,
    /// stride 1, no dilation, one group, at least [`MIN_CHANNELS`] input and output channels,
    /// at least [`LANES`] tiles, and tiles mostly inside the output (at least 70 % of their
    /// pixels). With fewer tiles than lanes (a 7×7 output has 4) the transforms run half
    /// empty and the products are too narrow to pay for reading `U`, four times the
    /// weights: ResNet-50's two 512-channel 7×7 layers took 4.9 ms each on one thread,
    /// 3.0 ms by im2col + GEMM.
    pub(crate) fn fits(g: &ConvGeometry) -> bool {
        let shape = (g.kernel_h, g.kernel_w, g.stride_y, g.stride_x);
        let dilation = (g.dilation_y, g.dilation_x);
        if shape != (3, 3, 1, 1) || dilation != (1, 1) || g.groups != 1 {
            return false;
        }
        if g.channels < MIN_CHANNELS || g.out_channels < MIN_CHANNELS || g.out_plane() == 0 {
            return false;
        }
        let tiles = g.out_height.div_ceil(4) * g.out_width.div_ceil(4);
        tiles >= LANES && 10 * g.out_plane() >= 7 * tiles * 16
    }

    /// The kernel for `g` (which [`fits`](Self::fits)) with weights `w` (`[out, in, 3, 3]`).
    pub(crate) fn new(g: &ConvGeometry, w: &[f32]) -> Self {
        let (out, inp) = (g.out_channels, g.channels);
        // The transform depends on the weights only: every network of this process with
        // these weights (a model at several input shapes) shares one.
        let u = crate::prepared::shared("winograd", [out, inp, 0], w, XI * out * inp, || {
            Self::transform(w, out, inp)
        });
        Self {
            g: g.clone(),
            u,
            tiles_y: g.out_height.div_ceil(4),
            tiles_x: g.out_width.div_ceil(4),
        }
    }

    /// `U = G k Gᵀ` of every `out × inp` 3×3 filter of `w`, laid out `[ξ][out][in]`.
    fn transform(w: &[f32], out: usize, inp: usize) -> Vec<f32> {
        let mut u = vec![0.0; XI * out * inp];
        for o in 0..out {
            for i in 0..inp {
                let k = &w[(o * inp + i) * 9..][..9];
                // G k Gᵀ: the columns first, then the rows, in f64.
                let mut half = [[0.0f64; 3]; 6];
                for c in 0..3 {
                    let col = kernel_transform([k[c], k[3 + c], k[6 + c]].map(f64::from));
                    for (r, v) in col.into_iter().enumerate() {
                        half[r][c] = v;
                    }
                }
                for (r, row) in half.iter().enumerate() {
                    for (c, v) in kernel_transform(*row).into_iter().enumerate() {
                        u[((r * 6 + c) * out + o) * inp + i] = v as f32;
                    }
                }
            }
        }
        u
    }

    /// The geometry this kernel runs.
    pub(crate) fn geometry(&self) -> &ConvGeometry {
        &self.g
    }

    /// Tiles per block: a multiple of [`LANES`], at least one lane group, at most the image.
    fn block_tiles(&self) -> usize {
        let per_tile = XI * (self.g.channels + self.g.out_channels);
        let tiles = (self.tiles_y * self.tiles_x).next_multiple_of(LANES);
        (CacheSizes::get().winograd_elements() / per_tile / LANES * LANES).clamp(LANES, tiles)
    }

    /// Threads worth using: one when the image's products are too small to share.
    fn workers(&self, threads: usize) -> usize {
        let work = XI * self.g.channels * self.g.out_channels * self.tiles_y * self.tiles_x;
        worth(work, MIN_PARALLEL_WORK, threads)
    }

    /// Scratch elements one execution needs: one block's `V` and `M`.
    pub(crate) fn scratch_len(&self) -> usize {
        XI * self.block_tiles() * (self.g.channels + self.g.out_channels)
    }

    /// `out = activation(conv(x) + bias)` over the whole batch on up to `threads` threads;
    /// `scratch` has [`Self::scratch_len`] elements.
    pub(crate) fn run(
        &self,
        x: &[f32],
        bias: Option<&[f32]>,
        activation: Option<&Epilogue>,
        out: &mut [f32],
        scratch: &mut [f32],
        threads: usize,
    ) {
        let g = &self.g;
        let (in_image, out_plane) = (g.channels * g.height * g.width, g.out_plane());
        let out_image = g.out_channels * out_plane;
        let workers = self.workers(threads);
        let tb = self.block_tiles();
        let (v, m) = scratch.split_at_mut(XI * tb * g.channels);
        let m = &mut m[..XI * tb * g.out_channels];
        let in_chunk = g.channels.div_ceil(workers);
        let out_chunk = g.out_channels.div_ceil(workers);
        let total = self.tiles_y * self.tiles_x;
        for (x_n, out_n) in x
            .chunks_exact(in_image)
            .zip(out.chunks_exact_mut(out_image))
            .take(g.batch)
        {
            for first in (0..total).step_by(tb) {
                let tiles = Tiles {
                    first,
                    len: tb.min(total - first),
                    stride: tb,
                };
                // The input transform, split by input channels.
                let input = |(c, v_c): (usize, &mut [f32])| {
                    let x_c = &x_n[c * in_chunk * g.height * g.width..];
                    Arch::new().dispatch(InputTransform {
                        k: self,
                        tiles,
                        x: x_c,
                        v: v_c,
                    });
                };
                let v_chunk = in_chunk * XI * tb;
                for_each_part(workers, v.chunks_mut(v_chunk).enumerate(), input);
                // The products and the output transform, split by output channels.
                let v_all: &[f32] = v;
                let output = |(c, (m_c, out_c)): (usize, (&mut [f32], &mut [f32]))| {
                    let o = c * out_chunk;
                    self.products(o, v_all, m_c, tiles);
                    Arch::new().dispatch(OutputTransform {
                        k: self,
                        tiles,
                        m: m_c,
                        bias: bias.map(|b| &b[o..]),
                        activation,
                        out: out_c,
                    });
                };
                let (m_chunk, o_chunk) = (out_chunk * XI * tb, out_chunk * out_plane);
                let parts = m.chunks_mut(m_chunk).zip(out_n.chunks_mut(o_chunk));
                for_each_part(workers, parts.enumerate(), output);
            }
        }
    }

    /// The 36 products of one block for output channels `first..` (as many as `m` holds):
    /// `M_ξ = U_ξ · V_ξ`.
    fn products(&self, first: usize, v: &[f32], m: &mut [f32], tiles: Tiles) {
        let g = &self.g;
        let tb = tiles.stride;
        let rows = m.len() / (XI * tb);
        for xi in 0..XI {
            let u = &self.u[(xi * g.out_channels + first) * g.channels..][..rows * g.channels];
            gemm(
                rows,
                g.channels,
                tiles.len,
                Operand::RowMajor(u),
                Operand::Strided(&v[xi * tb..], XI * tb),
                &mut m[xi * tb..],
                XI * tb,
                1,
                Accum::Replace,
            );
        }
    }
}

/// One block of tiles: tiles `first..first + len` of the image (row-major over the tile
/// grid), stored `stride` apart in `V` and `M`.
#[derive(Debug, Clone, Copy)]
struct Tiles {
    first: usize,
    len: usize,
    stride: usize,
}

/// `G k` for one column (or row) `k` of a kernel.
fn kernel_transform([a, b, c]: [f64; 3]) -> [f64; 6] {
    [
        a / 2.0,
        -(a + b + c) / 6.0,
        (a - b + c) / 6.0,
        (a + 2.0 * b + 4.0 * c) / 30.0,
        (-16.0 * a + 8.0 * b - 4.0 * c) / 15.0,
        c / 2.0,
    ]
}

/// A vector of one value per lane (tile).
type Lanes = [f32; LANES];

/// `Bᵀ d` for one column `d` of six input tiles' pixels, lane-wise.
#[inline(always)]
fn input_1d(d: &[Lanes; 6]) -> [Lanes; 6] {
    let mut y = [[0.0; LANES]; 6];
    for l in 0..LANES {
        let [x0, x1, x2, x3, x4, x5] = [d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l]];
        y[0][l] = 2.0 * (x0 - 2.0 * x2 + x4) + 3.0 * (x1 - x3);
        y[1][l] = 2.0 * (x4 - x1) - (5.0 * x2 + x3);
        y[2][l] = 2.0 * (x1 + x4) + (x2 - 5.0 * x3);
        y[3][l] = 2.0 * (x4 - x2) + (x3 - x1);
        y[4][l] = 2.0 * (x1 - x3) + (x4 - x2);
        y[5][l] = 2.0 * (x1 - 2.0 * x3 + x5) + 3.0 * (x2 - x4);
    }
    y
}

/// `Aᵀ m` for one column `m` of six transformed tiles' products, lane-wise.
#[inline(always)]
fn output_1d(m: &[Lanes; 6]) -> [Lanes; 4] {
    let mut y = [[0.0; LANES]; 4];
    for l in 0..LANES {
        let [m0, m1, m2, m3, m4, m5] = [m[0][l], m[1][l], m[2][l], m[3][l], m[4][l], m[5][l]];
        let (s12, d12) = (m1 + m2, m1 - m2);
        y[0][l] = m0 + s12 + m3 + m4;
        y[1][l] = d12 + 2.0 * m3 - 0.5 * m4;
        y[2][l] = s12 + 4.0 * m3 + 0.25 * m4;
        y[3][l] = d12 + 8.0 * m3 - 0.125 * m4 + m5;
    }
    y
}

/// The input transform of one block for the input channels `x` starts at (as many as `v`
/// holds): `V[c][ξ][tile] = (Bᵀ d B)[ξ]`.
struct InputTransform<'a> {
    k: &'a Winograd,
    tiles: Tiles,
    x: &'a [f32],
    v: &'a mut [f32],
}

impl WithSimd for InputTransform<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let Self { k, tiles, x, v } = self;
        let g = &k.g;
        let (h, w) = (g.height, g.width);
        let tb = tiles.stride;
        for (c, v_c) in v.chunks_exact_mut(XI * tb).enumerate() {
            let x_c = &x[c * h * w..][..h * w];
            for group in (0..tiles.len.next_multiple_of(LANES)).step_by(LANES) {
                // The 6×6 pixels under each lane's tile, `d[row][column][lane]`.
                let mut d = [[[0.0f32; LANES]; 6]; 6];
                for lane in 0..LANES.min(tiles.len.saturating_sub(group)) {
                    let t = tiles.first + group + lane;
                    let y0 = (t / k.tiles_x * 4) as isize - g.pad_top as isize;
                    let x0 = (t % k.tiles_x * 4) as isize - g.pad_left as isize;
                    for (r, d_r) in d.iter_mut().enumerate() {
                        let y = y0 + r as isize;
                        if y < 0 || y >= h as isize {
                            continue;
                        }
                        let row = &x_c[y as usize * w..][..w];
                        if x0 >= 0 && x0 as usize + 6 <= w {
                            for (q, &p) in row[x0 as usize..][..6].iter().enumerate() {
                                d_r[q][lane] = p;
                            }
                        } else {
                            for (q, d_rq) in d_r.iter_mut().enumerate() {
                                let xq = x0 + q as isize;
                                if xq >= 0 && xq < w as isize {
                                    d_rq[lane] = row[xq as usize];
                                }
                            }
                        }
                    }
                }
                // Bᵀ d by columns, then (Bᵀ d) B by rows.
                let mut half = [[[0.0f32; LANES]; 6]; 6];
                for q in 0..6 {
                    let col = input_1d(&[d[0][q], d[1][q], d[2][q], d[3][q], d[4][q], d[5][q]]);
                    for r in 0..6 {
                        half[r][q] = col[r];
                    }
                }
                for (r, half_r) in half.iter().enumerate() {
                    for (q, value) in input_1d(half_r).into_iter().enumerate() {
                        v_c[(r * 6 + q) * tb + group..][..LANES].copy_from_slice(&value);
                    }
                }
            }
        }
    }
}

/// The output transform of one block for the output channels `out` starts at (as many as
/// `m` holds): `out = (Aᵀ M A) + bias`, the pixels of each tile inside the output.
struct OutputTransform<'a> {
    k: &'a Winograd,
    tiles: Tiles,
    m: &'a [f32],
    bias: Option<&'a [f32]>,
    activation: Option<&'a Epilogue>,
    out: &'a mut [f32],
}

impl WithSimd for OutputTransform<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _: S) {
        let Self {
            k,
            tiles,
            m,
            bias,
            activation,
            out,
        } = self;
        let g = &k.g;
        let (oh, ow) = (g.out_height, g.out_width);
        let tb = tiles.stride;
        for (o, (m_o, out_o)) in m
            .chunks_exact(XI * tb)
            .zip(out.chunks_exact_mut(oh * ow))
            .enumerate()
        {
            let b = bias.map_or(0.0, |b| b[o]);
            for group in (0..tiles.len).step_by(LANES) {
                let mut half = [[[0.0f32; LANES]; 6]; 4];
                for q in 0..6 {
                    let mut col = [[0.0f32; LANES]; 6];
                    for (r, col_r) in col.iter_mut().enumerate() {
                        col_r.copy_from_slice(&m_o[(r * 6 + q) * tb + group..][..LANES]);
                    }
                    for (r, value) in output_1d(&col).into_iter().enumerate() {
                        half[r][q] = value;
                    }
                }
                let mut y = [[[0.0f32; LANES]; 4]; 4];
                for (r, half_r) in half.iter().enumerate() {
                    for (q, value) in output_1d(half_r).into_iter().enumerate() {
                        y[r][q] = value.map(|v| v + b);
                    }
                }
                if let Some(a) = activation {
                    // Inside this dispatched kernel: no dispatch per group of tiles.
                    a.apply_inline(y.as_flattened_mut().as_flattened_mut());
                }
                for lane in 0..LANES.min(tiles.len - group) {
                    let t = tiles.first + group + lane;
                    let (y0, x0) = (t / k.tiles_x * 4, t % k.tiles_x * 4);
                    let cols = (ow - x0).min(4);
                    for (r, y_r) in y.iter().enumerate().take(oh - y0) {
                        let row = &mut out_o[(y0 + r) * ow + x0..][..cols];
                        for (q, p) in row.iter_mut().enumerate() {
                            *p = y_r[q][lane];
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        ActivationFunction, Convolution2dDescriptor, DataType, LayerDescriptor, Padding2d,
        TensorInfo,
    };

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close};

    /// The geometry of a 3×3 convolution of `[n, c, h, w]` to `o` channels with `pad` on
    /// every side.
    fn geometry(n: u32, c: u32, h: u32, w: u32, o: u32, pad: u32) -> ConvGeometry {
        let d = Convolution2dDescriptor {
            padding: Padding2d {
                left: pad,
                right: pad,
                top: pad,
                bottom: pad,
            },
            bias_enabled: true,
            ..Convolution2dDescriptor::default()
        };
        let (oh, ow) = (h + 2 * pad - 2, w + 2 * pad - 2);
        ConvGeometry::new(
            &LayerDescriptor::Convolution2d(d),
            &TensorInfo::new(&[n, c, h, w], DataType::Float32),
            &TensorInfo::new(&[o, c, 3, 3], DataType::Float32),
            &TensorInfo::new(&[n, o, oh, ow], DataType::Float32),
        )
        .expect("a valid convolution")
    }

    /// The convolution by its definition, in f64.
    fn oracle(g: &ConvGeometry, x: &[f32], w: &[f32], bias: &[f32]) -> Vec<f64> {
        let mut out = Vec::with_capacity(g.out_len());
        for n in 0..g.batch {
            for (o, &b) in bias.iter().enumerate().take(g.out_channels) {
                for oy in 0..g.out_height {
                    for ox in 0..g.out_width {
                        let mut s = f64::from(b);
                        for c in 0..g.channels {
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    let y = (oy + ky) as isize - g.pad_top as isize;
                                    let xx = (ox + kx) as isize - g.pad_left as isize;
                                    if y < 0
                                        || xx < 0
                                        || y >= g.height as isize
                                        || xx >= g.width as isize
                                    {
                                        continue;
                                    }
                                    let xi = ((n * g.channels + c) * g.height + y as usize)
                                        * g.width
                                        + xx as usize;
                                    let wi = ((o * g.channels + c) * 3 + ky) * 3 + kx;
                                    s += f64::from(x[xi]) * f64::from(w[wi]);
                                }
                            }
                        }
                        out.push(s);
                    }
                }
            }
        }
        out
    }

    /// Against the definition: padded and not, sizes that are not multiples of the tile,
    /// blocks that end in a partial lane group, two images, one to three threads.
    #[test]
    fn matches_the_definition() {
        let mut rng = Lcg(3);
        for &(n, c, h, w, o, pad) in &[
            (1, 16, 8, 16, 16, 1),
            (2, 17, 8, 19, 19, 1),
            (1, 16, 10, 18, 16, 0),
            (1, 32, 30, 30, 24, 1),
            (1, 64, 56, 56, 64, 1),
        ] {
            let g = geometry(n, c, h, w, o, pad);
            assert!(Winograd::fits(&g), "{g:?}");
            let x = rng.vec(g.batch * g.channels * g.height * g.width);
            let wts = rng.vec(g.out_channels * g.channels * 9);
            let bias = rng.vec(g.out_channels);
            let want = oracle(&g, &x, &wts, &bias);
            let k = Winograd::new(&g, &wts);
            for threads in [1, 2, 3] {
                let mut out = vec![f32::NAN; g.out_len()];
                let mut scratch = vec![f32::NAN; k.scratch_len()];
                k.run(&x, Some(&bias), None, &mut out, &mut scratch, threads);
                assert_close(
                    &out,
                    &want,
                    REL_TOL,
                    &format!("{n}x{c}x{h}x{w} -> {o}, pad {pad}, {threads} threads"),
                );
            }
        }
    }

    /// The fused activation and the absence of a bias.
    #[test]
    fn activation_without_bias() {
        let mut rng = Lcg(9);
        let g = geometry(1, 16, 12, 12, 16, 1);
        let (x, wts) = (rng.vec(16 * 144), rng.vec(16 * 16 * 9));
        let want: Vec<f64> = oracle(&g, &x, &wts, &[0.0; 16])
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        let relu = Epilogue::of(
            Some(backplane_api::ActivationDescriptor {
                function: ActivationFunction::ReLU,
                a: 0.0,
                b: 0.0,
            }),
            None,
            None,
        )
        .unwrap();
        let k = Winograd::new(&g, &wts);
        let mut out = vec![0.0; g.out_len()];
        let mut scratch = vec![0.0; k.scratch_len()];
        k.run(&x, None, Some(&relu), &mut out, &mut scratch, 1);
        assert_close(&out, &want, REL_TOL, "relu, no bias");
    }

    /// What does not fit: another kernel, stride, dilation, group count, too few channels or
    /// tiles, or tiles mostly outside a small output.
    #[test]
    fn fits_only_what_it_runs() {
        assert!(Winograd::fits(&geometry(1, 16, 8, 16, 16, 1)));
        assert!(!Winograd::fits(&geometry(1, 8, 8, 16, 16, 1)));
        assert!(!Winograd::fits(&geometry(1, 16, 8, 16, 8, 1)));
        // 8×8 output: 4 tiles, fewer than a lane group.
        assert!(!Winograd::fits(&geometry(1, 16, 8, 8, 16, 1)));
        // 9×13 output: 12 tiles, 117 of 192 tiled pixels.
        assert!(!Winograd::fits(&geometry(1, 16, 9, 13, 16, 1)));
        let mut g = geometry(1, 16, 8, 16, 16, 1);
        g.stride_x = 2;
        assert!(!Winograd::fits(&g));
        let mut g = geometry(1, 16, 8, 16, 16, 1);
        g.dilation_y = 2;
        assert!(!Winograd::fits(&g));
        let mut g = geometry(1, 16, 8, 16, 16, 1);
        g.groups = 2;
        assert!(!Winograd::fits(&g));
    }

    /// Relative tolerance against the f64 oracle: the transforms scale values by up to 8²
    /// before the products (sums of 9 × channels products of values in [-1, 1)).
    const REL_TOL: f64 = 1e-4;
}
