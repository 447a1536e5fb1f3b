//! BatchNormalization, inference form (ONNX `BatchNormalization` with `training_mode = 0`):
//! `y = scale * (x - mean) / sqrt(variance + epsilon) + bias` per channel. Inputs are
//! `[x, scale, bias, mean, variance]`; the channel axis is 1 for NCHW (any rank >= 2) and the
//! last axis for NHWC.

use backplane_api::{
    BackendError, BackendResult, DataLayout, LayerDescriptor, TensorInfo, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

use super::expect_counts;

/// Batch normalisation with statistics read at execution.
#[derive(Debug)]
pub struct BatchNormWorkload {
    epsilon: f32,
    /// Elements before the channel axis.
    outer: usize,
    /// Channels.
    channels: usize,
    /// Elements after the channel axis.
    inner: usize,
    /// Shapes of the five inputs and of the output, checked at execution.
    input_shapes: Vec<Vec<u32>>,
    output_shape: Vec<u32>,
}

fn check_shape(what: &str, info: &TensorInfo, expected: &[u32]) -> BackendResult<()> {
    if info.shape.as_slice() != expected {
        return Err(BackendError::invalid_argument(format!(
            "{what} has shape {:?}, the workload was created for {expected:?}",
            info.shape.as_slice()
        )));
    }
    Ok(())
}

/// Creates the workload of a `BatchNormalization` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let invalid = |m: String| BackendError::invalid_argument(format!("layer {}: {m}", desc.name));
    let LayerDescriptor::BatchNormalization(d) = desc.layer else {
        return Err(invalid(format!(
            "{} is not BatchNormalization",
            desc.layer.kind()
        )));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 5, 1)?;
    let x: Vec<usize> = desc.inputs[0].shape.iter().map(|&v| v as usize).collect();
    let axis = match d.layout {
        DataLayout::Nchw => 1,
        DataLayout::Nhwc => x.len().saturating_sub(1),
    };
    if x.len() < 2 || desc.outputs[0].shape != desc.inputs[0].shape {
        return Err(invalid(format!(
            "input {:?} must have rank >= 2 and equal the output {:?}",
            desc.inputs[0].shape.as_slice(),
            desc.outputs[0].shape.as_slice()
        )));
    }
    let channels = x[axis];
    if let Some(t) = desc.inputs[1..]
        .iter()
        .find(|t| t.shape.as_slice() != [channels as u32])
    {
        return Err(invalid(format!(
            "statistics must have shape [{channels}], got {:?}",
            t.shape.as_slice()
        )));
    }
    Ok(Box::new(BatchNormWorkload {
        epsilon: d.epsilon,
        outer: x[..axis].iter().product(),
        channels,
        inner: x[axis + 1..].iter().product(),
        input_shapes: desc.inputs.iter().map(|t| t.shape.to_vec()).collect(),
        output_shape: desc.outputs[0].shape.to_vec(),
    }))
}

impl Workload for BatchNormWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 5, 1)?;
        for (i, (view, shape)) in inputs.iter().zip(&self.input_shapes).enumerate() {
            check_shape(&format!("input {i}"), view.info, shape)?;
        }
        check_shape("output 0", outputs[0].info, &self.output_shape)?;
        let x = inputs[0].as_f32()?;
        let (scale, bias, mean, var) = (
            inputs[1].as_f32()?,
            inputs[2].as_f32()?,
            inputs[3].as_f32()?,
            inputs[4].as_f32()?,
        );
        let out = outputs[0].as_f32_mut()?;
        // y = (x - mean) * a + bias with a = scale / sqrt(var + epsilon), per channel.
        let eps = f64::from(self.epsilon);
        let factor: Vec<f32> = scale
            .iter()
            .zip(var)
            .map(|(&s, &v)| (f64::from(s) / (f64::from(v) + eps).sqrt()) as f32)
            .collect();
        let (c, inner) = (self.channels, self.inner);
        for o in 0..self.outer {
            let base = o * c * inner;
            if inner == 1 {
                // Channels last: contiguous over channels.
                let (x_row, y_row) = (&x[base..][..c], &mut out[base..][..c]);
                for ((((y, &xv), &a), &m), &b) in
                    y_row.iter_mut().zip(x_row).zip(&factor).zip(mean).zip(bias)
                {
                    *y = (xv - m) * a + b;
                }
            } else {
                for ch in 0..c {
                    let (a, m, b) = (factor[ch], mean[ch], bias[ch]);
                    let start = base + ch * inner;
                    for (y, &xv) in out[start..][..inner].iter_mut().zip(&x[start..][..inner]) {
                        *y = (xv - m) * a + b;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        BatchNormalizationDescriptor, DataType, ROption, RSlice, RStr, WorkloadFactory, bytemuck,
    };

    use super::*;
    use crate::workload_factory::CpuRefWorkloadFactory;

    /// A deterministic generator of values in `[-1, 1)`.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> f32 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }

        fn vec(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| self.next()).collect()
        }
    }

    fn f32t(shape: &[u32]) -> TensorInfo {
        TensorInfo::new(shape, DataType::Float32)
    }

    fn make(
        layer: &LayerDescriptor,
        inputs: &[TensorInfo],
        outputs: &[TensorInfo],
    ) -> BackendResult<Box<dyn Workload>> {
        let constants = vec![ROption::RNone; inputs.len()];
        let desc = WorkloadDesc {
            name: RStr::from("bn"),
            layer,
            inputs: RSlice::from_slice(inputs),
            outputs: RSlice::from_slice(outputs),
            constants: RSlice::from_slice(&constants),
        };
        CpuRefWorkloadFactory.create_workload(&desc)
    }

    /// Builds the workload through the factory and runs it on a NaN-filled output buffer.
    fn run(layer: &LayerDescriptor, inputs: &[(&[u32], &[f32])]) -> Vec<f32> {
        let infos: Vec<TensorInfo> = inputs.iter().map(|(s, _)| f32t(s)).collect();
        let out_info = [infos[0].clone()];
        let workload = make(layer, &infos, &out_info).unwrap();
        let views: Vec<TensorView<'_>> = infos
            .iter()
            .zip(inputs)
            .map(|(info, (_, data))| TensorView::new(info, bytemuck::cast_slice(data)))
            .collect();
        let mut out = vec![f32::NAN; out_info[0].num_elements().unwrap()];
        workload
            .execute(
                &views,
                &mut [TensorViewMut::new(
                    &out_info[0],
                    bytemuck::cast_slice_mut(&mut out),
                )],
            )
            .unwrap();
        out
    }

    fn assert_close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "element {i}: got {a}, want {b}"
            );
        }
    }

    /// Statistics for `c` channels: scale, bias, mean in `[-1, 1)`, variance in `[0.1, 2)`.
    fn stats(rng: &mut Lcg, c: usize) -> [Vec<f32>; 4] {
        let var = rng.vec(c).iter().map(|v| 1.05 + 0.95 * v).collect();
        [rng.vec(c), rng.vec(c), rng.vec(c), var]
    }

    /// The ONNX formula elementwise, in f64, with the channel of flat index `i` given by `channel`.
    fn oracle(
        x: &[f32],
        [s, b, m, v]: &[Vec<f32>; 4],
        eps: f32,
        channel: impl Fn(usize) -> usize,
    ) -> Vec<f32> {
        let f = |t: &[f32], c: usize| f64::from(t[c]);
        (0..x.len())
            .map(|i| {
                let c = channel(i);
                let y = f(s, c) * (f64::from(x[i]) - f(m, c)) / (f(v, c) + f64::from(eps)).sqrt()
                    + f(b, c);
                y as f32
            })
            .collect()
    }

    fn layer(layout: DataLayout, epsilon: f32) -> LayerDescriptor {
        LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor { epsilon, layout })
    }

    fn inputs<'a>(
        x: (&'a [u32], &'a [f32]),
        st: &'a [Vec<f32>; 4],
        c: &'a [u32; 1],
    ) -> Vec<(&'a [u32], &'a [f32])> {
        let mut v = vec![x];
        v.extend(st.iter().map(|t| (c.as_slice(), t.as_slice())));
        v
    }

    /// NCHW: channel axis 1 at ranks 2, 3, 4 and 5.
    #[test]
    fn nchw_channel_axis_one_at_any_rank() {
        for (seed, shape) in [
            &[3usize, 4][..],
            &[2, 3, 5],
            &[2, 3, 4, 5],
            &[1, 2, 3, 2, 2],
        ]
        .into_iter()
        .enumerate()
        {
            let mut rng = Lcg(seed as u64 + 1);
            let c = shape[1];
            let inner: usize = shape[2..].iter().product();
            let x = rng.vec(shape.iter().product());
            let st = stats(&mut rng, c);
            let want = oracle(&x, &st, 1e-5, |i| (i / inner) % c);
            let s: Vec<u32> = shape.iter().map(|&d| d as u32).collect();
            let got = run(
                &layer(DataLayout::Nchw, 1e-5),
                &inputs((&s, &x), &st, &[c as u32]),
            );
            assert_close(&got, &want);
        }
    }

    /// NHWC: the last axis is the channel, and the result is the transposed NCHW one.
    #[test]
    fn nhwc_channel_last_matches_transposed_nchw() {
        let (n, c, h, w) = (2, 3, 4, 5);
        let mut rng = Lcg(11);
        let x = rng.vec(n * c * h * w);
        let st = stats(&mut rng, c);
        let eps = 1e-3;
        let nchw = run(
            &layer(DataLayout::Nchw, eps),
            &inputs((&[2, 3, 4, 5], &x), &st, &[3]),
        );
        let mut xt = Vec::new();
        let mut want_t = Vec::new();
        for ni in 0..n {
            for yi in 0..h {
                for xi in 0..w {
                    for ci in 0..c {
                        xt.push(x[((ni * c + ci) * h + yi) * w + xi]);
                        want_t.push(nchw[((ni * c + ci) * h + yi) * w + xi]);
                    }
                }
            }
        }
        let nhwc = run(
            &layer(DataLayout::Nhwc, eps),
            &inputs((&[2, 4, 5, 3], &xt), &st, &[3]),
        );
        assert_close(&nhwc, &want_t);
        assert_close(&nhwc, &oracle(&xt, &st, eps, |i| i % c));
        // Rank 2 NHWC: [N, C], the channel is still the last axis.
        let x2 = rng.vec(4 * 3);
        let got = run(
            &layer(DataLayout::Nhwc, eps),
            &inputs((&[4, 3], &x2), &st, &[3]),
        );
        assert_close(&got, &oracle(&x2, &st, eps, |i| i % c));
    }

    /// A hand-computed value pins the formula: scale 2, bias 1, mean 3, var 3, eps 1 at x 7
    /// gives 2 * (7 - 3) / 2 + 1 = 5.
    #[test]
    fn hand_computed() {
        let st = [vec![2.0], vec![1.0], vec![3.0], vec![3.0]];
        let got = run(
            &layer(DataLayout::Nchw, 1.0),
            &inputs((&[1, 1, 1, 2], &[7.0, 3.0]), &st, &[1]),
        );
        assert_eq!(got, [5.0, 1.0]);
    }

    /// Wrong tensor counts or shapes at execution are errors, not panics.
    #[test]
    fn rejects_mismatched_tensors() {
        let l = layer(DataLayout::Nchw, 1e-5);
        let infos = [
            f32t(&[1, 2, 2]),
            f32t(&[2]),
            f32t(&[2]),
            f32t(&[2]),
            f32t(&[2]),
        ];
        let out_info = f32t(&[1, 2, 2]);
        let workload = make(&l, &infos, std::slice::from_ref(&out_info)).unwrap();
        let (x, s) = ([0f32; 4], [1f32; 2]);
        let mut y = [0f32; 4];
        let mut views: Vec<TensorView<'_>> =
            vec![TensorView::new(&infos[0], bytemuck::cast_slice(&x))];
        views.extend(
            infos[1..]
                .iter()
                .map(|i| TensorView::new(i, bytemuck::cast_slice(&s))),
        );
        let mut out = [TensorViewMut::new(
            &out_info,
            bytemuck::cast_slice_mut(&mut y),
        )];
        assert!(workload.execute(&views[..4], &mut out).is_err());
        let other = f32t(&[1, 4]);
        let mut odd = views.clone();
        odd[0] = TensorView::new(&other, bytemuck::cast_slice(&x));
        assert!(workload.execute(&odd, &mut out).is_err());
        assert!(workload.execute(&views, &mut out).is_ok());
        // Statistics of the wrong length are refused by layer support.
        let mut bad = infos.clone();
        bad[3] = f32t(&[4]);
        assert!(make(&l, &bad, &[out_info]).is_err());
    }
}
