//! Pad (every plain type; the 16-bit floats widened): one `(before, after)` pair per
//! dimension, filled with a constant (in the tensor's type, saturating), by reflection
//! without repeating the edge (numpy `'reflect'`, ONNX `reflect`) or by repeating the edge
//! (numpy and ONNX `'edge'`).
//!
//! Execution walks the output row by row (the innermost dimension). A row whose outer
//! coordinates all map into the input is the matching input row copied into the middle, with
//! its padded ends filled from the mode's source coordinates; any other row (constant mode
//! only) is all constant.

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, PadMode, TensorView, TensorViewMut,
    Workload, WorkloadDesc,
};

use super::numeric::by_integer_type;
use super::{ExpectedShapes, expect_counts, invalid_layer};

/// Creates the workload of a `Pad` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Pad(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Pad layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let input = desc.inputs[0].shape.as_slice();
    let output = desc.outputs[0].shape.as_slice();
    let bad = |why: String| {
        invalid_layer(
            desc,
            format_args!(
                "cannot pad {} into {}: {why}",
                desc.inputs[0], desc.outputs[0]
            ),
        )
    };
    if d.padding.len() != input.len() || output.len() != input.len() {
        return Err(bad(format!("{} padding pairs", d.padding.len())));
    }
    let mut dims = Vec::with_capacity(input.len());
    for (i, (p, (&n, &o))) in d.padding.iter().zip(input.iter().zip(output)).enumerate() {
        let (n, before, after) = (u64::from(n), u64::from(p.before), u64::from(p.after));
        if u64::from(o) != n + before + after {
            return Err(bad(format!("dimension {i} has the wrong size")));
        }
        let fits = match d.mode {
            PadMode::Constant => true,
            PadMode::Reflect => before < n && after < n,
            PadMode::Edge => n > 0 || before + after == 0,
        };
        if !fits {
            return Err(bad(format!(
                "{:?} padding of dimension {i} does not fit its size {n}",
                d.mode
            )));
        }
        dims.push(Dim {
            len: n as usize,
            before: p.before as usize,
            out: o as usize,
            stride: 0,
        });
    }
    // Row-major input strides.
    let mut acc = 1usize;
    for dim in dims.iter_mut().rev() {
        dim.stride = acc;
        acc = acc
            .checked_mul(dim.len)
            .ok_or_else(|| bad("too many elements".to_owned()))?;
    }
    // A scalar is one row of one element.
    let last = dims.last().copied().unwrap_or(Dim {
        len: 1,
        before: 0,
        out: 1,
        stride: 1,
    });
    Ok(Box::new(PadWorkload {
        shapes: ExpectedShapes::of(desc),
        dims,
        last,
        value: d.value,
        mode: d.mode,
    }))
}

/// One dimension of the input and the output.
#[derive(Debug, Clone, Copy)]
struct Dim {
    /// Input size.
    len: usize,
    /// Padding before.
    before: usize,
    /// Output size.
    out: usize,
    /// Input stride.
    stride: usize,
}

impl Dim {
    /// The input coordinate output coordinate `c` reads, `None` for the constant.
    /// Reflect and Edge padding fit the dimension (checked at creation), so one reflection
    /// suffices and the input is not empty.
    fn source(&self, mode: PadMode, c: usize) -> Option<usize> {
        let (n, before) = (self.len, self.before);
        if c >= before && c - before < n {
            return Some(c - before);
        }
        match mode {
            PadMode::Constant => None,
            PadMode::Edge if c < before => Some(0),
            PadMode::Edge => Some(n - 1),
            // -(c - before)
            PadMode::Reflect if c < before => Some(before - c),
            // 2 (n - 1) - (c - before)
            PadMode::Reflect => Some(2 * (n - 1) + before - c),
        }
    }
}

/// Pads one tensor.
#[derive(Debug)]
pub struct PadWorkload {
    shapes: ExpectedShapes,
    dims: Vec<Dim>,
    /// The innermost dimension (a one-element one for a scalar).
    last: Dim,
    value: f32,
    mode: PadMode,
}

impl PadWorkload {
    /// Fills one output row from the input row `src` (the innermost dimension).
    fn fill_row<T: Copy>(&self, src: &[T], row: &mut [T], value: T) {
        let last = &self.last;
        let (head, rest) = row.split_at_mut(last.before);
        let (middle, tail) = rest.split_at_mut(last.len);
        middle.copy_from_slice(src);
        if self.mode == PadMode::Constant {
            head.fill(value);
            tail.fill(value);
            return;
        }
        for (c, o) in head.iter_mut().enumerate() {
            *o = last.source(self.mode, c).map_or(value, |j| src[j]);
        }
        let from = last.before + last.len;
        for (c, o) in (from..).zip(tail.iter_mut()) {
            *o = last.source(self.mode, c).map_or(value, |j| src[j]);
        }
    }

    /// Pads `src` into `dst`, elements of any type, the constant `value`.
    fn run<T: Copy>(&self, src: &[T], dst: &mut [T], value: T) {
        if dst.is_empty() {
            return;
        }
        let outer = &self.dims[..self.dims.len().saturating_sub(1)];
        let mut idx = vec![0usize; outer.len()];
        for row in dst.chunks_exact_mut(self.last.out) {
            // The input row of these outer coordinates, if every one maps into the input.
            let start = idx.iter().zip(outer).try_fold(0usize, |acc, (&c, dim)| {
                dim.source(self.mode, c).map(|j| acc + j * dim.stride)
            });
            match start {
                Some(s) => self.fill_row(&src[s..s + self.last.len], row, value),
                None => row.fill(value),
            }
            // Next output row: an odometer over the outer dimensions.
            for (c, dim) in idx.iter_mut().zip(outer).rev() {
                *c += 1;
                if *c < dim.out {
                    break;
                }
                *c = 0;
            }
        }
    }
}

impl Workload for PadWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let dt = inputs[0].info.data_type;
        match dt {
            DataType::Float32 => {
                self.run(inputs[0].as_f32()?, outputs[0].as_f32_mut()?, self.value)
            }
            DataType::Float64 => self.run(
                inputs[0].as_slice::<f64>()?,
                outputs[0].as_mut_slice::<f64>()?,
                f64::from(self.value),
            ),
            DataType::Boolean => self.run(
                inputs[0].as_slice::<u8>()?,
                outputs[0].as_mut_slice::<u8>()?,
                u8::from(self.value != 0.0),
            ),
            // The constant in the integer type, saturating (the descriptor's value is an f32).
            dt => by_integer_type!(
                dt,
                |T| {
                    use num_traits::AsPrimitive;
                    let v: T = self.value.as_();
                    self.run(
                        inputs[0].as_slice::<T>()?,
                        outputs[0].as_mut_slice::<T>()?,
                        v,
                    )
                },
                return Err(BackendError::unsupported(format!(
                    "CpuRef pads no {dt} data"
                )))
            ),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{PadDescriptor, PadPair, RSlice};

    use super::*;
    use crate::workloads::test_support::{
        Lcg, assert_invalid_argument, desc, execute, f32t, numel, try_run,
    };

    fn out_shape(shape: &[u32], pads: &[(u32, u32)]) -> Vec<u32> {
        shape
            .iter()
            .zip(pads)
            .map(|(&n, &(b, a))| n + b + a)
            .collect()
    }

    /// Runs the padding of `x` of `shape` by `pads` through the factory.
    fn run(
        mode: PadMode,
        value: f32,
        pads: &[(u32, u32)],
        shape: &[u32],
        x: &[f32],
    ) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Pad(PadDescriptor {
            padding: pads
                .iter()
                .map(|&(before, after)| PadPair { before, after })
                .collect(),
            value,
            mode,
        });
        try_run(&layer, &[(shape, x)], &out_shape(shape, pads))
    }

    /// numpy's definitions, coordinate by coordinate: constant outside the input; `reflect`
    /// mirrors about the first and last element (`-1 -> 1`, `n -> n - 2`), repeatedly; `edge`
    /// clamps.
    fn oracle(
        mode: PadMode,
        value: f32,
        pads: &[(u32, u32)],
        shape: &[u32],
        x: &[f32],
    ) -> Vec<f32> {
        let out = out_shape(shape, pads);
        (0..numel(&out))
            .map(|flat| {
                let mut rest = flat;
                let mut src = vec![0i64; shape.len()];
                for d in (0..shape.len()).rev() {
                    let o = (rest % out[d] as usize) as i64;
                    rest /= out[d] as usize;
                    let n = i64::from(shape[d]);
                    let mut c = o - i64::from(pads[d].0);
                    match mode {
                        PadMode::Constant => {
                            if c < 0 || c >= n {
                                return value;
                            }
                        }
                        PadMode::Edge => c = c.clamp(0, n - 1),
                        PadMode::Reflect => {
                            while c < 0 || c >= n {
                                if c < 0 {
                                    c = -c;
                                } else {
                                    c = 2 * (n - 1) - c;
                                }
                            }
                        }
                    }
                    src[d] = c;
                }
                let off = shape
                    .iter()
                    .zip(&src)
                    .fold(0i64, |acc, (&s, &c)| acc * i64::from(s) + c);
                x[off as usize]
            })
            .collect()
    }

    const MODES: [PadMode; 3] = [PadMode::Constant, PadMode::Reflect, PadMode::Edge];

    /// numpy's outputs for `[1, 2, 3]`, written by hand.
    #[test]
    fn rank1_hand_written() {
        let x = [1.0, 2.0, 3.0];
        let r = |mode, value, pads| run(mode, value, &[pads], &[3], &x).unwrap();
        // np.pad([1,2,3], (2,2), 'reflect')
        assert_eq!(
            r(PadMode::Reflect, 0.0, (2, 2)),
            [3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]
        );
        assert_eq!(
            r(PadMode::Reflect, 0.0, (2, 1)),
            [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]
        );
        assert_eq!(r(PadMode::Reflect, 0.0, (0, 1)), [1.0, 2.0, 3.0, 2.0]);
        // np.pad([1,2,3], (2,2), 'edge')
        assert_eq!(
            r(PadMode::Edge, 0.0, (2, 2)),
            [1.0, 1.0, 1.0, 2.0, 3.0, 3.0, 3.0]
        );
        assert_eq!(
            r(PadMode::Edge, 0.0, (0, 3)),
            [1.0, 2.0, 3.0, 3.0, 3.0, 3.0]
        );
        // np.pad([1,2,3], (2,2), constant_values=9)
        assert_eq!(
            r(PadMode::Constant, 9.0, (2, 2)),
            [9.0, 9.0, 1.0, 2.0, 3.0, 9.0, 9.0]
        );
        assert_eq!(
            r(PadMode::Constant, -1.0, (5, 0)),
            [-1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 2.0, 3.0]
        );
        for mode in MODES {
            assert_eq!(r(mode, 7.0, (0, 0)), x);
        }
    }

    /// numpy's outputs for small rank-2 and rank-3 tensors, written by hand.
    #[test]
    fn rank2_and_rank3_hand_written() {
        let x = [1.0, 2.0, 3.0, 4.0];
        // np.pad([[1,2],[3,4]], 1, 'reflect')
        assert_eq!(
            run(PadMode::Reflect, 0.0, &[(1, 1), (1, 1)], &[2, 2], &x).unwrap(),
            [
                4.0, 3.0, 4.0, 3.0, 2.0, 1.0, 2.0, 1.0, 4.0, 3.0, 4.0, 3.0, 2.0, 1.0, 2.0, 1.0
            ]
        );
        // np.pad([[1,2],[3,4]], 1, 'edge')
        assert_eq!(
            run(PadMode::Edge, 0.0, &[(1, 1), (1, 1)], &[2, 2], &x).unwrap(),
            [
                1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0
            ]
        );
        // np.pad([[[1,2],[3,4]]], ((1,0),(0,1),(1,0)))
        assert_eq!(
            run(
                PadMode::Constant,
                0.0,
                &[(1, 0), (0, 1), (1, 0)],
                &[1, 2, 2],
                &x
            )
            .unwrap(),
            [
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, //
                0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0,
            ]
        );
        // np.pad([[[1,2],[3,4]]], ((0,0),(1,1),(0,1)), 'reflect')
        assert_eq!(
            run(
                PadMode::Reflect,
                0.0,
                &[(0, 0), (1, 1), (0, 1)],
                &[1, 2, 2],
                &x
            )
            .unwrap(),
            [3.0, 4.0, 3.0, 1.0, 2.0, 1.0, 3.0, 4.0, 3.0, 1.0, 2.0, 1.0]
        );
    }

    /// Every mode on rank 1 and rank 3 (and 2 and 4) with random data and padding.
    #[test]
    fn every_mode_matches_oracle() {
        type Case = (&'static [u32], &'static [(u32, u32)]);
        let cases: [Case; 9] = [
            (&[5], &[(2, 3)]),
            (&[6], &[(0, 5)]),
            (&[1], &[(0, 0)]),
            (&[3, 4, 5], &[(1, 2), (0, 3), (4, 1)]),
            (&[2, 3, 4], &[(1, 1), (2, 2), (3, 3)]),
            (&[4, 2, 3], &[(0, 0), (1, 0), (0, 2)]),
            (&[3, 4, 5], &[(2, 0), (0, 0), (0, 0)]),
            (&[4, 5], &[(3, 4), (1, 1)]),
            (&[1, 2, 3, 4], &[(0, 0), (1, 1), (2, 1), (0, 3)]),
        ];
        let mut seed = 0;
        for (shape, pads) in cases {
            for mode in MODES {
                seed += 1;
                let fits = shape.iter().zip(pads).all(|(&n, &(b, a))| b < n && a < n);
                if mode == PadMode::Reflect && !fits {
                    assert!(run(mode, 0.0, pads, shape, &vec![0.0; numel(shape)]).is_err());
                    continue;
                }
                let x = Lcg(seed).vec_in(numel(shape), -4.0, 4.0);
                let got = run(mode, 0.75, pads, shape, &x).unwrap();
                let want = oracle(mode, 0.75, pads, shape, &x);
                assert_eq!(got, want, "{mode:?} {shape:?} {pads:?}");
            }
        }
    }

    /// Scalars and empty dimensions.
    #[test]
    fn scalar_and_empty() {
        for mode in MODES {
            assert_eq!(run(mode, 1.0, &[], &[], &[2.5]).unwrap(), [2.5]);
        }
        // Constant padding of an empty dimension fills everything.
        assert_eq!(
            run(PadMode::Constant, 3.0, &[(1, 1), (0, 0)], &[0, 2], &[]).unwrap(),
            [3.0; 4]
        );
        assert_eq!(
            run(PadMode::Constant, 3.0, &[(0, 0), (1, 0)], &[2, 0], &[]).unwrap(),
            [3.0; 2]
        );
        assert_eq!(
            run(PadMode::Edge, 3.0, &[(0, 0), (0, 0)], &[2, 0], &[]).unwrap(),
            Vec::<f32>::new()
        );
        assert!(run(PadMode::Edge, 3.0, &[(0, 0), (1, 0)], &[2, 0], &[]).is_err());
        // A huge but empty output is not materialised.
        assert_eq!(
            run(
                PadMode::Constant,
                0.0,
                &[(0, 0), (4_000_000_000, 0)],
                &[0, 3],
                &[]
            )
            .unwrap(),
            Vec::<f32>::new()
        );
        assert_eq!(
            run(
                PadMode::Edge,
                0.0,
                &[(0, 0), (4_000_000_000, 0)],
                &[0, 3],
                &[]
            )
            .unwrap(),
            Vec::<f32>::new()
        );
    }

    /// Bad configurations are refused at creation; bad tensors at execution are errors.
    #[test]
    fn bad_configurations_are_errors() {
        assert!(run(PadMode::Reflect, 0.0, &[(3, 0)], &[3], &[0.0; 3]).is_err());
        assert!(run(PadMode::Reflect, 0.0, &[(0, 3)], &[3], &[0.0; 3]).is_err());
        let layer = LayerDescriptor::Pad(PadDescriptor {
            padding: vec![PadPair {
                before: 1,
                after: 1,
            }]
            .into(),
            value: 0.0,
            mode: PadMode::Edge,
        });
        let ins = [f32t(&[3])];
        let outs = [f32t(&[5])];
        let desc = desc(&layer, &ins, &outs);
        let w = create(&desc).unwrap();
        let x = [1f32; 3];
        let mut out = [0f32; 5];
        let short = [(&ins[0], &x[..2])];
        assert_invalid_argument(execute(&*w, &short, &outs[0], &mut out));
        assert_invalid_argument(execute(&*w, &[], &outs[0], &mut out));
        let wrong = [(&outs[0], &[0f32; 5][..])];
        assert_invalid_argument(execute(&*w, &wrong, &outs[0], &mut out));
        // The output shape must be the padded one.
        let bad_outs = [f32t(&[6])];
        assert!(
            create(&WorkloadDesc {
                outputs: RSlice::from_slice(&bad_outs),
                ..desc
            })
            .is_err()
        );
    }

    /// Integer data: the constant saturates to the type; edge padding copies the values.
    #[test]
    fn integer_types() {
        use crate::workloads::test_support::{Bytes, try_run_typed, typed};
        let layer = |mode, value| {
            LayerDescriptor::Pad(PadDescriptor {
                padding: RSlice::from_slice(&[PadPair {
                    before: 1,
                    after: 2,
                }])
                .to_vec()
                .into(),
                mode,
                value,
            })
        };
        let got = try_run_typed(
            &layer(PadMode::Constant, 300.0),
            &[(typed(&[2], DataType::Signed8), Bytes::of(&[-5i8, 7]))],
            &typed(&[5], DataType::Signed8),
        )
        .unwrap();
        assert_eq!(got.to_vec::<i8>(), [127, -5, 7, 127, 127]);
        let big = [i64::MIN, i64::MAX];
        let got = try_run_typed(
            &layer(PadMode::Edge, 0.0),
            &[(typed(&[2], DataType::Signed64), Bytes::of(&big))],
            &typed(&[5], DataType::Signed64),
        )
        .unwrap();
        assert_eq!(
            got.to_vec::<i64>(),
            [i64::MIN, i64::MIN, i64::MAX, i64::MAX, i64::MAX]
        );
    }
}
