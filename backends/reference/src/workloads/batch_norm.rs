//! BatchNormalization, inference form (ONNX `BatchNormalization` with `training_mode = 0`):
//! `y = scale * (x - mean) / sqrt(variance + epsilon) + bias` per channel. Inputs are
//! `[x, scale, bias, mean, variance]`; the channel axis is 1 for NCHW (any rank >= 2) and the
//! last axis for NHWC. Float32 or Float64 (every tensor of one type).

use backplane_api::{
    BackendResult, DataLayout, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::{ExpectedShapes, expect_counts, float_workload, invalid_layer};

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
    shapes: ExpectedShapes,
}

/// Creates the workload of a `BatchNormalization` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::BatchNormalization(d) = desc.layer else {
        return Err(invalid_layer(
            desc,
            format_args!("{} is not BatchNormalization", desc.layer.kind()),
        ));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 5, 1)?;
    let x: Vec<usize> = desc.inputs[0].shape.iter().map(|&v| v as usize).collect();
    let axis = match d.layout {
        DataLayout::Nchw => 1,
        DataLayout::Nhwc => x.len().saturating_sub(1),
    };
    if x.len() < 2 || desc.outputs[0].shape != desc.inputs[0].shape {
        return Err(invalid_layer(
            desc,
            format_args!(
                "input {:?} must have rank >= 2 and equal the output {:?}",
                desc.inputs[0].shape.as_slice(),
                desc.outputs[0].shape.as_slice()
            ),
        ));
    }
    let channels = x[axis];
    if let Some(t) = desc.inputs[1..]
        .iter()
        .find(|t| t.shape.as_slice() != [channels as u32])
    {
        return Err(invalid_layer(
            desc,
            format_args!(
                "statistics must have shape [{channels}], got {:?}",
                t.shape.as_slice()
            ),
        ));
    }
    Ok(Box::new(BatchNormWorkload {
        epsilon: d.epsilon,
        outer: x[..axis].iter().product(),
        channels,
        inner: x[axis + 1..].iter().product(),
        shapes: ExpectedShapes::of(desc),
    }))
}

impl BatchNormWorkload {
    /// The normalisation in `T` (`f32` or `f64`, the tensors' type), each channel's factor
    /// computed in f64.
    fn run<T>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()>
    where
        T: backplane_api::Element + num_traits::Float + Into<f64>,
    {
        let x = inputs[0].as_slice::<T>()?;
        let (scale, bias, mean, var) = (
            inputs[1].as_slice::<T>()?,
            inputs[2].as_slice::<T>()?,
            inputs[3].as_slice::<T>()?,
            inputs[4].as_slice::<T>()?,
        );
        let out = outputs[0].as_mut_slice::<T>()?;
        // y = (x - mean) * a + bias with a = scale / sqrt(var + epsilon), per channel.
        let eps = f64::from(self.epsilon);
        let factor: Vec<T> = scale
            .iter()
            .zip(var)
            .map(|(&s, &v)| T::from(s.into() / (v.into() + eps).sqrt()).unwrap_or_else(T::nan))
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

float_workload!(BatchNormWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::{BatchNormalizationDescriptor, TensorInfo};

    use super::*;
    use crate::workloads::test_support::{
        self, Lcg, assert_close, execute, f32t, make, to_nhwc, u32s,
    };

    /// Runs `layer` through the factory; the output has the shape of `x`, the first input.
    fn run(layer: &LayerDescriptor, inputs: &[(&[u32], &[f32])]) -> Vec<f32> {
        test_support::run(layer, inputs, inputs[0].0)
    }

    /// Relative tolerance of the comparisons with the oracle.
    const REL_TOL: f32 = 1e-5;

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
            let s = u32s(shape);
            let got = run(
                &layer(DataLayout::Nchw, 1e-5),
                &inputs((&s, &x), &st, &[c as u32]),
            );
            assert_close(&got, &want, REL_TOL, "nchw");
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
        let xt = to_nhwc(&x, [n, c, h, w]);
        let want_t = to_nhwc(&nchw, [n, c, h, w]);
        let nhwc = run(
            &layer(DataLayout::Nhwc, eps),
            &inputs((&[2, 4, 5, 3], &xt), &st, &[3]),
        );
        assert_close(&nhwc, &want_t, REL_TOL, "nhwc vs transposed nchw");
        assert_close(&nhwc, &oracle(&xt, &st, eps, |i| i % c), REL_TOL, "nhwc");
        // Rank 2 NHWC: [N, C], the channel is still the last axis.
        let x2 = rng.vec(4 * 3);
        let got = run(
            &layer(DataLayout::Nhwc, eps),
            &inputs((&[4, 3], &x2), &st, &[3]),
        );
        assert_close(
            &got,
            &oracle(&x2, &st, eps, |i| i % c),
            REL_TOL,
            "rank 2 nhwc",
        );
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
        let mut views: Vec<(&TensorInfo, &[f32])> = vec![(&infos[0], &x)];
        views.extend(infos[1..].iter().map(|i| (i, &s[..])));
        assert!(execute(&*workload, &views[..4], &out_info, &mut y).is_err());
        let other = f32t(&[1, 4]);
        let mut odd = views.clone();
        odd[0] = (&other, &x);
        assert!(execute(&*workload, &odd, &out_info, &mut y).is_err());
        assert!(execute(&*workload, &views, &out_info, &mut y).is_ok());
        // Statistics of the wrong length are refused by layer support.
        let mut bad = infos.clone();
        bad[3] = f32t(&[4]);
        assert!(make(&l, &bad, &[out_info]).is_err());
    }
}
