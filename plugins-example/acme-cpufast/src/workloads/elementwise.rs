//! ElementwiseBinary: every [`BinaryOperation`] (`Add`, `Sub`, `Mul`, `Div`, `Maximum`,
//! `Minimum`, `Power`, `SquaredDifference`) in Float32, with numpy broadcasting, any rank, and
//! CpuRef's semantics (IEEE f32 arithmetic; `Maximum`/`Minimum` are [`f32::max`] and
//! [`f32::min`], which return the other operand when one is NaN; `Power` is [`f32::powf`]).
//!
//! [`Broadcast`] simplifies the two shapes once, when the workload is created: dimensions of
//! size 1 are dropped, and adjacent dimensions that both operands step through in one run
//! (both contiguous, or both broadcast) are merged. The output is then walked row by row (its
//! last merged dimension), each operand stepping through a row with stride 1 or 0, so the
//! common cases are single loops the compiler vectorises, one per operation:
//!
//! - same shape: one row of every element;
//! - a scalar or any one-element operand (a constant such as HardSigmoid's `alpha`): one row,
//!   the scalar broadcast;
//! - per channel, `[1, C, 1, 1]` against `[N, C, H, W]` (the squeeze-excitation `Mul`, a
//!   bias): rows of `H·W`, one channel value each.

use backplane_api::{
    BackendResult, BinaryOperation, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc, shapes,
};

use super::{MIN_PARALLEL_ELEMENTS, Signature, invalid_layer};
use crate::gemm::{for_each_part, worth};

/// The numpy broadcast of two operand shapes, simplified for the kernels (see the module
/// documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broadcast {
    /// The merged output dimensions, outermost first (at least one; a 0 for an empty
    /// output); the last is a row.
    dims: Vec<usize>,
    /// Per merged dimension, the step of `a` (0 where `a` is broadcast).
    a_strides: Vec<usize>,
    /// Per merged dimension, the step of `b`.
    b_strides: Vec<usize>,
}

impl Broadcast {
    /// The broadcast of shapes `a` and `b`, or why they do not broadcast.
    pub(crate) fn new(a: &[u32], b: &[u32]) -> Result<Self, String> {
        let out = shapes::broadcast(a, b)?;
        if out.contains(&0) {
            return Ok(Self {
                dims: vec![0],
                a_strides: vec![0],
                b_strides: vec![0],
            });
        }
        let a = operand_strides(a, &out);
        let b = operand_strides(b, &out);
        // Innermost first: (size, a step, b step), merged where both operands continue.
        let mut merged: Vec<(usize, usize, usize)> = Vec::new();
        for ((&size, &sa), &sb) in out.iter().zip(&a).zip(&b).rev() {
            let size = size as usize;
            if size == 1 {
                continue;
            }
            match merged.last_mut() {
                Some((n, ia, ib)) if sa == *ia * *n && sb == *ib * *n => *n *= size,
                _ => merged.push((size, sa, sb)),
            }
        }
        if merged.is_empty() {
            // One element (scalars, or every dimension 1).
            merged.push((1, 0, 0));
        }
        merged.reverse();
        Ok(Self {
            dims: merged.iter().map(|m| m.0).collect(),
            a_strides: merged.iter().map(|m| m.1).collect(),
            b_strides: merged.iter().map(|m| m.2).collect(),
        })
    }

    /// `out = f(a, b)` element by element, with the broadcast, for output elements
    /// `first..first + out.len()` (in row-major order).
    fn run_range(
        &self,
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
        first: usize,
        f: &impl Fn(f32, f32) -> f32,
    ) {
        let rank = self.dims.len();
        let inner = self.dims[rank - 1];
        if inner == 0 || out.is_empty() {
            return;
        }
        let (sa, sb) = (self.a_strides[rank - 1], self.b_strides[rank - 1]);
        let outer = &self.dims[..rank - 1];
        // Where row `first / inner` starts: its index over the outer dimensions and offsets.
        let mut index = vec![0usize; outer.len()];
        let (mut oa, mut ob) = (0usize, 0usize);
        let mut row = first / inner;
        for axis in (0..outer.len()).rev() {
            index[axis] = row % outer[axis];
            row /= outer[axis];
            oa += index[axis] * self.a_strides[axis];
            ob += index[axis] * self.b_strides[axis];
        }
        let mut col = first % inner;
        let mut rest = out;
        while !rest.is_empty() {
            let n = (inner - col).min(rest.len());
            let (seg, tail) = rest.split_at_mut(n);
            rest = tail;
            let (xa, xb) = (oa + col * sa, ob + col * sb);
            match (sa, sb) {
                (1, 1) => {
                    for ((o, &x), &y) in seg.iter_mut().zip(&a[xa..][..n]).zip(&b[xb..][..n]) {
                        *o = f(x, y);
                    }
                }
                (1, _) => {
                    let y = b[xb];
                    for (o, &x) in seg.iter_mut().zip(&a[xa..][..n]) {
                        *o = f(x, y);
                    }
                }
                (_, 1) => {
                    let x = a[xa];
                    for (o, &y) in seg.iter_mut().zip(&b[xb..][..n]) {
                        *o = f(x, y);
                    }
                }
                _ => seg.fill(f(a[xa], b[xb])),
            }
            col = 0;
            // The next row: an odometer over the outer dimensions, the offsets following it.
            for axis in (0..outer.len()).rev() {
                index[axis] += 1;
                oa += self.a_strides[axis];
                ob += self.b_strides[axis];
                if index[axis] < outer[axis] {
                    break;
                }
                index[axis] = 0;
                oa -= self.a_strides[axis] * outer[axis];
                ob -= self.b_strides[axis] * outer[axis];
            }
        }
    }

    /// The whole output on up to `threads` threads, each a contiguous range of it (rows
    /// split anywhere), for outputs of at least [`MIN_PARALLEL_ELEMENTS`].
    pub(crate) fn run_parallel(
        &self,
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
        threads: usize,
        f: impl Fn(f32, f32) -> f32 + Sync,
    ) {
        let threads = worth(out.len(), MIN_PARALLEL_ELEMENTS, threads);
        let chunk = out.len().div_ceil(threads).max(1);
        for_each_part(threads, out.chunks_mut(chunk).enumerate(), |(i, part)| {
            self.run_range(a, b, part, i * chunk, &f)
        });
    }
}

/// The element strides of an operand of `shape` along each axis of the broadcast output
/// `out`: 0 along the axes it is broadcast on (size 1, or missing in front).
fn operand_strides(shape: &[u32], out: &[u32]) -> Vec<usize> {
    let mut strides = vec![0; out.len()];
    let mut step = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        let axis = out.len() - shape.len() + i;
        if d != 1 {
            strides[axis] = step;
        }
        step *= d as usize;
    }
    strides
}

/// `out = op(a, b)` on up to `threads` threads, each operation its own loop (so each is
/// vectorised on its own).
pub(crate) fn apply(
    op: BinaryOperation,
    plan: &Broadcast,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    threads: usize,
) {
    let t = threads;
    match op {
        BinaryOperation::Add => plan.run_parallel(a, b, out, t, |x, y| x + y),
        BinaryOperation::Sub => plan.run_parallel(a, b, out, t, |x, y| x - y),
        BinaryOperation::Mul => plan.run_parallel(a, b, out, t, |x, y| x * y),
        BinaryOperation::Div => plan.run_parallel(a, b, out, t, |x, y| x / y),
        BinaryOperation::Maximum => plan.run_parallel(a, b, out, t, f32::max),
        BinaryOperation::Minimum => plan.run_parallel(a, b, out, t, f32::min),
        BinaryOperation::Power => plan.run_parallel(a, b, out, t, f32::powf),
        BinaryOperation::SquaredDifference => {
            plan.run_parallel(a, b, out, t, |x, y| (x - y) * (x - y))
        }
        // Defined on integers only: `create` refuses them, so no Float32 data reaches here.
        BinaryOperation::BitwiseAnd
        | BinaryOperation::BitwiseOr
        | BinaryOperation::BitwiseXor
        | BinaryOperation::ShiftLeft
        | BinaryOperation::ShiftRight => {}
    }
}

/// A stand-alone ElementwiseBinary layer.
#[derive(Debug)]
pub(crate) struct ElementwiseWorkload {
    op: BinaryOperation,
    plan: Broadcast,
    signature: Signature,
    threads: usize,
}

/// Creates the workload of an `ElementwiseBinary` layer, run on up to `threads` threads.
pub(crate) fn create(desc: &WorkloadDesc<'_>, threads: usize) -> BackendResult<Box<dyn Workload>> {
    let &LayerDescriptor::ElementwiseBinary(op) = desc.layer else {
        return Err(invalid_layer(desc, "not an ElementwiseBinary layer"));
    };
    if op.is_integer_only() {
        return Err(invalid_layer(
            desc,
            format_args!("{op:?} is defined on integers; CpuFast computes Float32"),
        ));
    }
    let ([a, b], [y]) = (desc.inputs.as_slice(), desc.outputs.as_slice()) else {
        return Err(invalid_layer(
            desc,
            "ElementwiseBinary takes two inputs and one output",
        ));
    };
    let expected = shapes::broadcast(&a.shape, &b.shape).map_err(|e| invalid_layer(desc, e))?;
    if y.shape.as_slice() != expected {
        return Err(invalid_layer(
            desc,
            format_args!("output {y} is not the broadcast {expected:?}"),
        ));
    }
    let plan = Broadcast::new(&a.shape, &b.shape).map_err(|e| invalid_layer(desc, e))?;
    Ok(Box::new(ElementwiseWorkload {
        op,
        plan,
        signature: Signature::of(desc),
        threads,
    }))
}

impl Workload for ElementwiseWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        apply(
            self.op,
            &self.plan,
            inputs[0].as_f32()?,
            inputs[1].as_f32()?,
            outputs[0].as_f32_mut()?,
            self.threads,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::test_support::{
        Lcg, assert_close, f32t, make, numel, run, run_with_constants,
    };

    /// Relative tolerance against the f64 oracle: one f32 rounding (two for
    /// `SquaredDifference`; `powf` within an ulp or two).
    const REL_TOL: f64 = 1e-6;

    /// The operation in f64, from its definition.
    fn oracle_op(op: BinaryOperation, x: f64, y: f64) -> f64 {
        match op {
            BinaryOperation::Add => x + y,
            BinaryOperation::Sub => x - y,
            BinaryOperation::Mul => x * y,
            BinaryOperation::Div => x / y,
            BinaryOperation::Maximum => x.max(y),
            BinaryOperation::Minimum => x.min(y),
            BinaryOperation::Power => x.powf(y),
            BinaryOperation::SquaredDifference => (x - y) * (x - y),
            // Defined on integers: not run on Float32 (the loop below skips them).
            _ => f64::NAN,
        }
    }

    /// numpy broadcasting from its definition: output index `i` reads each operand at `i`
    /// with every broadcast dimension's index set to 0.
    fn oracle(
        op: BinaryOperation,
        a_shape: &[u32],
        a: &[f32],
        b_shape: &[u32],
        b: &[f32],
    ) -> Vec<f64> {
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
                oracle_op(op, read(a_shape, a, &index), read(b_shape, b, &index))
            })
            .collect()
    }

    /// Operand values for `op`: positive bases for `Power` (a negative base with a fractional
    /// exponent is NaN, which never compares equal), divisors away from 0 for `Div`.
    fn operands(op: BinaryOperation, rng: &mut Lcg, na: usize, nb: usize) -> (Vec<f32>, Vec<f32>) {
        match op {
            BinaryOperation::Power => (rng.vec_in(na, 0.25, 4.0), rng.vec_in(nb, -3.0, 3.0)),
            BinaryOperation::Div => (rng.vec_in(na, -4.0, 4.0), rng.vec_in(nb, 0.5, 4.0)),
            _ => (rng.vec_in(na, -4.0, 4.0), rng.vec_in(nb, -4.0, 4.0)),
        }
    }

    /// Every operation on every broadcast pattern: same shape, per channel both ways,
    /// trailing and leading broadcasts, both operands broadcast, scalars, empty tensors;
    /// each operand variable or constant.
    #[test]
    fn every_operation_and_broadcast_matches_the_definition() {
        let mut rng = Lcg(5);
        let cases: [(&[u32], &[u32]); 14] = [
            (&[2, 3, 4], &[2, 3, 4]),
            (&[1, 4, 5, 5], &[1, 4, 1, 1]),
            (&[1, 4, 1, 1], &[2, 4, 3, 5]),
            (&[1, 4, 5, 5], &[4, 1, 1]),
            (&[2, 6], &[6]),
            (&[2, 3, 4], &[3, 1]),
            (&[4, 1, 5], &[3, 1]),
            (&[3, 1], &[2, 3, 4]),
            (&[2, 1, 3, 1], &[1, 5, 1, 7]),
            (&[], &[2, 2]),
            (&[3, 17], &[1]),
            (&[], &[]),
            (&[1], &[3, 1, 2]),
            (&[2, 0, 3], &[1, 3]),
        ];
        for op in BinaryOperation::ALL {
            if op.is_integer_only() {
                continue;
            }
            let layer = LayerDescriptor::ElementwiseBinary(op);
            for (sa, sb) in cases {
                let (a, b) = operands(op, &mut rng, numel(sa), numel(sb));
                let out = shapes::broadcast(sa, sb).unwrap();
                let want = oracle(op, sa, &a, sb, &b);
                for (ca, cb) in [(false, false), (false, true), (true, false)] {
                    let got = run_with_constants(&layer, &[(sa, &a, ca), (sb, &b, cb)], &out);
                    assert_close(
                        &got,
                        &want,
                        REL_TOL,
                        &format!("{op:?} {sa:?} {sb:?} constants {ca}/{cb}"),
                    );
                }
            }
        }
    }

    /// CpuRef's semantics at the edges: Maximum and Minimum ignore a NaN operand, a division
    /// by zero is infinite, `0^0 = 1`, a NaN sum stays NaN.
    #[test]
    fn ieee_edges() {
        let s: &[u32] = &[4];
        let a = [f32::NAN, 1.0, 0.0, -2.0];
        let b = [3.0, f32::NAN, 0.0, 0.0];
        let got = |op| {
            run(
                &LayerDescriptor::ElementwiseBinary(op),
                &[(s, &a), (s, &b)],
                s,
            )
        };
        assert_eq!(got(BinaryOperation::Maximum)[..3], [3.0, 1.0, 0.0]);
        assert_eq!(got(BinaryOperation::Minimum)[..3], [3.0, 1.0, 0.0]);
        let div = got(BinaryOperation::Div);
        assert!(div[2].is_nan() && div[3] == f32::NEG_INFINITY);
        assert_eq!(got(BinaryOperation::Power)[2], 1.0);
        assert!(got(BinaryOperation::Add)[0].is_nan());
    }

    /// Ranges that start and end inside rows, split between threads, give exactly the serial
    /// result: same shape, per-channel, a scalar, and broadcasts on both sides.
    #[test]
    fn ranges_and_threads_match_one_pass() {
        let mut rng = Lcg(41);
        for (a_shape, b_shape) in [
            (vec![1u32, 3, 256, 200], vec![1u32, 3, 256, 200]),
            (vec![1, 48, 80, 40], vec![1, 48, 1, 1]),
            (vec![1, 5, 173, 171], vec![1]),
            (vec![7, 1, 139], vec![1, 151, 139]),
        ] {
            let plan = Broadcast::new(&a_shape, &b_shape).unwrap();
            let (a, b) = (rng.vec(numel(&a_shape)), rng.vec(numel(&b_shape)));
            let len = numel(&shapes::broadcast(&a_shape, &b_shape).unwrap());
            assert!(len >= MIN_PARALLEL_ELEMENTS, "{a_shape:?}");
            let mut one = vec![0.0; len];
            plan.run_range(&a, &b, &mut one, 0, &|x, y| x * 3.0 - y);
            for threads in [2, 3, 7] {
                let mut split = vec![f32::NAN; len];
                plan.run_parallel(&a, &b, &mut split, threads, |x, y| x * 3.0 - y);
                assert_eq!(
                    split, one,
                    "{a_shape:?} with {b_shape:?}, {threads} threads"
                );
            }
            // A range in the middle, starting and ending inside rows.
            let (first, n) = (len / 3 + 1, len / 5 + 3);
            let mut part = vec![0.0; n];
            plan.run_range(&a, &b, &mut part, first, &|x, y| x * 3.0 - y);
            assert_eq!(part, one[first..first + n], "{a_shape:?} with {b_shape:?}");
        }
    }

    /// The simplification gives the fast paths: one row for the same shape and for a scalar,
    /// rows of `H·W` with a per-channel operand, and two rows' worth of merged dimensions
    /// when both operands are broadcast.
    #[test]
    fn broadcasts_are_merged() {
        let plan = |a: &[u32], b: &[u32]| {
            let p = Broadcast::new(a, b).unwrap();
            (p.dims, p.a_strides, p.b_strides)
        };
        assert_eq!(
            plan(&[2, 8, 6, 5], &[2, 8, 6, 5]),
            (vec![480], vec![1], vec![1])
        );
        assert_eq!(plan(&[1, 8, 6, 5], &[1]), (vec![240], vec![1], vec![0]));
        assert_eq!(plan(&[], &[3, 4]), (vec![12], vec![0], vec![1]));
        assert_eq!(
            plan(&[1, 8, 1, 1], &[1, 8, 6, 5]),
            (vec![8, 30], vec![1, 0], vec![30, 1])
        );
        assert_eq!(
            plan(&[2, 8, 6, 5], &[1, 8, 1, 1]),
            (vec![2, 8, 30], vec![240, 30, 1], vec![0, 1, 0])
        );
        assert_eq!(plan(&[1, 1], &[1]), (vec![1], vec![0], vec![0]));
        assert_eq!(plan(&[3, 0], &[1]), (vec![0], vec![0], vec![0]));
    }

    /// Layer support and the factory agree on what does not broadcast.
    #[test]
    fn shapes_that_do_not_broadcast_are_refused() {
        let layer = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);
        let Err(e) = make(&layer, &[f32t(&[2, 3]), f32t(&[4])], &[f32t(&[2, 3])]) else {
            panic!("a workload for [2, 3] * [4]");
        };
        assert!(
            e.message.as_str().contains("do not broadcast"),
            "{}",
            e.message.as_str()
        );
    }
}
