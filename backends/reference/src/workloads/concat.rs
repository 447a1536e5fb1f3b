//! Concat: N inputs joined along one axis (ONNX `Concat`).
//!
//! Each tensor is viewed as `[outer, chunk]`, where `outer` is the product of the dimensions
//! before the axis (the same for every input and the output) and `chunk` the contiguous rest;
//! an output row is the inputs' rows one after another.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc,
};

use super::expect_counts;

/// Creates the workload of a `Concat` layer (N >= 1 inputs, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Concat(d) = desc.layer else {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: not a Concat layer",
            desc.name
        )));
    };
    if desc.inputs.is_empty() {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: Concat needs at least one input",
            desc.name
        )));
    }
    expect_counts(desc.inputs.len(), desc.outputs.len(), desc.inputs.len(), 1)?;
    let out = desc.outputs[0].shape.to_vec();
    let axis = d.axis as usize;
    let bad = || {
        BackendError::invalid_argument(format!(
            "layer {}: inputs do not concatenate into {} along axis {axis}",
            desc.name, desc.outputs[0]
        ))
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
    // Every product below is at most the output's element count, once that is known not to
    // overflow; an empty output needs none of them.
    let empty = out.contains(&0);
    if !empty && desc.outputs[0].num_elements().is_none() {
        return Err(BackendError::invalid_argument(format!(
            "layer {}: {} has too many elements",
            desc.name, desc.outputs[0]
        )));
    }
    let inner = if empty {
        0
    } else {
        out[axis + 1..]
            .iter()
            .map(|&v| v as usize)
            .product::<usize>()
    };
    Ok(Box::new(ConcatWorkload {
        inputs: desc.inputs.iter().map(|t| t.shape.to_vec()).collect(),
        chunks: desc
            .inputs
            .iter()
            .map(|t| t.shape[axis] as usize * inner)
            .collect(),
        row: out[axis] as usize * inner,
        output: out,
    }))
}

/// Copies N inputs, row by row, into one output.
#[derive(Debug)]
pub struct ConcatWorkload {
    inputs: Vec<Vec<u32>>,
    output: Vec<u32>,
    /// Elements of input `i` per outer index.
    chunks: Vec<usize>,
    /// Elements of the output per outer index (the sum of `chunks`): one output row per
    /// product of the dimensions before the axis.
    row: usize,
}

impl Workload for ConcatWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        expect_counts(inputs.len(), outputs.len(), self.inputs.len(), 1)?;
        let shapes_match = inputs
            .iter()
            .zip(&self.inputs)
            .all(|(v, s)| v.info.shape.as_slice() == s.as_slice())
            && outputs[0].info.shape.as_slice() == self.output.as_slice();
        if !shapes_match {
            return Err(BackendError::invalid_argument(format!(
                "concat into {}: the tensor shapes differ from those the workload was created for",
                outputs[0].info
            )));
        }
        let srcs = inputs
            .iter()
            .map(TensorView::as_f32)
            .collect::<BackendResult<Vec<_>>>()?;
        let dst = outputs[0].as_f32_mut()?;
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

#[cfg(test)]
mod tests {
    use backplane_api::{
        ConcatDescriptor, DataType, ErrorCode, ROption, RSlice, RStr, TensorInfo, WorkloadFactory,
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

    fn numel(shape: &[u32]) -> usize {
        shape.iter().product::<u32>() as usize
    }

    /// Builds the workload through the factory (layer support included) and runs it;
    /// the output starts as NaN so an unwritten element fails every comparison.
    fn run(axis: u32, inputs: &[(&[u32], &[f32])], out_shape: &[u32]) -> BackendResult<Vec<f32>> {
        let layer = LayerDescriptor::Concat(ConcatDescriptor { axis });
        let ins: Vec<TensorInfo> = inputs
            .iter()
            .map(|(s, _)| TensorInfo::new(s, DataType::Float32))
            .collect();
        let outs = [TensorInfo::new(out_shape, DataType::Float32)];
        let constants: Vec<ROption<RSlice<'_, u8>>> =
            inputs.iter().map(|_| ROption::RNone).collect();
        let desc = WorkloadDesc {
            name: RStr::from("concat"),
            layer: &layer,
            inputs: RSlice::from_slice(&ins),
            outputs: RSlice::from_slice(&outs),
            constants: RSlice::from_slice(&constants),
        };
        let w = CpuRefWorkloadFactory.create_workload(&desc)?;
        let views: Vec<TensorView<'_>> = ins
            .iter()
            .zip(inputs)
            .map(|(info, (_, x))| TensorView::new(info, bytemuck::cast_slice(x)))
            .collect();
        let mut out = vec![f32::NAN; numel(out_shape)];
        let mut ov = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        w.execute(&views, &mut ov)?;
        Ok(out)
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
                            lcg(seed, numel(s), -10.0, 10.0)
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
        let ins = [
            TensorInfo::new(&[3], DataType::Float32),
            TensorInfo::new(&[3], DataType::Float32),
        ];
        let outs = [TensorInfo::new(&[6], DataType::Float32)];
        let constants = [ROption::RNone, ROption::RNone];
        let desc = WorkloadDesc {
            name: RStr::from("concat"),
            layer: &layer,
            inputs: RSlice::from_slice(&ins),
            outputs: RSlice::from_slice(&outs),
            constants: RSlice::from_slice(&constants),
        };
        let w = create(&desc).unwrap();
        let x = [1f32; 3];
        let mut out = [0f32; 6];
        let mut ov = [TensorViewMut::new(
            &outs[0],
            bytemuck::cast_slice_mut(&mut out),
        )];
        let one = [TensorView::new(&ins[0], bytemuck::cast_slice(&x))];
        assert_eq!(
            w.execute(&one, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let short = [
            TensorView::new(&ins[0], bytemuck::cast_slice(&x)),
            TensorView::new(&ins[1], bytemuck::cast_slice(&x[..2])),
        ];
        assert_eq!(
            w.execute(&short, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        let other = TensorInfo::new(&[1, 3], DataType::Float32);
        let wrong = [
            TensorView::new(&ins[0], bytemuck::cast_slice(&x)),
            TensorView::new(&other, bytemuck::cast_slice(&x)),
        ];
        assert_eq!(
            w.execute(&wrong, &mut ov).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }
}
