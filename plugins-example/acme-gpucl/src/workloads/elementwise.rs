//! Activation, ElementwiseUnary, ElementwiseBinary and BatchNormalization: one kernel
//! launch each, one work item per element (`kernels/elementwise.cl`).

use std::sync::Arc;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BackendResult, LayerDescriptor, Workload,
    WorkloadDesc,
};
use backplane_backend_kit::constants;

use super::{Builder, KArg, Src, broadcast_strides, count, invalid_layer, padded, strides};
use crate::device::Device;

/// The kernels' number of an activation (`activate` in `elementwise.cl`): the function's
/// discriminant, 8 for Gelu's tanh form, -1 for none.
pub(crate) fn activation_code(a: Option<&ActivationDescriptor>) -> i32 {
    match a {
        None => -1,
        Some(d) if d.function == ActivationFunction::Gelu && d.a != 0.0 => 8,
        Some(d) => d.function as i32,
    }
}

/// The three activation arguments of a kernel: code, `a`, `b`.
pub(crate) fn activation_args(a: Option<&ActivationDescriptor>) -> [KArg; 3] {
    [
        KArg::Int(activation_code(a)),
        KArg::Float(a.map_or(0.0, |d| d.a)),
        KArg::Float(a.map_or(0.0, |d| d.b)),
    ]
}

/// The workload of an Activation, ElementwiseUnary, ElementwiseBinary or BatchNormalization.
pub(crate) fn create(
    device: &Arc<Device>,
    desc: &WorkloadDesc<'_>,
) -> BackendResult<Box<dyn Workload>> {
    let mut b = Builder::new(device, desc);
    let out = &desc.outputs[0];
    let n = count(out).map_err(|e| invalid_layer(desc, e))?;
    let global = n as usize;
    match desc.layer {
        LayerDescriptor::Activation(a) => {
            let x = b.input(0)?;
            let [f, fa, fb] = activation_args(Some(a));
            b.kernel(
                "activation",
                vec![
                    KArg::Buf(x),
                    KArg::Buf(Src::Output(0)),
                    KArg::Int(n),
                    f,
                    fa,
                    fb,
                ],
                global,
            )?;
        }
        LayerDescriptor::ElementwiseUnary(op) => {
            let x = b.input(0)?;
            b.kernel(
                "unary",
                vec![
                    KArg::Buf(x),
                    KArg::Buf(Src::Output(0)),
                    KArg::Int(n),
                    KArg::Int(*op as i32),
                ],
                global,
            )?;
        }
        LayerDescriptor::ElementwiseBinary(op) => {
            let shape = out.shape.as_slice();
            let table = (|| -> Result<Vec<usize>, String> {
                let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
                let mut p = padded(&dims, 1)?.to_vec();
                for input in &desc.inputs[..2] {
                    p.extend(padded(&broadcast_strides(&input.shape, shape), 0)?);
                }
                Ok(p)
            })()
            .map_err(|e| invalid_layer(desc, e))?;
            let (x, y) = (b.input(0)?, b.input(1)?);
            let p = b.upload_i32(&table)?;
            b.kernel(
                "binary",
                vec![
                    KArg::Buf(x),
                    KArg::Buf(y),
                    KArg::Buf(Src::Output(0)),
                    KArg::Buf(p),
                    KArg::Int(n),
                    KArg::Int(*op as i32),
                ],
                global,
            )?;
        }
        LayerDescriptor::BatchNormalization(d) => {
            // y = (x - mean) / sqrt(var + eps) * scale + bias = x * mul + add, per channel.
            let params: Vec<Vec<f32>> = (1..5)
                .map(|slot| constant_f32(desc, slot))
                .collect::<BackendResult<_>>()?;
            let [scale, bias, mean, var] = [&params[0], &params[1], &params[2], &params[3]];
            let mul: Vec<f32> = scale
                .iter()
                .zip(var)
                .map(|(s, v)| s / (v + d.epsilon).sqrt())
                .collect();
            let add: Vec<f32> = bias
                .iter()
                .zip(mean)
                .zip(&mul)
                .map(|((b, m), k)| b - m * k)
                .collect();
            let channels = out.shape.get(1).copied().unwrap_or(1) as usize;
            let inner = strides(&out.shape).get(1).copied().unwrap_or(1);
            let x = b.input(0)?;
            let (mul, add) = (b.upload_f32(&mul)?, b.upload_f32(&add)?);
            b.kernel(
                "channel_affine",
                vec![
                    KArg::Buf(x),
                    KArg::Buf(mul),
                    KArg::Buf(add),
                    KArg::Buf(Src::Output(0)),
                    KArg::Int(n),
                    KArg::Int(channels as i32),
                    KArg::Int(inner as i32),
                ],
                global,
            )?;
        }
        other => {
            return Err(invalid_layer(
                desc,
                format_args!("{} is not an element-wise layer", other.kind()),
            ));
        }
    }
    Ok(b.build())
}

/// The value of constant input `slot` as `f32`s (copied: a constant's bytes need not be
/// aligned; the kit's reader, its error naming the layer).
pub(crate) fn constant_f32(desc: &WorkloadDesc<'_>, slot: usize) -> BackendResult<Vec<f32>> {
    constants::constant_f32(desc, slot).map_err(|e| invalid_layer(desc, e))
}

#[cfg(test)]
mod tests {
    use backplane_api::{BinaryOperation, UnaryOperation};

    use super::*;
    use crate::workloads::test_support::{Lcg, assert_close, cst, numel, run1, var};

    /// Every activation function (Gelu in both forms) against `reference_f64`, on an odd
    /// length, with values that reach every branch.
    #[test]
    fn activations_match_their_definitions() {
        let mut x = Lcg(1).vec(1001).iter().map(|v| v * 8.0).collect::<Vec<_>>();
        x.extend([0.0, -0.0, 3.0, -3.0, 6.0, 40.0, -40.0]);
        let shape = [x.len() as u32];
        for function in ActivationFunction::ALL {
            for (a, b) in [(0.0, 0.0), (1.0, 0.5), (6.0, -1.0), (0.2, 2.0)] {
                if function == ActivationFunction::Gelu && a != 0.0 && a != 1.0 {
                    continue;
                }
                let d = ActivationDescriptor { function, a, b };
                let got = run1(
                    &LayerDescriptor::Activation(d),
                    &[var(&shape, x.clone())],
                    &shape,
                );
                let want: Vec<f64> = x.iter().map(|&v| d.reference_f64(v)).collect();
                assert_close(&got, &want, &format!("{d:?}"));
            }
        }
    }

    #[test]
    fn unary_operations() {
        let x: Vec<f32> = Lcg(2).vec(517).iter().map(|v| v * 4.0).collect();
        let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.1).collect();
        let shape = [11, 47];
        // Inside (-1, 1) for the inverse functions and Tan (away from its poles), at least 1.1
        // for Acosh.
        let unit: Vec<f32> = x.iter().map(|v| v / 4.5).collect();
        let above_one: Vec<f32> = pos.iter().map(|v| v + 1.0).collect();
        for op in UnaryOperation::ALL {
            use UnaryOperation::*;
            let input = match op {
                Log | Sqrt | Rsqrt => &pos,
                Asin | Acos | Atanh | Tan => &unit,
                Acosh => &above_one,
                _ => &x,
            };
            let f = |v: f64| match op {
                Abs => v.abs(),
                Neg => -v,
                Exp => v.exp(),
                Log => v.ln(),
                Sqrt => v.sqrt(),
                Rsqrt => 1.0 / v.sqrt(),
                Reciprocal => 1.0 / v,
                Sin => v.sin(),
                Cos => v.cos(),
                Erf => erf(v),
                Ceil => v.ceil(),
                Floor => v.floor(),
                Tan => v.tan(),
                Asin => v.asin(),
                Acos => v.acos(),
                Atan => v.atan(),
                Sinh => v.sinh(),
                Cosh => v.cosh(),
                Asinh => v.asinh(),
                Acosh => v.acosh(),
                Atanh => v.atanh(),
                Round => v.round_ties_even(),
            };
            let got = run1(
                &LayerDescriptor::ElementwiseUnary(op),
                &[var(&shape, input.clone())],
                &shape,
            );
            let want: Vec<f64> = input.iter().map(|&v| f(f64::from(v))).collect();
            assert_close(&got, &want, &format!("{op:?}"));
        }
    }

    /// The error function by its series (|x| <= 4 here), independent of any library.
    fn erf(x: f64) -> f64 {
        if x.abs() > 6.0 {
            return x.signum();
        }
        let (mut sum, mut term, mut n) = (x, x, 0.0);
        while term.abs() > 1e-17 * sum.abs().max(1e-300) {
            n += 1.0;
            term *= -x * x / n;
            sum += term / (2.0 * n + 1.0);
            if n > 400.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    /// Numpy broadcasting up to rank 6, every operation, constant and non-constant operands.
    #[test]
    fn binary_operations_broadcast() {
        let cases: [(&[u32], &[u32]); 5] = [
            (&[3, 5, 7], &[3, 5, 7]),
            (&[2, 1, 5], &[3, 1]),
            (&[1], &[4, 3, 1, 2]),
            (&[2, 1, 3, 1, 2, 3], &[5, 1, 4, 1, 1]),
            (&[7, 1], &[1, 9]),
        ];
        let mut g = Lcg(3);
        for (sa, sb) in cases {
            let out = backplane_api::shapes::broadcast(sa, sb).unwrap();
            let (a, b) = (g.vec(numel(sa)), g.vec(numel(sb)));
            for op in BinaryOperation::ALL {
                use BinaryOperation::*;
                if op.is_integer_only() {
                    continue;
                }
                // Powers of positive bases, so that every exponent is defined.
                let a = if op == Power {
                    a.iter().map(|v| v.abs() + 0.5).collect()
                } else {
                    a.clone()
                };
                let at = |s: &[u32], v: &[f32], idx: &[usize]| -> f64 {
                    let lead = out.len() - s.len();
                    let mut off = 0;
                    for (k, &d) in s.iter().enumerate() {
                        let i = if d == 1 { 0 } else { idx[lead + k] };
                        off = off * d as usize + i;
                    }
                    f64::from(v[off])
                };
                let mut want = Vec::new();
                for flat in 0..numel(&out) {
                    let mut idx = vec![0; out.len()];
                    let mut r = flat;
                    for d in (0..out.len()).rev() {
                        idx[d] = r % out[d] as usize;
                        r /= out[d] as usize;
                    }
                    let (x, y) = (at(sa, &a, &idx), at(sb, &b, &idx));
                    want.push(match op {
                        Add => x + y,
                        Sub => x - y,
                        Mul => x * y,
                        Div => x / y,
                        Maximum => x.max(y),
                        Minimum => x.min(y),
                        Power => x.powf(y),
                        SquaredDifference => (x - y) * (x - y),
                        _ => f64::NAN,
                    });
                }
                let layer = LayerDescriptor::ElementwiseBinary(op);
                let got = run1(&layer, &[var(sa, a.clone()), var(sb, b.clone())], &out);
                assert_close(&got, &want, &format!("{op:?} {sa:?} {sb:?}"));
                let got = run1(&layer, &[var(sa, a.clone()), cst(sb, b.clone())], &out);
                assert_close(&got, &want, &format!("{op:?} {sa:?} const {sb:?}"));
            }
        }
    }

    #[test]
    fn batch_normalization_per_channel() {
        let (n, c, h, w) = (2, 3, 5, 7);
        let mut g = Lcg(4);
        let x = g.vec(n * c * h * w);
        let scale = g.vec(c);
        let bias = g.vec(c);
        let mean = g.vec(c);
        let varc: Vec<f32> = g.vec(c).iter().map(|v| v.abs() + 0.2).collect();
        let eps = 1e-5f32;
        let shape = [n as u32, c as u32, h as u32, w as u32];
        let layer =
            LayerDescriptor::BatchNormalization(backplane_api::BatchNormalizationDescriptor {
                epsilon: eps,
                layout: backplane_api::DataLayout::Nchw,
            });
        let p = |v: &Vec<f32>| cst(&[c as u32], v.clone());
        let got = run1(
            &layer,
            &[
                var(&shape, x.clone()),
                p(&scale),
                p(&bias),
                p(&mean),
                p(&varc),
            ],
            &shape,
        );
        let want: Vec<f64> = x
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let ch = (i / (h * w)) % c;
                (f64::from(v) - f64::from(mean[ch])) / (f64::from(varc[ch]) + f64::from(eps)).sqrt()
                    * f64::from(scale[ch])
                    + f64::from(bias[ch])
            })
            .collect();
        assert_close(&got, &want, "batch norm");
    }
}
