//! Quantised `FullyConnected` and `BatchMatMul` (ONNX `QLinearMatMul`, `MatMulInteger`
//! followed by a requantisation, or QDQ `MatMul`/`Gemm`).
//!
//! Each output is `acc = bias[j] + sum_k((x - x_offset) * (w - w_offset))` exactly in `i32`
//! (no bias for `BatchMatMul`), then the [`Requantizer`] of its column `j`. The weights (`b`)
//! are quantised per tensor or per column: along the output axis of `FullyConnected`'s
//! weights (1 for `[in, out]`, 0 for `[out, in]`), along `b`'s column axis for
//! `BatchMatMul` (its last axis, the one before when `transpose_b`). `x` (`a`) may be u8
//! while the weights are s8.

use backplane_api::{
    BackendResult, LayerDescriptor, TensorInfo, TensorView, TensorViewMut, Workload, WorkloadDesc,
    shapes,
};

use super::{QParams, Requantizer, bias_values, check_buffers};
use crate::workloads::{
    ExpectedShapes, batch_matmul::matrix_offsets, checked_num_elements, expect_counts,
    invalid_layer,
};

/// The shape of a matrix product layer: `count` products of `[m, k]` by `[k, n]` matrices,
/// shared by the static ([`QMatMulWorkload`]) and the dynamic
/// ([`super::dynamic::DynamicMatMulWorkload`]) forms.
#[derive(Debug, Clone)]
pub(crate) struct Geometry {
    m: usize,
    k: usize,
    /// The number of output columns (one weight scale each when per axis).
    pub(crate) n: usize,
    /// Per output matrix, the offsets of its `x` and `w` matrices.
    x_offsets: Vec<usize>,
    w_offsets: Vec<usize>,
    transpose_x: bool,
    transpose_w: bool,
    /// The axis of the weights that runs along the output columns.
    pub(crate) column_axis: usize,
}

impl Geometry {
    /// The geometry of `desc`, a `FullyConnected` or `BatchMatMul` layer with input `x`,
    /// weights `w` and output `y` (an error naming the layer when the shapes disagree).
    pub(crate) fn of(
        desc: &WorkloadDesc<'_>,
        x: &TensorInfo,
        w: &TensorInfo,
        y: &TensorInfo,
    ) -> BackendResult<Self> {
        for t in [x, w, y] {
            checked_num_elements(desc, t)?;
        }
        let dim = |s: &[u32], from_end: usize| s[s.len() - from_end] as usize;
        Ok(match desc.layer {
            LayerDescriptor::FullyConnected(d) => {
                expect_counts(desc.inputs.len(), 1, if d.bias_enabled { 3 } else { 2 }, 1)?;
                let (&[rows, k], &[w0, w1], &[yr, n]) =
                    (x.shape.as_slice(), w.shape.as_slice(), y.shape.as_slice())
                else {
                    return Err(invalid_layer(
                        desc,
                        "FullyConnected tensors must have rank 2",
                    ));
                };
                let expected_w = if d.transpose_weights { [n, k] } else { [k, n] };
                if [w0, w1] != expected_w
                    || yr != rows
                    || desc
                        .inputs
                        .get(2)
                        .is_some_and(|b| b.shape.as_slice() != [n])
                {
                    return Err(invalid_layer(desc, "inconsistent FullyConnected tensors"));
                }
                Self {
                    m: rows as usize,
                    k: k as usize,
                    n: n as usize,
                    x_offsets: vec![0],
                    w_offsets: vec![0],
                    transpose_x: false,
                    transpose_w: d.transpose_weights,
                    column_axis: usize::from(!d.transpose_weights),
                }
            }
            LayerDescriptor::BatchMatMul(d) => {
                expect_counts(desc.inputs.len(), 1, 2, 1)?;
                let expected = shapes::batch_matmul(d, &x.shape, &w.shape)
                    .map_err(|e| invalid_layer(desc, e))?;
                if expected != y.shape.as_slice() {
                    return Err(invalid_layer(
                        desc,
                        format_args!("BatchMatMul of {x} and {w} into {y}"),
                    ));
                }
                let (m, k) = if d.transpose_a {
                    (dim(&x.shape, 1), dim(&x.shape, 2))
                } else {
                    (dim(&x.shape, 2), dim(&x.shape, 1))
                };
                let n = dim(&y.shape, 1);
                let batch = &y.shape[..y.shape.len() - 2];
                let (x_offsets, w_offsets) = if y.shape.contains(&0) {
                    (Vec::new(), Vec::new())
                } else {
                    (
                        matrix_offsets(batch, &x.shape, m * k),
                        matrix_offsets(batch, &w.shape, k * n),
                    )
                };
                Self {
                    m,
                    k,
                    n,
                    x_offsets,
                    w_offsets,
                    transpose_x: d.transpose_a,
                    transpose_w: d.transpose_b,
                    column_axis: w.shape.len() - if d.transpose_b { 2 } else { 1 },
                }
            }
            other => {
                return Err(invalid_layer(
                    desc,
                    format_args!("{} is not a matrix product", other.kind()),
                ));
            }
        })
    }

    /// Checks that the weights `w` (parameters `w_q`) are quantised per tensor or along the
    /// column axis.
    pub(crate) fn check_weight_axis(
        &self,
        desc: &WorkloadDesc<'_>,
        w: &TensorInfo,
        w_q: &QParams,
    ) -> BackendResult<()> {
        if w_q.axis.is_some_and(|a| a != self.column_axis) {
            return Err(invalid_layer(
                desc,
                format_args!(
                    "{w} must be quantized per tensor or along axis {}",
                    self.column_axis
                ),
            ));
        }
        Ok(())
    }

    /// Runs every product: for each output element (flat index `o`, column `j`),
    /// `emit(o, j, sum_k x(xi) * w(wi))` with the sum wrapping in `i32`, where `x` and `w`
    /// give the (zero-point-subtracted) value at a flat index of the input and the weights.
    #[inline]
    pub(crate) fn for_each_product(
        &self,
        x: impl Fn(usize) -> i32,
        w: impl Fn(usize) -> i32,
        mut emit: impl FnMut(usize, usize, i32),
    ) {
        let (m, k, n) = (self.m, self.k, self.n);
        for (mat, (&xo, &wo)) in self.x_offsets.iter().zip(&self.w_offsets).enumerate() {
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0i32;
                    for kk in 0..k {
                        let xi = if self.transpose_x {
                            kk * m + i
                        } else {
                            i * k + kk
                        };
                        let wi = if self.transpose_w {
                            j * k + kk
                        } else {
                            kk * n + j
                        };
                        acc = acc.wrapping_add(x(xo + xi).wrapping_mul(w(wo + wi)));
                    }
                    emit(mat * m * n + i * n + j, j, acc);
                }
            }
        }
    }
}

/// A quantised matrix product: the [`Geometry`], the operands' parameters and the
/// requantisation of the output.
#[derive(Debug)]
pub struct QMatMulWorkload {
    geometry: Geometry,
    x_q: QParams,
    w_q: QParams,
    requantizer: Requantizer,
    shapes: ExpectedShapes,
}

/// The input, the weights and the output of a product layer (a bias may follow the weights).
pub(crate) fn operands<'d>(
    desc: &'d WorkloadDesc<'_>,
) -> BackendResult<(&'d TensorInfo, &'d TensorInfo, &'d TensorInfo)> {
    match desc.inputs.as_slice() {
        [x, w, ..] if desc.outputs.len() == 1 => Ok((x, w, &desc.outputs[0])),
        _ => Err(invalid_layer(
            desc,
            "expects at least 2 inputs and 1 output",
        )),
    }
}

/// Creates the workload of a quantised `FullyConnected` or `BatchMatMul` layer.
pub fn create(desc: &WorkloadDesc<'_>) -> BackendResult<Box<dyn Workload>> {
    let (x, w, y) = operands(desc)?;
    let geometry = Geometry::of(desc, x, w, y)?;
    let x_q = QParams::per_tensor(desc, x)?;
    let w_q = QParams::of(desc, w)?;
    let y_q = QParams::per_tensor(desc, y)?;
    geometry.check_weight_axis(desc, w, &w_q)?;
    Ok(Box::new(QMatMulWorkload {
        requantizer: Requantizer::new(&x_q, &w_q, &y_q, geometry.n),
        geometry,
        x_q,
        w_q,
        shapes: ExpectedShapes::of(desc),
    }))
}

impl Workload for QMatMulWorkload {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorViewMut<'_>],
    ) -> BackendResult<()> {
        check_buffers(&self.shapes, inputs, outputs)?;
        let out = &mut outputs[0];
        let (xb, wb) = (inputs[0].data.as_slice(), inputs[1].data.as_slice());
        let bias = bias_values(inputs.get(2).map(|b| b.data.as_slice()), self.geometry.n);
        let (xt, wt) = (self.x_q.qtype, self.w_q.qtype);
        let (x_off, w_off) = (self.x_q.offset, self.w_q.offset);
        let y = out.data.as_mut_slice();
        self.geometry.for_each_product(
            |i| xt.read(xb[i]) - x_off,
            |i| wt.read(wb[i]) - w_off,
            |o, j, acc| y[o] = self.requantizer.apply(bias[j].wrapping_add(acc), j),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use backplane_api::{
        BatchMatMulDescriptor, DataType, FullyConnectedDescriptor, LayerDescriptor, TensorInfo,
    };

    use super::super::test_support::{
        XorShift, byte, i32_bytes, qt, qt_axis, range, run_bytes, sat, value,
    };

    /// The oracle: `y[i][j] = sat(rne((bias[j] + sum (x - xo)(w - wo)) * m[j]) + yo)` with
    /// plain row-major loops over untransposed copies. Returns how many outputs saturated.
    #[allow(
        clippy::too_many_arguments,
        reason = "a test case is all of a product's parameters"
    )]
    fn oracle(
        x: &[i32],
        w: &[i32],
        bias: &[i32],
        [m, k, n]: [usize; 3],
        (x_off, w_off, y_off): (i32, i32, i32),
        mult: &[f32],
        (lo, hi): (i32, i32),
    ) -> Vec<i32> {
        let mut y = Vec::new();
        for i in 0..m {
            for j in 0..n {
                let mut acc = i64::from(bias[j]);
                for kk in 0..k {
                    acc += i64::from(x[i * k + kk] - x_off) * i64::from(w[kk * n + j] - w_off);
                }
                y.push(sat(acc as f32 * mult[j], y_off, lo, hi));
            }
        }
        y
    }

    #[test]
    fn quantized_fully_connected_matches_oracle() {
        let mut rng = XorShift(0xDEAD_BEEF_1234_5678);
        let mut saturated = 0;
        for (x_dt, w_dt, transpose, per_axis) in [
            (DataType::QAsymmU8, DataType::QAsymmU8, false, false),
            (DataType::QAsymmU8, DataType::QSymmS8, true, true),
            (DataType::QAsymmS8, DataType::QSymmS8, false, true),
            (DataType::QAsymmS8, DataType::QAsymmS8, true, false),
        ] {
            let (rows, k, n) = (3usize, 7usize, 5usize);
            let (lo, hi) = range(x_dt);
            let (x_off, y_off) = (rng.int(lo, hi), rng.int(lo, hi));
            let w_off = if w_dt == DataType::QSymmS8 {
                0
            } else {
                let (l, h) = range(w_dt);
                rng.int(l, h)
            };
            let (x_s, y_s) = (0.03f32, rng.float(0.05, 0.6));
            let w_s: Vec<f32> = (0..n).map(|_| rng.float(0.002, 0.03)).collect();
            let xb = rng.bytes(rows * k);
            let wb = rng.bytes(k * n); // [k, n] row-major
            let bias: Vec<i32> = (0..n).map(|_| rng.int(-5000, 5000)).collect();
            let xv: Vec<i32> = xb.iter().map(|&b| value(x_dt, b)).collect();
            let wv: Vec<i32> = wb.iter().map(|&b| value(w_dt, b)).collect();
            let mult: Vec<f32> = (0..n)
                .map(|j| (x_s * if per_axis { w_s[j] } else { w_s[0] }) / y_s)
                .collect();
            let want = oracle(
                &xv,
                &wv,
                &bias,
                [rows, k, n],
                (x_off, w_off, y_off),
                &mult,
                (lo, hi),
            );
            // The weights as the layer takes them.
            let (w_shape, w_in, axis) = if transpose {
                let mut t = vec![0u8; k * n];
                for kk in 0..k {
                    for j in 0..n {
                        t[j * k + kk] = wb[kk * n + j];
                    }
                }
                ([n as u32, k as u32], t, 0)
            } else {
                ([k as u32, n as u32], wb.clone(), 1)
            };
            let w_info = if per_axis {
                qt_axis(&w_shape, w_dt, axis, &w_s, w_off)
            } else {
                qt(&w_shape, w_dt, w_s[0], w_off)
            };
            let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                bias_enabled: true,
                transpose_weights: transpose,
            });
            let got = run_bytes(
                &layer,
                &[
                    (qt(&[rows as u32, k as u32], x_dt, x_s, x_off), xb),
                    (w_info, w_in),
                    (
                        TensorInfo::new(&[n as u32], DataType::Signed32),
                        i32_bytes(&bias),
                    ),
                ],
                &qt(&[rows as u32, n as u32], x_dt, y_s, y_off),
            )
            .unwrap();
            let got: Vec<i32> = got.iter().map(|&b| value(x_dt, b)).collect();
            assert_eq!(got, want, "{x_dt} x {w_dt} transpose={transpose}");
            saturated += got.iter().filter(|&&v| v == lo || v == hi).count();
        }
        assert!(saturated > 0);
    }

    /// Broadcast batch, u8 activations with s8 per-column weights, and an exact tie case
    /// (m = 0.5).
    #[test]
    fn quantized_batch_matmul_matches_oracle() {
        let mut rng = XorShift(77);
        for (x_dt, w_dt, per_axis, tie) in [
            (DataType::QAsymmU8, DataType::QSymmS8, true, false),
            (DataType::QAsymmS8, DataType::QAsymmS8, false, false),
            (DataType::QAsymmU8, DataType::QAsymmU8, false, true),
        ] {
            let (batch, m, k, n) = (3usize, 2usize, 4usize, 3usize);
            let (lo, hi) = range(x_dt);
            let (x_off, y_off) = (rng.int(lo, hi), rng.int(lo, hi));
            let w_off = if w_dt == DataType::QSymmS8 {
                0
            } else {
                let (l, h) = range(w_dt);
                rng.int(l, h)
            };
            let (x_s, y_s) = if tie {
                (0.5, 0.25)
            } else {
                (0.04f32, rng.float(0.1, 0.9))
            };
            let w_s: Vec<f32> = (0..n)
                .map(|_| if tie { 0.25 } else { rng.float(0.002, 0.03) })
                .collect();
            // With `tie`, values within one step of their zero points keep the accumulators
            // small, so that odd ones are ties (m = 0.5) rather than saturated.
            let mut near = |dt: DataType, off: i32, count: usize| -> Vec<u8> {
                let (l, h) = range(dt);
                (0..count)
                    .map(|_| byte(dt, (off + rng.int(-1, 1)).clamp(l, h)))
                    .collect()
            };
            let (xb, wb) = if tie {
                (near(x_dt, x_off, batch * m * k), near(w_dt, w_off, k * n))
            } else {
                (rng.bytes(batch * m * k), rng.bytes(k * n))
            };
            let xv: Vec<i32> = xb.iter().map(|&b| value(x_dt, b)).collect();
            let wv: Vec<i32> = wb.iter().map(|&b| value(w_dt, b)).collect();
            let mult: Vec<f32> = (0..n)
                .map(|j| (x_s * if per_axis { w_s[j] } else { w_s[0] }) / y_s)
                .collect();
            let mut want = Vec::new();
            for bi in 0..batch {
                want.extend(oracle(
                    &xv[bi * m * k..(bi + 1) * m * k],
                    &wv,
                    &vec![0; n],
                    [m, k, n],
                    (x_off, w_off, y_off),
                    &mult,
                    (lo, hi),
                ));
            }
            let w_info = if per_axis {
                qt_axis(&[k as u32, n as u32], w_dt, 1, &w_s, w_off)
            } else {
                qt(&[k as u32, n as u32], w_dt, w_s[0], w_off)
            };
            let layer = LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
                transpose_a: false,
                transpose_b: false,
            });
            let got = run_bytes(
                &layer,
                &[
                    (
                        qt(&[batch as u32, m as u32, k as u32], x_dt, x_s, x_off),
                        xb,
                    ),
                    (w_info, wb),
                ],
                &qt(&[batch as u32, m as u32, n as u32], x_dt, y_s, y_off),
            )
            .unwrap();
            let got: Vec<i32> = got.iter().map(|&b| value(x_dt, b)).collect();
            assert_eq!(got, want, "{x_dt} x {w_dt}");
        }
    }
}
