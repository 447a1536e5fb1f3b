//! Tests of `dynamic.rs`.

use backplane_api::{
    BatchMatMulDescriptor, DataType, FullyConnectedDescriptor, LayerDescriptor, TensorInfo,
    bytemuck,
};

use super::DynamicQuantization;
use crate::workloads::quantized::test_support::{XorShift, qt, qt_axis, run_bytes, sat, value};

/// The oracle's `DynamicQuantizeLinear`, step by step as the layers doc defines it (f32
/// arithmetic, the rounding of `test_support::sat`): the scale, the zero point and the
/// values `q - zp`. An all-zero input gives `q - zp = 0` whatever the scale.
fn quantize_oracle(x: &[f32]) -> (f32, Vec<i64>) {
    let mut lo = 0.0f32;
    let mut hi = 0.0f32;
    for &v in x {
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    let s = (hi - lo) / 255.0;
    if s == 0.0 {
        return (s, vec![0; x.len()]);
    }
    let zp = sat(0.0 - lo / s, 0, 0, 255);
    let q = x
        .iter()
        .map(|&v| i64::from(sat(v / s, zp, 0, 255) - zp))
        .collect();
    (s, q)
}

/// The oracle of a product of `x` (`[m, k]` row-major, `batch` of them) by the weights
/// `w` (`[k, n]` row-major, already minus their offset, the same for every batch):
/// `y = (acc as f32) * (s * w_scale[j]) + bias[j]`.
fn product_oracle(
    x: &[f32],
    w: &[i64],
    w_scales: &[f32],
    bias: Option<&[f32]>,
    [batch, m, k, n]: [usize; 4],
) -> Vec<f32> {
    let (s, q) = quantize_oracle(x);
    let mut y = Vec::new();
    for b in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let acc: i64 = (0..k)
                    .map(|kk| q[b * m * k + i * k + kk] * w[kk * n + j])
                    .sum();
                let ws = w_scales[if w_scales.len() == 1 { 0 } else { j }];
                let mut v = acc as f32 * (s * ws);
                if let Some(bias) = bias {
                    v += bias[j];
                }
                y.push(v);
            }
        }
    }
    y
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(v).to_vec()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `[k, n]` row-major bytes transposed to `[n, k]`.
fn transposed(wb: &[u8], k: usize, n: usize) -> Vec<u8> {
    let mut t = vec![0u8; k * n];
    for kk in 0..k {
        for j in 0..n {
            t[j * k + kk] = wb[kk * n + j];
        }
    }
    t
}

/// Random inputs of several ranges (mixed signs, all positive so that `zp = 0`, all
/// negative so that `zp = 255`), the three weight types per tensor and per column, both
/// weight layouts, with and without bias: the outputs equal the oracle's bit for bit.
#[test]
fn dynamic_fully_connected_matches_oracle() {
    let mut rng = XorShift(0x5EED_D1A6_0000_0001);
    let cases = [
        (DataType::QSymmS8, false, true, true, (-2.0, 3.0)),
        (DataType::QSymmS8, true, true, false, (-0.5, 0.25)),
        (DataType::QAsymmS8, false, false, true, (0.1, 4.0)),
        (DataType::QAsymmU8, true, false, true, (-7.0, -0.01)),
        (DataType::QAsymmU8, false, true, false, (-1e-3, 5e-4)),
    ];
    for (w_dt, transpose, per_axis, with_bias, (lo, hi)) in cases {
        let (rows, k, n) = (4usize, 9usize, 5usize);
        let x: Vec<f32> = (0..rows * k).map(|_| rng.float(lo, hi)).collect();
        let w_off = match w_dt {
            DataType::QSymmS8 => 0,
            DataType::QAsymmS8 => rng.int(-20, 20),
            _ => rng.int(100, 150),
        };
        let w_s: Vec<f32> = (0..if per_axis { n } else { 1 })
            .map(|_| rng.float(0.001, 0.05))
            .collect();
        let wb = rng.bytes(k * n);
        let wv: Vec<i64> = wb
            .iter()
            .map(|&b| i64::from(value(w_dt, b) - w_off))
            .collect();
        let bias: Vec<f32> = (0..n).map(|_| rng.float(-1.0, 1.0)).collect();
        let want = product_oracle(
            &x,
            &wv,
            &w_s,
            with_bias.then_some(bias.as_slice()),
            [1, rows, k, n],
        );
        let (w_shape, w_in, axis) = if transpose {
            ([n as u32, k as u32], transposed(&wb, k, n), 0)
        } else {
            ([k as u32, n as u32], wb.clone(), 1)
        };
        let w_info = if per_axis {
            qt_axis(&w_shape, w_dt, axis, &w_s, w_off)
        } else {
            qt(&w_shape, w_dt, w_s[0], w_off)
        }
        .constant();
        let mut inputs = vec![
            (
                TensorInfo::new(&[rows as u32, k as u32], DataType::Float32),
                f32_bytes(&x),
            ),
            (w_info, w_in),
        ];
        if with_bias {
            inputs.push((
                TensorInfo::new(&[n as u32], DataType::Float32).constant(),
                f32_bytes(&bias),
            ));
        }
        let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: with_bias,
            transpose_weights: transpose,
        });
        let got = run_bytes(
            &layer,
            &inputs,
            &TensorInfo::new(&[rows as u32, n as u32], DataType::Float32),
        )
        .unwrap();
        let got = to_f32(&got);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "{w_dt} transpose={transpose} per_axis={per_axis}: {got:?} vs {want:?}"
        );
    }
}

/// `BatchMatMul` with a batch of `a`, `b` broadcast (`[K, N]`, per column and per tensor)
/// or batched (`[B, K, N]`), and `transpose_b` (`b` as `[N, K]`, quantised along axis 0).
#[test]
fn dynamic_batch_matmul_matches_oracle() {
    let mut rng = XorShift(0xB47C_4000_0000_0017);
    for (w_dt, per_axis, transpose_b) in [
        (DataType::QSymmS8, true, false),
        (DataType::QAsymmU8, false, false),
        (DataType::QAsymmS8, true, true),
    ] {
        let (batch, m, k, n) = (3usize, 2usize, 6usize, 4usize);
        let x: Vec<f32> = (0..batch * m * k).map(|_| rng.float(-1.5, 2.5)).collect();
        let w_off = if w_dt == DataType::QSymmS8 {
            0
        } else {
            rng.int(-5, 5) + if w_dt == DataType::QAsymmU8 { 128 } else { 0 }
        };
        let w_s: Vec<f32> = (0..if per_axis { n } else { 1 })
            .map(|_| rng.float(0.001, 0.05))
            .collect();
        let wb = rng.bytes(k * n);
        let wv: Vec<i64> = wb
            .iter()
            .map(|&b| i64::from(value(w_dt, b) - w_off))
            .collect();
        let want = product_oracle(&x, &wv, &w_s, None, [batch, m, k, n]);
        let (w_shape, w_in, axis) = if transpose_b {
            ([n as u32, k as u32], transposed(&wb, k, n), 0)
        } else {
            ([k as u32, n as u32], wb.clone(), 1)
        };
        let w_info = if per_axis {
            qt_axis(&w_shape, w_dt, axis, &w_s, w_off)
        } else {
            qt(&w_shape, w_dt, w_s[0], w_off)
        };
        let layer = LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
            transpose_a: false,
            transpose_b,
        });
        let a_info = TensorInfo::new(&[batch as u32, m as u32, k as u32], DataType::Float32);
        let out = TensorInfo::new(&[batch as u32, m as u32, n as u32], DataType::Float32);
        let got = run_bytes(
            &layer,
            &[
                (a_info.clone(), f32_bytes(&x)),
                (w_info.clone(), w_in.clone()),
            ],
            &out,
        )
        .unwrap();
        assert_eq!(to_f32(&got), want, "{w_dt} per_axis={per_axis}");
        // The same weights repeated along a batch axis of `b` give the same outputs.
        if !transpose_b {
            let mut batched = w_info.clone();
            batched.shape = vec![batch as u32, k as u32, n as u32].into();
            if let backplane_api::ROption::RSome(q) = &mut batched.quantization
                && let backplane_api::ROption::RSome(p) = &mut q.per_axis
            {
                p.axis = 2;
            }
            let got = run_bytes(
                &layer,
                &[(a_info, f32_bytes(&x)), (batched, w_in.repeat(batch))],
                &out,
            )
            .unwrap();
            assert_eq!(to_f32(&got), want, "{w_dt} batched b");
        }
    }
}

/// The parameters on chosen values: ties round to even (the zero point 2.5 -> 2, the
/// elements 0.5 -> 0 and 1.5 -> 2), the all-zero input, and inputs of one sign.
#[test]
fn dynamic_quantization_parameters() {
    // lo = -0.625, hi = 63.125: s = 63.75 / 255 = 0.25 exactly, zp = rne(2.5) = 2.
    let dq = DynamicQuantization::of(&[-0.625, 0.125, 0.375, 63.125]);
    assert_eq!(
        dq,
        DynamicQuantization {
            scale: 0.25,
            zero_point: 2
        }
    );
    let q: Vec<i32> = [-0.625f32, 0.125, 0.375, 63.125, 100.0, -100.0]
        .iter()
        .map(|&v| dq.quantize(v))
        .collect();
    assert_eq!(q, [0, 2, 4, 254, 255, 0]);
    // All zeros: onnxruntime's scale 1 (the doc's s = 0 gives the same q = 0).
    let zero = DynamicQuantization::of(&[0.0, -0.0, 0.0]);
    assert_eq!(
        zero,
        DynamicQuantization {
            scale: 1.0,
            zero_point: 0
        }
    );
    assert_eq!(zero.quantize(0.0), 0);
    assert_eq!(zero.quantize(-0.0), 0);
    assert_eq!(DynamicQuantization::of(&[0.5, 2.0]).zero_point, 0);
    assert_eq!(DynamicQuantization::of(&[-0.5, -2.0]).zero_point, 255);
    assert_eq!(DynamicQuantization::of(&[]).scale, 1.0);
}

/// `x / s` is a division, not a multiplication by `1 / s`: near ties the two round
/// apart, and the quantised value follows the division.
#[test]
fn dynamic_quantization_divides() {
    let base = [-1.0f32, 2.0];
    let dq = DynamicQuantization::of(&base);
    let s = (2.0f32 - -1.0) / 255.0;
    assert_eq!(dq.scale, s);
    let r = 1.0 / s;
    // Values a few ulps around the ties (i + 0.5) * s.
    let apart: Vec<f32> = (0..170)
        .flat_map(|i| {
            let t = (i as f32 + 0.5) * s;
            (-4i32..=4).map(move |d| f32::from_bits((t.to_bits() as i32 + d) as u32))
        })
        .filter(|&v| (v / s).round_ties_even() != (v * r).round_ties_even())
        .collect();
    assert!(!apart.is_empty());
    for v in apart {
        let mut x = base.to_vec();
        x.push(v);
        assert_eq!(DynamicQuantization::of(&x), dq);
        assert_eq!(dq.quantize(v), sat(v / s, dq.zero_point, 0, 255), "{v}");
    }
}

/// An all-zero input: every output is its column's bias exactly (+0 without a bias), as
/// the layers doc defines (`q = 0`, `acc = 0`).
#[test]
fn dynamic_all_zero_input_gives_bias() {
    let (k, n) = (3usize, 2usize);
    let w = qt_axis(&[k as u32, n as u32], DataType::QSymmS8, 1, &[0.5, 0.25], 0);
    let x = TensorInfo::new(&[2, k as u32], DataType::Float32);
    let out = TensorInfo::new(&[2, n as u32], DataType::Float32);
    let wb = vec![7u8, 200, 1, 128, 127, 3];
    let bias = [0.75f32, -1.5];
    for with_bias in [false, true] {
        let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: with_bias,
            transpose_weights: false,
        });
        let mut inputs = vec![(x.clone(), f32_bytes(&[0.0; 6])), (w.clone(), wb.clone())];
        if with_bias {
            inputs.push((
                TensorInfo::new(&[n as u32], DataType::Float32),
                f32_bytes(&bias),
            ));
        }
        let got = to_f32(&run_bytes(&layer, &inputs, &out).unwrap());
        let want: Vec<f32> = if with_bias {
            [bias, bias].concat()
        } else {
            vec![0.0; 4]
        };
        assert_eq!(
            got.iter().map(|f| f.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|f| f.to_bits()).collect::<Vec<_>>()
        );
    }
}

/// The oracle of a dynamically quantised convolution (NCHW, one group) of `x` (`[n, c, h, w]`)
/// by `w` (`[m, c, kh, kw]`, already minus their offset), stride `s`, pads `[top, left,
/// bottom, right]`: the input padded with zeros after quantising (a padding tap adds 0), the
/// bias in the accumulator as the layers doc says (`floor(b / m)` in f32, then `as i32`),
/// `y = (acc as i32 as f32) * m`.
fn convolution_oracle(
    x: &[f32],
    w: &[i64],
    w_scales: &[f32],
    bias: Option<&[f32]>,
    [n, c, h, wd]: [usize; 4],
    [m, kh, kw, s]: [usize; 4],
    [pt, pl, pb, pr]: [usize; 4],
) -> (Vec<f32>, [usize; 2]) {
    let (scale, q) = quantize_oracle(x);
    // An all-zero input's scale is 1 (the layers doc), which the bias's division reads.
    let scale = if scale == 0.0 { 1.0 } else { scale };
    let (oh, ow) = ((h + pt + pb - kh) / s + 1, (wd + pl + pr - kw) / s + 1);
    let mut y = Vec::new();
    for ni in 0..n {
        for o in 0..m {
            let mult = scale * w_scales[if w_scales.len() == 1 { 0 } else { o }];
            let start = bias.map_or(0, |b| f64::from(b[o] / mult).floor() as i64);
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = start;
                    for ci in 0..c {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let (iy, ix) = (oy * s + ky, ox * s + kx);
                                if iy < pt || ix < pl || iy - pt >= h || ix - pl >= wd {
                                    continue;
                                }
                                let xv = q[((ni * c + ci) * h + iy - pt) * wd + ix - pl];
                                acc += xv * w[((o * c + ci) * kh + ky) * kw + kx];
                            }
                        }
                    }
                    y.push(acc as i32 as f32 * mult);
                }
            }
        }
    }
    (y, [oh, ow])
}

#[test]
fn dynamic_convolution_matches_oracle() {
    use backplane_api::{Convolution2dDescriptor, Padding2d};
    let mut rng = XorShift(0x5EED_C0DE_0000_0002);
    // (weights, per channel, bias, input range, stride, pads)
    let cases = [
        (
            DataType::QAsymmU8,
            false,
            true,
            (-2.0, 3.0),
            1,
            [1, 1, 1, 1],
        ),
        (DataType::QAsymmU8, false, true, (0.0, 1.0), 2, [1, 1, 1, 1]),
        (
            DataType::QSymmS8,
            true,
            false,
            (-0.5, 0.25),
            1,
            [0, 0, 0, 0],
        ),
        (
            DataType::QAsymmS8,
            true,
            true,
            (-7.0, -0.01),
            2,
            [2, 0, 1, 1],
        ),
        (DataType::QAsymmU8, false, true, (0.0, 0.0), 1, [1, 1, 1, 1]),
    ];
    for (w_dt, per_axis, with_bias, (lo, hi), stride, pads) in cases {
        let ([n, c, h, wd], [m, kh, kw]) = ([2usize, 3, 6, 7], [4usize, 3, 3]);
        let x: Vec<f32> = (0..n * c * h * wd).map(|_| rng.float(lo, hi)).collect();
        let w_off = match w_dt {
            DataType::QSymmS8 => 0,
            DataType::QAsymmS8 => rng.int(-20, 20),
            _ => rng.int(100, 150),
        };
        let w_s: Vec<f32> = (0..if per_axis { m } else { 1 })
            .map(|_| rng.float(0.001, 0.05))
            .collect();
        let wb = rng.bytes(m * c * kh * kw);
        let wv: Vec<i64> = wb
            .iter()
            .map(|&b| i64::from(value(w_dt, b) - w_off))
            .collect();
        let bias: Vec<f32> = (0..m).map(|_| rng.float(-1.0, 1.0)).collect();
        let (want, [oh, ow]) = convolution_oracle(
            &x,
            &wv,
            &w_s,
            with_bias.then_some(bias.as_slice()),
            [n, c, h, wd],
            [m, kh, kw, stride],
            pads,
        );
        let w_shape = [m as u32, c as u32, kh as u32, kw as u32];
        let w_info = if per_axis {
            qt_axis(&w_shape, w_dt, 0, &w_s, w_off)
        } else {
            qt(&w_shape, w_dt, w_s[0], w_off)
        };
        let [top, left, bottom, right] = pads.map(|p| p as u32);
        let layer = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
            padding: Padding2d {
                left,
                right,
                top,
                bottom,
            },
            stride_x: stride as u32,
            stride_y: stride as u32,
            bias_enabled: with_bias,
            ..Convolution2dDescriptor::default()
        });
        let mut inputs = vec![
            (
                TensorInfo::new(
                    &[n as u32, c as u32, h as u32, wd as u32],
                    DataType::Float32,
                ),
                f32_bytes(&x),
            ),
            (w_info, wb),
        ];
        if with_bias {
            inputs.push((
                TensorInfo::new(&[m as u32], DataType::Float32),
                f32_bytes(&bias),
            ));
        }
        let y_info = TensorInfo::new(
            &[n as u32, m as u32, oh as u32, ow as u32],
            DataType::Float32,
        );
        let got = to_f32(&run_bytes(&layer, &inputs, &y_info).unwrap());
        assert_eq!(got, want, "{w_dt}, per axis {per_axis}, stride {stride}");
    }
}
