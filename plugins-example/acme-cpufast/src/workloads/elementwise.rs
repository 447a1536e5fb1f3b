//! ElementwiseBinary `Add` with numpy broadcasting, any rank. The output is walked row by row
//! (its last dimension); each operand steps through a row with stride 1 or 0 (broadcast), so
//! the common cases (same shape, a per-channel bias, a scalar) are plain loops.

use backplane_api::{
    BackendResult, BinaryOperation, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc, shapes,
};

use super::{Signature, invalid_layer};

/// The strides of `shape` seen from an output of `rank` dimensions: 0 along broadcast (size
/// 1 or missing) dimensions.
fn broadcast_strides(shape: &[u32], out: &[usize]) -> Vec<usize> {
    let rank = out.len();
    let mut strides = vec![0; rank];
    let mut step = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        let axis = rank - shape.len() + i;
        if d as usize == out[axis] && d != 1 {
            strides[axis] = step;
        }
        step *= d as usize;
    }
    strides
}

/// `a + b` with numpy broadcasting, for fixed shapes.
#[derive(Debug, Clone)]
pub(crate) struct BroadcastAdd {
    out: Vec<usize>,
    a_strides: Vec<usize>,
    b_strides: Vec<usize>,
}

impl BroadcastAdd {
    /// The broadcast of shapes `a` and `b`, or why they do not broadcast.
    pub(crate) fn new(a: &[u32], b: &[u32]) -> Result<Self, String> {
        let mut out: Vec<usize> = shapes::broadcast(a, b)?
            .iter()
            .map(|&d| d as usize)
            .collect();
        let (mut a, mut b) = (a.to_vec(), b.to_vec());
        if out.is_empty() {
            // Two scalars: one row of one element.
            (out, a, b) = (vec![1], vec![1], vec![1]);
        }
        Ok(Self {
            a_strides: broadcast_strides(&a, &out),
            b_strides: broadcast_strides(&b, &out),
            out,
        })
    }

    /// `out = a + b`.
    pub(crate) fn run(&self, a: &[f32], b: &[f32], out: &mut [f32]) {
        let rank = self.out.len();
        let inner = self.out[rank - 1];
        if inner == 0 || self.out.contains(&0) {
            return;
        }
        let (sa, sb) = (self.a_strides[rank - 1], self.b_strides[rank - 1]);
        let mut index = vec![0usize; rank - 1];
        for row in out.chunks_exact_mut(inner) {
            let offset =
                |strides: &[usize]| index.iter().zip(strides).map(|(i, s)| i * s).sum::<usize>();
            let (oa, ob) = (offset(&self.a_strides), offset(&self.b_strides));
            match (sa, sb) {
                (1, 1) => {
                    for ((o, &x), &y) in
                        row.iter_mut().zip(&a[oa..][..inner]).zip(&b[ob..][..inner])
                    {
                        *o = x + y;
                    }
                }
                (1, 0) => {
                    let y = b[ob];
                    for (o, &x) in row.iter_mut().zip(&a[oa..][..inner]) {
                        *o = x + y;
                    }
                }
                (0, 1) => {
                    let x = a[oa];
                    for (o, &y) in row.iter_mut().zip(&b[ob..][..inner]) {
                        *o = x + y;
                    }
                }
                _ => row.fill(a[oa] + b[ob]),
            }
            // Next row: increment the index over the outer dimensions.
            for axis in (0..rank - 1).rev() {
                index[axis] += 1;
                if index[axis] < self.out[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
    }
}

/// A stand-alone `Add`.
#[derive(Debug)]
pub(crate) struct AddWorkload {
    add: BroadcastAdd,
    signature: Signature,
}

/// Creates the workload of an `ElementwiseBinary(Add)` layer.
pub(crate) fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    if desc.layer != &LayerDescriptor::ElementwiseBinary(BinaryOperation::Add) {
        return Err(invalid_layer(
            desc,
            "CpuFast runs only the Add of ElementwiseBinary",
        ));
    }
    let ([a, b], [y]) = (desc.inputs.as_slice(), desc.outputs.as_slice()) else {
        return Err(invalid_layer(desc, "Add takes two inputs and one output"));
    };
    let add = BroadcastAdd::new(&a.shape, &b.shape).map_err(|e| invalid_layer(desc, e))?;
    let expected: Vec<u32> =
        shapes::broadcast(&a.shape, &b.shape).map_err(|e| invalid_layer(desc, e))?;
    if y.shape.as_slice() != expected {
        return Err(invalid_layer(
            desc,
            format_args!("output {y} is not the broadcast {expected:?}"),
        ));
    }
    Ok(Box::new(AddWorkload {
        add,
        signature: Signature::of(desc),
    }))
}

impl Workload for AddWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        self.add.run(
            inputs[0].as_f32()?,
            inputs[1].as_f32()?,
            outputs[0].as_f32_mut()?,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, numel, run};

    /// Relative tolerance (one rounding of an f32 sum).
    const REL_TOL: f64 = 1e-6;

    /// numpy broadcasting from its definition: output index `i` reads `a` at `i` with every
    /// broadcast dimension's index set to 0.
    fn oracle(a_shape: &[u32], a: &[f32], b_shape: &[u32], b: &[f32]) -> Vec<f64> {
        let out = shapes::broadcast(a_shape, b_shape).unwrap();
        let rank = out.len();
        let read = |shape: &[u32], data: &[f32], index: &[usize]| {
            let mut flat = 0;
            for (i, &d) in shape.iter().enumerate() {
                let at = index[rank - shape.len() + i];
                flat = flat * d as usize + if d == 1 { 0 } else { at };
            }
            f64::from(data[flat])
        };
        (0..numel(&out))
            .map(|mut f| {
                let mut index = vec![0; rank];
                for axis in (0..rank).rev() {
                    index[axis] = f % out[axis] as usize;
                    f /= out[axis] as usize;
                }
                read(a_shape, a, &index) + read(b_shape, b, &index)
            })
            .collect()
    }

    #[test]
    fn broadcasting_shapes() {
        let mut rng = Lcg(5);
        for (sa, sb) in [
            (&[2, 3, 4][..], &[2, 3, 4][..]),
            (&[1, 4, 5, 5], &[4, 1, 1]),
            (&[1, 4, 5, 5], &[1, 4, 1, 1]),
            (&[2, 6], &[6]),
            (&[2, 3, 4], &[3, 1]),
            (&[4, 1, 5], &[3, 1]),
            (&[3, 1], &[2, 3, 4]),
            (&[], &[2, 2]),
            (&[], &[]),
            (&[1], &[3, 1, 2]),
        ] {
            let (a, b) = (rng.vec(numel(sa)), rng.vec(numel(sb)));
            let out = shapes::broadcast(sa, sb).unwrap();
            let layer = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
            let got = run(&layer, &[(sa, &a), (sb, &b)], &out);
            assert_close(
                &got,
                &oracle(sa, &a, sb, &b),
                REL_TOL,
                &format!("{sa:?} + {sb:?}"),
            );
        }
    }
}
