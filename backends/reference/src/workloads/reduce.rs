//! Reduce (Backend API 1.1): Sum, Max, Min, Mean or Prod over a set of axes (ONNX `ReduceSum`,
//! `ReduceMax`, `ReduceMin`, `ReduceMean`, `ReduceProd`), accumulated in f64 in the input's
//! order. Max and Min propagate NaN; over no elements they give -inf and +inf, Sum 0, Prod 1
//! and Mean NaN.

use backplane_api::{
    BackendResult, LayerDescriptor, ReduceOperation, TensorView, TensorViewMut, Workload,
    WorkloadDesc, shapes,
};

use super::{ExpectedShapes, checked_num_elements, expect_counts, invalid_layer};

/// Creates the workload of a `Reduce` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Reduce(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a Reduce layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    let x = &desc.inputs[0];
    let expected =
        shapes::reduced(&x.shape, &d.axes, d.keep_dims).map_err(|e| invalid_layer(desc, e))?;
    if expected != desc.outputs[0].shape.as_slice() {
        return Err(invalid_layer(
            desc,
            format_args!("Reduce of {x} into {}", desc.outputs[0]),
        ));
    }
    checked_num_elements(desc, x)?;
    let rank = x.shape.len();
    // Per input dimension: its size and the output stride it advances (0 when reduced).
    let reduced: Vec<bool> = (0..rank).map(|a| d.axes.contains(&(a as u32))).collect();
    let mut out_strides = vec![0usize; rank];
    let mut acc = 1usize;
    for a in (0..rank).rev() {
        if !reduced[a] {
            out_strides[a] = acc;
            acc *= x.shape[a] as usize;
        }
    }
    let count: usize = (0..rank)
        .filter(|&a| reduced[a])
        .map(|a| x.shape[a] as usize)
        .product();
    Ok(Box::new(ReduceWorkload {
        operation: d.operation,
        shapes: ExpectedShapes::of(desc),
        dims: x
            .shape
            .iter()
            .map(|&v| v as usize)
            .zip(out_strides)
            .collect(),
        count,
    }))
}

/// Reduces one tensor.
#[derive(Debug)]
pub struct ReduceWorkload {
    operation: ReduceOperation,
    shapes: ExpectedShapes,
    /// Per input dimension, its size and the output offset one step of it moves.
    dims: Vec<(usize, usize)>,
    /// Input elements per output element.
    count: usize,
}

impl Workload for ReduceWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.shapes.check(inputs, outputs)?;
        let src = inputs[0].as_f32()?;
        let dst = outputs[0].as_f32_mut()?;
        let (init, step): (f64, fn(f64, f64) -> f64) = match self.operation {
            ReduceOperation::Sum | ReduceOperation::Mean => (0.0, |a, x| a + x),
            ReduceOperation::Prod => (1.0, |a, x| a * x),
            // NaN wins either way.
            ReduceOperation::Max => (f64::NEG_INFINITY, |a, x| {
                if a.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    a.max(x)
                }
            }),
            ReduceOperation::Min => (f64::INFINITY, |a, x| {
                if a.is_nan() || x.is_nan() {
                    f64::NAN
                } else {
                    a.min(x)
                }
            }),
        };
        let mut acc = vec![init; dst.len()];
        if !src.is_empty() {
            // Walk the input in order with an odometer that tracks the output offset.
            let mut index = vec![0usize; self.dims.len()];
            let mut at = 0usize;
            for &x in src {
                acc[at] = step(acc[at], f64::from(x));
                for (i, &(size, stride)) in index.iter_mut().zip(&self.dims).rev() {
                    *i += 1;
                    at += stride;
                    if *i < size {
                        break;
                    }
                    at -= stride * size;
                    *i = 0;
                }
            }
        }
        for (d, a) in dst.iter_mut().zip(acc) {
            *d = match self.operation {
                ReduceOperation::Mean => (a / self.count as f64) as f32,
                _ => a as f32,
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::ReduceDescriptor;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// The oracle: for each output element, the reduction of every input element whose kept
    /// indices match, by the definition.
    fn oracle(op: ReduceOperation, x: &[f32], shape: &[usize], axes: &[usize]) -> Vec<f64> {
        let out_shape: Vec<usize> = (0..shape.len())
            .filter(|a| !axes.contains(a))
            .map(|a| shape[a])
            .collect();
        let n_out: usize = out_shape.iter().product();
        let unravel = |mut f: usize, s: &[usize]| {
            let mut idx = vec![0; s.len()];
            for a in (0..s.len()).rev() {
                idx[a] = f % s[a];
                f /= s[a];
            }
            idx
        };
        (0..n_out)
            .map(|o| {
                let oi = unravel(o, &out_shape);
                let vals: Vec<f64> = (0..x.len())
                    .filter(|&f| {
                        let ii = unravel(f, shape);
                        let kept: Vec<usize> = (0..shape.len())
                            .filter(|a| !axes.contains(a))
                            .map(|a| ii[a])
                            .collect();
                        kept == oi
                    })
                    .map(|f| f64::from(x[f]))
                    .collect();
                match op {
                    ReduceOperation::Sum => vals.iter().sum(),
                    ReduceOperation::Mean => vals.iter().sum::<f64>() / vals.len() as f64,
                    ReduceOperation::Prod => vals.iter().product(),
                    ReduceOperation::Max => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                    ReduceOperation::Min => vals.iter().copied().fold(f64::INFINITY, f64::min),
                }
            })
            .collect()
    }

    #[test]
    fn every_operation_over_axis_sets_matches_the_definition() {
        let shape = [2u32, 3, 4];
        let us = [2usize, 3, 4];
        let mut rng = Lcg(5);
        let x = rng.vec_in(24, 0.5, 1.5);
        for op in ReduceOperation::ALL {
            for axes in [
                vec![0u32],
                vec![1],
                vec![2],
                vec![0, 2],
                vec![2, 0, 1],
                vec![],
            ] {
                for keep_dims in [false, true] {
                    let layer = LayerDescriptor::Reduce(ReduceDescriptor {
                        operation: op,
                        axes: axes.clone().into(),
                        keep_dims,
                    });
                    let out = shapes::reduced(&shape, &axes, keep_dims).unwrap();
                    let got = run(&layer, &[(&shape, &x)], &out);
                    let ax: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
                    assert_close(
                        &got,
                        &oracle(op, &x, &us, &ax),
                        1e-6,
                        &format!("{op:?} {axes:?}"),
                    );
                }
            }
        }
    }

    #[test]
    fn nan_and_empty_reductions() {
        let layer = |operation| {
            LayerDescriptor::Reduce(ReduceDescriptor {
                operation,
                axes: vec![1].into(),
                keep_dims: false,
            })
        };
        let got = run(
            &layer(ReduceOperation::Max),
            &[(&[1, 3], &[1.0, f32::NAN, 2.0])],
            &[1],
        );
        assert!(got[0].is_nan());
        let empty: [f32; 0] = [];
        let at = |op| run(&layer(op), &[(&[2, 0], &empty)], &[2]);
        assert_eq!(at(ReduceOperation::Sum), [0.0, 0.0]);
        assert_eq!(at(ReduceOperation::Prod), [1.0, 1.0]);
        assert_eq!(at(ReduceOperation::Max), [f32::NEG_INFINITY; 2]);
        assert_eq!(at(ReduceOperation::Min), [f32::INFINITY; 2]);
        assert!(at(ReduceOperation::Mean).iter().all(|v| v.is_nan()));
    }
}
