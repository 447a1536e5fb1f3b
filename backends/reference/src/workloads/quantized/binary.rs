//! Quantised `ElementwiseBinary` `Add` and `Mul` with numpy broadcasting (ONNX
//! `QLinearAdd`/`QLinearMul`, which onnxruntime's QDQ transformer fuses a QDQ `Add`/`Mul`
//! into), each input with its own per-tensor parameters, the output with its own: for `u8`
//! tensors. onnxruntime (x86-64, 1.31) leaves a QDQ `Add`/`Mul` with `i8` tensors unfused, so
//! `quantized::create` runs those by the QDQ definition ([`super::real`]).
//!
//! The arithmetic is onnxruntime's x86-64 kernels' (MLAS `qladd_avx2.cpp` for `Add`, the
//! SSE2 kernel of `qlmul.cpp` for `Mul`), in f32, with raw quantised values `a`, `b` (as f32)
//! and a final conversion that rounds half to even and saturates:
//! - `Add`: `ra = a_scale / c_scale`, `rb = b_scale / c_scale`,
//!   `fixed = c_offset - (ra * a_offset + rb * b_offset)`; then
//!   `c = fma(a, ra, fma(b, rb, fixed))` when both inputs vary along the innermost output
//!   dimension; when one of them is constant along it (a broadcast scalar for the kernel),
//!   its term is folded into `fixed` first with a separate multiply and add
//!   (`fixed' = fixed + b * rb`, then `c = fma(a, ra, fixed')`, or the same with the roles
//!   swapped).
//! - `Mul`: `c = (a - a_offset) * (b - b_offset)` exactly as an integer, then
//!   `c as f32 * ((a_scale * b_scale) / c_scale) + c_offset`, multiply then add.

use backplane_api::{
    BackendResult, BinaryOperation, LayerDescriptor, TensorView, TensorViewMut, Workload,
    WorkloadDesc,
};
use ndarray::{IxDyn, Zip};

use super::{QParams, check_buffers};
use crate::workloads::{
    ExpectedShapes,
    broadcast_to::{broadcast, dims, input_view, output_view},
    expect_counts, invalid_layer,
};

/// Which of onnxruntime's `Add` forms applies (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AddForm {
    /// Both inputs vary along the innermost dimension.
    Vectors,
    /// `a` is constant along it.
    ScalarA,
    /// `b` is constant along it.
    ScalarB,
}

/// A quantised `Add` or `Mul`.
#[derive(Debug)]
pub struct QBinaryWorkload {
    op: BinaryOperation,
    form: AddForm,
    a_shape: Vec<u32>,
    b_shape: Vec<u32>,
    out: IxDyn,
    a: QParams,
    b: QParams,
    c: QParams,
    shapes: ExpectedShapes,
}

/// Creates the workload of a quantised `ElementwiseBinary` `Add` or `Mul`.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let LayerDescriptor::ElementwiseBinary(op @ (BinaryOperation::Add | BinaryOperation::Mul)) =
        desc.layer
    else {
        return Err(invalid_layer(desc, "not a quantized Add or Mul"));
    };
    expect_counts(desc.inputs.len(), desc.outputs.len(), 2, 1)?;
    let (a, b, c) = (&desc.inputs[0], &desc.inputs[1], &desc.outputs[0]);
    let last = |s: &[u32]| s.last().copied().unwrap_or(1);
    let out_last = last(&c.shape);
    let (a_last, b_last) = (last(&a.shape), last(&b.shape));
    let form = if out_last > 1 && a_last == 1 && b_last != 1 {
        AddForm::ScalarA
    } else if out_last > 1 && b_last == 1 && a_last != 1 {
        AddForm::ScalarB
    } else {
        AddForm::Vectors
    };
    Ok(Box::new(QBinaryWorkload {
        op: *op,
        form,
        a_shape: a.shape.to_vec(),
        b_shape: b.shape.to_vec(),
        out: dims(&c.shape),
        a: QParams::per_tensor(desc, a)?,
        b: QParams::per_tensor(desc, b)?,
        c: QParams::per_tensor(desc, c)?,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl QBinaryWorkload {
    /// The output value (before saturation) of raw inputs `a` and `b`, as a function.
    fn kernel(&self) -> impl Fn(i32, i32) -> f32 + '_ {
        let (a, b, c) = (&self.a, &self.b, &self.c);
        let ra = a.scale() / c.scale();
        let rb = b.scale() / c.scale();
        let fixed = c.offset as f32 - (ra * a.offset as f32 + rb * b.offset as f32);
        let mul_ratio = (a.scale() * b.scale()) / c.scale();
        let (op, form) = (self.op, self.form);
        move |qa: i32, qb: i32| {
            let (fa, fb) = (qa as f32, qb as f32);
            match (op, form) {
                (BinaryOperation::Mul, _) => {
                    ((qa - a.offset) * (qb - b.offset)) as f32 * mul_ratio + c.offset as f32
                }
                (_, AddForm::Vectors) => fa.mul_add(ra, fb.mul_add(rb, fixed)),
                (_, AddForm::ScalarB) => fa.mul_add(ra, fixed + fb * rb),
                (_, AddForm::ScalarA) => fb.mul_add(rb, fixed + fa * ra),
            }
        }
    }
}

impl Workload for QBinaryWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        check_buffers(&self.shapes, inputs, outputs)?;
        let a = input_view(inputs[0].data.as_slice(), &self.a_shape)?;
        let b = input_view(inputs[1].data.as_slice(), &self.b_shape)?;
        let out = output_view(outputs[0].data.as_mut_slice(), &self.out)?;
        let f = self.kernel();
        let (at, bt, ct) = (self.a.qtype, self.b.qtype, self.c.qtype);
        Zip::from(out)
            .and(&broadcast(&a, &self.out)?)
            .and(&broadcast(&b, &self.out)?)
            .for_each(|o, &x, &y| {
                *o = ct.write(ct.saturate_round(f(at.read(x), bt.read(y)), 0));
            });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{BinaryOperation, DataType, LayerDescriptor};

    use super::super::test_support::{XorShift, qt, range, rne, run_bytes, value};

    /// The oracle, written from the module doc: the same f32 expressions evaluated per
    /// element over an explicit broadcast index, with an explicit tie rule and clamp (for
    /// `i8` tensors the QDQ definition, which `quantized::create` runs for them instead).
    #[test]
    fn quantized_add_and_mul_match_onnxruntime_formulas() {
        let mut rng = XorShift(0xABCD_EF01_2345_6789);
        let mut saturated = 0;
        let cases: [(&[u32], &[u32], &[u32]); 4] = [
            (&[2, 3, 4], &[2, 3, 4], &[2, 3, 4]),
            (&[2, 3, 4], &[4], &[2, 3, 4]),
            (&[2, 3, 4], &[2, 3, 1], &[2, 3, 4]),
            (&[3, 1], &[1, 5], &[3, 5]),
        ];
        for op in [BinaryOperation::Add, BinaryOperation::Mul] {
            for dt in [DataType::QAsymmU8, DataType::QAsymmS8] {
                for (sa, sb, sc) in cases {
                    let (lo, hi) = range(dt);
                    let (za, zb, zc) = (rng.int(lo, hi), rng.int(lo, hi), rng.int(lo, hi));
                    let (xa, xb, xc) = (
                        rng.float(0.01, 0.1),
                        rng.float(0.01, 0.1),
                        if op == BinaryOperation::Mul {
                            rng.float(0.05, 0.5)
                        } else {
                            rng.float(0.02, 0.2)
                        },
                    );
                    let n = |s: &[u32]| s.iter().product::<u32>() as usize;
                    let (ab, bb) = (rng.bytes(n(sa)), rng.bytes(n(sb)));
                    let got = run_bytes(
                        &LayerDescriptor::ElementwiseBinary(op),
                        &[
                            (qt(sa, dt, xa, za), ab.clone()),
                            (qt(sb, dt, xb, zb), bb.clone()),
                        ],
                        &qt(sc, dt, xc, zc),
                    )
                    .unwrap();
                    // Explicit broadcast: index of output element `i` in an input of `s`.
                    let index = |s: &[u32], mut i: usize| -> usize {
                        let mut idx = 0;
                        let mut stride = 1;
                        for (k, &d) in sc.iter().enumerate().rev() {
                            let coord = i % d as usize;
                            i /= d as usize;
                            let off = sc.len() - s.len();
                            if k >= off && s[k - off] != 1 {
                                idx += coord * stride;
                            }
                            if k >= off {
                                stride *= s[k - off] as usize;
                            }
                        }
                        idx
                    };
                    let (ra, rb) = (xa / xc, xb / xc);
                    let fixed = zc as f32 - (ra * za as f32 + rb * zb as f32);
                    let last = |s: &[u32]| *s.last().unwrap();
                    let scalar_b = last(sc) > 1 && last(sb) == 1 && last(sa) != 1;
                    let scalar_a = last(sc) > 1 && last(sa) == 1 && last(sb) != 1;
                    for (i, &g) in got.iter().enumerate() {
                        let qa = value(dt, ab[index(sa, i)]);
                        let qb = value(dt, bb[index(sb, i)]);
                        let (fa, fb) = (qa as f32, qb as f32);
                        // i8: the QDQ definition, the zero point added after rounding.
                        let (da, db) = ((qa - za) as f32 * xa, (qb - zb) as f32 * xb);
                        let v = if dt == DataType::QAsymmS8 {
                            let r = if op == BinaryOperation::Mul {
                                da * db
                            } else {
                                da + db
                            };
                            rne(r / xc) as f32 + zc as f32
                        } else if op == BinaryOperation::Mul {
                            ((qa - za) * (qb - zb)) as f32 * ((xa * xb) / xc) + zc as f32
                        } else if scalar_b {
                            fa.mul_add(ra, fixed + fb * rb)
                        } else if scalar_a {
                            fb.mul_add(rb, fixed + fa * ra)
                        } else {
                            fa.mul_add(ra, fb.mul_add(rb, fixed))
                        };
                        let want = rne(v).clamp(i64::from(lo), i64::from(hi)) as i32;
                        if want == lo || want == hi {
                            saturated += 1;
                        }
                        assert_eq!(value(dt, g), want, "{op:?} {dt} {sa:?} {sb:?} element {i}");
                        // Within one step of the exact real-valued result.
                        let real = if op == BinaryOperation::Mul {
                            f64::from(xa) * f64::from(qa - za) * f64::from(xb) * f64::from(qb - zb)
                        } else {
                            f64::from(xa) * f64::from(qa - za) + f64::from(xb) * f64::from(qb - zb)
                        };
                        let exact = (real / f64::from(xc) + f64::from(zc))
                            .clamp(f64::from(lo), f64::from(hi));
                        assert!((f64::from(want) - exact).abs() <= 1.0);
                    }
                }
            }
        }
        assert!(saturated > 0, "no output saturated");
    }

    /// A tie of the final conversion rounds to even: 0.25 * 5 / 0.5 = 2.5 -> 2, 0.25 * 7 / 0.5
    /// = 3.5 -> 4 (Add with b = its zero point).
    #[test]
    fn quantized_add_tie_rounds_to_even() {
        let dt = DataType::QAsymmU8;
        let got = run_bytes(
            &LayerDescriptor::ElementwiseBinary(BinaryOperation::Add),
            &[
                (qt(&[2], dt, 0.25, 0), vec![5, 7]),
                (qt(&[2], dt, 1.0, 10), vec![10, 10]),
            ],
            &qt(&[2], dt, 0.5, 0),
        )
        .unwrap();
        assert_eq!(got, vec![2, 4]);
    }
}
