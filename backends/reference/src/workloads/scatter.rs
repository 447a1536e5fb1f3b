//! ScatterElements and ScatterNd (Backend API 1.5): `data` with the elements (or slices) that
//! the indices select replaced by `updates`, or combined with them by the layer's reduction
//! (ONNX `ScatterElements`, `ScatterND`). Replacement moves any plain type's bytes; the
//! reductions compute in the tensors' type (integers wrapping, the 16-bit floats in f32 and
//! rounded once per update). Updates apply in their row-major order, so with repeated
//! indices the later update wins (`None`) or every update is combined in that order.

use backplane_api::{
    BackendError, BackendResult, DataType, LayerDescriptor, ScatterReduction, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};

use super::numeric::{by_integer_type, half_bits, is_half, widen_half};
use super::{
    ExpectedShapes, checked_num_elements, expect_counts, index_values, invalid_layer, raw, raw_mut,
};

/// Which scatter.
#[derive(Debug, Clone, Copy)]
enum Form {
    /// `ScatterElements` along this axis.
    Elements(usize),
    /// `ScatterNd`.
    Nd,
}

/// Creates the workload of a `ScatterElements` or `ScatterNd` layer (inputs `[data, indices,
/// updates]`, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (form, reduction) = match desc.layer {
        LayerDescriptor::ScatterElements(d) => (Form::Elements(d.axis as usize), d.reduction),
        LayerDescriptor::ScatterNd(r) => (Form::Nd, *r),
        _ => return Err(invalid_layer(desc, "not a scatter layer")),
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 3, 1)?;
    let expected = backplane_api::shapes::output_infos(desc.layer, &desc.inputs)
        .map_err(|e| invalid_layer(desc, e))?;
    if expected[0].shape != desc.outputs[0].shape {
        return Err(invalid_layer(
            desc,
            format_args!("the output must be {}", expected[0]),
        ));
    }
    let dt = desc.inputs[0].data_type;
    if reduction != ScatterReduction::None && (dt == DataType::Boolean || dt.is_quantized()) {
        return Err(BackendError::unsupported(format!(
            "layer {}: a {reduction:?} reduction of {dt} data",
            desc.name
        )));
    }
    for t in desc.inputs.iter() {
        checked_num_elements(desc, t)?;
    }
    let dims =
        |i: usize| -> Vec<usize> { desc.inputs[i].shape.iter().map(|&d| d as usize).collect() };
    Ok(Box::new(ScatterWorkload {
        form,
        reduction,
        data: dims(0),
        indices: dims(1),
        shapes: ExpectedShapes::of(desc),
        name: desc.name.to_string(),
    }))
}

/// Scatters one tensor's updates.
#[derive(Debug)]
pub struct ScatterWorkload {
    form: Form,
    reduction: ScatterReduction,
    data: Vec<usize>,
    indices: Vec<usize>,
    shapes: ExpectedShapes,
    name: String,
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

impl ScatterWorkload {
    /// `i` as a position along a dimension of `size` (negative from the end).
    fn position(&self, i: i64, size: usize) -> BackendResult<usize> {
        let at = if i < 0 {
            i.checked_add(size as i64).unwrap_or(-1)
        } else {
            i
        };
        usize::try_from(at)
            .ok()
            .filter(|&at| at < size)
            .ok_or_else(|| {
                BackendError::invalid_argument(format!(
                    "layer {}: index {i} is out of range for a dimension of {size}",
                    self.name
                ))
            })
    }

    /// The output element each update element lands on, in the updates' order.
    fn targets(&self, indices: &[i64]) -> BackendResult<Vec<usize>> {
        let ds = strides(&self.data);
        match self.form {
            Form::Elements(axis) => {
                let is = strides(&self.indices);
                indices
                    .iter()
                    .enumerate()
                    .map(|(p, &i)| {
                        let mut flat = 0;
                        for (a, (&st, &dst)) in is.iter().zip(&ds).enumerate() {
                            let c = (p / st) % self.indices[a];
                            let c = if a == axis {
                                self.position(i, self.data[a])?
                            } else {
                                c
                            };
                            flat += c * dst;
                        }
                        Ok(flat)
                    })
                    .collect()
            }
            Form::Nd => {
                let k = *self.indices.last().unwrap_or(&0);
                let slice: usize = self.data[k..].iter().product();
                let mut out = Vec::with_capacity(indices.len() / k.max(1) * slice);
                for tuple in indices.chunks_exact(k.max(1)) {
                    let mut base = 0;
                    for (j, &i) in tuple.iter().enumerate() {
                        base += self.position(i, self.data[j])? * ds[j];
                    }
                    out.extend(base..base + slice);
                }
                Ok(out)
            }
        }
    }
}

/// `combine(out[t], update)` for each update and its target, in order.
fn apply<T: Copy>(out: &mut [T], updates: &[T], targets: &[usize], combine: impl Fn(T, T) -> T) {
    for (&u, &t) in updates.iter().zip(targets) {
        out[t] = combine(out[t], u);
    }
}

/// The reduction's function on a float type.
fn float_combine<T: num_traits::Float>(r: ScatterReduction) -> fn(T, T) -> T {
    match r {
        ScatterReduction::None => |_, u| u,
        ScatterReduction::Add => |a, u| a + u,
        ScatterReduction::Mul => |a, u| a * u,
        ScatterReduction::Max => T::max,
        ScatterReduction::Min => T::min,
    }
}

impl Workload for ScatterWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let indices = index_values(&inputs[1])?;
        let targets = self.targets(&indices)?;
        let dt = inputs[0].info.data_type;
        outputs[0]
            .data
            .as_mut_slice()
            .copy_from_slice(inputs[0].data.as_slice());
        let r = self.reduction;
        macro_rules! bytes {
            ($t:ty) => {{
                let u = raw::<$t>(&inputs[2])?;
                apply(raw_mut::<$t>(&mut outputs[0])?, u, &targets, |_, u| u);
            }};
        }
        match (dt, r) {
            (_, ScatterReduction::None) => match dt.size_in_bytes() {
                1 => bytes!(u8),
                2 => bytes!(u16),
                4 => bytes!(u32),
                _ => bytes!(u64),
            },
            (DataType::Float32, r) => {
                let u = inputs[2].as_f32()?;
                apply(
                    outputs[0].as_f32_mut()?,
                    u,
                    &targets,
                    float_combine::<f32>(r),
                );
            }
            (DataType::Float64, r) => {
                let u = inputs[2].as_slice::<f64>()?;
                apply(
                    outputs[0].as_mut_slice::<f64>()?,
                    u,
                    &targets,
                    float_combine::<f64>(r),
                );
            }
            (dt, r) if is_half(dt) => {
                let u = widen_half(dt, inputs[2].as_slice::<u16>()?);
                let out = outputs[0].as_mut_slice::<u16>()?;
                let mut wide = widen_half(dt, out);
                apply(&mut wide, &u, &targets, float_combine::<f32>(r));
                for (o, w) in out.iter_mut().zip(wide) {
                    *o = half_bits(dt, f64::from(w));
                }
            }
            (dt, r) => by_integer_type!(
                dt,
                |T| {
                    let u = inputs[2].as_slice::<T>()?;
                    let combine: fn(T, T) -> T = match r {
                        ScatterReduction::None => |_, u| u,
                        ScatterReduction::Add => |a, u| a.wrapping_add(u),
                        ScatterReduction::Mul => |a, u| a.wrapping_mul(u),
                        ScatterReduction::Max => |a: T, u: T| a.max(u),
                        ScatterReduction::Min => |a: T, u: T| a.min(u),
                    };
                    apply(outputs[0].as_mut_slice::<T>()?, u, &targets, combine);
                },
                return Err(BackendError::unsupported(format!(
                    "layer {}: a {r:?} reduction of {dt} data",
                    self.name
                )))
            ),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::ScatterElementsDescriptor;

    use super::*;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};

    fn scatter(
        layer: LayerDescriptor,
        data: (&[u32], &[f32]),
        indices: (&[u32], &[i64]),
        updates: (&[u32], &[f32]),
    ) -> BackendResult<Vec<f32>> {
        let f = |s: &[u32]| typed(s, DataType::Float32);
        try_run_typed(
            &layer,
            &[
                (f(data.0), Bytes::of(data.1)),
                (typed(indices.0, DataType::Signed64), Bytes::of(indices.1)),
                (f(updates.0), Bytes::of(updates.1)),
            ],
            &f(data.0),
        )
        .map(|b| b.to_vec::<f32>())
    }

    /// ONNX's examples of ScatterElements, worked by hand.
    #[test]
    fn scatter_elements_by_hand() {
        let layer = |axis, reduction| {
            LayerDescriptor::ScatterElements(ScatterElementsDescriptor { axis, reduction })
        };
        let data = [0.0f32; 9];
        let got = scatter(
            layer(0, ScatterReduction::None),
            (&[3, 3], &data),
            (&[2, 3], &[1, 0, 2, 0, 2, 1]),
            (&[2, 3], &[1.0, 1.1, 1.2, 2.0, 2.1, 2.2]),
        )
        .unwrap();
        assert_eq!(got, [2.0, 1.1, 0.0, 1.0, 0.0, 2.2, 0.0, 2.1, 1.2]);
        // Axis 1, a negative index, and an add that meets one element twice.
        let got = scatter(
            layer(1, ScatterReduction::Add),
            (&[1, 5], &[1.0, 2.0, 3.0, 4.0, 5.0]),
            (&[1, 3], &[1, -2, 1]),
            (&[1, 3], &[1.1, 2.1, 3.0]),
        )
        .unwrap();
        assert_eq!(got, [1.0, 2.0 + 1.1 + 3.0, 3.0, 4.0 + 2.1, 5.0]);
        let err = scatter(
            layer(1, ScatterReduction::None),
            (&[1, 5], &[0.0; 5]),
            (&[1, 1], &[5]),
            (&[1, 1], &[1.0]),
        )
        .unwrap_err();
        assert!(
            err.message.contains("index 5 is out of range"),
            "{}",
            err.message
        );
    }

    /// ONNX's ScatterND example (slices of a rank-3 tensor), and a multiply of single
    /// elements.
    #[test]
    fn scatter_nd_by_hand() {
        let data: Vec<f32> = (0..16).map(|v| v as f32).collect();
        let got = scatter(
            LayerDescriptor::ScatterNd(ScatterReduction::None),
            (&[4, 2, 2], &data),
            (&[2, 1], &[0, 2]),
            (&[2, 2, 2], &[5.0, 5.0, 5.0, 5.0, 6.0, 6.0, 6.0, 6.0]),
        )
        .unwrap();
        let mut want = data.clone();
        want[0..4].fill(5.0);
        want[8..12].fill(6.0);
        assert_eq!(got, want);
        let got = scatter(
            LayerDescriptor::ScatterNd(ScatterReduction::Mul),
            (&[2, 2], &[1.0, 2.0, 3.0, 4.0]),
            (&[3, 2], &[0, 1, 1, 0, 0, 1]),
            (&[3], &[10.0, 5.0, 3.0]),
        )
        .unwrap();
        assert_eq!(got, [1.0, 60.0, 15.0, 4.0]);
    }

    /// Integers wrap; a max keeps the larger; bytes move for any type.
    #[test]
    fn integer_reductions() {
        let run = |r, data: &[i8], idx: &[i64], upd: &[i8]| {
            try_run_typed(
                &LayerDescriptor::ScatterNd(r),
                &[
                    (typed(&[3], DataType::Signed8), Bytes::of(data)),
                    (
                        typed(&[idx.len() as u32, 1], DataType::Signed64),
                        Bytes::of(idx),
                    ),
                    (
                        typed(&[upd.len() as u32], DataType::Signed8),
                        Bytes::of(upd),
                    ),
                ],
                &typed(&[3], DataType::Signed8),
            )
            .unwrap()
            .to_vec::<i8>()
        };
        assert_eq!(
            run(ScatterReduction::Add, &[120, 0, 5], &[0, 0], &[5, 5]),
            [-126, 0, 5]
        );
        assert_eq!(
            run(ScatterReduction::Max, &[1, 9, 5], &[1, 2], &[3, 7]),
            [1, 9, 7]
        );
        assert_eq!(
            run(ScatterReduction::None, &[1, 2, 3], &[2, 0], &[-1, -2]),
            [-2, 2, -1]
        );
    }
}
