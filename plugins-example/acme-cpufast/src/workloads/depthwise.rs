//! The direct depthwise kernels: one input channel per group, `multiplier` output channels
//! per input channel (output channel `o` reads input channel `o / multiplier`), no im2col.
//! Each writes the bias, the convolution and the fused activation of one image.
//!
//! - The phase kernel (dilation 1, stride 1 or 2 each way, a non-empty input and output; any
//!   kernel size) first copies each input plane into scratch, zero-padded on every side and,
//!   for stride 2, split into its even and odd rows and columns (up to four "phases"). Every
//!   tap of every output row then reads a contiguous run of one phase, at an offset that is
//!   the same for every output row: no bounds or edge cases in the inner loop, no strided
//!   access. A row of at least four vectors is computed in one pass per group of up to 9 taps
//!   (all of a 3x3 kernel), each sum in a register from the bias on, in plain loops the
//!   compiler vectorises. Narrower rows (7, 14, 28 wide in MobileNets, most of a
//!   stride-2 layer's) are computed as one flat run of `span`-wide rows per band of up to
//!   `CacheSizes::depthwise_band` elements, with `pulp`'s explicit vectors (four side by side, a fused
//!   multiply-add per tap) and no partial vector per row; the output's columns are then
//!   copied out (7x7 planes alone: 2.9 → 6.4 GMAC/s; PP-OCRv4 det on two threads, A/B:
//!   1.11 → 1.01× onnxruntime). The epilogue follows while the rows are in the L1 cache.
//! - The general kernel (dilation, stride 3 or more, an empty input) makes one strided
//!   multiply-add pass per tap over the output rows that tap reaches.
//!
//! Both add the taps to the bias in the same order (row by row, left to right); the flat runs
//! round once per fused multiply-add, and the phase kernel adds padding as `w · 0`.

use super::activation::Epilogue;
use faer::traits::pulp::{Arch, Simd, WithSimd};

use super::conv_geometry::{ConvGeometry, inside, split_columns};
use crate::cache::CacheSizes;
use crate::gemm::{for_each_part, worth};

/// How the phase kernel holds one input plane in scratch: phase `(ry, rx)` (each below the
/// stride that way) is a `rows × span` matrix whose element `(j, i)` is element
/// `(j·stride_y + ry, i·stride_x + rx)` of the input padded with `pad_top` rows above,
/// `pad_left` columns on the left and zeros past its end. Tap `(ky, kx)` of output `(oy, ox)`
/// reads element `(oy + ky / stride_y, ox + kx / stride_x)` of phase
/// `(ky % stride_y, kx % stride_x)`; phases are stored one after the other, `rx` fastest.
#[derive(Debug, Clone)]
struct Phases {
    /// Rows of a phase: the output's and the reach of the tallest tap.
    rows: usize,
    /// Columns of a phase: the output's and the reach of the widest tap.
    span: usize,
    /// Where each tap `(ky, kx)` (row-major) of output `(0, 0)` reads in the phases; output
    /// `(oy, ox)` reads `oy · span + ox` further.
    offsets: Vec<usize>,
    /// Output rows the kernel computes at a time, as one flat band of `band · span`
    /// elements (the extra columns are discarded).
    band: usize,
}

/// Elements every length of the phase kernel is rounded up to: [`BLOCK_VECTORS`] vectors of
/// `pulp`'s widest (16 lanes), so that any instruction set runs whole blocks.
const FLAT_ROUND: usize = BLOCK_VECTORS * 16;

/// Vectors the phase kernel computes side by side (independent sums, so the fused
/// multiply-adds of one tap overlap).
const BLOCK_VECTORS: usize = 4;

impl Phases {
    /// The phases of `g`'s planes, if the phase kernel runs `g`.
    fn of(g: &ConvGeometry) -> Option<Self> {
        let fits = (g.dilation_y, g.dilation_x) == (1, 1)
            && (1..=2).contains(&g.stride_y)
            && (1..=2).contains(&g.stride_x)
            && g.kernel_h * g.kernel_w > 0
            && g.height * g.width > 0
            && g.out_plane() > 0;
        fits.then(|| {
            let (sy, sx) = (g.stride_y, g.stride_x);
            let rows = g.out_height + (g.kernel_h - 1) / sy;
            let span = g.out_width + (g.kernel_w - 1) / sx;
            // A flat band (at least one row): small enough that the band, the input rows it
            // reads and the output rows it writes stay in the L1 cache (a whole 112x112 plane
            // at a time went through the L2 cache, slower than the kernel without bands).
            let band = (CacheSizes::get().depthwise_band() / span).clamp(1, g.out_height);
            let offsets = (0..g.kernel_h)
                .flat_map(|ky| (0..g.kernel_w).map(move |kx| (ky, kx)))
                .map(|(ky, kx)| {
                    let phase = (ky % sy) * sx + kx % sx;
                    (phase * rows + ky / sy) * span + kx / sx
                })
                .collect();
            Self {
                rows,
                span,
                offsets,
                band,
            }
        })
    }

    /// Elements of the phases of one plane.
    fn plane_len(&self, g: &ConvGeometry) -> usize {
        g.stride_y * g.stride_x * self.rows * self.span
    }

    /// Elements of a flat run of `rows` rows: `rows · span`, rounded up to whole blocks of
    /// vectors (the scratch holds one of [`Self::band`] rows).
    fn flat_len(&self, rows: usize) -> usize {
        (rows * self.span).next_multiple_of(FLAT_ROUND)
    }

    /// Zeros after the phases of a plane: the last band's last block reads up to
    /// `kernel_w + FLAT_ROUND` elements past them.
    fn tail_len(g: &ConvGeometry) -> usize {
        g.kernel_w + FLAT_ROUND
    }

    /// Copies input plane `x_c` into `phases` ([`Self::plane_len`] elements); `row` is
    /// scratch for one padded row (`stride_x · span` elements). Writes only what comes from
    /// the input: the padding in `phases` and `row` is zero from the first plane on.
    #[inline(always)]
    fn split(&self, g: &ConvGeometry, x_c: &[f32], phases: &mut [f32], row: &mut [f32]) {
        let phase_len = self.rows * self.span;
        // Padded columns `cols` hold input columns `0..cols.len()`.
        let cols = inside(row.len(), g.width, 1, -(g.pad_left as i64));
        for (ry, pair) in phases.chunks_exact_mut(g.stride_x * phase_len).enumerate() {
            // Phase row `j` holds input row `j·stride_y + ry - pad_top`, if that is one.
            let dy = ry as i64 - g.pad_top as i64;
            let valid = inside(self.rows, g.height, g.stride_y, dy);
            // `odd` is empty for stride 1 across.
            let (even, odd) = pair.split_at_mut(phase_len);
            for j in valid {
                let iy = (j as i64 * g.stride_y as i64 + dy) as usize;
                let x_row = &x_c[iy * g.width..][..cols.len()];
                let even_row = &mut even[j * self.span..][..self.span];
                if g.stride_x == 1 {
                    even_row[cols.clone()].copy_from_slice(x_row);
                } else {
                    row[cols.clone()].copy_from_slice(x_row);
                    let odd_row = &mut odd[j * self.span..][..self.span];
                    split_columns(row, even_row, odd_row);
                }
            }
        }
    }

    /// Output plane `out_p` from the phases of its input plane, with weights `w_o`
    /// (`[kh, kw]`). Rows of at least [`BLOCK_VECTORS`] vectors are computed in place, one
    /// at a time; narrower ones band by band in `flat` ([`Self::flat_len`] of [`Self::band`]
    /// rows), a flat run of `span`-wide rows whose output columns are then copied out (a
    /// 7-wide row would otherwise be one partial vector).
    #[inline(always)]
    #[allow(
        clippy::too_many_arguments,
        reason = "SIMD, operands, scratch and epilogue"
    )]
    fn output_plane<S: Simd>(
        &self,
        simd: S,
        g: &ConvGeometry,
        phases: &[f32],
        w_o: &[f32],
        bias: f32,
        activation: Option<&Epilogue>,
        flat: &mut [f32],
        out_p: &mut [f32],
    ) {
        let ow = g.out_width;
        let pass = Pass {
            simd,
            phases,
            offsets: &self.offsets,
            w: w_o,
            bias,
        };
        if ow >= BLOCK_VECTORS * S::F32_LANES {
            for (oy, out_row) in out_p.chunks_exact_mut(ow).enumerate() {
                pass.run::<true>(out_row, oy * self.span);
            }
            if let Some(a) = activation {
                a.apply_inline(out_p);
            }
            return;
        }
        for (band, out_band) in out_p.chunks_mut(self.band * ow).enumerate() {
            let rows = out_band.len() / ow;
            let flat = &mut flat[..self.flat_len(rows)];
            pass.run::<false>(flat, band * self.band * self.span);
            // The output's columns of each row, then the epilogue while they are in the L1
            // cache, compiled into this kernel (no dispatch of its own).
            for (out_row, row) in out_band.chunks_exact_mut(ow).zip(flat.chunks(self.span)) {
                out_row.copy_from_slice(&row[..ow]);
            }
            if let Some(a) = activation {
                a.apply_inline(out_band);
            }
        }
    }
}

/// The phase kernel's sums for one output plane.
struct Pass<'a, S: Simd> {
    /// The instruction set.
    simd: S,
    /// The phases of the input plane, then [`Phases::tail_len`] zeros.
    phases: &'a [f32],
    /// [`Phases::offsets`].
    offsets: &'a [usize],
    /// The plane's weights, `[kh, kw]`.
    w: &'a [f32],
    bias: f32,
}

impl<S: Simd> Pass<'_, S> {
    /// `run[k] = bias + Σ w[t] · phases[offsets[t] + first + k]` over every tap, in groups
    /// of up to 9 in order (one pass over `run` each). `run` is either a flat band of
    /// `span`-wide rows (whose columns past the output's width read past their row and are
    /// discarded) computed with explicit vectors ([`Self::add`]), or, with `ROW`, one output
    /// row (`first` its `oy · span`) in plain loops the compiler vectorises ([`Self::plain`]:
    /// for rows of several vectors it ran faster than the explicit ones, MobileNetV2 block's
    /// depthwise layer on two threads 188 against 212 us).
    #[inline(always)]
    fn run<const ROW: bool>(&self, run: &mut [f32], first: usize) {
        let (mut w, mut offsets, mut start) = (self.w, self.offsets, Some(self.bias));
        while !w.is_empty() {
            let group = match w.len() {
                9.. => 9,
                3.. => 3,
                _ => 1,
            };
            match (group, ROW) {
                (9, true) => self.plain::<9>(run, first, start, w, offsets),
                (3, true) => self.plain::<3>(run, first, start, w, offsets),
                (_, true) => self.plain::<1>(run, first, start, w, offsets),
                (9, false) => self.add::<9>(run, first, start, w, offsets),
                (3, false) => self.add::<3>(run, first, start, w, offsets),
                (_, false) => self.add::<1>(run, first, start, w, offsets),
            }
            (w, offsets, start) = (&w[group..], &offsets[group..], None);
        }
    }

    /// [`Self::add`] over one output row in plain loops: each sum stays in a register.
    #[inline(always)]
    fn plain<const T: usize>(
        &self,
        out_row: &mut [f32],
        first: usize,
        start: Option<f32>,
        w: &[f32],
        offsets: &[usize],
    ) {
        let w: [f32; T] = std::array::from_fn(|t| w[t]);
        let window = &self.phases[first..];
        let x: [&[f32]; T] = std::array::from_fn(|t| &window[offsets[t]..][..out_row.len()]);
        let sum = |init: f32, i: usize| (0..T).fold(init, |s, t| s + w[t] * x[t][i]);
        match start {
            Some(b) => out_row
                .iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = sum(b, i)),
            None => out_row
                .iter_mut()
                .enumerate()
                .for_each(|(i, o)| *o = sum(*o, i)),
        }
    }

    /// `run[k] = start + Σ w[t] · phases[offsets[t] + first + k]` (or `run[k] +` the sum
    /// when `start` is `None`) over the first `T` taps, added in order by fused multiply-adds
    /// where the CPU has them, [`BLOCK_VECTORS`] vectors at a time in registers (`run` is
    /// whole blocks: a flat band is rounded up to [`FLAT_ROUND`]).
    #[inline(always)]
    fn add<const T: usize>(
        &self,
        run: &mut [f32],
        first: usize,
        start: Option<f32>,
        w: &[f32],
        offsets: &[usize],
    ) {
        let simd = self.simd;
        let mut wv = [simd.splat_f32s(0.0); T];
        let mut at = [0; T];
        for t in 0..T {
            (wv[t], at[t]) = (simd.splat_f32s(w[t]), offsets[t] + first);
        }
        let (vectors, _) = S::as_mut_simd_f32s(run);
        for (j, o) in vectors.chunks_exact_mut(BLOCK_VECTORS).enumerate() {
            let mut acc = [simd.splat_f32s(0.0); BLOCK_VECTORS];
            for u in 0..BLOCK_VECTORS {
                acc[u] = start.map_or(o[u], |b| simd.splat_f32s(b));
            }
            let i = j * BLOCK_VECTORS * S::F32_LANES;
            let acc = taps(simd, &wv, self.phases, &at, i, acc);
            for (o, acc) in o.iter_mut().zip(acc) {
                *o = acc;
            }
        }
    }
}

/// `acc[u] + Σ w[t] · window[offsets[t] + i + u · lanes..][..lanes]` over the `T` taps, in
/// order, for `U` vectors side by side (independent sums, so the fused multiply-adds of one
/// tap overlap): the phase kernel's inner loop. Always inlined, and a plain loop: left a call
/// (an iterator's `fold`, a closure), it was compiled without the dispatched instruction set
/// and ran 7x slower.
#[inline(always)]
fn taps<S: Simd, const T: usize, const U: usize>(
    simd: S,
    w: &[S::f32s; T],
    window: &[f32],
    offsets: &[usize; T],
    i: usize,
    mut acc: [S::f32s; U],
) -> [S::f32s; U] {
    for t in 0..T {
        let (x, _) = S::as_simd_f32s(&window[offsets[t] + i..][..U * S::F32_LANES]);
        for u in 0..U {
            acc[u] = simd.mul_add_e_f32s(w[t], x[u], acc[u]);
        }
    }
    acc
}

/// The phase kernel over one image (see [`run`]), as a [`WithSimd`] operation: `pulp` (through
/// `faer`) compiles it for each instruction set it can pick at run time (AVX2 on an x86-64
/// CPU that has it): the plain loops of wide rows, vectorised by the compiler, and the
/// explicit vectors of the flat runs.
struct PhaseKernel<'a> {
    g: &'a ConvGeometry,
    phases: Phases,
    x_n: &'a [f32],
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    activation: Option<&'a Epilogue>,
    out_n: &'a mut [f32],
    scratch: &'a mut [f32],
}

impl WithSimd for PhaseKernel<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Self {
            g,
            phases,
            x_n,
            w,
            bias,
            activation,
            out_n,
            scratch,
        } = self;
        let (taps, plane_len) = (g.kernel_h * g.kernel_w, phases.plane_len(g));
        let (plane, rest) = scratch.split_at_mut(plane_len + Phases::tail_len(g));
        let (row, flat) = rest.split_at_mut(g.stride_x * phases.span);
        let flat = &mut flat[..phases.flat_len(phases.band)];
        plane.fill(0.0);
        row.fill(0.0);
        let multiplier = g.group_out();
        let in_plane = g.height * g.width;
        for (o, out_p) in out_n.chunks_exact_mut(g.out_plane()).enumerate() {
            if o % multiplier == 0 {
                let x_c = &x_n[o / multiplier * in_plane..][..in_plane];
                phases.split(g, x_c, &mut plane[..plane_len], row);
            }
            let w_o = &w[o * taps..][..taps];
            let b = bias.map_or(0.0, |b| b[o]);
            phases.output_plane(simd, g, plane, w_o, b, activation, flat, out_p);
        }
    }
}

/// Below this many multiply-adds per image the depthwise kernels run on the calling thread:
/// handing a smaller image to the pool cost more than it saved. With the flat runs for narrow
/// rows and helpers that spin between splits, 1 << 19 beat the earlier 1 << 21 on two
/// threads (A/B: PaddleOCR's classifier 0.68 -> 0.64 ms, PP-OCRv4 det 11.5 -> 11.1 ms, rec
/// unchanged; 1 << 18 was no better).
const MIN_PARALLEL_WORK: usize = 1 << 19;

/// Scratch elements [`run`] needs for `g` on `threads` threads: for the phase kernel, the
/// phases of one plane and their zero tail, one padded row and one flat band per thread that
/// runs.
pub(crate) fn scratch_len(g: &ConvGeometry, threads: usize) -> usize {
    one_scratch_len(g) * workers(g, threads)
}

/// Scratch elements of one thread running the phase kernel (none for the general one).
fn one_scratch_len(g: &ConvGeometry) -> usize {
    Phases::of(g).map_or(0, |p| {
        (p.plane_len(g) + Phases::tail_len(g) + g.stride_x * p.span + p.flat_len(p.band))
            .next_multiple_of(64)
    })
}

/// How many of `threads` threads split the channels of one image of `g`: one below
/// [`MIN_PARALLEL_WORK`], never more than there are channels.
fn workers(g: &ConvGeometry, threads: usize) -> usize {
    let work = g.out_channels * g.out_plane() * g.kernel_h * g.kernel_w;
    worth(work, MIN_PARALLEL_WORK, threads).min(g.channels)
}

/// `out_n = activation(depthwise(x_n, w) + bias)` for one image: `x_n` is `[C, H, W]`,
/// `out_n` `[M, OH, OW]`, `w` `[M, 1, KH, KW]`, `bias` `[M]`; `scratch` has at least
/// [`scratch_len`] elements for `threads`. With more than one thread, each runs a disjoint
/// range of input channels (and their output planes) with its own part of `scratch`; every
/// output element is the same sum as on one thread.
#[allow(
    clippy::too_many_arguments,
    reason = "operands, bias, fused activation, scratch and threads"
)]
pub(crate) fn run(
    g: &ConvGeometry,
    x_n: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    activation: Option<&Epilogue>,
    out_n: &mut [f32],
    scratch: &mut [f32],
    threads: usize,
) {
    let workers = workers(g, threads);
    if workers <= 1 {
        return run_channels(g, x_n, w, bias, activation, out_n, scratch);
    }
    let (in_plane, multiplier, taps) = (g.height * g.width, g.group_out(), g.kernel_h * g.kernel_w);
    let per = g.channels.div_ceil(workers);
    let per_out = per * multiplier * g.out_plane();
    // One job per range of channels: its first channel, its output planes and its scratch.
    let mut rest = scratch;
    let mut jobs = Vec::with_capacity(workers);
    for (i, out_c) in out_n.chunks_mut(per_out).enumerate() {
        let (mine, others) = std::mem::take(&mut rest).split_at_mut(one_scratch_len(g));
        rest = others;
        jobs.push((i * per, out_c, mine));
    }
    for_each_part(workers, jobs, |(c, out_c, scratch)| {
        let outs = out_c.len() / g.out_plane();
        let channels = outs / multiplier;
        run_channels(
            g,
            &x_n[c * in_plane..][..channels * in_plane],
            &w[c * multiplier * taps..][..outs * taps],
            bias.map(|b| &b[c * multiplier..][..outs]),
            activation,
            out_c,
            scratch,
        );
    });
}

/// [`run`] on the calling thread, for the channels `x_n` holds (`w`, `bias` and `out_n` start
/// at their first output channel).
fn run_channels(
    g: &ConvGeometry,
    x_n: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    activation: Option<&Epilogue>,
    out_n: &mut [f32],
    scratch: &mut [f32],
) {
    if let Some(phases) = Phases::of(g) {
        Arch::new().dispatch(PhaseKernel {
            g,
            phases,
            x_n,
            w,
            bias,
            activation,
            out_n,
            scratch,
        });
    } else {
        general(g, x_n, w, bias, activation, out_n);
    }
}

/// The general kernel, [`run`] without scratch: the bias, then one strided multiply-add over
/// the output rows each weight reaches, then the activation.
fn general(
    g: &ConvGeometry,
    x_n: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    activation: Option<&Epilogue>,
    out_n: &mut [f32],
) {
    let (in_plane, out_plane) = (g.height * g.width, g.out_plane());
    let (multiplier, taps) = (g.group_out(), g.kernel_h * g.kernel_w);
    for (o, out_p) in out_n.chunks_exact_mut(out_plane).enumerate() {
        out_p.fill(bias.map_or(0.0, |b| b[o]));
        let x_c = &x_n[(o / multiplier) * in_plane..][..in_plane];
        let w_o = &w[o * taps..][..taps];
        for ky in 0..g.kernel_h {
            let dy = (ky * g.dilation_y) as i64 - g.pad_top as i64;
            let rows = inside(g.out_height, g.height, g.stride_y, dy);
            for kx in 0..g.kernel_w {
                let dx = (kx * g.dilation_x) as i64 - g.pad_left as i64;
                let cols = inside(g.out_width, g.width, g.stride_x, dx);
                if cols.is_empty() {
                    continue;
                }
                let first_x = (cols.start as i64 * g.stride_x as i64 + dx) as usize;
                let wv = w_o[ky * g.kernel_w + kx];
                for oy in rows.clone() {
                    let iy = (oy as i64 * g.stride_y as i64 + dy) as usize;
                    let x_row = &x_c[iy * g.width + first_x..(iy + 1) * g.width];
                    let out_row = &mut out_p[oy * g.out_width..][cols.clone()];
                    if g.stride_x == 1 {
                        for (o_v, &x_v) in out_row.iter_mut().zip(x_row) {
                            *o_v += wv * x_v;
                        }
                    } else {
                        for (o_v, &x_v) in out_row.iter_mut().zip(x_row.iter().step_by(g.stride_x))
                        {
                            *o_v += wv * x_v;
                        }
                    }
                }
            }
        }
    }
    if let Some(a) = activation {
        a.apply(out_n);
    }
}

#[cfg(test)]
#[path = "depthwise_tests.rs"]
mod tests;
