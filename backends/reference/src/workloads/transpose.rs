//! Transpose: output dimension `i` is input dimension `permutation[i]` (ONNX `Transpose`), any
//! rank.
//!
//! At creation the output's dimensions are paired with their input strides, size-1 dimensions
//! dropped and dimensions that stay adjacent in the input merged, so an identity (or
//! size-1-only) permutation becomes one copy and `[0, 2, 3, 1]` on NCHW a 2-D transpose per
//! batch. Execution walks the output in order, the innermost dimension as a tight loop (a
//! slice copy when its input stride is 1).

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use backplane_api::bytemuck;

use super::{
    ExpectedShapes, checked_num_elements, expect_counts, invalid_layer, moving_workload, raw,
    raw_mut,
};

/// Creates the workload of a `Transpose` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Transpose(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Transpose layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let input = desc.inputs[0].shape.as_slice();
    let output = desc.outputs[0].shape.as_slice();
    let rank = input.len();
    let perm: Vec<usize> = d.permutation.iter().map(|&p| p as usize).collect();
    let mut seen = vec![false; rank];
    let is_perm = perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if !is_perm || output.iter().zip(&perm).any(|(&o, &p)| o != input[p]) || output.len() != rank {
        return Err(invalid_layer(
            desc,
            format_args!(
                "permutation {:?} does not map {} to {}",
                d.permutation.as_slice(),
                desc.inputs[0],
                desc.outputs[0]
            ),
        ));
    }
    let shapes = ExpectedShapes::of(desc);
    // An empty tensor has nothing to move (and its other dimensions may be anything).
    let numel = checked_num_elements(desc, &desc.inputs[0])?;
    if numel == 0 {
        return Ok(Box::new(TransposeWorkload {
            shapes,
            numel: 0,
            dims: Vec::new(),
        }));
    }
    // Row-major input strides (every product at most `numel`).
    let mut strides = vec![0usize; rank];
    let mut acc = 1usize;
    for (s, &dim) in strides.iter_mut().zip(input).rev() {
        *s = acc;
        acc *= dim as usize;
    }
    // (size, input stride) per output dimension, simplified.
    let mut dims: Vec<(usize, usize)> = Vec::with_capacity(rank);
    for &p in &perm {
        let (size, stride) = (input[p] as usize, strides[p]);
        if size == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == stride * size => *last = (last.0 * size, stride),
            _ => dims.push((size, stride)),
        }
    }
    Ok(Box::new(TransposeWorkload {
        shapes,
        numel,
        dims,
    }))
}

/// Permutes the dimensions of one tensor.
#[derive(Debug)]
pub struct TransposeWorkload {
    shapes: ExpectedShapes,
    numel: usize,
    /// The output's dimensions, outermost first, as (size, input stride), without size-1
    /// dimensions and with dimensions contiguous in the input merged.
    dims: Vec<(usize, usize)>,
}

impl TransposeWorkload {
    /// Moves the elements, as `T` (see [`raw`]).
    fn run<T: bytemuck::Pod>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let src = raw::<T>(&inputs[0])?;
        let dst = raw_mut::<T>(&mut outputs[0])?;
        if self.numel == 0 {
            return Ok(());
        }
        let Some((&(n, step), outer)) = self.dims.split_last() else {
            // Only size-1 dimensions: one element.
            dst.copy_from_slice(src);
            return Ok(());
        };
        let mut idx = vec![0usize; outer.len()];
        let mut off = 0usize;
        for row in dst.chunks_exact_mut(n) {
            if step == 1 {
                row.copy_from_slice(&src[off..off + n]);
            } else {
                for (o, &x) in row.iter_mut().zip(src[off..].iter().step_by(step)) {
                    *o = x;
                }
            }
            // Next output row: an odometer over the outer dimensions.
            for (i, &(size, stride)) in idx.iter_mut().zip(outer).rev() {
                *i += 1;
                off += stride;
                if *i < size {
                    break;
                }
                *i = 0;
                off -= size * stride;
            }
        }
        Ok(())
    }
}

moving_workload!(TransposeWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::{RSlice, TransposeDescriptor};

    use super::*;
    use crate::workloads::test_support::{
        Lcg, assert_invalid_argument, desc, execute, f32t, numel, try_run,
    };

    /// Runs the transpose of `x` of `shape` by `perm` through the factory.
    fn run(perm: &[u32], shape: &[u32], x: &[f32]) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: perm.to_vec().into(),
        });
        let out_shape: Vec<u32> = perm
            .iter()
            .map(|&p| shape.get(p as usize).copied().unwrap_or(1))
            .collect();
        try_run(&layer, &[(shape, x)], &out_shape)
    }

    /// The definition by index arithmetic: `out[idx] = in[j]` with `j[perm[i]] = idx[i]`.
    fn oracle(perm: &[u32], shape: &[u32], x: &[f32]) -> Vec<f32> {
        let out_shape: Vec<u32> = perm.iter().map(|&p| shape[p as usize]).collect();
        (0..x.len())
            .map(|flat| {
                let mut rest = flat;
                let mut idx = vec![0usize; out_shape.len()];
                for d in (0..out_shape.len()).rev() {
                    idx[d] = rest % out_shape[d] as usize;
                    rest /= out_shape[d] as usize;
                }
                let mut j = vec![0usize; shape.len()];
                for (i, &p) in perm.iter().enumerate() {
                    j[p as usize] = idx[i];
                }
                let off = shape
                    .iter()
                    .zip(&j)
                    .fold(0, |acc, (&s, &v)| acc * s as usize + v);
                x[off]
            })
            .collect()
    }

    /// Every permutation of `0..n`, by Heap's algorithm.
    fn permutations(n: u32) -> Vec<Vec<u32>> {
        fn heap(k: usize, a: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
            if k <= 1 {
                out.push(a.clone());
                return;
            }
            for i in 0..k {
                heap(k - 1, a, out);
                let j = if k.is_multiple_of(2) { i } else { 0 };
                a.swap(j, k - 1);
            }
        }
        let mut out = Vec::new();
        heap(n as usize, &mut (0..n).collect(), &mut out);
        out
    }

    /// Rank 2, 3 and 4 with every permutation, on shapes with and without size-1 dimensions.
    #[test]
    fn every_permutation_matches_oracle() {
        let shapes: [&[u32]; 8] = [
            &[3, 5],
            &[1, 7],
            &[2, 3, 4],
            &[4, 1, 3],
            &[2, 3, 4, 5],
            &[1, 3, 4, 5],
            &[2, 1, 1, 3],
            &[3, 2, 5, 1],
        ];
        let mut seed = 0;
        for shape in shapes {
            let perms = permutations(shape.len() as u32);
            assert_eq!(perms.len(), (1..=shape.len()).product::<usize>());
            for perm in perms {
                seed += 1;
                let x = Lcg(seed).vec_in(numel(shape), -5.0, 5.0);
                let got = run(&perm, shape, &x).unwrap();
                assert_eq!(
                    got,
                    oracle(&perm, shape, &x),
                    "shape {shape:?} perm {perm:?}"
                );
            }
        }
    }

    /// Rank 0, 1 and 5, and empty tensors.
    #[test]
    fn other_ranks_and_empty() {
        assert_eq!(run(&[], &[], &[4.5]).unwrap(), [4.5]);
        assert_eq!(run(&[0], &[3], &[1.0, 2.0, 3.0]).unwrap(), [1.0, 2.0, 3.0]);
        let shape = [2, 3, 1, 2, 3];
        let x = Lcg(99).vec_in(numel(&shape), -1.0, 1.0);
        for perm in [[4, 3, 2, 1, 0], [0, 2, 4, 1, 3], [1, 0, 2, 4, 3]] {
            assert_eq!(
                run(&perm, &shape, &x).unwrap(),
                oracle(&perm, &shape, &x),
                "{perm:?}"
            );
        }
        assert_eq!(run(&[1, 0, 2], &[2, 0, 3], &[]).unwrap(), Vec::<f32>::new());
        // Empty, with other dimensions whose product overflows (kept after the 0 in the output:
        // `TensorInfo::num_elements` folds from the left).
        let huge = [0, u32::MAX, u32::MAX, u32::MAX];
        assert_eq!(run(&[0, 3, 2, 1], &huge, &[]).unwrap(), Vec::<f32>::new());
    }

    /// Small hand-written cases.
    #[test]
    fn hand_written() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(
            run(&[1, 0], &[2, 3], &x).unwrap(),
            [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        // NCHW [1, 2, 1, 3] to NHWC [1, 1, 3, 2].
        assert_eq!(
            run(&[0, 2, 3, 1], &[1, 2, 1, 3], &x).unwrap(),
            [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
        // [2, 3, 1] -> [1, 2, 3] is a plain copy.
        assert_eq!(run(&[2, 0, 1], &[2, 3, 1], &x).unwrap(), x);
    }

    /// Invalid permutations are refused at creation; bad tensors at execution are errors.
    #[test]
    fn bad_configurations_are_errors() {
        let x = [0f32; 6];
        assert!(run(&[0, 0], &[2, 3], &x).is_err());
        assert!(run(&[0, 2], &[2, 3], &x).is_err());
        assert!(run(&[0], &[2, 3], &x).is_err());
        let layer = LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: vec![1, 0].into(),
        });
        let ins = [f32t(&[2, 3])];
        let outs = [f32t(&[3, 2])];
        let desc = desc(&layer, &ins, &outs);
        let w = create(&desc).unwrap();
        let mut out = [0f32; 6];
        let short = [(&ins[0], &x[..4])];
        assert_invalid_argument(execute(&*w, &short, &outs[0], &mut out));
        let wrong = [(&outs[0], &x[..])];
        assert_invalid_argument(execute(&*w, &wrong, &outs[0], &mut out));
        assert_invalid_argument(execute(&*w, &[], &outs[0], &mut out));
        // A wrong output shape is refused at creation.
        let swapped = WorkloadDesc {
            outputs: RSlice::from_slice(&ins),
            ..desc
        };
        assert!(create(&swapped).is_err());
    }
}
