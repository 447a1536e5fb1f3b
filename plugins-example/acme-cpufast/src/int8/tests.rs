//! The int8 kernels and workloads against naive integer oracles written here from the
//! definition (`backplane_api`'s "Quantised tensors"), byte for byte, on every instruction
//! set this CPU has (each forced in turn), one and two threads.

use backplane_api::{
    BatchMatMulDescriptor, Convolution2dDescriptor, DataType, FullyConnectedDescriptor,
    LayerDescriptor, Padding2d, PerAxisQuantization, Quantization, ROption, TensorInfo, TensorView,
    TensorViewMut,
};

use super::kernels::{FORCED, Isa, MR, NR, Requant, requant_one, tile};
use crate::{
    layer_support::is_layer_supported,
    workloads::test_support::{make_with, with_threads},
};

/// A deterministic generator.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(super) fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo + 1) as u64) as i32
    }
    pub(super) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn isas() -> Vec<Isa> {
    Isa::ALL.into_iter().filter(|i| i.available()).collect()
}

/// `saturate(round_half_even(acc as f32 · ((xs · ws) / ys)) + yz)` to the range `lo..=hi`.
fn oracle_requant(acc: i32, xs: f32, ws: f32, ys: f32, yz: i32, (lo, hi): (i32, i32)) -> i32 {
    let m = (xs * ws) / ys;
    let v = (acc as f32 * m).round_ties_even() + yz as f32;
    v.clamp(lo as f32, hi as f32) as i32
}

#[test]
fn tile_matches_the_definition_on_every_isa() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for &k4 in &[1usize, 3, 17] {
        // Random bytes, then the extremes: x = 255 against w = -128 and w = 127 everywhere
        // (AVX2's maddubs would saturate on pairs of 255 · 127 without the split).
        for extreme in [None, Some(-128i8), Some(127)] {
            let a: Vec<i8> = match extreme {
                Some(w) => vec![w; k4 * MR * 4],
                None => rng
                    .bytes(k4 * MR * 4)
                    .into_iter()
                    .map(|b| b as i8)
                    .collect(),
            };
            let b = match extreme {
                Some(_) => vec![255u8; k4 * NR * 4],
                None => rng.bytes(k4 * NR * 4),
            };
            let corr: Vec<i32> = (0..MR).map(|_| rng.int(-5000, 5000)).collect();
            let mult: Vec<f32> = (0..MR).map(|r| [0.5, 1e-4, 3e-3, 1.0][r % 4]).collect();
            let rq = Requant {
                corr: &corr,
                mult: &mult,
                zp: 7,
                lo: 0,
                hi: 255,
            };
            let (rows, cols) = (MR - 1, NR - 3);
            let mut want = vec![0u8; rows * 40];
            let mut accs = vec![0i32; rows * cols];
            for r in 0..rows {
                for j in 0..cols {
                    let mut acc = 0i32;
                    for kk in 0..k4 * 4 {
                        let x = i32::from(b[(kk / 4 * NR + j) * 4 + kk % 4]);
                        let w = i32::from(a[(kk / 4 * MR + r) * 4 + kk % 4]);
                        acc = acc.wrapping_add(x * w);
                    }
                    accs[r * cols + j] = acc;
                    want[r * 40 + j] = requant_one(acc, corr[r], mult[r], 7, 0, 255);
                }
            }
            if let Some(w) = extreme {
                assert_eq!(accs[0], i32::from(w) * 255 * 4 * k4 as i32);
            }
            for isa in isas() {
                let mut got = vec![0u8; rows * 40];
                tile(isa, &a, &b, k4, rows, cols, &rq, &mut got, 40);
                assert_eq!(got, want, "{isa:?} k4 {k4} extreme {extreme:?}");
            }
        }
    }
}

/// AVX2's `maddubs` never saturates: the sums of every pair of extremes are exact.
#[test]
fn avx2_never_saturates() {
    if !Isa::Avx2.available() {
        return;
    }
    for (x, w) in [
        (255u8, 127i8),
        (255, -128),
        (254, -128),
        (1, -128),
        (128, 127),
    ] {
        let (a, b) = (vec![w; 2 * MR * 4], vec![x; 2 * NR * 4]);
        let corr = [0i32; MR];
        let mult = [1.0f32; MR];
        let rq = Requant {
            corr: &corr,
            mult: &mult,
            zp: 0,
            lo: i32::MIN / 2,
            hi: i32::MAX / 2,
        };
        // Through the scalar requantisation with a range wide enough to hold the sums.
        let acc = i32::from(x) * i32::from(w) * 8;
        let mut out = vec![0u8; NR];
        tile(Isa::Avx2, &a, &b, 2, 1, NR, &rq, &mut out, NR);
        assert!(out.iter().all(|&v| v == acc as u8), "{x} · {w}");
    }
}

pub(super) fn q(shape: &[u32], dt: DataType, scale: f32, zp: i32) -> TensorInfo {
    TensorInfo::new(shape, dt).with_quantization(Quantization::per_tensor(scale, zp))
}

pub(super) fn q_axis_zp(
    shape: &[u32],
    dt: DataType,
    axis: u32,
    scales: Vec<f32>,
    zp: i32,
) -> TensorInfo {
    TensorInfo::new(shape, dt).with_quantization(Quantization {
        scale: 1.0,
        offset: zp,
        per_axis: ROption::RSome(PerAxisQuantization {
            axis,
            scales: scales.into(),
        }),
    })
}

pub(super) fn read(dt: DataType, b: u8) -> i32 {
    if dt == DataType::QAsymmU8 {
        i32::from(b)
    } else {
        i32::from(b as i8)
    }
}

fn range(dt: DataType) -> (i32, i32) {
    if dt == DataType::QAsymmU8 {
        (0, 255)
    } else {
        (-128, 127)
    }
}

fn store(dt: DataType, v: i32) -> u8 {
    if dt == DataType::QAsymmU8 {
        v as u8
    } else {
        v as i8 as u8
    }
}

/// Runs `layer` on every ISA and 1 and 2 threads, and compares with `want`.
pub(super) fn check_all(
    layer: &LayerDescriptor,
    infos: &[TensorInfo],
    data: &[Vec<u8>],
    y: &TensorInfo,
    want: &[u8],
    what: &str,
) {
    assert!(
        is_layer_supported(layer, infos, std::slice::from_ref(y)).is_supported(),
        "{what}: {:?}",
        is_layer_supported(layer, infos, std::slice::from_ref(y))
    );
    let constants: Vec<Option<&[u8]>> = infos
        .iter()
        .zip(data)
        .map(|(i, d)| i.is_constant.then_some(d.as_slice()))
        .collect();
    for isa in isas() {
        for threads in [1, 2] {
            FORCED.set(Some(isa));
            let w = with_threads(threads, || {
                make_with(layer, infos, &constants, std::slice::from_ref(y)).unwrap()
            });
            FORCED.set(None);
            let views: Vec<TensorView<'_>> = infos
                .iter()
                .zip(data)
                .map(|(i, d)| TensorView::new(i, d))
                .collect();
            let mut got = vec![0xa5u8; want.len()];
            w.execute(&views, &mut [TensorViewMut::new(y, &mut got)])
                .unwrap();
            assert_eq!(got, want, "{what} on {isa:?}, {threads} thread(s)");
        }
    }
}

/// [`conv_case_with`] on symmetric `QSymmS8` weights.
#[allow(
    clippy::too_many_arguments,
    reason = "a test case is all of a convolution's parameters"
)]
fn conv_case(
    rng: &mut Rng,
    x_dt: DataType,
    y_dt: DataType,
    x_shape: [usize; 4],
    m: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    pads: [usize; 4],
    depthwise: bool,
    per_channel: bool,
    ys: f32,
) {
    conv_case_with(
        rng,
        (DataType::QSymmS8, 0, None),
        x_dt,
        y_dt,
        x_shape,
        m,
        kernel,
        stride,
        dilation,
        pads,
        depthwise,
        per_channel,
        ys,
    );
}

/// One convolution case: weights of type and zero point `w_q` (and the input's zero point,
/// when given), `x` `[n, c, h, w]`, `m` outputs, kernel, stride, dilation, padding `[top,
/// left, bottom, right]`, depthwise or not.
#[allow(
    clippy::too_many_arguments,
    reason = "a test case is all of a convolution's parameters"
)]
fn conv_case_with(
    rng: &mut Rng,
    (w_dt, wz, x_zp): (DataType, i32, Option<i32>),
    x_dt: DataType,
    y_dt: DataType,
    [n, c, h, w]: [usize; 4],
    m: usize,
    [kh, kw]: [usize; 2],
    [sy, sx]: [usize; 2],
    [dy, dx]: [usize; 2],
    [pt, pl, pb, pr]: [usize; 4],
    depthwise: bool,
    per_channel: bool,
    ys: f32,
) {
    let oh = (h + pt + pb - (dy * (kh - 1) + 1)) / sy + 1;
    let ow = (w + pl + pr - (dx * (kw - 1) + 1)) / sx + 1;
    let cg = if depthwise { 1 } else { c };
    let xz = x_zp.unwrap_or(if x_dt == DataType::QAsymmU8 { 131 } else { -3 });
    let xs = 0.02f32;
    let yz = if y_dt == DataType::QAsymmU8 { 120 } else { 5 };
    let wscales: Vec<f32> = (0..m).map(|o| 0.003 + 0.001 * (o % 5) as f32).collect();
    let x = rng.bytes(n * c * h * w);
    let wb = rng.bytes(m * cg * kh * kw);
    let bias: Vec<i32> = (0..m).map(|_| rng.int(-3000, 3000)).collect();
    let mut want = vec![0u8; n * m * oh * ow];
    for ni in 0..n {
        for o in 0..m {
            let ws = if per_channel { wscales[o] } else { wscales[0] };
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = bias[o];
                    for ic in 0..cg {
                        let ci = if depthwise { o / (m / c) } else { ic };
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * sy + ky * dy) as isize - pt as isize;
                                let ix = (ox * sx + kx * dx) as isize - pl as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let xv = read(
                                    x_dt,
                                    x[((ni * c + ci) * h + iy as usize) * w + ix as usize],
                                );
                                let wv = read(w_dt, wb[((o * cg + ic) * kh + ky) * kw + kx]) - wz;
                                acc = acc.wrapping_add((xv - xz) * wv);
                            }
                        }
                    }
                    want[((ni * m + o) * oh + oy) * ow + ox] =
                        store(y_dt, oracle_requant(acc, xs, ws, ys, yz, range(y_dt)));
                }
            }
        }
    }
    let d = Convolution2dDescriptor {
        padding: Padding2d {
            left: pl as u32,
            right: pr as u32,
            top: pt as u32,
            bottom: pb as u32,
        },
        stride_x: sx as u32,
        stride_y: sy as u32,
        dilation_x: dx as u32,
        dilation_y: dy as u32,
        groups: 1,
        bias_enabled: true,
        ..Default::default()
    };
    let layer = if depthwise {
        LayerDescriptor::DepthwiseConvolution2d(d)
    } else {
        LayerDescriptor::Convolution2d(d)
    };
    let s = |v: &[usize]| v.iter().map(|&d| d as u32).collect::<Vec<_>>();
    let w_shape = s(&[m, cg, kh, kw]);
    let w_info = if per_channel {
        q_axis_zp(&w_shape, w_dt, 0, wscales.clone(), wz)
    } else {
        q(&w_shape, w_dt, wscales[0], wz)
    };
    let bias_info = TensorInfo::new(&[m as u32], DataType::Signed32).constant();
    let infos = [
        q(&s(&[n, c, h, w]), x_dt, xs, xz),
        w_info.constant(),
        bias_info,
    ];
    let data = vec![x, wb, bias.iter().flat_map(|b| b.to_le_bytes()).collect()];
    let y = q(&s(&[n, m, oh, ow]), y_dt, ys, yz);
    check_all(
        &layer,
        &infos,
        &data,
        &y,
        &want,
        &format!(
            "conv {x_dt}->{y_dt} w {w_dt} zp {wz} x {:?} m {m} k {kh}x{kw} s {sy}x{sx} d {dy}x{dx} p {:?} dw {depthwise}",
            [n, c, h, w],
            [pt, pl, pb, pr]
        ),
    );
}

#[test]
fn convolutions_match_the_definition() {
    use DataType::{QAsymmS8 as S8, QAsymmU8 as U8};
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // 3x3 padded, K = 27 (odd groups of four), M not a multiple of MR, N across tiles.
    conv_case(
        &mut rng,
        U8,
        U8,
        [1, 3, 9, 11],
        13,
        [3, 3],
        [1, 1],
        [1, 1],
        [1, 1, 1, 1],
        false,
        true,
        0.05,
    );
    // 1x1 direct, s8 in and out, per tensor; 2 images.
    conv_case(
        &mut rng,
        S8,
        S8,
        [2, 10, 6, 7],
        19,
        [1, 1],
        [1, 1],
        [1, 1],
        [0; 4],
        false,
        false,
        0.03,
    );
    // stride 2, asymmetric padding, dilation.
    conv_case(
        &mut rng,
        U8,
        S8,
        [1, 5, 13, 12],
        8,
        [3, 2],
        [2, 2],
        [2, 1],
        [2, 0, 1, 1],
        false,
        true,
        0.04,
    );
    // 3x3 over 256 channels (64 groups of four, 8 KiB of a tile's activations per tap): the
    // taps run in several runs (`CacheSizes::int8_tap_run_bytes`, for an L1d of at most
    // 96 KiB), each accumulating onto the ones before.
    conv_case(
        &mut rng,
        U8,
        S8,
        [1, 256, 5, 6],
        11,
        [3, 3],
        [1, 1],
        [1, 1],
        [1, 1, 1, 1],
        false,
        true,
        0.7,
    );
    // Strided on the interleaved phases: 3x3 stride 2 (ResNet's); a
    // 2x3 kernel with strides (2, 3), dilation and asymmetric padding (17 channels: a group
    // of four padded); a padded 1x1 stride 2 (one phase); 2 images, an odd size.
    conv_case(
        &mut rng,
        U8,
        U8,
        [1, 16, 13, 12],
        8,
        [3, 3],
        [2, 2],
        [1, 1],
        [1, 1, 1, 1],
        false,
        true,
        0.2,
    );
    conv_case(
        &mut rng,
        S8,
        U8,
        [1, 17, 11, 14],
        9,
        [2, 3],
        [2, 3],
        [1, 2],
        [2, 0, 1, 1],
        false,
        false,
        0.2,
    );
    conv_case(
        &mut rng,
        U8,
        S8,
        [2, 20, 9, 9],
        12,
        [1, 1],
        [2, 2],
        [1, 1],
        [1, 1, 1, 1],
        false,
        true,
        0.1,
    );
    conv_case(
        &mut rng,
        U8,
        U8,
        [2, 32, 15, 15],
        40,
        [3, 3],
        [2, 2],
        [1, 1],
        [0, 0, 1, 1],
        false,
        true,
        0.3,
    );
    // 1x1 stride 2.
    conv_case(
        &mut rng,
        S8,
        U8,
        [1, 16, 9, 9],
        24,
        [1, 1],
        [2, 2],
        [1, 1],
        [0; 4],
        false,
        true,
        0.05,
    );
    // Ties (m = 0.5 with x_s = 1, w_s = 1, y_s = 2 is elsewhere); saturation: a tiny y scale.
    conv_case(
        &mut rng,
        U8,
        U8,
        [1, 4, 5, 5],
        9,
        [3, 3],
        [1, 1],
        [1, 1],
        [1, 1, 1, 1],
        false,
        true,
        1e-4,
    );
    // Stride 1 on the interleaved image: dilation, asymmetric padding, s8 input; 1x1 padded.
    conv_case(
        &mut rng,
        S8,
        U8,
        [1, 7, 8, 45],
        11,
        [3, 2],
        [1, 1],
        [2, 3],
        [2, 1, 0, 3],
        false,
        true,
        0.05,
    );
    conv_case(
        &mut rng,
        U8,
        U8,
        [1, 6, 5, 6],
        9,
        [1, 1],
        [1, 1],
        [1, 1],
        [1, 1, 1, 1],
        false,
        true,
        0.05,
    );
    // Several im2col chunks (K = 576: 14 tiles a chunk; 576 columns), 2 images.
    conv_case(
        &mut rng,
        U8,
        U8,
        [2, 64, 24, 24],
        10,
        [3, 3],
        [1, 1],
        [1, 1],
        [1, 1, 1, 1],
        false,
        true,
        0.5,
    );
    // Depthwise, stride 2 with an odd left padding (the phases swap), odd width.
    conv_case(
        &mut rng,
        U8,
        U8,
        [1, 5, 9, 15],
        5,
        [3, 3],
        [2, 2],
        [1, 1],
        [1, 1, 1, 1],
        true,
        true,
        0.05,
    );
    // Depthwise: 3x3 and 5x5, strides 1 and 2, channel multiplier 2, dilation.
    conv_case(
        &mut rng,
        U8,
        U8,
        [1, 6, 10, 37],
        6,
        [3, 3],
        [1, 1],
        [1, 1],
        [1, 1, 1, 1],
        true,
        true,
        0.05,
    );
    conv_case(
        &mut rng,
        S8,
        U8,
        [2, 4, 11, 9],
        8,
        [5, 5],
        [2, 2],
        [1, 1],
        [2, 2, 2, 2],
        true,
        true,
        0.03,
    );
    conv_case(
        &mut rng,
        U8,
        S8,
        [1, 3, 12, 12],
        3,
        [3, 3],
        [2, 3],
        [2, 2],
        [1, 0, 2, 1],
        true,
        false,
        1e-3,
    );
}

/// Weights with a zero point (`QAsymmU8` as `quantize_static` writes with `QUInt8` weights,
/// `QAsymmS8` with one other than 0) on every path: im2col, the direct 1×1, the interleaved
/// image, depthwise (with weights past ±128: split taps), per channel and per tensor.
#[test]
fn convolutions_with_weight_zero_points_match_the_definition() {
    use DataType::{QAsymmS8 as S8, QAsymmU8 as U8};
    let mut rng = Rng(0x5eed_0f08);
    // (weights, their zero point, the input's), x, y, shape, m, kernel, stride, dilation,
    // pads, depthwise, per channel. The last three depthwise ones have weights and inputs far
    // from their zero points: products past `i16` (up to 255 · 255) unless the taps are split.
    type Case = (
        (DataType, i32, Option<i32>),
        [DataType; 2],
        [usize; 4],
        usize,
        [[usize; 2]; 3],
        [usize; 4],
        [bool; 2],
    );
    #[rustfmt::skip]
    let cases: [Case; 10] = [
        ((U8, 131, None), [U8, U8], [1, 3, 9, 11], 13, [[3, 3], [1, 1], [1, 1]], [1, 1, 1, 1], [false, true]),
        ((U8, 7, None), [S8, S8], [2, 10, 6, 7], 19, [[1, 1], [1, 1], [1, 1]], [0; 4], [false, false]),
        ((S8, -9, None), [U8, S8], [1, 5, 13, 12], 8, [[3, 2], [2, 2], [2, 1]], [2, 0, 1, 1], [false, true]),
        ((U8, 250, None), [S8, U8], [1, 7, 8, 45], 11, [[3, 2], [1, 1], [2, 3]], [2, 1, 0, 3], [false, false]),
        ((U8, 255, Some(0)), [U8, U8], [1, 130, 6, 5], 9, [[3, 3], [1, 1], [1, 1]], [1, 1, 1, 1], [false, true]),
        ((U8, 128, None), [U8, U8], [1, 5, 9, 15], 5, [[3, 3], [2, 2], [1, 1]], [1, 1, 1, 1], [true, true]),
        ((U8, 0, Some(0)), [U8, U8], [2, 4, 11, 9], 8, [[5, 5], [2, 2], [1, 1]], [2, 2, 2, 2], [true, true]),
        ((U8, 255, Some(255)), [U8, S8], [1, 6, 10, 37], 6, [[3, 3], [1, 1], [1, 1]], [1, 1, 1, 1], [true, false]),
        ((S8, 100, Some(-128)), [S8, U8], [1, 3, 12, 12], 3, [[3, 3], [2, 3], [2, 2]], [1, 0, 2, 1], [true, true]),
        ((U8, 131, None), [U8, U8], [1, 18, 10, 11], 10, [[3, 3], [2, 2], [1, 1]], [1, 1, 1, 1], [false, true]),
    ];
    for (w, [x_dt, y_dt], shape, m, [kernel, stride, dilation], pads, [dw, per_channel]) in cases {
        // An output scale that spreads the sums over the range (some saturate).
        let k = if dw { 1 } else { shape[1] } * kernel[0] * kernel[1];
        let ys = 0.02 * (k as f32).sqrt();
        conv_case_with(
            &mut rng,
            w,
            x_dt,
            y_dt,
            shape,
            m,
            kernel,
            stride,
            dilation,
            pads,
            dw,
            per_channel,
            ys,
        );
    }
}

#[test]
fn ties_round_to_even() {
    let mut rng = Rng(77);
    // m = (1 · 1) / 2 = 0.5: every odd accumulator is a tie.
    let (xs, ws, ys) = (1.0f32, 1.0f32, 2.0f32);
    let (k, n, rows) = (5usize, 7usize, 3usize);
    let x = rng.bytes(rows * k);
    let wb: Vec<u8> = (0..k * n).map(|_| rng.int(-3, 3) as i8 as u8).collect();
    let mut want = vec![0u8; rows * n];
    let mut ties = 0;
    for r in 0..rows {
        for c in 0..n {
            let acc: i32 = (0..k)
                .map(|kk| (i32::from(x[r * k + kk]) - 100) * i32::from(wb[kk * n + c] as i8))
                .sum();
            ties += acc & 1;
            want[r * n + c] = oracle_requant(acc, xs, ws, ys, 128, (0, 255)) as u8;
        }
    }
    assert!(ties > 3);
    let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor::default());
    let infos = [
        q(&[rows as u32, k as u32], DataType::QAsymmU8, xs, 100),
        q(&[k as u32, n as u32], DataType::QSymmS8, ws, 0).constant(),
    ];
    let y = q(&[rows as u32, n as u32], DataType::QAsymmU8, ys, 128);
    check_all(&layer, &infos, &[x, wb], &y, &want, "ties");
}

#[test]
fn matrix_products_match_the_definition() {
    let mut rng = Rng(0xdead_beef);
    let sym = (DataType::QSymmS8, 0);
    for (transpose, bmm, x_dt, (w_dt, wz)) in [
        (false, false, DataType::QAsymmU8, sym),
        (true, false, DataType::QAsymmS8, sym),
        (false, true, DataType::QAsymmU8, sym),
        (true, true, DataType::QAsymmS8, sym),
        // Weights with a zero point (K = 21: the panel's padding is the zero point).
        (false, false, DataType::QAsymmU8, (DataType::QAsymmU8, 131)),
        (true, true, DataType::QAsymmS8, (DataType::QAsymmU8, 0)),
        (true, false, DataType::QAsymmS8, (DataType::QAsymmS8, -77)),
    ] {
        let (batch, rows, k, n) = (2usize, 35usize, 21usize, 11usize);
        let total = if bmm { batch * rows } else { rows };
        let xz = if x_dt == DataType::QAsymmU8 { 128 } else { -7 };
        let x = rng.bytes(total * k);
        let wb = rng.bytes(k * n);
        let bias: Vec<i32> = (0..n).map(|_| rng.int(-2000, 2000)).collect();
        let ws: Vec<f32> = (0..n).map(|c| 0.002 + 0.0005 * c as f32).collect();
        let mut want = vec![0u8; total * n];
        for r in 0..total {
            for c in 0..n {
                let mut acc = if bmm { 0 } else { bias[c] };
                for kk in 0..k {
                    let w = read(w_dt, wb[if transpose { c * k + kk } else { kk * n + c }]) - wz;
                    acc += (read(x_dt, x[r * k + kk]) - xz) * w;
                }
                want[r * n + c] = oracle_requant(acc, 0.03, ws[c], 0.07, 9, (0, 255)) as u8;
            }
        }
        let (kk, nn) = (k as u32, n as u32);
        let w_shape = if transpose { [nn, kk] } else { [kk, nn] };
        let axis = u32::from(!transpose);
        let w_info = q_axis_zp(&w_shape, w_dt, axis, ws.clone(), wz).constant();
        let (layer, infos, data, y) = if bmm {
            (
                LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
                    transpose_a: false,
                    transpose_b: transpose,
                }),
                vec![q(&[batch as u32, rows as u32, kk], x_dt, 0.03, xz), w_info],
                vec![x, wb],
                q(
                    &[batch as u32, rows as u32, nn],
                    DataType::QAsymmU8,
                    0.07,
                    9,
                ),
            )
        } else {
            (
                LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                    bias_enabled: true,
                    transpose_weights: transpose,
                }),
                vec![
                    q(&[rows as u32, kk], x_dt, 0.03, xz),
                    w_info,
                    TensorInfo::new(&[nn], DataType::Signed32).constant(),
                ],
                vec![x, wb, bias.iter().flat_map(|b| b.to_le_bytes()).collect()],
                q(&[rows as u32, nn], DataType::QAsymmU8, 0.07, 9),
            )
        };
        check_all(
            &layer,
            &infos,
            &data,
            &y,
            &want,
            &format!("bmm {bmm} t {transpose} w {w_dt} zp {wz}"),
        );
    }
}

#[test]
fn refusals_say_why() {
    let reason =
        |layer: &LayerDescriptor, infos: &[TensorInfo], y: &TensorInfo| match is_layer_supported(
            layer,
            infos,
            std::slice::from_ref(y),
        ) {
            backplane_api::Support::Supported => "supported".to_owned(),
            backplane_api::Support::Unsupported(r) => r.to_string(),
        };
    let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor::default());
    let x = q(&[1, 4], DataType::QAsymmU8, 0.1, 3);
    let y = q(&[1, 2], DataType::QAsymmU8, 0.1, 3);
    let w = q(&[4, 2], DataType::QAsymmS8, 0.1, 5).constant();
    assert_eq!(reason(&fc, &[x.clone(), w], &y), "supported");
    let w = q(&[4, 2], DataType::Signed32, 0.1, 0).constant();
    assert!(
        reason(&fc, &[x.clone(), w], &y)
            .starts_with("CpuFast: weights must be QSymmS8, QAsymmS8 or QAsymmU8, got")
    );
    let w = q(&[4, 2], DataType::QSymmS8, 0.1, 0);
    assert!(reason(&fc, &[x.clone(), w.clone()], &y).contains("must be constant"));
    let w = w.constant();
    assert_eq!(reason(&fc, &[x.clone(), w.clone()], &y), "supported");
    let sub = LayerDescriptor::ElementwiseBinary(backplane_api::BinaryOperation::Sub);
    assert_eq!(
        reason(&sub, &[x.clone(), x.clone()], &x),
        "CpuFast: quantized Sub is not supported (falls back)"
    );
}

/// `Add` and `Mul` in onnxruntime's arithmetic (written out again here from CpuRef's module
/// doc: its fused kernels' for u8 tensors, the QDQ definition with an i8 one), with
/// broadcasting, on every ISA.
#[test]
fn add_and_mul_match_the_definition() {
    use backplane_api::BinaryOperation as B;
    let mut rng = Rng(4242);
    // The last two are split between threads (more than 2^17 elements): by rows, and one row
    // cut in two.
    let cases: [(&[u32], &[u32], &[u32]); 7] = [
        (&[1, 6, 5, 7], &[1, 6, 5, 7], &[1, 6, 5, 7]),
        (&[1, 6, 5, 7], &[1, 6, 1, 1], &[1, 6, 5, 7]),
        (&[1, 6, 1, 1], &[1, 6, 5, 7], &[1, 6, 5, 7]),
        (&[2, 3, 40], &[40], &[2, 3, 40]),
        (&[3, 1], &[1, 33], &[3, 33]),
        (&[1, 4, 180, 190], &[1, 4, 1, 1], &[1, 4, 180, 190]),
        (&[1, 1, 400, 400], &[1], &[1, 1, 400, 400]),
    ];
    for op in [B::Add, B::Mul] {
        for (i, &(sa, sb, sc)) in cases.iter().enumerate() {
            let (ta, tb, tc) = match i % 3 {
                0 => (DataType::QAsymmU8, DataType::QAsymmU8, DataType::QAsymmU8),
                1 => (DataType::QAsymmS8, DataType::QAsymmU8, DataType::QAsymmS8),
                _ => (DataType::QAsymmU8, DataType::QAsymmS8, DataType::QAsymmU8),
            };
            let (a_s, a_z, b_s, c_s, c_z) = (0.031f32, 7, 0.017f32, 0.04f32, 11);
            let b_z = if tb == DataType::QAsymmU8 { 130 } else { -3 };
            let (a, b) = (
                rng.bytes(sa.iter().product::<u32>() as usize),
                rng.bytes(sb.iter().product::<u32>() as usize),
            );
            let rank = sc.len();
            let pad = |s: &[u32]| -> Vec<usize> {
                let mut v = vec![1usize; rank - s.len()];
                v.extend(s.iter().map(|&d| d as usize));
                v
            };
            let (pa, pb, pc) = (pad(sa), pad(sb), pad(sc));
            let n: usize = pc.iter().product();
            let at = |p: &[usize], idx: &[usize]| {
                idx.iter()
                    .zip(p)
                    .fold(0, |acc, (&i, &d)| acc * d + if d == 1 { 0 } else { i })
            };
            let ra = a_s / c_s;
            let rb = b_s / c_s;
            let fixed = c_z as f32 - (ra * a_z as f32 + rb * b_z as f32);
            let last = |s: &[u32]| s.last().copied().unwrap_or(1);
            let mut want = vec![0u8; n];
            for (flat, w) in want.iter_mut().enumerate() {
                let mut idx = vec![0; rank];
                let mut r = flat;
                for d in (0..rank).rev() {
                    idx[d] = r % pc[d];
                    r /= pc[d];
                }
                let qa = read(ta, a[at(&pa, &idx)]);
                let qb = read(tb, b[at(&pb, &idx)]);
                let (fa, fb) = (qa as f32, qb as f32);
                // With an i8 tensor: the QDQ definition, the zero point added after rounding.
                let signed = [ta, tb, tc].contains(&DataType::QAsymmS8);
                let (da, db) = ((qa - a_z) as f32 * a_s, (qb - b_z) as f32 * b_s);
                let v = match op {
                    B::Mul if signed => ((da * db) / c_s).round_ties_even() + c_z as f32,
                    _ if signed => ((da + db) / c_s).round_ties_even() + c_z as f32,
                    B::Mul => ((qa - a_z) * (qb - b_z)) as f32 * ((a_s * b_s) / c_s) + c_z as f32,
                    _ if last(sc) > 1 && last(sa) == 1 && last(sb) != 1 => {
                        fb.mul_add(rb, fixed + fa * ra)
                    }
                    _ if last(sc) > 1 && last(sb) == 1 && last(sa) != 1 => {
                        fa.mul_add(ra, fixed + fb * rb)
                    }
                    _ => fa.mul_add(ra, fb.mul_add(rb, fixed)),
                };
                let (lo, hi) = range(tc);
                *w = store(tc, v.round_ties_even().clamp(lo as f32, hi as f32) as i32);
            }
            let layer = LayerDescriptor::ElementwiseBinary(op);
            let infos = [q(sa, ta, a_s, a_z), q(sb, tb, b_s, b_z)];
            let y = q(sc, tc, c_s, c_z);
            let what = format!("{op:?} {sa:?} {sb:?}");
            check_all(&layer, &infos, &[a.clone(), b.clone()], &y, &want, &what);
            // An operand of one element given as a constant: the layer becomes a table.
            for (slot, one) in [(0, sa), (1, sb)] {
                if one.iter().product::<u32>() == 1 {
                    let mut infos = infos.clone();
                    infos[slot] = infos[slot].clone().constant();
                    let what = format!("{what}, operand {slot} a constant byte");
                    check_all(&layer, &infos, &[a.clone(), b.clone()], &y, &want, &what);
                }
            }
        }
    }
    // Every byte of the varying operand, either operand the constant, u8 and i8.
    let bytes: Vec<u8> = (0..=255u8).collect();
    for (op, ta, tb, tc) in [
        (
            B::Add,
            DataType::QAsymmU8,
            DataType::QAsymmU8,
            DataType::QAsymmU8,
        ),
        (
            B::Mul,
            DataType::QAsymmU8,
            DataType::QAsymmU8,
            DataType::QAsymmU8,
        ),
        (
            B::Add,
            DataType::QAsymmS8,
            DataType::QAsymmS8,
            DataType::QAsymmS8,
        ),
        (
            B::Mul,
            DataType::QAsymmU8,
            DataType::QAsymmS8,
            DataType::QAsymmU8,
        ),
    ] {
        for slot in [0, 1] {
            let c = 200u8;
            let (sa, sb): (&[u32], &[u32]) = if slot == 1 {
                (&[256], &[1])
            } else {
                (&[1], &[256])
            };
            let infos = [q(sa, ta, 0.05, 9), q(sb, tb, 0.02, 3)];
            let mut infos = infos.to_vec();
            let y = q(&[256], tc, 0.07, 5);
            // The oracle: the same layer with the one-element operand not constant.
            let data = if slot == 1 {
                [bytes.clone(), vec![c]]
            } else {
                [vec![c], bytes.clone()]
            };
            let layer = LayerDescriptor::ElementwiseBinary(op);
            let want = {
                let w = make_with(&layer, &infos, &[None, None], std::slice::from_ref(&y)).unwrap();
                let views: Vec<TensorView<'_>> = infos
                    .iter()
                    .zip(&data)
                    .map(|(i, d)| TensorView::new(i, d))
                    .collect();
                let mut got = vec![0u8; 256];
                w.execute(&views, &mut [TensorViewMut::new(&y, &mut got)])
                    .unwrap();
                got
            };
            infos[slot] = infos[slot].clone().constant();
            check_all(
                &layer,
                &infos,
                &data,
                &y,
                &want,
                &format!("{op:?} table, slot {slot}"),
            );
        }
    }
}

#[test]
fn quantize_and_dequantize_match_the_definition() {
    let values: Vec<f32> = (0..3000)
        .map(|i| (i as f32 - 1500.0) * 0.05)
        .chain([
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.25,
            0.75,
            -0.25,
        ])
        .collect();
    for (dt, scale, zp) in [
        (DataType::QAsymmU8, 0.5f32, 3),
        (DataType::QAsymmS8, 0.1, -5),
    ] {
        let (lo, hi) = range(dt);
        let want: Vec<u8> = values
            .iter()
            .map(|&v| {
                let r = (v / scale)
                    .round_ties_even()
                    .clamp((lo - zp) as f32, (hi - zp) as f32);
                store(dt, r as i32 + zp)
            })
            .collect();
        let shape = [values.len() as u32];
        let x = TensorInfo::new(&shape, DataType::Float32);
        let y = q(&shape, dt, scale, zp);
        let xb: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
        check_all(
            &LayerDescriptor::Quantize(dt),
            std::slice::from_ref(&x),
            &[xb],
            &y,
            &want,
            "quantize",
        );
        let deq: Vec<u8> = want
            .iter()
            .flat_map(|&b| ((read(dt, b) - zp) as f32 * scale).to_ne_bytes())
            .collect();
        check_all(
            &LayerDescriptor::Dequantize,
            std::slice::from_ref(&y),
            std::slice::from_ref(&want),
            &x,
            &deq,
            "dequantize",
        );
    }
}

#[test]
fn concat_and_nearest_resize_move_bytes() {
    let mut rng = Rng(99);
    let t = |shape: &[u32]| q(shape, DataType::QAsymmU8, 0.1, 4);
    // Concat along axis 1 of [2, 1|3|2, 4].
    let parts = [1usize, 3, 2];
    let data: Vec<Vec<u8>> = parts.iter().map(|&c| rng.bytes(2 * c * 4)).collect();
    let mut want = Vec::new();
    for n in 0..2 {
        for (p, &c) in data.iter().zip(&parts) {
            want.extend_from_slice(&p[n * c * 4..(n + 1) * c * 4]);
        }
    }
    let infos: Vec<TensorInfo> = parts.iter().map(|&c| t(&[2, c as u32, 4])).collect();
    let layer = LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 });
    check_all(&layer, &infos, &data, &t(&[2, 6, 4]), &want, "concat");
    // Another scale on one input: its bytes are requantised (dequantised, then quantised
    // with the output's parameters).
    let mut other = infos.clone();
    other[1] = q(&[2, 3, 4], DataType::QAsymmS8, 0.2, -4);
    let mut want2 = Vec::new();
    for n in 0..2 {
        for (i, (p, &c)) in data.iter().zip(&parts).enumerate() {
            for &b in &p[n * c * 4..(n + 1) * c * 4] {
                want2.push(if i == 1 {
                    let real = (i32::from(b as i8) + 4) as f32 * 0.2;
                    ((real / 0.1).round_ties_even() + 4.0).clamp(0.0, 255.0) as u8
                } else {
                    b
                });
            }
        }
    }
    check_all(
        &layer,
        &other,
        &data,
        &t(&[2, 6, 4]),
        &want2,
        "concat requantised",
    );

    // Nearest, asymmetric, floor, x2.
    let x = rng.bytes(2 * 3 * 5);
    let mut want = vec![0u8; 2 * 6 * 10];
    for p in 0..2 {
        for oy in 0..6 {
            for ox in 0..10 {
                want[(p * 6 + oy) * 10 + ox] = x[(p * 3 + oy / 2) * 5 + ox / 2];
            }
        }
    }
    let layer = LayerDescriptor::Resize(backplane_api::ResizeDescriptor {
        method: backplane_api::ResizeMethod::Nearest,
        coordinates: backplane_api::CoordinateTransformation::Asymmetric,
        nearest: backplane_api::NearestRounding::Floor,
        height: 6,
        width: 10,
        scale_y: 2.0,
        scale_x: 2.0,
    });
    check_all(
        &layer,
        &[t(&[1, 2, 3, 5])],
        &[x],
        &t(&[1, 2, 6, 10]),
        &want,
        "resize",
    );
}

#[test]
fn max_pooling_keeps_the_largest_byte() {
    let mut rng = Rng(5);
    // (kernel, stride, padding [top, left, bottom, right]): ResNet's 3x3 stride 2 padding 1
    // (windows of 2 at the edge), a 2x4 window at stride 1 with asymmetric padding, 1x1.
    let configs: [([usize; 2], [usize; 2], [usize; 4]); 3] = [
        ([3, 3], [2, 2], [1, 1, 1, 1]),
        ([2, 4], [1, 1], [0, 2, 1, 1]),
        ([1, 1], [1, 2], [0, 0, 0, 0]),
    ];
    for dt in [DataType::QAsymmU8, DataType::QAsymmS8] {
        for ([kh, kw], [sy, sx], [pt, pl, pb, pr]) in configs {
            let (h, w) = (9usize, 11usize);
            let x = rng.bytes(2 * h * w);
            let (oh, ow) = ((h + pt + pb - kh) / sy + 1, (w + pl + pr - kw) / sx + 1);
            let mut want = vec![0u8; 2 * oh * ow];
            for p in 0..2 {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut m = i32::MIN;
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * sy + ky) as isize - pt as isize;
                                let ix = (ox * sx + kx) as isize - pl as isize;
                                if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                                    m = m.max(read(dt, x[(p * h + iy as usize) * w + ix as usize]));
                                }
                            }
                        }
                        want[(p * oh + oy) * ow + ox] = store(dt, m);
                    }
                }
            }
            let layer = LayerDescriptor::Pooling2d(backplane_api::Pooling2dDescriptor {
                pool_type: backplane_api::PoolingType::Max,
                pool_width: kw as u32,
                pool_height: kh as u32,
                stride_x: sx as u32,
                stride_y: sy as u32,
                padding: Padding2d {
                    left: pl as u32,
                    right: pr as u32,
                    top: pt as u32,
                    bottom: pb as u32,
                },
                rounding: backplane_api::OutputRounding::Floor,
                count_include_pad: false,
                layout: backplane_api::DataLayout::Nchw,
            });
            let t = |s: &[u32]| q(s, dt, 0.1, 3);
            let (xi, yi) = (
                t(&[1, 2, h as u32, w as u32]),
                t(&[1, 2, oh as u32, ow as u32]),
            );
            check_all(
                &layer,
                &[xi],
                &[x],
                &yi,
                &want,
                &format!("max pool {kh}x{kw}"),
            );
        }
    }
}

/// A fused `Quantize(ReLU(Dequantize(a) + Dequantize(b)))`: the f32 steps of the separate
/// layers, written out again.
#[test]
fn dequantize_add_relu_quantize_island() {
    let mut rng = Rng(31);
    let shape = [1u32, 3, 70, 700];
    let n = shape.iter().product::<u32>() as usize;
    let (a, b) = (rng.bytes(n), rng.bytes(n));
    let (sa, za, sb, zb, sy, zy) = (0.05f32, 120, 0.03f32, -7, 0.04f32, 3);
    for relu in [false, true] {
        let want: Vec<u8> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                let fa = (i32::from(x) - za) as f32 * sa;
                let fb = (i32::from(y as i8) - zb) as f32 * sb;
                let mut v = fa + fb;
                if relu {
                    v = v.max(0.0);
                }
                let r = (v / sy)
                    .round_ties_even()
                    .clamp((0 - zy) as f32, (255 - zy) as f32);
                (r as i32 + zy) as u8
            })
            .collect();
        let layer = LayerDescriptor::PreCompiled(backplane_api::PreCompiledDescriptor {
            backend: "CpuFast".into(),
            operation: "QuantizedAddRelu".into(),
            payload: vec![b'Q', 1, 0, u8::from(relu)].into(),
        });
        let infos = [
            q(&shape, DataType::QAsymmU8, sa, za),
            q(&shape, DataType::QAsymmS8, sb, zb),
        ];
        let y = q(&shape, DataType::QAsymmU8, sy, zy);
        check_all(&layer, &infos, &[a.clone(), b.clone()], &y, &want, "island");
    }
}

/// A quantised product fused with a quantised ReLU or BoundedReLU of equal parameters: the
/// product's bytes clamped to the quantised bounds.
#[test]
fn products_fused_with_a_clamp() {
    use backplane_api::{ActivationDescriptor, ActivationFunction};
    let mut rng = Rng(8);
    let (rows, k, n) = (5usize, 9usize, 13usize);
    let x = rng.bytes(rows * k);
    let wb = rng.bytes(k * n);
    let (xs, xz, ws, ys, yz) = (0.02f32, 128, 0.01f32, 0.01f32, 100);
    for (a, (lo, hi)) in [
        (
            ActivationDescriptor {
                function: ActivationFunction::ReLU,
                a: 0.0,
                b: 0.0,
            },
            (100, 255),
        ),
        // [-0.3, 0.6] quantises to [70, 160].
        (
            ActivationDescriptor {
                function: ActivationFunction::BoundedReLU,
                a: 0.6,
                b: -0.3,
            },
            (70, 160),
        ),
    ] {
        let mut want = vec![0u8; rows * n];
        for r in 0..rows {
            for c in 0..n {
                let acc: i32 = (0..k)
                    .map(|kk| (i32::from(x[r * k + kk]) - xz) * i32::from(wb[kk * n + c] as i8))
                    .sum();
                want[r * n + c] = oracle_requant(acc, xs, ws, ys, yz, (0, 255)).clamp(lo, hi) as u8;
            }
        }
        let mut op = crate::fused_op::FusedOp::plain(&LayerDescriptor::FullyConnected(
            FullyConnectedDescriptor::default(),
        ))
        .unwrap();
        op.activation = Some(a);
        let layer = LayerDescriptor::PreCompiled(backplane_api::PreCompiledDescriptor {
            backend: "CpuFast".into(),
            operation: op.operation().into(),
            payload: op.encode().into(),
        });
        let infos = [
            q(&[rows as u32, k as u32], DataType::QAsymmU8, xs, xz),
            q(&[k as u32, n as u32], DataType::QSymmS8, ws, 0).constant(),
        ];
        let y = q(&[rows as u32, n as u32], DataType::QAsymmU8, ys, yz);
        check_all(
            &layer,
            &infos,
            &[x.clone(), wb.clone()],
            &y,
            &want,
            &format!("{a:?}"),
        );
    }
}

/// A unary island (Dequantize, Mul and Add by constants, BoundedReLU, a Div of a constant by
/// the value, Quantize) as one table: each step in f32 as the Float32 layers compute it.
#[test]
fn unary_island_is_a_table() {
    let mut rng = Rng(12);
    let shape = [1u32, 2, 30, 40];
    let n = shape.iter().product::<u32>() as usize;
    let x = rng.bytes(n);
    let (sx, zx, sy, zy) = (0.07f32, 5, 0.02f32, -9);
    let (mul, add, num) = (0.2f32, 0.5f32, 0.3f32);
    let want: Vec<u8> = x
        .iter()
        .map(|&b| {
            let v = (i32::from(b as i8) - zx) as f32 * sx;
            let v = (v * mul + add).clamp(0.0, 1.0);
            let v = num / v;
            let r = (v / sy).round_ties_even();
            let r = if r.is_nan() { 0.0 } else { r };
            (r.clamp((-128 - zy) as f32, (127 - zy) as f32) as i32 + zy) as i8 as u8
        })
        .collect();
    // Steps: Mul by slot 1, Add slot 2, BoundedReLU(1, 0), Div with the constant (slot 3) first.
    let mut payload = vec![b'Q', 1, 1, 4, 0, 2, 1, 0, 0, 0, 2, 0, 1, 1];
    payload.extend(1.0f32.to_le_bytes());
    payload.extend(0.0f32.to_le_bytes());
    payload.extend([0, 3, 3, 1]);
    let layer = LayerDescriptor::PreCompiled(backplane_api::PreCompiledDescriptor {
        backend: "CpuFast".into(),
        operation: "QuantizedTable".into(),
        payload: payload.into(),
    });
    let c = || TensorInfo::new(&[1], DataType::Float32).constant();
    let infos = [q(&shape, DataType::QAsymmS8, sx, zx), c(), c(), c()];
    let data = vec![
        x,
        mul.to_le_bytes().to_vec(),
        add.to_le_bytes().to_vec(),
        num.to_le_bytes().to_vec(),
    ];
    let y = q(&shape, DataType::QAsymmS8, sy, zy);
    check_all(&layer, &infos, &data, &y, &want, "unary island");
}

/// Quantised softmax: onnxruntime's table form transcribed element by element (each
/// exponential computed where it is used), byte for byte, along the last axis (rows split
/// between threads) and a middle one, u8 and s8; and that form is a softmax: within one step
/// of the f64 value, the output step being `1 / floor(1 / y_scale)`.
#[test]
fn softmax_matches_the_table_definition() {
    let mut rng = Rng(0x50f7);
    type Case = (&'static [u32], i32, DataType, f32, i32, f32, i32);
    #[rustfmt::skip]
    let cases: [Case; 4] = [
        (&[40, 661], -1, DataType::QAsymmU8, 0.11, 120, 1.0 / 256.0, 0),
        (&[2, 5, 3], 1, DataType::QAsymmS8, 0.05, -3, 1.0 / 256.0, -128),
        (&[3, 7, 1], 0, DataType::QAsymmU8, 0.3, 0, 0.003, 2),
        (&[330, 400], 1, DataType::QAsymmS8, 0.02, 10, 1.0 / 128.0, -128),
    ];
    for (shape, axis, dt, xs, xz, ys, yz) in cases {
        let n = shape.iter().product::<u32>() as usize;
        let x = rng.bytes(n);
        let rank = shape.len();
        let ax = if axis < 0 { rank - 1 } else { axis as usize };
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let (len, inner) = (dims[ax], dims[ax + 1..].iter().product::<usize>());
        let headroom = f64::from(f32::MAX / len as f32);
        let shift = (headroom.ln() - 5.0).max(0.0) / f64::from(xs);
        let y_inverse = (1.0f32 / ys).floor();
        let (lo, hi) = range(dt);
        let mut want = vec![0u8; n];
        let mut worst = 0f64;
        for o in 0..n / (len * inner) {
            for i in 0..inner {
                let at = |k: usize| (o * len + k) * inner + i;
                let v = |k: usize| read(dt, x[at(k)]);
                let m = (0..len).map(v).max().unwrap();
                let e = |k: usize| ((f64::from(v(k) - m) + shift) * f64::from(xs)).exp() as f32;
                let mut sum = 0f32;
                for k in 0..len {
                    sum += e(k);
                }
                let real: f64 = (0..len)
                    .map(|k| (f64::from(v(k) - m) * f64::from(xs)).exp())
                    .sum();
                for k in 0..len {
                    let q = ((e(k) * y_inverse) / sum).round_ties_even() as i32 + yz;
                    want[at(k)] = store(dt, q.clamp(lo, hi));
                    let exact = (f64::from(v(k) - m) * f64::from(xs)).exp() / real;
                    let ideal = (exact * f64::from(y_inverse) + f64::from(yz))
                        .clamp(f64::from(lo), f64::from(hi));
                    worst = worst.max((f64::from(q.clamp(lo, hi)) - ideal).abs());
                }
            }
        }
        assert!(
            worst <= 1.0,
            "{shape:?}: {worst} steps from the f64 softmax"
        );
        let layer = LayerDescriptor::Softmax(backplane_api::SoftmaxDescriptor { beta: 1.0, axis });
        let y = q(shape, dt, ys, yz);
        check_all(
            &layer,
            &[q(shape, dt, xs, xz)],
            &[x],
            &y,
            &want,
            &format!("softmax {shape:?} axis {axis}"),
        );
    }
}

/// Quantised BatchMatMul of two activations: batch dimensions broadcast (numpy's), either
/// operand transposed, u8 and s8 operands and outputs; the integer sum written out per
/// element, requantised by the products' formula; byte for byte.
#[test]
fn products_of_two_activations_match_the_definition() {
    use DataType::{QAsymmS8 as S8, QAsymmU8 as U8};
    let mut rng = Rng(0xba7c);
    type Case = (&'static [u32], &'static [u32], [bool; 2], [DataType; 3]);
    #[rustfmt::skip]
    let cases: [Case; 5] = [
        (&[1, 8, 15, 40], &[1, 8, 40, 15], [false, false], [U8, U8, U8]),
        (&[2, 3, 4, 5], &[3, 5, 6], [false, false], [S8, U8, S8]),
        (&[3, 1, 5, 4], &[2, 6, 5], [true, true], [U8, S8, U8]),
        (&[7, 9], &[2, 11, 9], [false, true], [S8, S8, U8]),
        (&[4, 64, 96], &[4, 96, 80], [false, false], [U8, U8, S8]),
    ];
    for (sa, sb, [ta, tb], [da, db, dy]) in cases {
        let d = BatchMatMulDescriptor {
            transpose_a: ta,
            transpose_b: tb,
        };
        let zp = |dt: DataType, u: i32, s: i32| if dt == U8 { u } else { s };
        let (a_s, a_z, b_s, b_z) = (0.03f32, zp(da, 131, -5), 0.02f32, zp(db, 120, 3));
        let (y_s, y_z) = (0.25f32, zp(dy, 128, -2));
        let ai = q(sa, da, a_s, a_z);
        let bi = q(sb, db, b_s, b_z);
        let out = backplane_api::shapes::batch_matmul(&d, sa, sb).unwrap();
        let yi = q(&out, dy, y_s, y_z);
        let (a, b) = (
            rng.bytes(sa.iter().product::<u32>() as usize),
            rng.bytes(sb.iter().product::<u32>() as usize),
        );
        let dims = |s: &[u32]| s.iter().map(|&v| v as usize).collect::<Vec<_>>();
        let (pa, pb, po) = (dims(sa), dims(sb), dims(&out));
        let (ra, ro) = (pa.len(), po.len());
        let (m, n) = (po[ro - 2], po[ro - 1]);
        let k = if ta { pa[ra - 2] } else { pa[ra - 1] };
        let batches: usize = po[..ro - 2].iter().product();
        // The flat offset of a batch index (of the output's batch dims) in an operand's batch.
        let offset = |p: &[usize], flat: usize| {
            let (mut rest, mut off, mut stride) = (flat, 0, 1);
            for (i, &size) in po[..ro - 2].iter().enumerate().rev() {
                let idx = rest % size;
                rest /= size;
                let lead = (ro - 2) - (p.len() - 2);
                if i >= lead {
                    let own = p[i - lead];
                    if own != 1 {
                        off += idx * stride;
                    }
                    stride *= own;
                }
            }
            off
        };
        let (lo, hi) = range(dy);
        let mult = (a_s * b_s) / y_s;
        let mut want = Vec::new();
        for t in 0..batches {
            let (ao, bo) = (offset(&pa, t) * m * k, offset(&pb, t) * k * n);
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0i64;
                    for kk in 0..k {
                        let x = a[ao + if ta { kk * m + i } else { i * k + kk }];
                        let w = b[bo + if tb { j * k + kk } else { kk * n + j }];
                        acc += i64::from(read(da, x) - a_z) * i64::from(read(db, w) - b_z);
                    }
                    let v = ((acc as i32) as f32 * mult).round_ties_even() as i32 + y_z;
                    want.push(store(dy, v.clamp(lo, hi)));
                }
            }
        }
        check_all(
            &LayerDescriptor::BatchMatMul(d),
            &[ai, bi],
            &[a, b],
            &yi,
            &want,
            &format!("{sa:?} x {sb:?} transposed {ta}/{tb}"),
        );
    }
}

/// Quantised averages against their definitions written out: the global average of `u8`
/// planes in integers (onnxruntime's `QLinearGlobalAveragePool`), and window averages of
/// dequantised values summed in f32 row by row, quantised with the zero point added before
/// rounding for `u8` (`QLinearAveragePool`) and after it with an `i8` tensor (the QDQ form).
#[test]
fn averages_match_the_definition() {
    let mut rng = Rng(0xa7e);
    // Global: [1, 300, 7, 9] (planes split between threads), and [2, 3, 1, 1].
    for (shape, xs, xz, ys, yz) in [
        ([1u32, 300, 7, 9], 0.05f32, 131, 0.02f32, 120),
        ([2, 3, 1, 1], 0.3, 0, 0.11, 7),
    ] {
        let n = shape.iter().product::<u32>() as usize;
        let count = (shape[2] * shape[3]) as usize;
        let x = rng.bytes(n);
        let m = xs / (ys * count as f32);
        let want: Vec<u8> = x
            .chunks(count)
            .map(|p| {
                let acc: i64 =
                    p.iter().map(|&b| i64::from(b)).sum::<i64>() - xz as i64 * count as i64;
                let r = ((acc as i32) as f32 * m).round_ties_even() as i32 + yz;
                r.clamp(0, 255) as u8
            })
            .collect();
        let layer = LayerDescriptor::Mean(backplane_api::MeanDescriptor {
            axes: vec![2, 3].into(),
            keep_dims: true,
        });
        let yi = q(&[shape[0], shape[1], 1, 1], DataType::QAsymmU8, ys, yz);
        let xi = q(&shape, DataType::QAsymmU8, xs, xz);
        check_all(
            &layer,
            &[xi],
            &[x],
            &yi,
            &want,
            &format!("global average {shape:?}"),
        );
    }
    // Windows: 3x2 stride (3, 2) (PP-OCRv4 rec's), 2x2 stride 1; u8 and i8.
    for ([kh, kw], [sy, sx], dt) in [
        ([3usize, 2usize], [3usize, 2usize], DataType::QAsymmU8),
        ([2, 2], [1, 1], DataType::QAsymmS8),
        ([3, 2], [3, 2], DataType::QAsymmS8),
    ] {
        let (c, h, w) = (70usize, 12usize, 41usize);
        let (oh, ow) = ((h - kh) / sy + 1, (w - kw) / sx + 1);
        let x = rng.bytes(c * h * w);
        let (xs, xz, ys, yz) = (
            0.07f32,
            if dt == DataType::QAsymmU8 { 128 } else { -4 },
            0.05f32,
            if dt == DataType::QAsymmU8 { 100 } else { 9 },
        );
        let (lo, hi) = range(dt);
        let mut want = Vec::new();
        for p in 0..c {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = 0f32;
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let b = x[(p * h + oy * sy + ky) * w + ox * sx + kx];
                            sum += (read(dt, b) - xz) as f32 * xs;
                        }
                    }
                    let v = sum / (kh * kw) as f32;
                    let qv = if dt == DataType::QAsymmU8 {
                        (v / ys + yz as f32)
                            .round_ties_even()
                            .clamp(lo as f32, hi as f32) as i32
                    } else {
                        (v / ys)
                            .round_ties_even()
                            .clamp((lo - yz) as f32, (hi - yz) as f32)
                            as i32
                            + yz
                    };
                    want.push(store(dt, qv));
                }
            }
        }
        let layer = LayerDescriptor::Pooling2d(backplane_api::Pooling2dDescriptor {
            pool_type: backplane_api::PoolingType::Average,
            pool_width: kw as u32,
            pool_height: kh as u32,
            stride_x: sx as u32,
            stride_y: sy as u32,
            padding: Padding2d::default(),
            rounding: backplane_api::OutputRounding::Floor,
            count_include_pad: false,
            layout: backplane_api::DataLayout::Nchw,
        });
        let xi = q(&[1, c as u32, h as u32, w as u32], dt, xs, xz);
        let yi = q(&[1, c as u32, oh as u32, ow as u32], dt, ys, yz);
        check_all(
            &layer,
            &[xi],
            &[x],
            &yi,
            &want,
            &format!("average {kh}x{kw} {dt:?}"),
        );
    }
}

#[test]
fn gather_row_reads_the_padded_row_by_its_definition() {
    let src: Vec<u8> = (1..=11).collect();
    for step in 1..=3 {
        for pad in 0..4 {
            for x0 in 0..20 {
                for n in 0..=9 {
                    let mut row = vec![0u8; n];
                    super::product::gather_row(&src, x0, pad, step, 200, &mut row);
                    let want: Vec<u8> = (0..n)
                        .map(|j| {
                            let at = x0 + j * step;
                            if at >= pad && at - pad < src.len() {
                                src[at - pad]
                            } else {
                                200
                            }
                        })
                        .collect();
                    assert_eq!(row, want, "step {step} pad {pad} x0 {x0} n {n}");
                }
            }
        }
    }
}

#[test]
fn depthwise_planes_are_laid_out_anew_for_each_geometry() {
    use DataType::QAsymmU8 as U8;
    let mut rng = Rng(0x0d3e_9b1a);
    // Both pad their planes to 6x6 (the same scratch length): the first fills every position,
    // the second reads a zero border the first wrote over, so the second must not find the
    // first's values there. Then the first again, after the second.
    for [x, pads] in [[6, 0], [4, 1], [6, 0]] {
        conv_case(
            &mut rng,
            U8,
            U8,
            [1, 3, x, x],
            3,
            [3, 3],
            [1, 1],
            [1, 1],
            [pads; 4],
            true,
            true,
            0.05,
        );
    }
}
