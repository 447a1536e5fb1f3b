//! Tests of `chain.rs`.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, Convolution2dDescriptor, FullyConnectedDescriptor,
    LayerDescriptor, OutputRounding, Padding2d, Pooling2dDescriptor, PoolingType,
    PreCompiledDescriptor, shapes,
};

use super::*;
use crate::{
    fused_op::BatchNormStage,
    workloads::test_support::{
        Lcg, assert_close, assert_close_to_scale, f32t, run, run_with_constants, u32s, with_threads,
    },
};

/// Relative tolerance against the f64 oracles (sums of up to a few hundred products).
const REL_TOL: f64 = 1e-5;

/// Tolerance of a convolution against its f64 oracle, relative to the sum of its products'
/// magnitudes: 8 f32 epsilons (faer's NEON and AVX kernels sum in different orders; one
/// 576-term output of `convolutions_split_between_threads` is 1.3e-5 from the oracle on
/// aarch64, within 1e-5 · (1 + |y|) on x86-64 only by luck).
const SUM_TOL: f64 = 1e-6;

/// One convolution configuration, NCHW.
#[derive(Clone, Copy)]
struct Conv {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    m: usize,
    kh: usize,
    kw: usize,
    groups: usize,
    stride: (usize, usize),
    dilation: (usize, usize),
    /// Top, bottom, left, right.
    pads: (usize, usize, usize, usize),
    bias: bool,
}

impl Conv {
    fn out_hw(&self) -> (usize, usize) {
        let (t, b, l, r) = self.pads;
        let oh = (self.h + t + b - self.dilation.0 * (self.kh - 1) - 1) / self.stride.0 + 1;
        let ow = (self.w + l + r - self.dilation.1 * (self.kw - 1) - 1) / self.stride.1 + 1;
        (oh, ow)
    }

    fn descriptor(&self) -> Convolution2dDescriptor {
        let u = |v: usize| v as u32;
        Convolution2dDescriptor {
            padding: Padding2d {
                top: u(self.pads.0),
                bottom: u(self.pads.1),
                left: u(self.pads.2),
                right: u(self.pads.3),
            },
            stride_y: u(self.stride.0),
            stride_x: u(self.stride.1),
            dilation_y: u(self.dilation.0),
            dilation_x: u(self.dilation.1),
            groups: u(self.groups),
            bias_enabled: self.bias,
            layout: backplane_api::DataLayout::Nchw,
        }
    }

    fn x_shape(&self) -> Vec<u32> {
        u32s(&[self.n, self.c, self.h, self.w])
    }

    fn w_shape(&self) -> Vec<u32> {
        u32s(&[self.m, self.c / self.groups, self.kh, self.kw])
    }

    fn y_shape(&self) -> Vec<u32> {
        let (oh, ow) = self.out_hw();
        u32s(&[self.n, self.m, oh, ow])
    }
}

/// ONNX Conv from its definition in f64: `y[n, m, oy, ox] = B[m] + sum x[n, c, oy*sy +
/// ky*dy - pt, ox*sx + kx*dx - pl] * W[m, ic, ky, kx]` over the group's channels, zero
/// outside the input.
fn conv_oracle(p: &Conv, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f64> {
    let (oh, ow) = p.out_hw();
    let (cg, mg) = (p.c / p.groups, p.m / p.groups);
    let mut y = Vec::new();
    for n in 0..p.n {
        for m in 0..p.m {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut s = b.map_or(0.0, |b| f64::from(b[m]));
                    for ic in 0..cg {
                        let c = (m / mg) * cg + ic;
                        for ky in 0..p.kh {
                            for kx in 0..p.kw {
                                let iy =
                                    (oy * p.stride.0 + ky * p.dilation.0) as i64 - p.pads.0 as i64;
                                let ix =
                                    (ox * p.stride.1 + kx * p.dilation.1) as i64 - p.pads.2 as i64;
                                if !(0..p.h as i64).contains(&iy) || !(0..p.w as i64).contains(&ix)
                                {
                                    continue;
                                }
                                let xv = x[((n * p.c + c) * p.h + iy as usize) * p.w + ix as usize];
                                let wv = w[((m * cg + ic) * p.kh + ky) * p.kw + kx];
                                s += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    y.push(s);
                }
            }
        }
    }
    y
}

/// Runs `p` as a stand-alone layer (weights as non-constant inputs) and compares.
fn check_conv(p: &Conv, depthwise: bool, seed: u64) {
    let mut rng = Lcg(seed);
    let x = rng.vec(p.n * p.c * p.h * p.w);
    let w = rng.vec(p.m * (p.c / p.groups) * p.kh * p.kw);
    let b = rng.vec(p.m);
    let layer = if depthwise {
        LayerDescriptor::DepthwiseConvolution2d(p.descriptor())
    } else {
        LayerDescriptor::Convolution2d(p.descriptor())
    };
    let (xs, ws, bs) = (p.x_shape(), p.w_shape(), u32s(&[p.m]));
    let mut ins: Vec<(&[u32], &[f32])> = vec![(&xs, &x), (&ws, &w)];
    if p.bias {
        ins.push((&bs, &b));
    }
    let want = conv_oracle(p, &x, &w, p.bias.then_some(&b[..]));
    // Σ|x · w| (+ |b|) per output: the bound on any summation order's rounding.
    let abs = |v: &[f32]| v.iter().map(|v| v.abs()).collect::<Vec<f32>>();
    let b_abs = abs(&b);
    let scale = conv_oracle(p, &abs(&x), &abs(&w), p.bias.then_some(&b_abs[..]));
    // Split between threads (a product past `MIN_PARALLEL_WORK`, a depthwise image past
    // its threshold) or not, the same sums up to the GEMM's order.
    for threads in [1, 2, 3] {
        let got = with_threads(threads, || run(&layer, &ins, &p.y_shape()));
        assert_close_to_scale(
            &got,
            &want,
            &scale,
            SUM_TOL,
            &format!("convolution, {threads} threads"),
        );
    }
}

const BASE: Conv = Conv {
    n: 2,
    c: 4,
    h: 9,
    w: 8,
    m: 6,
    kh: 3,
    kw: 3,
    groups: 1,
    stride: (1, 1),
    dilation: (1, 1),
    pads: (1, 1, 1, 1),
    bias: true,
};

/// im2col: padding (asymmetric, wider than the kernel), strides, dilation, groups.
#[test]
fn convolution_variants() {
    let cases = [
        BASE,
        Conv {
            groups: 2,
            stride: (2, 2),
            dilation: (2, 2),
            pads: (1, 2, 2, 1),
            ..BASE
        },
        Conv {
            bias: false,
            stride: (1, 3),
            dilation: (3, 1),
            groups: 2,
            ..BASE
        },
        Conv {
            kh: 2,
            kw: 3,
            stride: (1, 3),
            pads: (3, 3, 2, 4),
            m: 2,
            ..BASE
        },
        Conv {
            kh: 1,
            kw: 1,
            pads: (0, 0, 0, 0),
            ..BASE
        },
        Conv {
            kh: 1,
            kw: 1,
            pads: (0, 0, 0, 0),
            groups: 2,
            bias: false,
            ..BASE
        },
        Conv {
            kh: 1,
            kw: 1,
            pads: (0, 0, 0, 0),
            stride: (2, 2),
            ..BASE
        },
        Conv { c: 1, m: 3, ..BASE },
        // Stride 2 across without dilation: im2col reads the rows split into their even
        // and odd columns; odd and even widths, taps starting on both.
        Conv {
            w: 11,
            kh: 7,
            kw: 7,
            stride: (2, 2),
            pads: (3, 2, 3, 2),
            ..BASE
        },
        Conv {
            w: 10,
            kw: 4,
            stride: (1, 2),
            pads: (0, 1, 2, 1),
            groups: 2,
            ..BASE
        },
        Conv {
            c: 3,
            m: 9,
            n: 1,
            h: 20,
            w: 33,
            ..BASE
        },
        // A kernel wider than the input (a 1-D convolution of length 1 with padding 2, as
        // ONNX's test_Conv1d_pad2size1): the outer taps read nothing but padding.
        Conv {
            h: 1,
            w: 1,
            kh: 1,
            kw: 5,
            pads: (0, 0, 2, 2),
            ..BASE
        },
        // A kernel one column wide, stride 1, no column padding: each tap's rows are one
        // run of the input (a one-column image as magika's, a wider one, rows padded).
        Conv {
            w: 1,
            kh: 5,
            kw: 1,
            pads: (0, 0, 0, 0),
            ..BASE
        },
        Conv {
            kh: 3,
            kw: 1,
            dilation: (2, 1),
            pads: (2, 3, 0, 0),
            groups: 2,
            ..BASE
        },
        // An empty input: every output reads only padding.
        Conv {
            h: 0,
            kh: 1,
            kw: 1,
            pads: (1, 1, 0, 0),
            ..BASE
        },
    ];
    for (i, p) in cases.iter().enumerate() {
        check_conv(p, false, i as u64 + 1);
    }
}

/// Convolutions large enough to be split between threads: the im2col over several blocks
/// of output rows (the last one shorter), grouped and strided, and a pointwise one.
#[test]
fn convolutions_split_between_threads() {
    let big = Conv {
        n: 1,
        c: 64,
        m: 64,
        h: 37,
        w: 32,
        ..BASE
    };
    check_conv(&big, false, 21);
    check_conv(
        &Conv {
            n: 2,
            groups: 2,
            stride: (2, 1),
            pads: (2, 0, 1, 1),
            h: 60,
            ..big
        },
        false,
        22,
    );
    check_conv(
        &Conv {
            stride: (2, 2),
            pads: (1, 1, 1, 0),
            h: 61,
            w: 45,
            ..big
        },
        false,
        24,
    );
    check_conv(
        &Conv {
            kh: 1,
            kw: 1,
            pads: (0, 0, 0, 0),
            h: 64,
            w: 64,
            ..big
        },
        false,
        23,
    );
    // One column wide (magika's shape, smaller): three blocks of rows (204, 204, 38), each
    // tap one run.
    check_conv(
        &Conv {
            c: 256,
            kh: 5,
            kw: 1,
            pads: (0, 0, 0, 0),
            h: 450,
            w: 1,
            ..big
        },
        false,
        25,
    );
}

/// The direct depthwise kernel, multiplier 1 and 2, through both layer kinds.
#[test]
fn depthwise_variants() {
    let dw = Conv {
        c: 3,
        m: 3,
        groups: 3,
        stride: (1, 2),
        dilation: (2, 1),
        pads: (1, 1, 1, 2),
        ..BASE
    };
    check_conv(&dw, true, 11);
    check_conv(&Conv { m: 6, ..dw }, true, 12);
    check_conv(
        &Conv {
            m: 6,
            bias: false,
            stride: (2, 2),
            ..dw
        },
        false,
        13,
    );
    check_conv(
        &Conv {
            kh: 5,
            kw: 5,
            pads: (2, 2, 2, 2),
            stride: (1, 1),
            dilation: (1, 1),
            ..dw
        },
        true,
        14,
    ); // Past the threshold: the channels split between threads.
    check_conv(
        &Conv {
            n: 1,
            c: 16,
            m: 16,
            groups: 16,
            h: 128,
            w: 130,
            stride: (1, 1),
            dilation: (1, 1),
            ..dw
        },
        true,
        15,
    );
}

/// FullyConnected in both weight layouts, with and without bias, several batch sizes.
#[test]
fn fully_connected_variants() {
    let mut rng = Lcg(31);
    for (n, k, m) in [(1, 8, 4), (3, 17, 5), (5, 64, 33)] {
        for transpose_weights in [false, true] {
            for bias_enabled in [false, true] {
                let (x, w, b) = (rng.vec(n * k), rng.vec(k * m), rng.vec(m));
                let layer = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
                    bias_enabled,
                    transpose_weights,
                });
                let ws = if transpose_weights {
                    u32s(&[m, k])
                } else {
                    u32s(&[k, m])
                };
                let (xs, bs) = (u32s(&[n, k]), u32s(&[m]));
                let mut ins: Vec<(&[u32], &[f32])> = vec![(&xs, &x), (&ws, &w)];
                if bias_enabled {
                    ins.push((&bs, &b));
                }
                let got = run(&layer, &ins, &u32s(&[n, m]));
                let mut want = Vec::new();
                for i in 0..n {
                    for j in 0..m {
                        let mut s = if bias_enabled { f64::from(b[j]) } else { 0.0 };
                        for p in 0..k {
                            let wv = if transpose_weights {
                                w[j * k + p]
                            } else {
                                w[p * m + j]
                            };
                            s += f64::from(x[i * k + p]) * f64::from(wv);
                        }
                        want.push(s);
                    }
                }
                assert_close(
                    &got,
                    &want,
                    REL_TOL,
                    &format!("fc {n}x{k}x{m} t={transpose_weights} b={bias_enabled}"),
                );
            }
        }
    }
}

/// A fused convolution, grouped (im2col + GEMM) or depthwise (the direct kernel applies
/// the activation itself), stride 1 or 2: head bias, batch norm, added bias, HardSwish and
/// average pooling, against the unfused stages computed by their definitions.
#[test]
fn fused_conv_batch_norm_bias_activation_pool() {
    check_fused_conv(&Conv { groups: 2, ..BASE }, 41);
    let depthwise = Conv {
        groups: 4,
        m: 8,
        ..BASE
    };
    check_fused_conv(&depthwise, 42);
    check_fused_conv(
        &Conv {
            stride: (2, 2),
            ..depthwise
        },
        43,
    );
}

/// [`fused_conv_batch_norm_bias_activation_pool`] for `p`.
fn check_fused_conv(p: &Conv, seed: u64) {
    let mut rng = Lcg(seed);
    let x = rng.vec(p.n * p.c * p.h * p.w);
    let w = rng.vec(p.m * (p.c / p.groups) * p.kh * p.kw);
    let (b0, scale, beta, mean, add) = (
        rng.vec(p.m),
        rng.vec(p.m),
        rng.vec(p.m),
        rng.vec(p.m),
        rng.vec(p.m),
    );
    let var = rng.vec_in(p.m, 0.2, 2.0);
    let mul = rng.vec(p.m);
    let (post_scale, post_shift) = (0.75f32, -0.125f32);
    let residual = rng.vec(p.y_shape().iter().map(|&d| d as usize).product());
    let eps = 1e-5f32;
    let pool = Pooling2dDescriptor {
        pool_type: PoolingType::Average,
        padding: Padding2d {
            left: 1,
            right: 1,
            top: 1,
            bottom: 1,
        },
        pool_width: 3,
        pool_height: 3,
        stride_x: 2,
        stride_y: 2,
        rounding: OutputRounding::Ceiling,
        count_include_pad: false,
        layout: backplane_api::DataLayout::Nchw,
    };
    let op = FusedOp {
        head: Head::Convolution(p.descriptor()),
        weights: 1,
        head_bias: Some(2),
        batch_norm: Some(BatchNormStage {
            epsilon: eps,
            slots: [3, 4, 5, 6],
        }),
        scale: Some(8),
        residual: Some(11),
        bias: Some(7),
        activation: Some(ActivationDescriptor {
            function: ActivationFunction::HardSwish,
            a: 0.0,
            b: 0.0,
        }),
        post_scale: Some(9),
        post_shift: Some(10),
        pool: Some(pool.clone()),
    };
    let layer = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
        backend: "CpuFast".into(),
        operation: op.operation().into(),
        payload: op.encode().into(),
    });
    let (xs, ws, cs, bias_shape) = (
        p.x_shape(),
        p.w_shape(),
        u32s(&[p.m]),
        u32s(&[1, p.m, 1, 1]),
    );
    let head_out = p.y_shape();
    let out_shape = shapes::output_shapes(
        &LayerDescriptor::Pooling2d(pool.clone()),
        &[f32t(&head_out)],
    )
    .unwrap()
    .swap_remove(0);
    let got = run_with_constants(
        &layer,
        &[
            (&xs, &x, false),
            (&ws, &w, true),
            (&cs, &b0, true),
            (&cs, &scale, true),
            (&cs, &beta, true),
            (&cs, &mean, true),
            (&cs, &var, true),
            (&bias_shape, &add, true),
            (&u32s(&[p.m, 1, 1]), &mul, true),
            (&[1], &[post_scale], true),
            (&[], &[post_shift], true),
            (&head_out, &residual, false),
        ],
        &out_shape,
    );
    // The oracle: each stage by its definition, then pooling by the stand-alone workload
    // (itself checked against its definition in pooling.rs).
    let plane = head_out[2] as usize * head_out[3] as usize;
    let staged: Vec<f32> = conv_oracle(p, &x, &w, Some(&b0))
        .iter()
        .enumerate()
        .map(|(i, &y)| {
            let c = (i / plane) % p.m;
            let f = |t: &[f32]| f64::from(t[c]);
            let bn = f(&scale) * (y - f(&mean)) / (f(&var) + f64::from(eps)).sqrt() + f(&beta);
            let z = bn * f(&mul) + f(&add) + f64::from(residual[i]);
            let h = z * (z / 6.0 + 0.5).clamp(0.0, 1.0);
            (h * f64::from(post_scale) + f64::from(post_shift)) as f32
        })
        .collect();
    let want = run(
        &LayerDescriptor::Pooling2d(pool),
        &[(&head_out, &staged)],
        &out_shape,
    );
    let want: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
    assert_close(&got, &want, 1e-4, "fused chain");
}

/// A fused FullyConnected with an added `[1, M]` bias and ReLU6.
#[test]
fn fused_fully_connected_bias_relu6() {
    let (n, k, m) = (2, 12, 7);
    let mut rng = Lcg(51);
    let (x, w, add) = (rng.vec(n * k), rng.vec_in(m * k, -2.0, 2.0), rng.vec(m));
    let op = FusedOp {
        head: Head::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: true,
        }),
        weights: 1,
        head_bias: None,
        batch_norm: None,
        scale: None,
        residual: None,
        post_scale: None,
        post_shift: None,
        bias: Some(2),
        activation: Some(ActivationDescriptor {
            function: ActivationFunction::BoundedReLU,
            a: 6.0,
            b: 0.0,
        }),
        pool: None,
    };
    let layer = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
        backend: "CpuFast".into(),
        operation: op.operation().into(),
        payload: op.encode().into(),
    });
    let (xs, ws, bs) = (u32s(&[n, k]), u32s(&[m, k]), u32s(&[1, m]));
    let got = run_with_constants(
        &layer,
        &[(&xs, &x, false), (&ws, &w, true), (&bs, &add, true)],
        &u32s(&[n, m]),
    );
    let mut want = Vec::new();
    for i in 0..n {
        for j in 0..m {
            let s: f64 = (0..k)
                .map(|p| f64::from(x[i * k + p]) * f64::from(w[j * k + p]))
                .sum::<f64>()
                + f64::from(add[j]);
            want.push(s.clamp(0.0, 6.0));
        }
    }
    assert_close(&got, &want, REL_TOL, "fused fc");
}

/// The transformer's feed-forward layer: `x [2, 5, 24] · W [24, 40]` (or `W` stored
/// transposed) fused with an added bias of every accepted shape and Gelu (both forms),
/// against the stages by their definitions in f64; and a fully connected layer with Gelu.
#[test]
fn fused_batch_matmul_bias_gelu() {
    let (b, s, k, m) = (2, 5, 24, 40);
    let mut rng = Lcg(61);
    let (x, w, add) = (rng.vec_in(b * s * k, -2.0, 2.0), rng.vec(k * m), rng.vec(m));
    let gelu = |a: f32| ActivationDescriptor {
        function: ActivationFunction::Gelu,
        a,
        b: 0.0,
    };
    for (bias_shape, transpose_b, form) in [
        (u32s(&[m]), false, 0.0),
        (u32s(&[1, m]), true, 1.0),
        (u32s(&[1, 1, m]), false, 1.0),
    ] {
        let op = FusedOp {
            head: Head::BatchMatMul(backplane_api::BatchMatMulDescriptor {
                transpose_a: false,
                transpose_b,
            }),
            weights: 1,
            head_bias: None,
            batch_norm: None,
            scale: None,
            residual: None,
            post_scale: None,
            post_shift: None,
            bias: Some(2),
            activation: Some(gelu(form)),
            pool: None,
        };
        let layer = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
            backend: "CpuFast".into(),
            operation: op.operation().into(),
            payload: op.encode().into(),
        });
        // The weights as stored: [K, M], or [M, K] when transposed.
        let (ws, stored) = if transpose_b {
            let mut t = vec![0.0; k * m];
            for p in 0..k {
                for j in 0..m {
                    t[j * k + p] = w[p * m + j];
                }
            }
            (u32s(&[m, k]), t)
        } else {
            (u32s(&[k, m]), w.clone())
        };
        let xs = u32s(&[b, s, k]);
        let got = run_with_constants(
            &layer,
            &[
                (&xs, &x, false),
                (&ws, &stored, true),
                (&bias_shape, &add, true),
            ],
            &u32s(&[b, s, m]),
        );
        let want: Vec<f64> = (0..b * s)
            .flat_map(|row| (0..m).map(move |j| (row, j)))
            .map(|(row, j)| {
                let z = (0..k)
                    .map(|p| f64::from(x[row * k + p]) * f64::from(w[p * m + j]))
                    .sum::<f64>()
                    + f64::from(add[j]);
                gelu(form).reference_f64(z as f32)
            })
            .collect();
        assert_close(
            &got,
            &want,
            REL_TOL,
            &format!("bmm+bias{bias_shape:?}+gelu(a={form}) t={transpose_b}"),
        );
    }

    // FullyConnected [N, K] · W [M, K]^T with its own bias, then Gelu.
    let (n, k, m) = (3, 16, 9);
    let (x, w, b0) = (rng.vec(n * k), rng.vec(m * k), rng.vec(m));
    let op = FusedOp {
        head: Head::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: true,
        }),
        weights: 1,
        head_bias: Some(2),
        batch_norm: None,
        scale: None,
        residual: None,
        post_scale: None,
        post_shift: None,
        bias: None,
        activation: Some(gelu(0.0)),
        pool: None,
    };
    let layer = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
        backend: "CpuFast".into(),
        operation: op.operation().into(),
        payload: op.encode().into(),
    });
    let got = run_with_constants(
        &layer,
        &[
            (&u32s(&[n, k]), &x, false),
            (&u32s(&[m, k]), &w, true),
            (&u32s(&[m]), &b0, true),
        ],
        &u32s(&[n, m]),
    );
    let want: Vec<f64> = (0..n * m)
        .map(|i| {
            let (r, j) = (i / m, i % m);
            let z = (0..k)
                .map(|p| f64::from(x[r * k + p]) * f64::from(w[j * k + p]))
                .sum::<f64>()
                + f64::from(b0[j]);
            gelu(0.0).reference_f64(z as f32)
        })
        .collect();
    assert_close(&got, &want, REL_TOL, "fc+bias+gelu");
}

/// A fused layer whose parameters are not constant is refused when it is created.
#[test]
fn fused_parameters_must_be_constant() {
    let op = FusedOp {
        head: Head::FullyConnected(FullyConnectedDescriptor::default()),
        weights: 1,
        head_bias: None,
        batch_norm: None,
        scale: None,
        residual: None,
        post_scale: None,
        post_shift: None,
        bias: None,
        activation: Some(ActivationDescriptor {
            function: ActivationFunction::ReLU,
            a: 0.0,
            b: 0.0,
        }),
        pool: None,
    };
    let layer = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
        backend: "CpuFast".into(),
        operation: op.operation().into(),
        payload: op.encode().into(),
    });
    let Err(err) = crate::workloads::test_support::make(
        &layer,
        &[f32t(&[1, 2]), f32t(&[2, 2])],
        &[f32t(&[1, 2])],
    ) else {
        panic!("created a fused workload without constants");
    };
    assert_eq!(err.message.as_str(), "layer test: input 1 must be constant");
}
