//! Gather (Backend API 1.1): slices of `data` along one axis, picked by Signed32 or (1.5)
//! Signed64 indices (ONNX
//! `Gather`), for data of any type. With `data` viewed as `[outer, d, inner]` around the axis,
//! output row `(o, j)` is `data[o, indices[j], ..]`; a negative index counts from the end and
//! one outside `[-d, d)` fails the execution, naming it.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc, bytemuck,
};

use super::{
    ExpectedShapes, checked_num_elements, expect_counts, index_values, invalid_layer,
    moving_workload, raw, raw_mut,
};

/// Creates the workload of a `Gather` layer (inputs `[data, indices]`, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Gather(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Gather layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 2, 1)?;
    let data = &desc.inputs[0];
    let axis = d.axis as usize;
    if axis >= data.shape.len() {
        return Err(invalid_layer(desc, format_args!("axis {axis} of {data}")));
    }
    checked_num_elements(desc, data)?;
    checked_num_elements(desc, &desc.outputs[0])?;
    Ok(Box::new(GatherWorkload {
        shapes: ExpectedShapes::of(desc),
        outer: data.shape[..axis].iter().map(|&v| v as usize).product(),
        size: data.shape[axis] as usize,
        inner: data.shape[axis + 1..].iter().map(|&v| v as usize).product(),
        name: desc.name.to_string(),
    }))
}

/// Copies the indexed rows.
#[derive(Debug)]
pub struct GatherWorkload {
    shapes: ExpectedShapes,
    /// Product of the dimensions before the axis.
    outer: usize,
    /// The axis's size.
    size: usize,
    /// Product of the dimensions after the axis.
    inner: usize,
    name: String,
}

impl GatherWorkload {
    /// Moves the rows, as `T` (see [`raw`]).
    fn run<T: bytemuck::Pod>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let data = raw::<T>(&inputs[0])?;
        let indices = index_values(&inputs[1])?;
        let out = raw_mut::<T>(&mut outputs[0])?;
        let rows: Vec<usize> = indices
            .iter()
            .map(|&i| {
                let at = if i < 0 {
                    i.checked_add(self.size as i64).unwrap_or(-1)
                } else {
                    i
                };
                usize::try_from(at)
                    .ok()
                    .filter(|&at| at < self.size)
                    .ok_or_else(|| {
                        BackendError::invalid_argument(format!(
                            "layer {}: index {i} is out of range for a dimension of {}",
                            self.name, self.size
                        ))
                    })
            })
            .collect::<BackendResult<_>>()?;
        if self.inner == 0 || out.is_empty() {
            return Ok(());
        }
        let mut chunks = out.chunks_exact_mut(self.inner);
        for o in 0..self.outer {
            let base = o * self.size;
            for &r in &rows {
                let start = (base + r) * self.inner;
                if let Some(chunk) = chunks.next() {
                    chunk.copy_from_slice(&data[start..start + self.inner]);
                }
            }
        }
        Ok(())
    }
}

moving_workload!(GatherWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::{DataType, ErrorCode, GatherDescriptor};

    use super::*;
    use crate::workloads::test_support::{Bytes, Lcg, try_run_typed, typed};

    /// The oracle: every output element from its multi-index, by the definition.
    fn oracle(
        data: &[f32],
        shape: &[u32],
        axis: usize,
        indices: &[i32],
        ishape: &[u32],
    ) -> Vec<f32> {
        let mut out_shape: Vec<usize> = shape[..axis].iter().map(|&v| v as usize).collect();
        out_shape.extend(ishape.iter().map(|&v| v as usize));
        out_shape.extend(shape[axis + 1..].iter().map(|&v| v as usize));
        let n: usize = out_shape.iter().product();
        let strides = |s: &[usize]| {
            let mut st = vec![1usize; s.len()];
            for a in (0..s.len().saturating_sub(1)).rev() {
                st[a] = st[a + 1] * s[a + 1];
            }
            st
        };
        let dshape: Vec<usize> = shape.iter().map(|&v| v as usize).collect();
        let (ost, dst) = (strides(&out_shape), strides(&dshape));
        let ir = ishape.len();
        (0..n)
            .map(|flat| {
                let idx: Vec<usize> = ost
                    .iter()
                    .zip(&out_shape)
                    .map(|(s, d)| flat / s % d)
                    .collect();
                // The indices' multi-index is idx[axis..axis + ir].
                let ist = strides(&ishape.iter().map(|&v| v as usize).collect::<Vec<_>>());
                let j: usize = idx[axis..axis + ir]
                    .iter()
                    .zip(&ist)
                    .map(|(a, b)| a * b)
                    .sum();
                let mut row = i64::from(indices[j]);
                if row < 0 {
                    row += i64::from(shape[axis]);
                }
                let mut src = idx[..axis].to_vec();
                src.push(row as usize);
                src.extend(&idx[axis + ir..]);
                data[src.iter().zip(&dst).map(|(a, b)| a * b).sum::<usize>()]
            })
            .collect()
    }

    #[test]
    fn every_axis_with_negative_indices_matches_the_definition() {
        let shape = [3u32, 4, 5];
        let mut rng = Lcg(3);
        let data = rng.vec(60);
        for axis in 0..3 {
            let d = shape[axis] as i32;
            let indices = [d - 1, -1, 0, -d, 1, 0];
            let ishape = [2u32, 3];
            let mut out_shape = shape[..axis].to_vec();
            out_shape.extend(ishape);
            out_shape.extend(&shape[axis + 1..]);
            let layer = LayerDescriptor::Gather(GatherDescriptor { axis: axis as u32 });
            let got = try_run_typed(
                &layer,
                &[
                    (typed(&shape, DataType::Float32), Bytes::of(&data)),
                    (typed(&ishape, DataType::Signed32), Bytes::of(&indices)),
                ],
                &typed(&out_shape, DataType::Float32),
            )
            .unwrap();
            assert_eq!(
                got.to_vec::<f32>(),
                oracle(&data, &shape, axis, &indices, &ishape),
                "axis {axis}"
            );
        }
    }

    #[test]
    fn integer_and_boolean_data_and_scalar_indices() {
        let layer = LayerDescriptor::Gather(GatherDescriptor { axis: 0 });
        let got = try_run_typed(
            &layer,
            &[
                (
                    typed(&[3, 2], DataType::Signed32),
                    Bytes::of(&[1i32, 2, 3, 4, 5, 6]),
                ),
                (typed(&[], DataType::Signed32), Bytes::of(&[-2i32])),
            ],
            &typed(&[2], DataType::Signed32),
        )
        .unwrap();
        assert_eq!(got.to_vec::<i32>(), [3, 4]);
        let got = try_run_typed(
            &layer,
            &[
                (typed(&[3], DataType::Boolean), Bytes::of(&[1u8, 0, 1])),
                (typed(&[4], DataType::Signed32), Bytes::of(&[1i32, 2, 0, 1])),
            ],
            &typed(&[4], DataType::Boolean),
        )
        .unwrap();
        assert_eq!(got.to_vec::<u8>(), [0, 1, 1, 0]);
    }

    #[test]
    fn an_index_out_of_range_fails_the_execution() {
        let layer = LayerDescriptor::Gather(GatherDescriptor { axis: 0 });
        let err = try_run_typed(
            &layer,
            &[
                (
                    typed(&[3], DataType::Float32),
                    Bytes::of(&[1.0f32, 2.0, 3.0]),
                ),
                (typed(&[2], DataType::Signed32), Bytes::of(&[0i32, 3])),
            ],
            &typed(&[2], DataType::Float32),
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
        assert_eq!(
            err.message.as_str(),
            "layer test: index 3 is out of range for a dimension of 3"
        );
        let err = try_run_typed(
            &layer,
            &[
                (
                    typed(&[3], DataType::Float32),
                    Bytes::of(&[1.0f32, 2.0, 3.0]),
                ),
                (typed(&[1], DataType::Signed32), Bytes::of(&[-4i32])),
            ],
            &typed(&[1], DataType::Float32),
        )
        .unwrap_err();
        assert_eq!(
            err.message.as_str(),
            "layer test: index -4 is out of range for a dimension of 3"
        );
    }
}
