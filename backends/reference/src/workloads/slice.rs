//! Slice (Backend API 1.1): a strided box of a tensor. Output index `i` of dimension `d` reads
//! input index `begin[d] + i * step[d]` (ONNX `Slice`, resolved by the host's importer).

use backplane_api::{
    BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload, WorkloadDesc, shapes,
};

use backplane_api::bytemuck;

use super::{
    ExpectedShapes, checked_num_elements, expect_counts, invalid_layer, moving_workload, raw,
    raw_mut,
};

/// Creates the workload of a `Slice` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Slice(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Slice layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let (x, out) = (&desc.inputs[0], &desc.outputs[0]);
    let expected = shapes::slice(d, &x.shape).map_err(|e| invalid_layer(desc, e))?;
    if expected != out.shape.as_slice() {
        return Err(invalid_layer(desc, format_args!("Slice of {x} into {out}")));
    }
    checked_num_elements(desc, x)?;
    // Input strides, in elements.
    let mut strides = vec![1i64; x.shape.len()];
    for a in (0..x.shape.len().saturating_sub(1)).rev() {
        strides[a] = strides[a + 1] * i64::from(x.shape[a + 1]);
    }
    let start: i64 = d
        .begin
        .iter()
        .zip(&strides)
        .map(|(&b, &s)| i64::from(b) * s)
        .sum();
    let steps = d
        .step
        .iter()
        .zip(&strides)
        .map(|(&st, &s)| i64::from(st) * s)
        .collect();
    Ok(Box::new(SliceWorkload {
        start,
        steps,
        size: d.size.iter().map(|&v| v as usize).collect(),
        shapes: ExpectedShapes::of(desc),
    }))
}

/// Copies the box, one output element at a time in row-major order.
#[derive(Debug)]
pub struct SliceWorkload {
    /// Offset of the first element read.
    start: i64,
    /// Input offset change per step of each output dimension.
    steps: Vec<i64>,
    size: Vec<usize>,
    shapes: ExpectedShapes,
}

impl SliceWorkload {
    /// Moves the elements, as `T` (see [`raw`]).
    fn run<T: bytemuck::Pod>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let src = raw::<T>(&inputs[0])?;
        let dst = raw_mut::<T>(&mut outputs[0])?;
        if dst.is_empty() {
            return Ok(());
        }
        let r = self.size.len();
        let mut index = vec![0usize; r];
        let mut offset = self.start;
        for d in dst.iter_mut() {
            // In the input by construction: `shapes::slice` checked the first and last index
            // of every dimension.
            *d = src[offset as usize];
            // Advance the odometer from the last dimension.
            for a in (0..r).rev() {
                index[a] += 1;
                offset += self.steps[a];
                if index[a] < self.size[a] {
                    break;
                }
                offset -= self.steps[a] * self.size[a] as i64;
                index[a] = 0;
            }
        }
        Ok(())
    }
}

moving_workload!(SliceWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::SliceDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, run};

    /// The oracle, from the definition: per dimension the list of input indices taken, then
    /// every combination in row-major order.
    fn oracle(x_shape: &[u32], x: &[f32], d: &SliceDescriptor) -> Vec<f32> {
        let picks: Vec<Vec<usize>> = (0..x_shape.len())
            .map(|a| {
                (0..d.size[a] as i64)
                    .map(|i| (i64::from(d.begin[a]) + i * i64::from(d.step[a])) as usize)
                    .collect()
            })
            .collect();
        let mut out = vec![];
        let mut combo = vec![vec![]];
        for p in &picks {
            combo = combo
                .into_iter()
                .flat_map(|c: Vec<usize>| {
                    p.iter().map(move |&i| {
                        let mut c = c.clone();
                        c.push(i);
                        c
                    })
                })
                .collect();
        }
        for c in combo {
            let flat = c
                .iter()
                .zip(x_shape)
                .fold(0usize, |acc, (&i, &dim)| acc * dim as usize + i);
            out.push(x[flat]);
        }
        out
    }

    #[test]
    fn strided_and_backwards_boxes() {
        let shape = [3u32, 4, 5];
        let x = Lcg(5).vec(60);
        for (begin, step, size) in [
            ([0u32, 0, 0], [1i32, 1, 1], [3u32, 4, 5]),
            ([1, 3, 4], [1, -1, -2], [2, 4, 3]),
            ([2, 0, 1], [-2, 3, 2], [2, 2, 2]),
            ([0, 1, 0], [1, 1, 1], [3, 0, 5]),
        ] {
            let d = SliceDescriptor {
                begin: begin.iter().copied().collect(),
                step: step.iter().copied().collect(),
                size: size.iter().copied().collect(),
            };
            let got = run(&LayerDescriptor::Slice(d.clone()), &[(&shape, &x)], &size);
            assert_eq!(got, oracle(&shape, &x, &d), "{d:?}");
        }
    }
}
