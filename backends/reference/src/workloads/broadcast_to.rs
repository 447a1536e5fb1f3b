//! BroadcastTo (Backend API 1.1): the one input repeated along broadcast dimensions to the
//! descriptor's shape (ONNX `Expand`), for data of any type.

use backplane_api::{
    BackendError, BackendResult, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc, bytemuck,
};
use ndarray::{ArrayViewD, ArrayViewMutD, IxDyn, Zip};

use super::{ExpectedShapes, expect_counts, invalid_layer, moving_workload, raw, raw_mut};

/// `shape` as an ndarray dimension.
pub(crate) fn dims(shape: &[u32]) -> IxDyn {
    IxDyn(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>())
}

/// `data` as an array of `shape`.
pub(crate) fn input_view<'a, T>(data: &'a [T], shape: &[u32]) -> BackendResult<ArrayViewD<'a, T>> {
    ArrayViewD::from_shape(dims(shape), data).map_err(|e| {
        BackendError::invalid_argument(format!("tensor does not match its shape: {e}"))
    })
}

/// `a` broadcast to `to` (an error when it does not broadcast).
pub(crate) fn broadcast<'a, T>(
    a: &'a ArrayViewD<'_, T>,
    to: &IxDyn,
) -> BackendResult<ArrayViewD<'a, T>> {
    a.broadcast(to.clone()).ok_or_else(|| {
        BackendError::invalid_argument(format!("{:?} does not broadcast to {to:?}", a.shape()))
    })
}

/// `data` as a writable array of `shape`.
pub(crate) fn output_view<'a, T>(
    data: &'a mut [T],
    shape: &IxDyn,
) -> BackendResult<ArrayViewMutD<'a, T>> {
    ArrayViewMutD::from_shape(shape.clone(), data).map_err(|e| {
        BackendError::invalid_argument(format!("output does not match its shape: {e}"))
    })
}

/// Calls `f(o, x, y)` for every element `o` of `out` (row-major, of shape `out_shape`) with the
/// elements `x` of `a` and `y` of `b` that numpy's broadcasting pairs with it. The walk is in
/// rows: dimensions of one element dropped and neighbours that both inputs step through
/// alike merged, then one loop per row whose inputs advance by 0 or 1 (a `[n, 2048, 1]`
/// against a `[1, 1, 257]` compares rows of 257 against one value each). An error when a
/// shape does not broadcast to `out_shape` or a slice does not hold its shape.
pub(crate) fn zip_broadcast<A: Copy, B: Copy, O>(
    (a, a_shape): (&[A], &[u32]),
    (b, b_shape): (&[B], &[u32]),
    (out, out_shape): (&mut [O], &[u32]),
    mut f: impl FnMut(&mut O, A, B),
) -> BackendResult<()> {
    let volume = |shape: &[u32]| shape.iter().map(|&d| d as usize).product::<usize>();
    if a.len() != volume(a_shape) || b.len() != volume(b_shape) || out.len() != volume(out_shape) {
        return Err(BackendError::invalid_argument(format!(
            "tensors of {} and {} elements broadcast into {} do not match their shapes \
             {a_shape:?}, {b_shape:?}, {out_shape:?}",
            a.len(),
            b.len(),
            out.len()
        )));
    }
    let (sa, sb) = (strides(a_shape, out_shape)?, strides(b_shape, out_shape)?);
    // (size, a's step, b's step) per dimension of more than one element, merged.
    let mut walk: Vec<(usize, usize, usize)> = Vec::new();
    for (i, &d) in out_shape.iter().enumerate() {
        let size = d as usize;
        match walk.last_mut() {
            _ if size == 1 => {}
            Some(last) if last.1 == sa[i] * size && last.2 == sb[i] * size => {
                *last = (last.0 * size, sa[i], sb[i]);
            }
            _ => walk.push((size, sa[i], sb[i])),
        }
    }
    if out.is_empty() {
        return Ok(());
    }
    let ((n, ia, ib), outer) = match walk.split_last() {
        Some((&inner, outer)) => (inner, outer),
        None => ((1, 0, 0), &[][..]),
    };
    let mut index = vec![0usize; outer.len()];
    let (mut at_a, mut at_b) = (0usize, 0usize);
    for row in out.chunks_exact_mut(n) {
        match (ia, ib) {
            (1, 1) => {
                let pairs = a[at_a..][..n].iter().zip(&b[at_b..][..n]);
                row.iter_mut()
                    .zip(pairs)
                    .for_each(|(o, (&x, &y))| f(o, x, y));
            }
            (0, 1) => {
                let x = a[at_a];
                row.iter_mut()
                    .zip(&b[at_b..][..n])
                    .for_each(|(o, &y)| f(o, x, y));
            }
            (1, 0) => {
                let y = b[at_b];
                row.iter_mut()
                    .zip(&a[at_a..][..n])
                    .for_each(|(o, &x)| f(o, x, y));
            }
            _ => {
                for (j, o) in row.iter_mut().enumerate() {
                    f(o, a[at_a + j * ia], b[at_b + j * ib]);
                }
            }
        }
        for (i, &(size, da, db)) in index.iter_mut().zip(outer).rev() {
            *i += 1;
            at_a += da;
            at_b += db;
            if *i < size {
                break;
            }
            at_a -= da * size;
            at_b -= db * size;
            *i = 0;
        }
    }
    Ok(())
}

/// Per dimension of `out`, the step in a row-major tensor of `shape` (aligned to `out`'s last
/// dimensions) that one step of that dimension of `out` takes: 0 where `shape` broadcasts.
fn strides(shape: &[u32], out: &[u32]) -> BackendResult<Vec<usize>> {
    let refuse =
        || BackendError::invalid_argument(format!("{shape:?} does not broadcast to {out:?}"));
    let lead = out.len().checked_sub(shape.len()).ok_or_else(refuse)?;
    let mut steps = vec![0usize; out.len()];
    let mut step = 1usize;
    for (i, &d) in shape.iter().enumerate().rev() {
        if d == out[lead + i] {
            steps[lead + i] = step;
        } else if d != 1 {
            return Err(refuse());
        }
        step *= d as usize;
    }
    Ok(steps)
}

/// Creates the workload of a `BroadcastTo` layer (one input, one output).
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::BroadcastTo(d) = desc.layer else {
        return Err(invalid_layer(desc, "not a BroadcastTo layer"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 1, 1)?;
    if desc.outputs[0].shape != d.shape {
        return Err(invalid_layer(
            desc,
            format_args!(
                "BroadcastTo {:?} written to {}",
                d.shape.as_slice(),
                desc.outputs[0]
            ),
        ));
    }
    Ok(Box::new(BroadcastToWorkload {
        shapes: ExpectedShapes::of(desc),
        input: desc.inputs[0].shape.to_vec(),
        output: dims(&d.shape),
    }))
}

/// Repeats its input.
#[derive(Debug)]
pub struct BroadcastToWorkload {
    shapes: ExpectedShapes,
    input: Vec<u32>,
    output: IxDyn,
}

impl BroadcastToWorkload {
    /// Moves the elements, as `T` (see [`raw`]).
    fn run<T: bytemuck::Pod>(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        let x = input_view(raw::<T>(&inputs[0])?, &self.input)?;
        let out = output_view(raw_mut::<T>(&mut outputs[0])?, &self.output)?;
        Zip::from(out)
            .and(&broadcast(&x, &self.output)?)
            .for_each(|o, &v| *o = v);
        Ok(())
    }
}

moving_workload!(BroadcastToWorkload);

#[cfg(test)]
mod tests {
    use backplane_api::{BroadcastToDescriptor, DataType};

    use super::*;
    use crate::workloads::test_support::{Bytes, try_run_typed, typed};

    /// numpy's pairing, written out: output index `i` reads index `i[k]` of each input's
    /// dimension `k` (aligned right), or 0 where that dimension has one element.
    fn paired(shape: &[u32], out: &[u32], flat: usize) -> usize {
        let mut rest = flat;
        let mut index = vec![0usize; out.len()];
        for (i, &d) in index.iter_mut().zip(out).rev() {
            *i = rest % d as usize;
            rest /= d as usize;
        }
        let lead = out.len() - shape.len();
        shape.iter().enumerate().fold(0, |at, (k, &d)| {
            at * d as usize + if d == 1 { 0 } else { index[lead + k] }
        })
    }

    /// Every way of pairing (rows against values, values against rows, steps that do not
    /// merge, dimensions of one, scalars, nothing) against [`paired`].
    #[test]
    fn zip_broadcast_pairs_as_numpy_does() {
        let cases: [(&[u32], &[u32], &[u32]); 10] = [
            (&[4, 2048, 1], &[1, 1, 257], &[4, 2048, 257]),
            (&[2, 3], &[2, 1], &[2, 3]),
            (&[2, 3, 4], &[2, 3, 4], &[2, 3, 4]),
            (&[1, 3, 1], &[2, 1, 4], &[2, 3, 4]),
            (&[3, 1, 5], &[5], &[3, 2, 5]),
            (&[2, 1, 3, 1], &[1, 4, 1, 2], &[2, 4, 3, 2]),
            (&[], &[2, 3], &[2, 3]),
            (&[], &[], &[]),
            (&[1, 1], &[1], &[1, 1]),
            (&[0, 3], &[3], &[0, 3]),
        ];
        for (sa, sb, so) in cases {
            let volume = |s: &[u32]| s.iter().map(|&d| d as usize).product::<usize>();
            let a: Vec<i64> = (0..volume(sa) as i64).collect();
            let b: Vec<i64> = (0..volume(sb) as i64).map(|v| 1000 * v).collect();
            let mut out = vec![-1i64; volume(so)];
            zip_broadcast((&a, sa), (&b, sb), (&mut out, so), |o, x, y| *o = x + y).unwrap();
            let want: Vec<i64> = (0..volume(so))
                .map(|f| a[paired(sa, so, f)] + b[paired(sb, so, f)])
                .collect();
            assert_eq!(out, want, "{sa:?} with {sb:?} into {so:?}");
        }
        let mut out = [0i64; 6];
        let refused = zip_broadcast(
            (&[1i64, 2][..], &[2]),
            (&[1i64; 3][..], &[3]),
            (&mut out[..], &[2, 3]),
            |_, _, _| {},
        );
        assert!(
            refused
                .unwrap_err()
                .to_string()
                .contains("does not broadcast")
        );
        let short = zip_broadcast(
            (&[1i64][..], &[2]),
            (&[1i64][..], &[1]),
            (&mut out[..2], &[2]),
            |_, _, _| {},
        );
        assert!(short.is_err());
    }

    #[test]
    fn repeats_along_new_and_unit_dimensions() {
        let layer = LayerDescriptor::BroadcastTo(BroadcastToDescriptor {
            shape: vec![2, 2, 3].into(),
        });
        let got = try_run_typed(
            &layer,
            &[(typed(&[2, 1], DataType::Signed32), Bytes::of(&[7i32, -1]))],
            &typed(&[2, 2, 3], DataType::Signed32),
        )
        .unwrap();
        // out[i, j, k] = x[j, 0], by the definition.
        let want: Vec<i32> = (0..12).map(|f| [7, -1][(f / 3) % 2]).collect();
        assert_eq!(got.to_vec::<i32>(), want);
        let got = try_run_typed(
            &layer,
            &[(
                typed(&[3], DataType::Float32),
                Bytes::of(&[0.5f32, 1.5, 2.5]),
            )],
            &typed(&[2, 2, 3], DataType::Float32),
        )
        .unwrap();
        let want: Vec<f32> = (0..12).map(|f| [0.5, 1.5, 2.5][f % 3]).collect();
        assert_eq!(got.to_vec::<f32>(), want);
    }

    #[test]
    fn a_shape_that_does_not_broadcast_is_refused() {
        let layer = LayerDescriptor::BroadcastTo(BroadcastToDescriptor {
            shape: vec![2, 3].into(),
        });
        let err = try_run_typed(
            &layer,
            &[(typed(&[2], DataType::Float32), Bytes::of(&[1.0f32, 2.0]))],
            &typed(&[2, 3], DataType::Float32),
        )
        .unwrap_err();
        assert_eq!(err.code, backplane_api::ErrorCode::Unsupported);
    }
}
