//! Activation: every function (the v1 ones and the 1.1 `Gelu`, in its erf form `a = 0` and
//! its tanh form `a = 1`), element by element, with CpuRef's semantics (see
//! [`ActivationFunction`] for `a` and `b`). A NaN input
//! gives a NaN output for every function.
//! The kernel, [`apply`], works in place, so a fused chain runs it on its output buffer. The
//! erf form of Gelu and the sigmoid have CpuFast's own kernels, written so that the compiler
//! vectorises them (an `exp` by range reduction and a polynomial, and `erfc` as
//! `t · exp(-z² + P(t))`, `t = 1 / (1 + z / 2)`, the Chebyshev fit of Numerical Recipes'
//! `erfcc`, relative error below 1.2e-7); every other function is the API's shared definition
//! ([`ActivationDescriptor::apply_in_place`], inlined) in a loop that `pulp` compiles for the CPU's vector
//! instructions.

use std::ops::Range;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendResult, LayerDescriptor, TensorView,
    TensorViewMut, Workload, WorkloadDesc,
};
use faer::traits::pulp::{Arch, Simd, WithSimd};

use super::{MIN_PARALLEL_ELEMENTS, Signature, invalid_layer};
use crate::gemm::{for_each_part, worth};

/// `data = a(data)`, element by element ([`Epilogue::apply_inline`]'s kernels, in one
/// dispatch to the CPU's instruction set).
pub(crate) fn apply(a: &ActivationDescriptor, data: &mut [f32]) {
    Epilogue {
        activation: Some(*a),
        scale: None,
        shift: None,
    }
    .apply(data);
}

/// ReLU and LeakyReLU by the API's plain loop, never inlined, so never compiled for AVX2:
/// there LLVM turns `*v = if x < 0 { 0 } else { x }` into a masked store of the changed
/// elements only (`vmaskmovps`), which Zen runs far slower than a blend (17 % of the small
/// CNN's time). BoundedReLU's two bounds compile to a minimum and a maximum: vectorised, it
/// is faster (MobileNetV1 block 1.13 -> 1.03x onnxruntime).
#[inline(never)]
fn plain(a: &ActivationDescriptor, data: &mut [f32]) {
    a.apply_in_place(data);
}

/// What a fused chain does to each element of its head's output after the bias: the
/// activation, then `y · scale`, then `y + shift` (each optional; each rounded as the layers
/// it replaces round it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Epilogue {
    pub(crate) activation: Option<ActivationDescriptor>,
    pub(crate) scale: Option<f32>,
    pub(crate) shift: Option<f32>,
}

impl Epilogue {
    /// The epilogue of these parts, `None` when there is none.
    pub(crate) fn of(
        activation: Option<ActivationDescriptor>,
        scale: Option<f32>,
        shift: Option<f32>,
    ) -> Option<Self> {
        (activation.is_some() || scale.is_some() || shift.is_some()).then_some(Self {
            activation,
            scale,
            shift,
        })
    }

    /// The epilogue of `x` in f64 from the definitions (the tests' oracle).
    #[cfg(test)]
    pub(crate) fn reference_f64(&self, x: f32) -> f64 {
        let y = self.activation.map_or(f64::from(x), |a| a.reference_f64(x));
        y * self.scale.map_or(1.0, f64::from) + self.shift.map_or(0.0, f64::from)
    }

    /// The epilogue over `data`, in place.
    pub(crate) fn apply(&self, data: &mut [f32]) {
        self.apply_rows(data, data.len().max(1), 0..data.len());
    }

    /// The epilogue over columns `cols` of every row of `out` (rows `ld` elements apart), in
    /// place, in one dispatch to the CPU's instruction set: a dispatch per row of a block cost
    /// more than the row (as it did in the depthwise kernel).
    pub(crate) fn apply_rows(&self, out: &mut [f32], ld: usize, cols: Range<usize>) {
        struct Rows<'a> {
            epilogue: &'a Epilogue,
            out: &'a mut [f32],
            ld: usize,
            cols: Range<usize>,
        }
        impl WithSimd for Rows<'_> {
            type Output = ();

            #[inline(always)]
            fn with_simd<S: Simd>(self, _: S) {
                for row in self.out.chunks_mut(self.ld) {
                    if let Some(seg) = row.get_mut(self.cols.clone()) {
                        self.epilogue.apply_inline(seg);
                    }
                }
            }
        }
        Arch::new().dispatch(Rows {
            epilogue: self,
            out,
            ld,
            cols,
        });
    }

    /// The epilogue over `data` in the instruction set of the code it is inlined into (a
    /// dispatched kernel): CpuFast's own Gelu (erf form) and sigmoid, [`plain`] ReLU and
    /// LeakyReLU, and every other function as the API defines it
    /// ([`ActivationDescriptor::apply_in_place`], inlined; HardSwish on PP-OCRv4 rec's 37 activation
    /// layers: 1.68 -> 1.16 ms compiled for AVX2).
    #[inline(always)]
    pub(crate) fn apply_inline(&self, data: &mut [f32]) {
        if let Some(a) = &self.activation {
            match a.function {
                ActivationFunction::Gelu if a.a == 0.0 => {
                    data.iter_mut().for_each(|v| *v = gelu_erf(*v));
                }
                ActivationFunction::Gelu => data.iter_mut().for_each(|v| *v = gelu_tanh(*v)),
                ActivationFunction::Sigmoid => data.iter_mut().for_each(|v| *v = sigmoid(*v)),
                ActivationFunction::ReLU | ActivationFunction::LeakyReLU => plain(a, data),
                _ => a.apply_in_place(data),
            }
        }
        match (self.scale, self.shift) {
            (Some(s), Some(t)) => data.iter_mut().for_each(|x| *x = *x * s + t),
            (Some(s), None) => data.iter_mut().for_each(|x| *x *= s),
            (None, Some(t)) => data.iter_mut().for_each(|x| *x += t),
            (None, None) => {}
        }
    }
}

/// `out += residual`, then the epilogue, over a whole tensor: for the kernels that cannot add
/// a residual block by block themselves.
pub(crate) fn add_then(out: &mut [f32], residual: &[f32], epilogue: Option<&Epilogue>) {
    for (o, &r) in out.iter_mut().zip(residual) {
        *o += r;
    }
    if let Some(e) = epilogue {
        e.apply(out);
    }
}

/// `out[i] = e^(beta · x[i] - shift)` (softmax's exponentials) with [`exp`], compiled by
/// `pulp` for the best instruction set the CPU has.
pub(crate) fn exp_shifted(x: &[f32], beta: f32, shift: f32, out: &mut [f32]) {
    struct ExpShifted<'a> {
        x: &'a [f32],
        beta: f32,
        shift: f32,
        out: &'a mut [f32],
    }
    impl WithSimd for ExpShifted<'_> {
        type Output = ();

        #[inline(always)]
        fn with_simd<S: Simd>(self, _: S) {
            for (o, &v) in self.out.iter_mut().zip(self.x) {
                *o = exp(self.beta.mul_add(v, -self.shift));
            }
        }
    }
    Arch::new().dispatch(ExpShifted {
        x,
        beta,
        shift,
        out,
    });
}

/// `e^x` for `x` in [-87, 88] (clamped there; NaN stays NaN), relative error about 2e-7:
/// `2^n · e^r` with `n = round(x / ln 2)`, `r = x - n · ln 2` (ln 2 in two parts, so that `r`
/// is exact) and `e^r` by its Taylor polynomial of degree 7 (`|r| <= ln 2 / 2`).
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * std::f32::consts::LOG2_E).round_ties_even();
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let mut p: f32 = 1.0 / 5040.0;
    for c in [
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
        1.0,
    ] {
        p = p.mul_add(r, c);
    }
    // 2^n from its exponent bits (n in [-126, 127]; NaN converts to 0).
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// `erfc(z)` for `z >= 0`, relative error about 1e-6 (the fit's 1.2e-7 and `exp`'s rounding of
/// `-z²`).
#[inline(always)]
fn erfc(z: f32) -> f32 {
    const P: [f32; 10] = [
        0.170_872_77,
        -0.822_152_23,
        1.488_515_9,
        -1.135_204,
        0.278_868_07,
        -0.186_288_06,
        0.096_784_18,
        0.374_091_96,
        1.000_023_7,
        -1.265_512_2,
    ];
    let t = 1.0 / 0.5f32.mul_add(z, 1.0);
    let mut p = P[0];
    for &c in &P[1..] {
        p = p.mul_add(t, c);
    }
    t * exp(p - z * z)
}

/// Gelu, erf form: `x/2 · (1 + erf(x/√2))`, as `x - x/2 · erfc(x/√2)` for `x >= 0` and
/// `x/2 · erfc(-x/√2)` below, so that both sides keep their relative accuracy.
#[inline(always)]
fn gelu_erf(x: f32) -> f32 {
    let e = erfc(x.abs() * std::f32::consts::FRAC_1_SQRT_2);
    let half = 0.5 * x;
    if x >= 0.0 {
        half.mul_add(-e, x)
    } else {
        half * e
    }
}

/// Gelu, tanh form: `x/2 · (1 + tanh(z))` with `z = √(2/π) · (x + 0.044715 x³)`, computed as
/// `x · σ(2z)` (the same function: `(1 + tanh z) / 2 = σ(2z)`) with CpuFast's vectorisable
/// [`sigmoid`] instead of a scalar `tanh` (magika's two such layers: 4x faster).
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    const TWO_K: f32 = 2.0 * 0.797_884_6; // 2 · √(2/π)
    let z2 = TWO_K * (0.044_715 * x * x).mul_add(x, x);
    x * sigmoid(z2)
}

/// `1 / (1 + e^-x)`, from `e^-|x|` so that no exponent is positive.
#[inline(always)]
pub(crate) fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    let s = 1.0 / (1.0 + e);
    if x >= 0.0 { s } else { e * s }
}

/// `tanh(x)`, vectorisable, relative error below about 3e-7: below |x| = 0.625 its odd
/// Taylor series to `x^19` (under 1e-8 of the value from the terms left out), above
/// `(1 - t) / (1 + t)` with `t = e^(-2|x|) <= 0.29` (no cancellation), the sign restored.
/// A NaN stays NaN.
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    // tanh's Taylor coefficients of x^19, x^17, ..., x^3 (the x term is 1).
    const C: [f32; 9] = [
        -2.391_291_2e-4,
        5.900_274e-4,
        -1.455_834_4e-3,
        3.592_128e-3,
        -8.863_236e-3,
        2.186_948_8e-2,
        -5.396_825_4e-2,
        0.133_333_34,
        -0.333_333_34,
    ];
    let a = x.abs();
    let a2 = a * a;
    let mut p = C[0];
    for &c in &C[1..] {
        p = p.mul_add(a2, c);
    }
    let small = (p * a2).mul_add(a, a);
    let t = exp(-2.0 * a);
    let large = (1.0 - t) / (1.0 + t);
    let y = if a < 0.625 { small } else { large };
    // `x` itself where it is NaN (the branches above would give a number).
    if x.is_nan() { x } else { y.copysign(x) }
}

/// A stand-alone activation layer.
#[derive(Debug)]
pub(crate) struct ActivationWorkload {
    desc: ActivationDescriptor,
    signature: Signature,
    threads: usize,
}

/// Creates the workload of an `Activation` layer, run on up to `threads` threads.
pub(crate) fn create(desc: &WorkloadDesc<'_>, threads: usize) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::Activation(d) = desc.layer else {
        return Err(invalid_layer(desc, "not an Activation layer"));
    };
    if desc.inputs.len() != 1
        || desc.outputs.len() != 1
        || desc.inputs[0].shape != desc.outputs[0].shape
    {
        return Err(invalid_layer(
            desc,
            "an activation maps one tensor to one of its shape",
        ));
    }
    Ok(Box::new(ActivationWorkload {
        desc: *d,
        signature: Signature::of(desc),
        threads,
    }))
}

impl Workload for ActivationWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        self.signature.check(inputs, outputs)?;
        let src = inputs[0].as_f32()?;
        let dst = outputs[0].as_f32_mut()?;
        let threads = worth(dst.len(), MIN_PARALLEL_ELEMENTS, self.threads);
        let chunk = dst.len().div_ceil(threads).max(1);
        for_each_part(
            threads,
            dst.chunks_mut(chunk).zip(src.chunks(chunk)),
            |(d, s)| {
                d.copy_from_slice(s);
                apply(&self.desc, d);
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::ActivationFunction;

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, run};

    /// Relative tolerance against the f64 oracle.
    const REL_TOL: f64 = 1e-6;

    fn act(function: ActivationFunction, a: f32, b: f32) -> ActivationDescriptor {
        ActivationDescriptor { function, a, b }
    }

    /// Every function, with non-default parameters (both forms of Gelu), over [-8, 8) and
    /// extremes.
    #[test]
    fn every_function_matches_its_definition() {
        let mut x = Lcg(3).vec_in(500, -8.0, 8.0);
        x.extend([0.0, -0.0, 1e-30, -1e-30, 80.0, -80.0, 3.0, -3.0, 6.0]);
        let all = [
            act(ActivationFunction::ReLU, 0.0, 0.0),
            act(ActivationFunction::BoundedReLU, 6.0, 0.0),
            act(ActivationFunction::BoundedReLU, 1.0, -1.0),
            act(ActivationFunction::Sigmoid, 0.0, 0.0),
            act(ActivationFunction::TanH, 1.0, 1.0),
            act(ActivationFunction::TanH, 1.7, 0.66),
            act(ActivationFunction::LeakyReLU, 0.1, 0.0),
            act(ActivationFunction::HardSwish, 0.0, 0.0),
            act(ActivationFunction::Elu, 1.0, 0.0),
            act(ActivationFunction::Elu, 0.5, 0.0),
            act(ActivationFunction::Gelu, 0.0, 0.0),
            act(ActivationFunction::Gelu, 1.0, 0.0),
        ];
        let shape = [x.len() as u32];
        for d in all {
            let got = run(&LayerDescriptor::Activation(d), &[(&shape, &x)], &shape);
            let want: Vec<f64> = x.iter().map(|&v| d.reference_f64(v)).collect();
            assert_close(&got, &want, REL_TOL, &format!("{d:?}"));
        }
    }

    /// NaN stays NaN through every function.
    #[test]
    fn nan_propagates() {
        for function in ActivationFunction::ALL {
            for a in [6.0, 0.0, 1.0] {
                let mut v = [f32::NAN; 9];
                apply(&act(function, a, 0.0), &mut v);
                assert!(v.iter().all(|x| x.is_nan()), "{function:?} a = {a}");
            }
        }
    }

    /// CpuFast's own kernels (both forms of Gelu, sigmoid) against the f64 definitions on a fine
    /// grid over [-20, 20]: within 1e-5 of the value, plus 1e-12. (The f64 definition's
    /// `1 + erf(x)` cancels: about 1e-6 relative error of its own at -6, 0 below -8.)
    #[test]
    fn own_kernels_are_accurate() {
        let x: Vec<f32> = (-20_000..=20_000).map(|i| i as f32 * 1e-3).collect();
        for d in [
            act(ActivationFunction::Gelu, 0.0, 0.0),
            act(ActivationFunction::Gelu, 1.0, 0.0),
            act(ActivationFunction::Sigmoid, 0.0, 0.0),
        ] {
            let mut got = x.clone();
            apply(&d, &mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = d.reference_f64(v);
                assert!(
                    (f64::from(g) - want).abs() <= 1e-5 * want.abs() + 1e-12,
                    "{d:?} at {v}: got {g}, want {want}"
                );
            }
        }
    }

    /// The LSTM's `tanh` within 3e-7 of f64's, relatively, on both sides of its switch at
    /// 0.625, at tiny and huge values and the infinities; NaN stays NaN.
    #[test]
    fn tanh_is_accurate() {
        let mut x: Vec<f32> = (-40_000..=40_000).map(|i| i as f32 * 2.5e-4).collect();
        x.extend([
            0.624_999_9,
            0.625,
            -0.625,
            1e-30,
            -1e-30,
            1e-6,
            50.0,
            -90.0,
            1e30,
        ]);
        x.extend([f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0]);
        for &v in &x {
            let (got, want) = (f64::from(tanh(v)), f64::from(v).tanh());
            assert!(
                (got - want).abs() <= 3e-7 * want.abs(),
                "tanh({v}): got {got}, want {want}"
            );
            assert_eq!(
                tanh(v).is_sign_negative(),
                v.is_sign_negative(),
                "tanh({v})"
            );
        }
        assert!(tanh(f32::NAN).is_nan());
    }
}
