//! DeformableConvolution2d (Backend API 1.5; ONNX `DeformConv`): a grouped 2-D convolution
//! whose every tap reads the input at its place moved by a per-output offset, bilinearly
//! interpolated (elements outside the plane count as 0), and weighted by an optional mask.
//! Float32 or Float64; each output accumulated in f64 and rounded once on store.

use backplane_api::{
    BackendResult, DataType, DeformableConvolution2dDescriptor, LayerDescriptor, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, expect_rule_output, invalid_layer};

/// Creates the workload of a `DeformableConvolution2d` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::DeformableConvolution2d(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a DeformableConvolution2d layer"));
    };
    let n_in = 3 + usize::from(d.convolution.bias_enabled) + usize::from(d.mask_enabled);
    expect_counts(desc.inputs.len(), desc.outputs.len(), n_in, 1)?;
    let output = expect_rule_output(desc)?;
    let dims =
        |i: usize| -> Vec<usize> { desc.inputs[i].shape.iter().map(|&v| v as usize).collect() };
    let (x, w, y) = (dims(0), dims(1), &output.shape);
    Ok(Box::new(DeformableConvolutionWorkload {
        d: d.clone(),
        x: [x[0], x[1], x[2], x[3]],
        w: [w[0], w[1], w[2], w[3]],
        out: [y[2] as usize, y[3] as usize],
        data_type: desc.inputs[0].data_type,
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Runs one deformable convolution.
#[derive(Debug)]
pub struct DeformableConvolutionWorkload {
    d: DeformableConvolution2dDescriptor,
    /// `[n, c, h, w]`.
    x: [usize; 4],
    /// `[m, c / groups, kh, kw]`.
    w: [usize; 4],
    /// `[oh, ow]`.
    out: [usize; 2],
    data_type: DataType,
    shapes: ExpectedShapes,
}

/// `plane` (`h x w`) at real coordinates `(y, x)`: the four nearest elements weighted
/// bilinearly, each outside the plane counting as 0.
fn sample(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    let (y0, x0) = (y.floor(), x.floor());
    let (ly, lx) = (y - y0, x - x0);
    let mut v = 0.0;
    for (dy, wy) in [(0.0, 1.0 - ly), (1.0, ly)] {
        for (dx, wx) in [(0.0, 1.0 - lx), (1.0, lx)] {
            let (yy, xx) = (y0 + dy, x0 + dx);
            if yy >= 0.0 && xx >= 0.0 && yy < h as f64 && xx < w as f64 {
                // Inside the plane: non-negative and below its extent.
                v += wy * wx * plane[yy as usize * w + xx as usize];
            }
        }
    }
    v
}

impl DeformableConvolutionWorkload {
    /// The output, in f64, from the inputs widened to f64 (`[x, w, offset, bias?, mask?]`).
    fn run(&self, t: &[Vec<f64>]) -> Vec<f64> {
        let c = &self.d.convolution;
        let [n, ch, h, w] = self.x;
        let [m, cg, kh, kw] = self.w;
        let [oh, ow] = self.out;
        let groups = c.groups.max(1) as usize;
        let mg = m / groups;
        let og = self.d.offset_groups as usize;
        let per_offset_group = ch / og;
        let (x, weights, offset) = (&t[0], &t[1], &t[2]);
        let bias = c.bias_enabled.then(|| &t[3]);
        let mask = self.d.mask_enabled.then(|| &t[t.len() - 1]);
        let at = |b: usize, k: usize, i: usize, j: usize, channels: usize| {
            ((b * channels + k) * oh + i) * ow + j
        };
        let mut y = vec![0f64; n * m * oh * ow];
        for b in 0..n {
            for o in 0..m {
                let group = o / mg;
                for i in 0..oh {
                    for j in 0..ow {
                        let mut sum = bias.map_or(0.0, |bias| bias[o]);
                        for ic in 0..cg {
                            let cin = group * cg + ic;
                            let g = cin / per_offset_group;
                            let plane = &x[(b * ch + cin) * h * w..][..h * w];
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let tap = (g * kh + ky) * kw + kx;
                                    let dy = offset[at(b, tap * 2, i, j, og * 2 * kh * kw)];
                                    let dx = offset[at(b, tap * 2 + 1, i, j, og * 2 * kh * kw)];
                                    let py = (i * c.stride_y as usize + ky * c.dilation_y as usize)
                                        as f64
                                        - f64::from(c.padding.top)
                                        + dy;
                                    let px = (j * c.stride_x as usize + kx * c.dilation_x as usize)
                                        as f64
                                        - f64::from(c.padding.left)
                                        + dx;
                                    let scale = mask
                                        .map_or(1.0, |mask| mask[at(b, tap, i, j, og * kh * kw)]);
                                    let wv = weights[((o * cg + ic) * kh + ky) * kw + kx];
                                    sum += wv * scale * sample(plane, h, w, py, px);
                                }
                            }
                        }
                        y[((b * m + o) * oh + i) * ow + j] = sum;
                    }
                }
            }
        }
        y
    }
}

impl Workload for DeformableConvolutionWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        if self.data_type == DataType::Float64 {
            let wide: Vec<Vec<f64>> = inputs
                .iter()
                .map(|t| t.as_slice::<f64>().map(<[f64]>::to_vec))
                .collect::<BackendResult<_>>()?;
            outputs[0]
                .as_mut_slice::<f64>()?
                .copy_from_slice(&self.run(&wide));
        } else {
            let wide: Vec<Vec<f64>> = inputs
                .iter()
                .map(|t| {
                    t.as_f32()
                        .map(|v| v.iter().map(|&v| f64::from(v)).collect())
                })
                .collect::<BackendResult<_>>()?;
            let y = self.run(&wide);
            for (o, v) in outputs[0].as_f32_mut()?.iter_mut().zip(y) {
                // Rounded once to the output's type.
                #[allow(clippy::cast_possible_truncation)]
                // reason: the result is an f32 tensor's value, rounded to nearest
                {
                    *o = v as f32;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        Convolution2dDescriptor, DataType, DeformableConvolution2dDescriptor, LayerDescriptor,
        TensorInfo,
    };

    use crate::workloads::test_support::{Bytes, try_run_typed};

    /// A 1x1 kernel of 2 over a 2x2 plane [[1, 2], [3, 4]]: with zero offsets, 2x the input;
    /// with every offset (0.5, 0.5), each output reads the middle of its square: at (0, 0)
    /// (1 + 2 + 3 + 4) / 4 = 2.5, at (0, 1) (2 + 4) / 4 = 1.5 and at (1, 0) (3 + 4) / 4 = 1.75
    /// (the neighbours outside count 0), at (1, 1) 4 / 4 = 1; times 2. A mask of 0.5 halves
    /// that. Worked by hand.
    #[test]
    fn shifted_taps_by_hand() {
        let d = DeformableConvolution2dDescriptor {
            convolution: Convolution2dDescriptor::default(),
            offset_groups: 1,
            mask_enabled: false,
        };
        let f = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let run =
            |d: &DeformableConvolution2dDescriptor, offset: [f32; 8], mask: Option<[f32; 4]>| {
                let mut inputs = vec![
                    (f(&[1, 1, 2, 2]), Bytes::of(&x)),
                    (f(&[1, 1, 1, 1]), Bytes::of(&[2.0f32])),
                    (f(&[1, 2, 2, 2]), Bytes::of(&offset)),
                ];
                if let Some(m) = mask {
                    inputs.push((f(&[1, 1, 2, 2]), Bytes::of(&m)));
                }
                try_run_typed(
                    &LayerDescriptor::DeformableConvolution2d(d.clone()),
                    &inputs,
                    &f(&[1, 1, 2, 2]),
                )
                .unwrap()
                .to_vec::<f32>()
            };
        assert_eq!(run(&d, [0.0; 8], None), [2.0, 4.0, 6.0, 8.0]);
        // Offsets: channel 0 (dy) for every output, then channel 1 (dx).
        let half = [0.5f32; 8];
        assert_eq!(run(&d, half, None), [5.0, 3.0, 3.5, 2.0]);
        let masked = DeformableConvolution2dDescriptor {
            mask_enabled: true,
            ..d
        };
        assert_eq!(run(&masked, half, Some([0.5; 4])), [2.5, 1.5, 1.75, 1.0]);
    }
}
