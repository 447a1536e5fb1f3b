//! TransposeConvolution2d (Backend API 1.1, ONNX `ConvTranspose`, NCHW) as a GEMM and a
//! col2im: for group `g` of image `n` and a block of input rows, `cols = W_gᵀ · X_g` (one row
//! per `(output channel, ky, kx)` of the group, one column per input pixel of the block), then
//! each row of `cols` is added to the output pixels its tap lands on
//! (`iy · stride - top + ky · dilation`), over outputs that start at the bias. The weights
//! (`[in, out / groups, kh, kw]`) are read at every execution, so they need not be constant.
//!
//! Blocks of input rows keep `cols` within `CacheSizes::im2col_elements`, so that it is still in the
//! cache when the col2im reads it. The GEMM splits between threads as [`gemm`] decides; the
//! col2im runs on the calling thread.

use std::{ops::Range, sync::Arc};

use backplane_api::{
    BackendResult, LayerDescriptor, TensorInfo, TensorView, TensorViewMut,
    TransposeConvolution2dDescriptor, Workload, WorkloadDesc, shapes,
};

use backplane_backend_kit::geometry::Geometry2d;

use super::{Signature, invalid_layer};
use crate::{
    cache::CacheSizes,
    gemm::{Accum, Operand, gemm},
    memory::Arena,
};

/// Everything about one transposed convolution fixed when it is created.
#[derive(Debug, Clone)]
pub(crate) struct TransposeGeometry {
    /// The window: `channels`, `height`, `width` are the input's, `out_*` the output's,
    /// padding crops the output.
    g: Geometry2d,
    bias: bool,
}

impl TransposeGeometry {
    /// The geometry of a transposed convolution `d` of `inputs` (`[x, w, bias?]`) into
    /// `outputs`, or why CpuFast cannot run it.
    pub(crate) fn new(
        d: &TransposeConvolution2dDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> Result<Self, String> {
        let want = 2 + usize::from(d.bias_enabled);
        let ([x, w, ..], [y]) = (inputs, outputs) else {
            return Err(format!(
                "TransposeConvolution2d takes {want} inputs and one output"
            ));
        };
        if inputs.len() != want {
            return Err(format!(
                "TransposeConvolution2d expects {want} inputs, got {}",
                inputs.len()
            ));
        }
        let expected = shapes::transpose_convolution(d, &x.shape, &w.shape)?;
        if expected != y.shape.as_slice() {
            return Err(format!(
                "output {:?} differs from the expected {expected:?}",
                y.shape.as_slice()
            ));
        }
        let g = Geometry2d::transpose_convolution(d, x, w, y)?;
        if let Some(b) = inputs.get(2)
            && b.shape.as_slice() != [g.out_channels as u32]
        {
            return Err(format!("bias {b} is not [{}]", g.out_channels));
        }
        Ok(Self {
            g,
            bias: d.bias_enabled,
        })
    }

    /// Rows of `cols`: `(output channel, ky, kx)` of one group.
    fn taps(&self) -> usize {
        self.g.out_channels / self.g.groups * self.g.kernel_h * self.g.kernel_w
    }

    /// Input rows per block (at least one).
    fn block_rows(&self) -> usize {
        (CacheSizes::get().im2col_elements() / (self.taps() * self.g.width).max(1))
            .clamp(1, self.g.height.max(1))
    }

    /// Scratch elements of one execution: one block's `cols`.
    fn scratch_len(&self) -> usize {
        self.taps() * self.block_rows() * self.g.width
    }

    /// The inputs `i` in `0..in_len` whose output `i * stride + offset - pad` lies in
    /// `0..out_len`.
    fn landing(
        in_len: usize,
        out_len: usize,
        stride: usize,
        offset: usize,
        pad: usize,
    ) -> Range<usize> {
        // i * stride >= pad - offset, and i * stride < out_len + pad - offset.
        let lo = pad.saturating_sub(offset).div_ceil(stride);
        let hi = (out_len + pad).saturating_sub(offset).div_ceil(stride);
        lo.min(in_len)..hi.min(in_len).max(lo.min(in_len))
    }

    /// `out = conv_transpose(x, w) + bias` over the whole batch.
    fn run(
        &self,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut [f32],
        threads: usize,
    ) {
        let (in_plane, out_plane) = (
            self.g.height * self.g.width,
            self.g.out_height * self.g.out_width,
        );
        let (cg, mg) = (
            self.g.channels / self.g.groups,
            self.g.out_channels / self.g.groups,
        );
        let (taps, kernel) = (self.taps(), self.g.kernel_h * self.g.kernel_w);
        if out_plane == 0 || self.g.out_channels == 0 {
            return;
        }
        for (n, out_n) in out
            .chunks_exact_mut(self.g.out_channels * out_plane)
            .enumerate()
            .take(self.g.batch)
        {
            for (o, plane) in out_n.chunks_exact_mut(out_plane).enumerate() {
                plane.fill(bias.map_or(0.0, |b| b[o]));
            }
            if in_plane == 0 || cg == 0 {
                continue;
            }
            let x_n = &x[n * self.g.channels * in_plane..][..self.g.channels * in_plane];
            for g in 0..self.g.groups {
                let x_g = &x_n[g * cg * in_plane..][..cg * in_plane];
                let w_g = &w[g * cg * taps..][..cg * taps];
                let out_g = &mut out_n[g * mg * out_plane..][..mg * out_plane];
                let step = self.block_rows();
                for iy0 in (0..self.g.height).step_by(step) {
                    let rows = iy0..(iy0 + step).min(self.g.height);
                    let cols_n = rows.len() * self.g.width;
                    let cols = &mut scratch[..taps * cols_n];
                    gemm(
                        taps,
                        cg,
                        cols_n,
                        Operand::Transposed(w_g),
                        Operand::Strided(&x_g[iy0 * self.g.width..], in_plane),
                        cols,
                        cols_n,
                        threads,
                        Accum::Replace,
                    );
                    for (t, col) in cols.chunks_exact(cols_n).enumerate() {
                        let (j, ky, kx) = (
                            t / kernel,
                            t % kernel / self.g.kernel_w,
                            t % self.g.kernel_w,
                        );
                        let plane = &mut out_g[j * out_plane..][..out_plane];
                        self.col2im(col, rows.clone(), ky, kx, plane);
                    }
                }
            }
        }
    }

    /// Adds one row of `cols` (tap `ky, kx` of one output channel, input rows `rows`) to that
    /// channel's output plane.
    fn col2im(&self, col: &[f32], rows: Range<usize>, ky: usize, kx: usize, plane: &mut [f32]) {
        let ys = Self::landing(
            self.g.height,
            self.g.out_height,
            self.g.stride_y,
            ky * self.g.dilation_y,
            self.g.pad_top,
        );
        let xs = Self::landing(
            self.g.width,
            self.g.out_width,
            self.g.stride_x,
            kx * self.g.dilation_x,
            self.g.pad_left,
        );
        if xs.is_empty() {
            return;
        }
        let first_ox = xs.start * self.g.stride_x + kx * self.g.dilation_x - self.g.pad_left;
        let iy0 = rows.start;
        for iy in rows.start.max(ys.start)..rows.end.min(ys.end) {
            let oy = iy * self.g.stride_y + ky * self.g.dilation_y - self.g.pad_top;
            let src = &col[(iy - iy0) * self.g.width..][xs.clone()];
            let dst = &mut plane[oy * self.g.out_width + first_ox..];
            if self.g.stride_x == 1 {
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d += v;
                }
            } else {
                for (d, &v) in dst.iter_mut().step_by(self.g.stride_x).zip(src) {
                    *d += v;
                }
            }
        }
    }
}

/// A stand-alone TransposeConvolution2d layer.
#[derive(Debug)]
pub(crate) struct TransposeConvolutionWorkload {
    g: TransposeGeometry,
    signature: Signature,
    arena: Arc<Arena>,
    threads: usize,
}

/// Creates the workload of a `TransposeConvolution2d` layer, taking scratch from `arena`.
pub(crate) fn create(
    desc: &WorkloadDesc<'_>,
    arena: Arc<Arena>,
    threads: usize,
) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::TransposeConvolution2d(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a TransposeConvolution2d layer"));
    };
    let g = TransposeGeometry::new(d, &desc.inputs, &desc.outputs)
        .map_err(|e| invalid_layer(desc, e))?;
    arena.reserve(g.scratch_len());
    Ok(Box::new(TransposeConvolutionWorkload {
        g,
        signature: Signature::of(desc),
        arena,
        threads,
    }))
}

impl Workload for TransposeConvolutionWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let (x, w) = (inputs[0].as_f32()?, inputs[1].as_f32()?);
        let bias = if self.g.bias {
            Some(inputs[2].as_f32()?)
        } else {
            None
        };
        let out = outputs[0].as_f32_mut()?;
        let len = self.g.scratch_len();
        let mut lent = (len > 0).then(|| self.arena.scratch(len));
        let scratch: &mut [f32] = lent.as_deref_mut().unwrap_or(&mut []);
        self.g.run(x, w, bias, out, scratch, self.threads);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::Padding2d;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, f32t, numel, run, with_threads};

    /// Stride 1, no padding, dilation or output padding, one group, a bias.
    fn base() -> TransposeConvolution2dDescriptor {
        TransposeConvolution2dDescriptor {
            bias_enabled: true,
            ..Default::default()
        }
    }

    /// The definition, in f64: every input pixel times every tap, added where it lands.
    fn oracle(
        d: &TransposeConvolution2dDescriptor,
        xs: [usize; 4],
        ws: [usize; 4],
        os: [usize; 4],
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
    ) -> Vec<f64> {
        let ([n, c, h, wd], [_, mg, kh, kw], [_, m, oh, ow]) = (xs, ws, os);
        let cg = c / d.groups as usize;
        let mut out: Vec<f64> = (0..n * m * oh * ow)
            .map(|i| bias.map_or(0.0, |b| f64::from(b[i / (oh * ow) % m])))
            .collect();
        for b in 0..n {
            for ci in 0..c {
                for iy in 0..h {
                    for ix in 0..wd {
                        for j in 0..mg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let oy = (iy * d.stride_y as usize + ky * d.dilation_y as usize)
                                        as i64
                                        - i64::from(d.padding.top);
                                    let ox = (ix * d.stride_x as usize + kx * d.dilation_x as usize)
                                        as i64
                                        - i64::from(d.padding.left);
                                    if oy < 0 || ox < 0 || oy >= oh as i64 || ox >= ow as i64 {
                                        continue;
                                    }
                                    let mo = ci / cg * mg + j;
                                    let xv = x[((b * c + ci) * h + iy) * wd + ix];
                                    let wv = w[((ci * mg + j) * kh + ky) * kw + kx];
                                    out[((b * m + mo) * oh + oy as usize) * ow + ox as usize] +=
                                        f64::from(xv) * f64::from(wv);
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// Strides, padding, dilation, output padding, groups, several images and blocks of
    /// rows, with and without a bias, on one and two threads, against the definition.
    #[test]
    fn matches_the_definition() {
        let mut rng = Lcg(17);
        let pad = |top, left, bottom, right| Padding2d {
            left,
            right,
            top,
            bottom,
        };
        let stride2 = TransposeConvolution2dDescriptor {
            stride_x: 2,
            stride_y: 2,
            ..base()
        };
        // (x shape, out channels per group, kernel, descriptor)
        let cases = [
            ([1, 24, 20, 20], 24, [2, 2], stride2.clone()),
            (
                [2, 6, 7, 5],
                3,
                [3, 3],
                TransposeConvolution2dDescriptor {
                    padding: pad(1, 2, 1, 0),
                    stride_x: 2,
                    stride_y: 3,
                    output_padding_x: 1,
                    output_padding_y: 2,
                    groups: 2,
                    bias_enabled: false,
                    ..base()
                },
            ),
            (
                [1, 4, 9, 11],
                5,
                [3, 2],
                TransposeConvolution2dDescriptor {
                    padding: pad(2, 1, 3, 1),
                    dilation_x: 2,
                    dilation_y: 3,
                    ..base()
                },
            ),
            ([1, 8, 300, 200], 1, [2, 2], stride2),
        ];
        for (xs, mg, [kh, kw], d) in cases {
            let ws = [xs[1], mg, kh, kw];
            let os = shapes::transpose_convolution(&d, &xs, &ws).expect("a valid case");
            let os: [u32; 4] = os.try_into().expect("4-D");
            let x = rng.vec(numel(&xs));
            let w = rng.vec(numel(&ws));
            let m = os[1];
            let b = rng.vec(m as usize);
            let u = |s: [u32; 4]| s.map(|v| v as usize);
            let want = oracle(
                &d,
                u(xs),
                u(ws),
                u(os),
                &x,
                &w,
                d.bias_enabled.then_some(&b[..]),
            );
            let bias_enabled = d.bias_enabled;
            let layer = LayerDescriptor::TransposeConvolution2d(d.clone());
            let mut inputs: Vec<(&[u32], &[f32])> = vec![(&xs, &x), (&ws, &w)];
            let bs = [m];
            if bias_enabled {
                inputs.push((&bs, &b));
            }
            for threads in [1, 2] {
                let got = with_threads(threads, || run(&layer, &inputs, &os));
                assert_close(
                    &got,
                    &want,
                    1e-5,
                    &format!("{d:?} of {xs:?}, {threads} threads"),
                );
            }
        }
    }

    /// Shapes that do not fit are refused with the reason.
    #[test]
    fn refuses_what_does_not_fit() {
        let d = TransposeConvolution2dDescriptor {
            stride_x: 2,
            stride_y: 2,
            bias_enabled: false,
            ..base()
        };
        let err = TransposeGeometry::new(
            &d,
            &[f32t(&[1, 4, 5, 5]), f32t(&[4, 2, 2, 2])],
            &[f32t(&[1, 2, 9, 9])],
        )
        .expect_err("a wrong output");
        assert_eq!(
            err,
            "output [1, 2, 9, 9] differs from the expected [1, 2, 10, 10]"
        );
        let err = TransposeGeometry::new(&d, &[f32t(&[1, 4, 5, 5])], &[f32t(&[1, 2, 10, 10])])
            .expect_err("no weights");
        assert_eq!(err, "TransposeConvolution2d takes 2 inputs and one output");
    }
}
