//! Concat: N inputs joined along one axis (ONNX `Concat`).
//!
//! Each tensor is viewed as `[outer, chunk]`, where `outer` is the product of the dimensions
//! before the axis (the same for every input and the output) and `chunk` the contiguous rest;
//! an output row is the inputs' rows one after another.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use backplane_api::bytemuck;

use super::{
    ExpectedShapes, expect_counts, inner_size, invalid_layer, moving_workload, raw, raw_mut,
};

/// Creates the workload of a `Concat` layer (N >= 1 inputs, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Concat(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Concat layer"));
    };
    if desc.inputs.is_empty() {
        return Err(invalid_layer(desc, "Concat needs at least one input"));
    }
    expect_counts(desc.inputs.len(), desc.outputs.len(), desc.inputs.len(), 1)?;
    let out = desc.outputs[0].shape.as_slice();
    let axis = d.axis as usize;
    let bad = || {
        invalid_layer(
            desc,
            format_args!(
                "inputs do not concatenate into {} along axis {axis}",
                desc.outputs[0]
            ),
        )
    };
    if axis >= out.len() {
        return Err(bad());
    }
    let mut total = 0usize;
    for t in desc.inputs.iter() {
        let s = t.shape.as_slice();
        if s.len() != out.len() || s[..axis] != out[..axis] || s[axis + 1..] != out[axis + 1..] {
            return Err(bad());
        }
        total += s[axis] as usize;
    }
    if total != out[axis] as usize {
        return Err(bad());
    }
    // Every product below is at most the output's element count, which `inner_size` has
    // checked does not overflow (and `inner` is 0 for an empty output).
    let inner = inner_size(desc, &desc.outputs[0], axis)?;
    Ok(Box::new(ConcatWorkload {
        shapes: ExpectedShapes::of(desc),
        chunks: desc
            .inputs
            .iter()
            .map(|t| t.shape[axis] as usize * inner)
            .collect(),
        row: out[axis] as usize * inner,
    }))
}

/// Copies N inputs, row by row, into one output.
#[derive(Debug)]
pub struct ConcatWorkload {
    shapes: ExpectedShapes,
    /// Elements of input `i` per outer index.
    chunks: Vec<usize>,
    /// Elements of the output per outer index (the sum of `chunks`): one output row per
    /// product of the dimensions before the axis.
    row: usize,
}

impl ConcatWorkload {
    /// Moves the elements, as `T` (see [`raw`]).
    fn run<T: bytemuck::Pod>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let srcs = inputs
            .iter()
            .map(raw::<T>)
            .collect::<BackendResult<Vec<_>>>()?;
        let dst = raw_mut::<T>(&mut outputs[0])?;
        if self.row == 0 {
            // No elements.
            return Ok(());
        }
        for (o, out_row) in dst.chunks_exact_mut(self.row).enumerate() {
            let mut at = 0;
            for (src, &c) in srcs.iter().zip(&self.chunks) {
                out_row[at..at + c].copy_from_slice(&src[o * c..(o + 1) * c]);
                at += c;
            }
        }
        Ok(())
    }
}

moving_workload!(ConcatWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::ConcatDescriptor;

    use super::*;
    use crate::workloads::test_support::{
        Lcg, assert_invalid_argument, desc, execute, f32t, numel, try_run,
    };

    /// Runs the concatenation of `inputs` along `axis` into `out_shape` through the factory.
    fn run(axis: u32, inputs: &[(&[u32], &[f32])], out_shape: &[u32]) -> BackendResult<Vec<f32>> {
        try_run(
            &LayerDescriptor::Concat(ConcatDescriptor { axis }),
            inputs,
            out_shape,
        )
    }

    /// The definition by index arithmetic: output element at multi-index `idx` comes from the
    /// input whose range along `axis` holds `idx[axis]`, at the offset coordinate.
    fn oracle(axis: usize, inputs: &[(&[u32], &[f32])], out_shape: &[u32]) -> Vec<f32> {
        (0..numel(out_shape))
            .map(|flat| {
                let mut rest = flat;
                let mut idx = vec![0usize; out_shape.len()];
                for d in (0..out_shape.len()).rev() {
                    idx[d] = rest % out_shape[d] as usize;
                    rest /= out_shape[d] as usize;
                }
                let mut start = 0;
                for (shape, x) in inputs {
                    let size = shape[axis] as usize;
                    if idx[axis] < start + size {
                        idx[axis] -= start;
                        let off = shape
                            .iter()
                            .zip(&idx)
                            .fold(0, |acc, (&s, &i)| acc * s as usize + i);
                        return x[off];
                    }
                    start += size;
                }
                unreachable!("index {idx:?} outside every input")
            })
            .collect()
    }

    /// Three inputs on the first, middle and last axis of 3-D and 4-D tensors.
    #[test]
    fn three_inputs_match_oracle() {
        let base: [u32; 4] = [2, 3, 4, 5];
        let mut seed = 0;
        for rank in [3usize, 4] {
            for axis in 0..rank {
                for sizes in [[1u32, 2, 3], [3, 1, 1], [2, 0, 4]] {
                    let shapes: Vec<Vec<u32>> = sizes
                        .iter()
                        .map(|&n| {
                            let mut s = base[..rank].to_vec();
                            s[axis] = n;
                            s
                        })
                        .collect();
                    let data: Vec<Vec<f32>> = shapes
                        .iter()
                        .map(|s| {
                            seed += 1;
                            Lcg(seed).vec_in(numel(s), -10.0, 10.0)
                        })
                        .collect();
                    let inputs: Vec<(&[u32], &[f32])> = shapes
                        .iter()
                        .zip(&data)
                        .map(|(s, x)| (s.as_slice(), x.as_slice()))
                        .collect();
                    let mut out_shape = base[..rank].to_vec();
                    out_shape[axis] = sizes.iter().sum();
                    let got = run(axis as u32, &inputs, &out_shape).unwrap();
                    let want = oracle(axis, &inputs, &out_shape);
                    // A copy: bit-exact.
                    assert_eq!(got, want, "rank {rank} axis {axis} sizes {sizes:?}");
                }
            }
        }
    }

    /// Small hand-written cases, and a single input.
    #[test]
    fn hand_written() {
        let a: &[f32] = &[1.0, 2.0, 3.0, 4.0];
        let b: &[f32] = &[5.0, 6.0];
        let got = run(0, &[(&[2, 2], a), (&[1, 2], b)], &[3, 2]).unwrap();
        assert_eq!(got, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let got = run(1, &[(&[2, 2], a), (&[2, 1], b)], &[2, 3]).unwrap();
        assert_eq!(got, [1.0, 2.0, 5.0, 3.0, 4.0, 6.0]);
        let got = run(0, &[(&[4], a)], &[4]).unwrap();
        assert_eq!(got, a);
        let got = run(0, &[(&[2, 0], &[]), (&[1, 0], &[])], &[3, 0]).unwrap();
        assert_eq!(got, Vec::<f32>::new());
    }

    /// Mismatched shapes are refused at creation; bad tensors at execution are errors.
    #[test]
    fn bad_configurations_are_errors() {
        let a: &[f32] = &[0.0; 6];
        assert!(run(1, &[(&[2, 3], a), (&[3, 2], a)], &[2, 5]).is_err());
        assert!(run(2, &[(&[2, 3], a), (&[2, 3], a)], &[2, 6]).is_err());
        assert!(run(1, &[(&[2, 3], a), (&[2, 3], a)], &[2, 5]).is_err());
        let layer = LayerDescriptor::Concat(ConcatDescriptor { axis: 0 });
        let ins = [f32t(&[3]), f32t(&[3])];
        let outs = [f32t(&[6])];
        let w = create(&desc(&layer, &ins, &outs)).unwrap();
        let x = [1f32; 3];
        let mut out = [0f32; 6];
        let one = [(&ins[0], &x[..])];
        assert_invalid_argument(execute(&*w, &one, &outs[0], &mut out));
        let short = [(&ins[0], &x[..]), (&ins[1], &x[..2])];
        assert_invalid_argument(execute(&*w, &short, &outs[0], &mut out));
        let other = f32t(&[1, 3]);
        let wrong = [(&ins[0], &x[..]), (&other, &x[..])];
        assert_invalid_argument(execute(&*w, &wrong, &outs[0], &mut out));
    }
}
