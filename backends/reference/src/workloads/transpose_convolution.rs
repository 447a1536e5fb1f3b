//! TransposeConvolution2d (Backend API 1.1): ONNX `ConvTranspose` on NCHW. Each input pixel,
//! times each weight tap, is added to the output pixel it lands on
//! (`y * stride - top + ky * dilation`); the bias starts every output element. The loops go
//! one output plane at a time, so that the plane stays in the cache while every input channel
//! and tap is added to it (input pixel by input pixel, the scatter ran at about 0.5 GMAC/s on
//! PP-OCRv4's detector).

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, TransposeConvolution2dDescriptor,
    Workload, WorkloadDesc, shapes,
};

use super::{ExpectedShapes, checked_num_elements, expect_counts, float_workload, invalid_layer};

/// Creates the workload of a `TransposeConvolution2d` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::TransposeConvolution2d(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a TransposeConvolution2d layer"));
    };
    expect_counts(
        desc.inputs.len(),
        desc.outputs.len(),
        if d.bias_enabled { 3 } else { 2 },
        1,
    )?;
    let (x, w, out) = (&desc.inputs[0], &desc.inputs[1], &desc.outputs[0]);
    let expected =
        shapes::transpose_convolution(d, &x.shape, &w.shape).map_err(|e| invalid_layer(desc, e))?;
    if expected != out.shape.as_slice() {
        return Err(invalid_layer(
            desc,
            format_args!("ConvTranspose of {x} with {w} into {out}"),
        ));
    }
    for t in [x, w, out] {
        checked_num_elements(desc, t)?;
    }
    let dims = |s: &[u32]| [s[0], s[1], s[2], s[3]].map(|v| v as usize);
    Ok(Box::new(TransposeConvolutionWorkload {
        d: d.clone(),
        x: dims(&x.shape),
        w: dims(&w.shape),
        out: dims(&out.shape),
        shapes: ExpectedShapes::of(desc),
    }))
}

/// The scatter form of a transposed convolution.
#[derive(Debug)]
pub struct TransposeConvolutionWorkload {
    d: TransposeConvolution2dDescriptor,
    /// `[n, c, h, w]`.
    x: [usize; 4],
    /// `[c, m / groups, kh, kw]`.
    w: [usize; 4],
    /// `[n, m, oh, ow]`.
    out: [usize; 4],
    shapes: ExpectedShapes,
}

impl TransposeConvolutionWorkload {
    /// The convolution in `T` (`f32` or `f64`, the tensors' type).
    fn run<T>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()>
    where
        T: backplane_api::Element + num_traits::Float + std::ops::AddAssign,
    {
        let (x, w) = (inputs[0].as_slice::<T>()?, inputs[1].as_slice::<T>()?);
        let bias = match inputs.get(2) {
            Some(b) => Some(b.as_slice::<T>()?),
            None => None,
        };
        let out = outputs[0].as_mut_slice::<T>()?;
        let [_, c, h, wd] = self.x;
        let [_, mg, kh, kw] = self.w;
        let [_, m, oh, ow] = self.out;
        let d = &self.d;
        let groups = d.groups as usize;
        let cg = c / groups;
        let (in_plane, out_plane) = (h * wd, oh * ow);
        let (sy, sx) = (d.stride_y as usize, d.stride_x as usize);
        let (dy, dx) = (d.dilation_y as usize, d.dilation_x as usize);
        let (top, left) = (d.padding.top as usize, d.padding.left as usize);
        // One output plane at a time (it stays in the cache): the bias, then every input
        // channel of its group, tap by tap, row by row.
        for (p, plane) in out.chunks_exact_mut(out_plane).enumerate() {
            let (b, mo) = (p / m, p % m);
            let (g, j) = (mo / mg, mo % mg);
            plane.fill(bias.map_or(T::zero(), |bias| bias[mo]));
            for ci in g * cg..(g + 1) * cg {
                let x_c = &x[(b * c + ci) * in_plane..][..in_plane];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let wv = w[((ci * mg + j) * kh + ky) * kw + kx];
                        for (iy, x_row) in x_c.chunks_exact(wd).enumerate() {
                            // Output row `iy * sy + ky * dy - top`, if inside.
                            let Some(oy) = (iy * sy + ky * dy).checked_sub(top) else {
                                continue;
                            };
                            if oy >= oh {
                                break;
                            }
                            let out_row = &mut plane[oy * ow..][..ow];
                            for (ix, &v) in x_row.iter().enumerate() {
                                let Some(ox) = (ix * sx + kx * dx).checked_sub(left) else {
                                    continue;
                                };
                                if ox >= ow {
                                    break;
                                }
                                out_row[ox] += v * wv;
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

float_workload!(TransposeConvolutionWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::Padding2d;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// The oracle, in the gather form: each output pixel sums, in f64, the input pixels and
    /// taps whose scatter lands on it (`oy + top - ky * dilation` divisible by the stride).
    fn oracle(
        d: &TransposeConvolution2dDescriptor,
        xs: [usize; 4],
        x: &[f32],
        ws: [usize; 4],
        w: &[f32],
        bias: Option<&[f32]>,
        os: [usize; 4],
    ) -> Vec<f64> {
        let [n, c, h, wd] = xs;
        let [_, mg, kh, kw] = ws;
        let [_, m, oh, ow] = os;
        let cg = c / d.groups as usize;
        let mut out = Vec::new();
        for b in 0..n {
            for mo in 0..m {
                let (g, j) = (mo / mg, mo % mg);
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = bias.map_or(0.0, |bb| f64::from(bb[mo]));
                        for ci in g * cg..(g + 1) * cg {
                            for ky in 0..kh {
                                let ty = oy as i64 + i64::from(d.padding.top)
                                    - (ky * d.dilation_y as usize) as i64;
                                if ty < 0 || ty % i64::from(d.stride_y) != 0 {
                                    continue;
                                }
                                let iy = (ty / i64::from(d.stride_y)) as usize;
                                if iy >= h {
                                    continue;
                                }
                                for kx in 0..kw {
                                    let tx = ox as i64 + i64::from(d.padding.left)
                                        - (kx * d.dilation_x as usize) as i64;
                                    if tx < 0 || tx % i64::from(d.stride_x) != 0 {
                                        continue;
                                    }
                                    let ix = (tx / i64::from(d.stride_x)) as usize;
                                    if ix >= wd {
                                        continue;
                                    }
                                    acc += f64::from(x[((b * c + ci) * h + iy) * wd + ix])
                                        * f64::from(w[((ci * mg + j) * kh + ky) * kw + kx]);
                                }
                            }
                        }
                        out.push(acc);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_the_gather_form() {
        let mut rng = Lcg(41);
        let base = TransposeConvolution2dDescriptor {
            stride_x: 2,
            stride_y: 2,
            ..Default::default()
        };
        let cases = [
            (base.clone(), [1, 4, 3, 3], [4, 2, 2, 2]),
            (
                TransposeConvolution2dDescriptor {
                    padding: Padding2d {
                        top: 1,
                        left: 2,
                        bottom: 0,
                        right: 1,
                    },
                    stride_y: 3,
                    dilation_x: 2,
                    output_padding_y: 1,
                    bias_enabled: true,
                    ..base.clone()
                },
                [2, 3, 4, 5],
                [3, 2, 3, 3],
            ),
            (
                TransposeConvolution2dDescriptor {
                    groups: 2,
                    stride_x: 1,
                    output_padding_x: 0,
                    bias_enabled: true,
                    ..base.clone()
                },
                [1, 4, 3, 2],
                [4, 3, 2, 3],
            ),
        ];
        for (d, xs, ws) in cases {
            let u = |s: [usize; 4]| s.map(|v| v as u32);
            let os = shapes::transpose_convolution(&d, &u(xs), &u(ws)).unwrap();
            let os4 = [os[0], os[1], os[2], os[3]].map(|v| v as usize);
            let x = rng.vec(xs.iter().product());
            let w = rng.vec(ws.iter().product());
            let bias = rng.vec(os4[1]);
            let bs = [os[1]];
            let (xs32, ws32) = (u(xs), u(ws));
            let mut ins: Vec<(&[u32], &[f32])> = vec![(&xs32, &x), (&ws32, &w)];
            if d.bias_enabled {
                ins.push((&bs, &bias));
            }
            let got = run(
                &LayerDescriptor::TransposeConvolution2d(d.clone()),
                &ins,
                &os,
            );
            let want = oracle(&d, xs, &x, ws, &w, d.bias_enabled.then_some(&bias[..]), os4);
            assert_close(&got, &want, 1e-5, &format!("{d:?}"));
        }
    }
}
