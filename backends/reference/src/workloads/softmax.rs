//! Softmax along one axis (ONNX opset 13: each 1-D slice along `axis` is normalised on its
//! own), of `beta * x`, with the slice maximum subtracted before exponentiating.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc, shapes::normalize_axis,
};

use super::expect_counts;

/// Creates the workload of a `Softmax` layer (one input, one output of the same shape).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Softmax(d) = desc.layer else {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: not a Softmax layer",
            desc.name
        )));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let shape = desc.inputs[0].shape.to_vec();
    if desc.outputs[0].shape.as_slice() != shape.as_slice() {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: softmax of {} into {}",
            desc.name, desc.inputs[0], desc.outputs[0]
        )));
    }
    let axis = normalize_axis(i64::from(d.axis), shape.len())
        .map_err(|e| BackendError::invalid_argument(format!("layer {}: {e}", desc.name)))?;
    // Every partial product is at most the element count, once that is known not to overflow;
    // an empty tensor needs none of them.
    if !shape.contains(&0) && desc.inputs[0].num_elements().is_none() {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: {} has too many elements",
            desc.name, desc.inputs[0]
        )));
    }
    let inner = if shape.contains(&0) {
        0
    } else {
        shape[axis + 1..]
            .iter()
            .map(|&v| v as usize)
            .product::<usize>()
    };
    Ok(Box::new(SoftmaxWorkload {
        beta: d.beta,
        len: shape[axis] as usize,
        inner,
        shape,
    }))
}

/// Softmax of `beta * x` along one axis; the tensor is viewed as `[outer, len, inner]`,
/// `outer` being the product of the dimensions before the axis.
#[derive(Debug)]
pub struct SoftmaxWorkload {
    beta: f32,
    shape: Vec<u32>,
    /// The axis' size.
    len: usize,
    /// Product of the dimensions after the axis (the stride of the axis).
    inner: usize,
}

impl SoftmaxWorkload {
    /// The innermost axis: each contiguous row of `len` is one softmax.
    fn rows(&self, src: &[f32], dst: &mut [f32]) {
        let beta = self.beta;
        for (x, y) in src
            .chunks_exact(self.len)
            .zip(dst.chunks_exact_mut(self.len))
        {
            let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(beta * v));
            let mut sum = 0f64;
            for (o, &v) in y.iter_mut().zip(x) {
                *o = (beta * v - max).exp();
                sum += f64::from(*o);
            }
            let scale = (1.0 / sum) as f32;
            y.iter_mut().for_each(|o| *o *= scale);
        }
    }

    /// An outer axis: `inner` softmaxes at once per block, walking contiguous rows of `inner`.
    fn blocks(&self, src: &[f32], dst: &mut [f32]) {
        let (beta, inner) = (self.beta, self.inner);
        let block = self.len * inner;
        let mut max = vec![0f32; inner];
        let mut sum = vec![0f64; inner];
        for (x, y) in src.chunks_exact(block).zip(dst.chunks_exact_mut(block)) {
            max.fill(f32::NEG_INFINITY);
            for row in x.chunks_exact(inner) {
                for (m, &v) in max.iter_mut().zip(row) {
                    *m = m.max(beta * v);
                }
            }
            sum.fill(0.0);
            for (xr, yr) in x.chunks_exact(inner).zip(y.chunks_exact_mut(inner)) {
                for (((o, &v), &m), s) in yr.iter_mut().zip(xr).zip(&max).zip(sum.iter_mut()) {
                    *o = (beta * v - m).exp();
                    *s += f64::from(*o);
                }
            }
            // Reuse `max` for the reciprocals.
            for (m, &s) in max.iter_mut().zip(&sum) {
                *m = (1.0 / s) as f32;
            }
            for yr in y.chunks_exact_mut(inner) {
                for (o, &r) in yr.iter_mut().zip(&max) {
                    *o *= r;
                }
            }
        }
    }
}

impl Workload for SoftmaxWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), 1, 1)?;
        if inputs[0].info.shape.as_slice() != self.shape.as_slice()
            || outputs[0].info.shape.as_slice() != self.shape.as_slice()
        {
            return Err(BackendError::invalid_argument(format!(
                "softmax of {} into {}, the workload was created for {:?}",
                inputs[0].info, outputs[0].info, self.shape
            )));
        }
        let src = inputs[0].as_f32()?;
        let dst = outputs[0].as_f32_mut()?;
        if dst.is_empty() {
            return Ok(());
        }
        if self.inner == 1 {
            self.rows(src, dst);
        } else {
            self.blocks(src, dst);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        DataType, ErrorCode, ROption, RSlice, RStr, SoftmaxDescriptor, TensorInfo, WorkloadFactory,
        bytemuck,
    };

    use super::*;
    use crate::workload_factory::CpuRefWorkloadFactory;

    /// A deterministic pseudo-random sequence in `[lo, hi)`.
    fn lcg(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let u = (s >> 40) as f32 / (1u64 << 24) as f32;
                lo + (hi - lo) * u
            })
            .collect()
    }

    /// Builds the workload through the factory (layer support included) and runs it on `x`;
    /// the output starts as NaN so an unwritten element fails every comparison.
    fn run(beta: f32, axis: i32, shape: &[u32], x: &[f32]) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Softmax(SoftmaxDescriptor { beta, axis });
        let ins = [TensorInfo::new(shape, DataType::Float32)];
        let outs = [TensorInfo::new(shape, DataType::Float32)];
        let constants = [ROption::RNone];
        let desc = WorkloadDesc {
            name: RStr::from("softmax"),
            layer: &layer,
            inputs: RSlice::from_slice(&ins),
            outputs: RSlice::from_slice(&outs),
            constants: RSlice::from_slice(&constants),
        };
        let w = CpuRefWorkloadFactory.create_workload(&desc)?;
        let mut out = vec![f32::NAN; x.len()];
        let views = [TensorView::new(&ins[0], bytemuck::cast_slice(x))];
        let mut ov = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        w.execute(&views, &mut ov)?;
        Ok(out)
    }

    /// Row-major multi-index of flat index `i`.
    fn unravel(mut i: usize, shape: &[u32]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d] as usize;
            i /= shape[d] as usize;
        }
        idx
    }

    /// Flat index of a row-major multi-index.
    fn ravel(idx: &[usize], shape: &[u32]) -> usize {
        idx.iter()
            .zip(shape)
            .fold(0, |acc, (&i, &d)| acc * d as usize + i)
    }

    /// The definition, in f64: for every element, the exponentials of its whole slice along
    /// `axis` (found by varying that coordinate), with the slice maximum subtracted.
    fn oracle(beta: f32, axis: usize, shape: &[u32], x: &[f32]) -> Vec<f64> {
        let beta = f64::from(beta);
        (0..x.len())
            .map(|i| {
                let idx = unravel(i, shape);
                let slice: Vec<f64> = (0..shape[axis] as usize)
                    .map(|k| {
                        let mut j = idx.clone();
                        j[axis] = k;
                        beta * f64::from(x[ravel(&j, shape)])
                    })
                    .collect();
                let m = slice.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let denom: f64 = slice.iter().map(|v| (v - m).exp()).sum();
                (beta * f64::from(x[i]) - m).exp() / denom
            })
            .collect()
    }

    fn assert_close(got: &[f32], want: &[f64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let g = f64::from(g);
            assert!(
                (g - w).abs() <= 1e-6 * (1.0 + w.abs()),
                "{what}: element {i}: got {g}, want {w}"
            );
        }
    }

    /// Every slice along `axis` sums to 1.
    fn assert_slices_sum_to_one(got: &[f32], axis: usize, shape: &[u32], what: &str) {
        for i in 0..got.len() {
            let idx = unravel(i, shape);
            if idx[axis] != 0 {
                continue;
            }
            let s: f64 = (0..shape[axis] as usize)
                .map(|k| {
                    let mut j = idx.clone();
                    j[axis] = k;
                    f64::from(got[ravel(&j, shape)])
                })
                .sum();
            assert!(
                (s - 1.0).abs() <= 1e-6,
                "{what}: slice at {idx:?} sums to {s}"
            );
        }
    }

    /// Axis 0, 1, -1 (and -2, -3) of 3-D tensors, beta 1 and others, against the oracle.
    #[test]
    fn matches_oracle_on_every_axis() {
        let shapes: [&[u32]; 3] = [&[3, 4, 5], &[2, 7, 1], &[1, 3, 16]];
        let mut seed = 1;
        for shape in shapes {
            for axis in [0, 1, 2, -1, -2, -3] {
                for beta in [1.0f32, 0.5, 2.5, -1.0, 0.0] {
                    seed += 1;
                    let n = shape.iter().product::<u32>() as usize;
                    let x = lcg(seed, n, -6.0, 6.0);
                    let got = run(beta, axis, shape, &x).unwrap();
                    let a = normalize_axis(i64::from(axis), 3).unwrap();
                    let what = format!("shape {shape:?} axis {axis} beta {beta}");
                    assert_close(&got, &oracle(beta, a, shape, &x), &what);
                    assert_slices_sum_to_one(&got, a, shape, &what);
                }
            }
        }
    }

    /// Rank 1, 2 and 4, including a scalar-sized axis.
    #[test]
    fn other_ranks() {
        let cases: [(&[u32], i32); 5] = [
            (&[10], 0),
            (&[4, 6], 0),
            (&[4, 6], -1),
            (&[2, 3, 4, 5], 1),
            (&[2, 1, 3], 1),
        ];
        for (k, (shape, axis)) in cases.into_iter().enumerate() {
            let n = shape.iter().product::<u32>() as usize;
            let x = lcg(100 + k as u64, n, -3.0, 3.0);
            let got = run(1.3, axis, shape, &x).unwrap();
            let a = normalize_axis(i64::from(axis), shape.len()).unwrap();
            assert_close(
                &got,
                &oracle(1.3, a, shape, &x),
                &format!("{shape:?} axis {axis}"),
            );
        }
    }

    /// Huge inputs do not overflow (the maximum is subtracted), and small hand-written cases.
    #[test]
    fn stable_and_hand_written() {
        let got = run(1.0, -1, &[2, 2], &[1000.0, 1000.0, -1000.0, -1001.0]).unwrap();
        let e = (-1.0f64).exp();
        assert_close(&got, &[0.5, 0.5, 1.0 / (1.0 + e), e / (1.0 + e)], "large");
        let got = run(1.0, 0, &[2, 2], &[1000.0, 3.0, 1000.0, 3.0]).unwrap();
        assert_close(&got, &[0.5, 0.5, 0.5, 0.5], "large, axis 0");
        let got = run(1.0, 0, &[4], &[0.25; 4]).unwrap();
        assert_close(&got, &[0.25; 4], "uniform");
        // softmax(2 * [0, ln 3 / 2]) = [1/4, 3/4]
        let got = run(2.0, 0, &[2], &[0.0, 3f32.ln() / 2.0]).unwrap();
        assert_close(&got, &[0.25, 0.75], "beta 2");
        let got = run(-1.0, 0, &[2], &[0.0, 3f32.ln()]).unwrap();
        assert_close(&got, &[0.75, 0.25], "beta -1");
        // A negative beta turns very negative inputs into huge exponents.
        let got = run(-1.0, -1, &[2], &[-1000.0, -1001.0]).unwrap();
        assert_close(
            &got,
            &[e / (1.0 + e), 1.0 / (1.0 + e)],
            "beta -1, large, last axis",
        );
        let got = run(-1.0, 0, &[2, 2], &[-1000.0, -1.0, -1001.0, -1.0]).unwrap();
        assert_close(
            &got,
            &[e / (1.0 + e), 0.5, 1.0 / (1.0 + e), 0.5],
            "beta -1, large, axis 0",
        );
        for axis in [0, 1, 2] {
            assert_eq!(run(1.0, axis, &[2, 0, 3], &[]).unwrap(), Vec::<f32>::new());
        }
        let big = lcg(7, 3 * 9, 1e4, 3e4);
        let got = run(1.0, 1, &[3, 9], &big).unwrap();
        assert!(got.iter().all(|v| v.is_finite()));
        assert_slices_sum_to_one(&got, 1, &[3, 9], "big");
    }

    /// Out-of-range axes are refused at creation; bad tensors at execution are errors.
    #[test]
    fn bad_configurations_are_errors() {
        assert!(run(1.0, 3, &[2, 2, 2], &[0.0; 8]).is_err());
        assert!(run(1.0, -4, &[2, 2, 2], &[0.0; 8]).is_err());
        let layer = LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis: 1 });
        let ins = [TensorInfo::new(&[2, 3], DataType::Float32)];
        let constants = [ROption::RNone];
        let desc = WorkloadDesc {
            name: RStr::from("softmax"),
            layer: &layer,
            inputs: RSlice::from_slice(&ins),
            outputs: RSlice::from_slice(&ins),
            constants: RSlice::from_slice(&constants),
        };
        let w = create(&desc).unwrap();
        let x = [0f32; 6];
        let mut out = [0f32; 6];
        let mut ov = [TensorViewMut::new(
            &ins[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        let short = [TensorView::new(&ins[0], bytemuck::cast_slice(&x[..5]))];
        assert_eq!(
            w.execute(&short, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let other = TensorInfo::new(&[3, 2], DataType::Float32);
        let t = [TensorView::new(&other, bytemuck::cast_slice(&x))];
        assert_eq!(
            w.execute(&t, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let two = [TensorView::new(&ins[0], bytemuck::cast_slice(&x)); 2];
        assert_eq!(
            w.execute(&two, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }
}
