//! Dynamically quantised products against an oracle written here from ONNX's
//! `DynamicQuantizeLinear` and `MatMulInteger` (f32 steps in the definition's order), bit for
//! bit, on every instruction set this CPU has, one and two threads.

use backplane_api::{
    BatchMatMulDescriptor, DataType, FullyConnectedDescriptor, LayerDescriptor, TensorInfo,
};

use super::tests::{Rng, check_all, q_axis_zp, read};
use crate::layer_support::is_layer_supported;

/// `DynamicQuantizeLinear` of `x` by its definition: the quantised values, scale and zero
/// point.
fn dynamic_quantize_linear(x: &[f32]) -> (Vec<i32>, f32, i32) {
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
    // onnxruntime's scale for an all-zero input (any scale gives the same outputs).
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (-lo / scale).round_ties_even().clamp(0.0, 255.0) as i32;
    let q = x
        .iter()
        .map(|&v| ((v / scale).round_ties_even() + zp as f32).clamp(0.0, 255.0) as i32)
        .collect();
    (q, scale, zp)
}

/// The workload's range and rounding (eight chains, the adder's rounding) against the
/// definition above: every quarter step from -300 to 300 (ties both ways) under three scales
/// and three zero points, values far out of range, infinities; NaN gives the zero point; the
/// parameters of vectors of every length to 40, a NaN among them or not.
#[test]
fn quantization_matches_the_definition() {
    use super::dynamic::{parameters, quantize};
    let mut values: Vec<f32> = (-1200..=1200).map(|i| i as f32 * 0.25).collect();
    values.extend([
        1e30,
        -1e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        4194303.5,
        -8388609.0,
    ]);
    for scale in [1.0f32, 0.5, 1.0 / 3.0] {
        for zp in [0, 128, 255] {
            for &v in &values {
                let want = ((v / scale).round_ties_even() + zp as f32).clamp(0.0, 255.0) as i32;
                assert_eq!(
                    i32::from(quantize(v, scale, zp)),
                    want,
                    "{v} / {scale} + {zp}"
                );
            }
            assert_eq!(i32::from(quantize(f32::NAN, scale, zp)), zp);
        }
    }
    let mut rng = Rng(17);
    for len in 1..=40 {
        let mut x: Vec<f32> = (0..len)
            .map(|_| rng.int(-2000, 5000) as f32 / 1000.0)
            .collect();
        let (_, scale, zp) = dynamic_quantize_linear(&x);
        assert_eq!(parameters(&x), (scale, zp), "length {len}");
        x[len / 2] = f32::NAN;
        let finite: Vec<f32> = x.iter().copied().filter(|v| !v.is_nan()).collect();
        let (_, scale, zp) = dynamic_quantize_linear(&finite);
        assert_eq!(parameters(&x), (scale, zp), "length {len} with a NaN");
    }
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_ne_bytes()).collect()
}

#[test]
fn dynamic_products_match_the_definition() {
    let mut rng = Rng(0x5eed_0042);
    let sym = (DataType::QSymmS8, 0);
    // (transposed weights, batch matmul, weights and their zero point, input kind)
    let cases = [
        (false, false, (DataType::QAsymmU8, 131), "mixed"),
        (true, false, sym, "mixed"),
        (false, true, (DataType::QAsymmS8, -77), "mixed"),
        (true, true, (DataType::QAsymmU8, 0), "mixed"),
        (false, false, (DataType::QAsymmU8, 255), "positive"),
        (true, false, (DataType::QAsymmS8, 5), "negative"),
        (false, false, sym, "zero"),
        (true, true, sym, "ties"),
    ];
    for (transpose, bmm, (w_dt, wz), input) in cases {
        let (batch, rows, k, n) = (2usize, 35usize, 21usize, 11usize);
        let total = if bmm { batch * rows } else { rows };
        let x: Vec<f32> = (0..total * k)
            .map(|i| match input {
                "positive" => rng.int(0, 10_000) as f32 * 1e-3,
                "negative" => -(rng.int(1, 10_000) as f32) * 1e-3,
                "zero" => 0.0,
                // Multiples of half a step of the range [-2.55, 0]: ties round to even.
                "ties" => -(((i % 511) as f32) * 0.005),
                _ => rng.int(-30_000, 20_000) as f32 * 1e-4,
            })
            .collect();
        let wb = rng.bytes(k * n);
        let ws: Vec<f32> = (0..n).map(|c| 0.002 + 0.0005 * c as f32).collect();
        let bias: Vec<f32> = (0..n).map(|_| rng.int(-2000, 2000) as f32 * 1e-3).collect();
        let (xq, xs, xz) = dynamic_quantize_linear(&x);
        let mut want = Vec::with_capacity(total * n);
        for r in 0..total {
            for c in 0..n {
                let mut acc = 0i32;
                for kk in 0..k {
                    let w = read(w_dt, wb[if transpose { c * k + kk } else { kk * n + c }]) - wz;
                    acc += (xq[r * k + kk] - xz) * w;
                }
                let v = acc as f32 * (xs * ws[c]);
                want.push(if bmm { v } else { v + bias[c] });
            }
        }
        let (kk, nn) = (k as u32, n as u32);
        let w_shape = if transpose { [nn, kk] } else { [kk, nn] };
        let w_info = q_axis_zp(&w_shape, w_dt, u32::from(!transpose), ws.clone(), wz).constant();
        let (layer, infos, data, y) = if bmm {
            let shape = |last| vec![batch as u32, rows as u32, last];
            (
                LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
                    transpose_a: false,
                    transpose_b: transpose,
                }),
                vec![TensorInfo::new(&shape(kk), DataType::Float32), w_info],
                vec![floats(&x), wb],
                TensorInfo::new(&shape(nn), DataType::Float32),
            )
        } else {
            (
                LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                    bias_enabled: true,
                    transpose_weights: transpose,
                }),
                vec![
                    TensorInfo::new(&[rows as u32, kk], DataType::Float32),
                    w_info,
                    TensorInfo::new(&[nn], DataType::Float32),
                ],
                vec![floats(&x), wb, floats(&bias)],
                TensorInfo::new(&[rows as u32, nn], DataType::Float32),
            )
        };
        let what = format!("bmm {bmm} t {transpose} w {w_dt} zp {wz}, {input} input");
        check_all(&layer, &infos, &data, &y, &floats(&want), &what);
    }
}

#[test]
fn dynamic_products_refuse_what_they_cannot_run() {
    let w = q_axis_zp(&[4, 3], DataType::QSymmS8, 1, vec![0.1; 3], 0).constant();
    let fc = |bias_enabled| {
        LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled,
            transpose_weights: false,
        })
    };
    let x = TensorInfo::new(&[2, 4], DataType::Float32);
    let y = TensorInfo::new(&[2, 3], DataType::Float32);
    let cases = [
        (
            fc(true),
            vec![
                x.clone(),
                w.clone(),
                TensorInfo::new(&[3], DataType::Signed32),
            ],
            y.clone(),
            "CpuFast: a dynamically quantized product needs a Float32 bias, got [3] Signed32",
        ),
        (
            fc(true),
            vec![
                x.clone(),
                w.clone(),
                TensorInfo::new(&[2], DataType::Float32),
            ],
            y.clone(),
            "CpuFast: the bias [2] Float32 must have shape [3]",
        ),
        (
            fc(false),
            vec![x.clone(), w.clone()],
            TensorInfo::new(&[2, 3], DataType::Float16),
            "CpuFast: a dynamically quantized product needs a Float32 output, got [2, 3] Float16",
        ),
    ];
    for (layer, inputs, y, want) in cases {
        let got = is_layer_supported(&layer, &inputs, std::slice::from_ref(&y));
        assert_eq!(format!("{got:?}"), format!("Unsupported({want:?})"));
    }
}

#[test]
fn dynamic_convolutions_match_the_definition() {
    use backplane_api::{Convolution2dDescriptor, Padding2d};
    let mut rng = Rng(0x5eed_0043);
    // (weights and their zero point, stride, pads [top, left, bottom, right], bias, input)
    let cases = [
        ((DataType::QAsymmU8, 131), 1, [1, 1, 1, 1], true, "mixed"),
        ((DataType::QAsymmU8, 0), 2, [1, 1, 1, 1], true, "positive"),
        ((DataType::QSymmS8, 0), 1, [0, 0, 0, 0], false, "mixed"),
        ((DataType::QAsymmS8, -77), 2, [2, 0, 1, 1], true, "negative"),
        ((DataType::QAsymmU8, 255), 1, [1, 1, 1, 1], true, "zero"),
    ];
    for ((w_dt, wz), stride, [pt, pl, pb, pr], with_bias, input) in cases {
        let ([n, c, h, w], [m, kh, kw]) = ([2usize, 5, 9, 11], [19usize, 3, 3]);
        let x: Vec<f32> = (0..n * c * h * w)
            .map(|_| match input {
                "positive" => rng.int(0, 10_000) as f32 * 1e-3,
                "negative" => -(rng.int(1, 10_000) as f32) * 1e-3,
                "zero" => 0.0,
                _ => rng.int(-30_000, 20_000) as f32 * 1e-4,
            })
            .collect();
        let wb = rng.bytes(m * c * kh * kw);
        let ws = 0.003f32;
        let bias: Vec<f32> = (0..m).map(|_| rng.int(-2000, 2000) as f32 * 1e-3).collect();
        let (xq, xs, xz) = dynamic_quantize_linear(&x);
        let (oh, ow) = (
            (h + pt + pb - kh) / stride + 1,
            (w + pl + pr - kw) / stride + 1,
        );
        let mut want = Vec::with_capacity(n * m * oh * ow);
        for b in 0..n {
            for o in 0..m {
                let mult = xs * ws;
                // The bias enters the accumulator: floor(b / m), as i32.
                let start = if with_bias {
                    (bias[o] / mult).floor() as i32
                } else {
                    0
                };
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = start;
                        for ci in 0..c {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let (iy, ix) = (oy * stride + ky, ox * stride + kx);
                                    if iy < pt || ix < pl || iy - pt >= h || ix - pl >= w {
                                        continue; // padding: (zp - zp) · w = 0
                                    }
                                    let xv = xq[((b * c + ci) * h + iy - pt) * w + ix - pl] - xz;
                                    let wv = read(w_dt, wb[((o * c + ci) * kh + ky) * kw + kx]);
                                    acc += xv * (wv - wz);
                                }
                            }
                        }
                        want.push(acc as f32 * mult);
                    }
                }
            }
        }
        let w_info = q_axis_zp(
            &[m as u32, c as u32, kh as u32, kw as u32],
            w_dt,
            0,
            vec![ws; m],
            wz,
        )
        .constant();
        let layer = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
            padding: Padding2d {
                left: pl as u32,
                right: pr as u32,
                top: pt as u32,
                bottom: pb as u32,
            },
            stride_x: stride as u32,
            stride_y: stride as u32,
            bias_enabled: with_bias,
            ..Convolution2dDescriptor::default()
        });
        let mut infos = vec![
            TensorInfo::new(&[n as u32, c as u32, h as u32, w as u32], DataType::Float32),
            w_info,
        ];
        let mut data = vec![floats(&x), wb];
        if with_bias {
            infos.push(TensorInfo::new(&[m as u32], DataType::Float32).constant());
            data.push(floats(&bias));
        }
        let y = TensorInfo::new(
            &[n as u32, m as u32, oh as u32, ow as u32],
            DataType::Float32,
        );
        let what = format!("conv w {w_dt} zp {wz} stride {stride}, {input} input");
        check_all(&layer, &infos, &data, &y, &floats(&want), &what);
    }
}
