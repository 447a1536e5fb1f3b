//! Mean over a block of adjacent axes, reduced dimensions kept as 1 or dropped (the memory
//! layout is the same either way): GlobalAveragePool is a Mean over `[2, 3]` of NCHW, the
//! squeeze-excitation blocks' first layer. Axes of size 1 do not count as gaps, so `[1, 3]`
//! of `[N, C, 1, W]` is adjacent; axes with a gap of size > 1 between them (`[1, 3]` of
//! `[N, C, H, W]`) are refused with a reason. Empty axes reduce nothing (a copy).
//!
//! The input is seen as `[outer, len, inner]` (`len` the reduced elements): with `inner = 1`
//! (the reduced axes last, as in GlobalAveragePool) each output is the mean of a contiguous
//! row, summed in f64 in interleaved partial sums ([`sum_f64`]); otherwise rows of `inner`
//! are added into an f64 accumulator element-wise. Both loops vectorise. The sum divided by
//! `len` is rounded to f32 once; a mean over no element is NaN (0/0).

use backplane_api::{
    BackendResult, LayerDescriptor, MeanDescriptor, TensorInfo, TensorView, TensorViewMut,
    Workload, WorkloadDesc, shapes,
};

use super::{Signature, invalid_layer, split_axes, sum_f64};

/// A mean's geometry, fixed when it is created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MeanPlan {
    /// Elements reduced into each output.
    len: usize,
    /// The stride between them (the product of the dimensions after the reduced ones).
    inner: usize,
}

impl MeanPlan {
    /// The plan of `d` from `x` to `y`, or why CpuFast does not run it.
    pub(crate) fn new(d: &MeanDescriptor, x: &TensorInfo, y: &TensorInfo) -> Result<Self, String> {
        let shape = x.shape.as_slice();
        let expected = shapes::reduced(shape, &d.axes, d.keep_dims)?;
        if y.shape.as_slice() != expected {
            return Err(format!(
                "the mean of {shape:?} over {:?} is {expected:?}, not {:?}",
                d.axes.as_slice(),
                y.shape.as_slice()
            ));
        }
        let reduced = |i: usize| d.axes.contains(&(i as u32));
        // The axes that matter: dimensions of size 1 neither move data nor make a gap.
        let mut moving = (0..shape.len()).filter(|&i| reduced(i) && shape[i] != 1);
        let Some(first) = moving.next() else {
            return Ok(Self { len: 1, inner: 1 });
        };
        let last = moving.next_back().unwrap_or(first);
        if let Some(gap) = (first..last).find(|&i| !reduced(i) && shape[i] != 1) {
            return Err(format!(
                "Mean over axes {:?} of {shape:?}: only adjacent axes are reduced, and axis \
                 {gap} (size {}) lies between them",
                d.axes.as_slice(),
                shape[gap]
            ));
        }
        let (_, len, inner) = split_axes(shape, first..last + 1);
        Ok(Self { len, inner })
    }

    /// `out` = the means of `x`.
    pub(crate) fn run(&self, x: &[f32], out: &mut [f32]) {
        let (len, inner) = (self.len, self.inner);
        if out.is_empty() {
            return;
        }
        if len == 0 {
            out.fill(f32::NAN);
            return;
        }
        let n = len as f64;
        if inner == 1 {
            for (o, row) in out.iter_mut().zip(x.chunks_exact(len)) {
                *o = (sum_f64(row, |v| v) / n) as f32;
            }
            return;
        }
        let mut acc = vec![0.0f64; inner];
        for (o, block) in out.chunks_exact_mut(inner).zip(x.chunks_exact(len * inner)) {
            let (head, rest) = block.split_at(inner);
            for (s, &v) in acc.iter_mut().zip(head) {
                *s = f64::from(v);
            }
            for row in rest.chunks_exact(inner) {
                for (s, &v) in acc.iter_mut().zip(row) {
                    *s += f64::from(v);
                }
            }
            for (y, &s) in o.iter_mut().zip(&acc) {
                *y = (s / n) as f32;
            }
        }
    }
}

/// A stand-alone Mean layer.
#[derive(Debug)]
pub(crate) struct MeanWorkload {
    plan: MeanPlan,
    signature: Signature,
}

/// Creates the workload of a `Mean` layer.
pub(crate) fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (LayerDescriptor::Mean(d), [x], [y]) =
        (desc.layer, desc.inputs.as_slice(), desc.outputs.as_slice())
    else {
        return Err(invalid_layer(desc, "not a Mean of one input"));
    };
    Ok(Box::new(MeanWorkload {
        plan: MeanPlan::new(d, x, y).map_err(|e| invalid_layer(desc, e))?,
        signature: Signature::of(desc),
    }))
}

impl Workload for MeanWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        self.plan.run(inputs[0].as_f32()?, outputs[0].as_f32_mut()?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::Support;

    use super::*;
    use crate::{
        layer_support::is_layer_supported,
        workloads::test_support::{Lcg, assert_close, f32t, numel, run},
    };

    /// Relative tolerance against the f64 oracle: f64 sums, one rounding to f32.
    const REL_TOL: f64 = 1e-6;

    fn mean(axes: &[u32], keep_dims: bool) -> LayerDescriptor {
        LayerDescriptor::Mean(MeanDescriptor {
            axes: axes.to_vec().into(),
            keep_dims,
        })
    }

    /// The definition with naive loops: every input element is added, in f64, to the output
    /// whose index is its own with the reduced axes dropped; then each sum is divided by the
    /// count of elements that went into it.
    fn oracle(shape: &[u32], axes: &[u32], x: &[f32]) -> Vec<f64> {
        let kept: Vec<usize> = (0..shape.len())
            .filter(|i| !axes.contains(&(*i as u32)))
            .collect();
        let out_len: usize = kept.iter().map(|&i| shape[i] as usize).product();
        let (mut sum, mut count) = (vec![0.0f64; out_len], vec![0usize; out_len]);
        for (flat, &v) in x.iter().enumerate() {
            let mut rest = flat;
            let mut index = vec![0; shape.len()];
            for axis in (0..shape.len()).rev() {
                index[axis] = rest % shape[axis] as usize;
                rest /= shape[axis] as usize;
            }
            let o = kept
                .iter()
                .fold(0, |o, &i| o * shape[i] as usize + index[i]);
            sum[o] += f64::from(v);
            count[o] += 1;
        }
        sum.iter().zip(&count).map(|(s, &c)| s / c as f64).collect()
    }

    /// GlobalAveragePool on PaddleOCR's squeeze-excitation sizes and odd ones, every other
    /// adjacent block of axes (leading, middle, all, one, none), both `keep_dims`.
    #[test]
    fn adjacent_axes_match_the_definition() {
        let mut rng = Lcg(11);
        let cases: [(&[u32], &[u32]); 11] = [
            (&[1, 16, 12, 48], &[2, 3]),
            (&[2, 3, 5, 7], &[3, 2]),
            (&[1, 8, 1, 1], &[2, 3]),
            (&[2, 3, 5, 7], &[1]),
            (&[2, 3, 5, 7], &[0, 1]),
            (&[2, 3, 5, 7], &[1, 2, 3]),
            (&[2, 3, 5, 7], &[0, 1, 2, 3]),
            (&[2, 3, 5, 7], &[3]),
            (&[2, 3, 5, 7], &[]),
            (&[2, 3, 1, 9], &[1, 3]),
            (&[4, 1, 6], &[0, 1]),
        ];
        for (shape, axes) in cases {
            let x = rng.vec_in(numel(shape), -2.0, 3.0);
            let want = oracle(shape, axes, &x);
            for keep_dims in [true, false] {
                let out = shapes::reduced(shape, axes, keep_dims).unwrap();
                let got = run(&mean(axes, keep_dims), &[(shape, &x)], &out);
                assert_close(
                    &got,
                    &want,
                    REL_TOL,
                    &format!("{shape:?} axes {axes:?} keep {keep_dims}"),
                );
            }
        }
    }

    /// A large common offset does not cost digits (f64 sums), and a mean over no element is
    /// NaN, as 0/0.
    #[test]
    fn offsets_and_empty_reductions() {
        let shape: &[u32] = &[1, 2, 33, 35];
        let x: Vec<f32> = Lcg(3).vec(numel(shape)).iter().map(|v| 1.0e4 + v).collect();
        let got = run(&mean(&[2, 3], true), &[(shape, &x)], &[1, 2, 1, 1]);
        assert_close(&got, &oracle(shape, &[2, 3], &x), REL_TOL, "1e4 ± 1");
        let got = run(&mean(&[1], false), &[(&[2, 0, 3], &[])], &[2, 3]);
        assert!(got.iter().all(|v| v.is_nan()), "{got:?}");
    }

    /// Axes with a gap, and outputs of another shape, are refused with a reason.
    #[test]
    fn gaps_and_wrong_outputs_are_refused() {
        let support = |layer: &LayerDescriptor, x: &[u32], y: &[u32]| match is_layer_supported(
            layer,
            &[f32t(x)],
            &[f32t(y)],
        ) {
            Support::Supported => "supported".to_owned(),
            Support::Unsupported(r) => r.to_string(),
        };
        assert_eq!(
            support(&mean(&[1, 3], true), &[2, 3, 5, 7], &[2, 1, 5, 1]),
            "CpuFast: Mean over axes [1, 3] of [2, 3, 5, 7]: only adjacent axes are reduced, \
             and axis 2 (size 5) lies between them"
        );
        assert_eq!(
            support(&mean(&[2, 3], true), &[2, 3, 5, 7], &[2, 3]),
            "CpuFast: the mean of [2, 3, 5, 7] over [2, 3] is [2, 3, 1, 1], not [2, 3]"
        );
        assert_eq!(
            support(&mean(&[2, 3], false), &[2, 3, 5, 7], &[2, 3]),
            "supported"
        );
        assert!(support(&mean(&[4], true), &[2, 3, 5, 7], &[2, 3, 5, 7]).contains("axes [4]"));
    }
}
