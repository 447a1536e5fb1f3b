//! Each op against numbers computed by hand from its definition, on tiny inputs.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, ArgMinMaxDescriptor, ArgMinMaxFunction,
    BatchMatMulDescriptor, BatchNormalizationDescriptor, BinaryOperation, ComparisonOperation,
    ConcatDescriptor, Convolution2dDescriptor, CoordinateTransformation, DataLayout,
    FlattenDescriptor, FullyConnectedDescriptor, GatherDescriptor, InstanceNormalizationDescriptor,
    LayerNormalizationDescriptor, MeanDescriptor, NearestRounding, NormalizationDescriptor,
    OutputRounding, PadDescriptor, PadMode, PadPair, Padding2d, Pooling2dDescriptor, PoolingType,
    ReduceDescriptor, ReshapeDescriptor, ResizeDescriptor, ResizeMethod, SliceDescriptor,
    SoftmaxDescriptor, TransposeConvolution2dDescriptor, TransposeDescriptor, UnaryOperation,
};

use super::*;

fn t(shape: &[usize], data: &[f64]) -> Tensor {
    Tensor::new(shape, data.to_vec())
}

/// `evaluate(layer, inputs)`'s values, checked to have `shape`.
fn run(layer: LayerDescriptor, inputs: &[Tensor], shape: &[usize]) -> Vec<f64> {
    let y = evaluate(&layer, inputs).unwrap();
    assert_eq!(y.shape, shape, "{layer:?}");
    y.data
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
    }
}

fn one_to(n: usize) -> Vec<f64> {
    (1..=n).map(|v| v as f64).collect()
}

#[test]
fn tensor_indexing_and_broadcast_reads() {
    let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(x.offset(&[1, 2]), 5);
    assert_eq!(x.at(&[1, 0]), 4.0);
    let b = t(&[2, 1], &[10.0, 20.0]);
    assert_eq!(b.at_broadcast(&[1, 2]), 20.0);
    assert_eq!(b.at_broadcast(&[7, 1, 0]), 20.0);
    assert_eq!(indices(&[2, 2]), [[0, 0], [0, 1], [1, 0], [1, 1]]);
    assert_eq!(broadcast_shape(&[2, 1, 4], &[3, 1]).unwrap(), [2, 3, 4]);
    assert!(broadcast_shape(&[2], &[3]).is_err());
}

#[test]
fn constant_by_hand() {
    let c = ConstTensor::from_f32(&[2], &[1.5, -2.0]);
    close(&run(LayerDescriptor::Constant(c), &[], &[2]), &[1.5, -2.0]);
}

fn conv(
    padding: Padding2d,
    stride: u32,
    dilation_x: u32,
    groups: u32,
    bias: bool,
) -> Convolution2dDescriptor {
    Convolution2dDescriptor {
        padding,
        stride_x: stride,
        stride_y: stride,
        dilation_x,
        groups,
        bias_enabled: bias,
        ..Default::default()
    }
}

const PAD1: Padding2d = Padding2d {
    left: 1,
    right: 1,
    top: 1,
    bottom: 1,
};

#[test]
fn convolution_by_hand() {
    let x = t(&[1, 1, 3, 3], &one_to(9));
    // A diagonal 2x2 kernel adds x[y][x] and x[y+1][x+1]; plus the bias 0.5.
    let w = t(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0]);
    let d = LayerDescriptor::Convolution2d(conv(Padding2d::default(), 1, 1, 1, true));
    let y = run(d, &[x.clone(), w, t(&[1], &[0.5])], &[1, 1, 2, 2]);
    close(&y, &[6.5, 8.5, 12.5, 14.5]);
    // Padding 1, stride 2, a 2x2 kernel of ones: windows at rows/cols -1..=0 and 1..=2.
    let ones = t(&[1, 1, 2, 2], &[1.0; 4]);
    let d = LayerDescriptor::Convolution2d(conv(PAD1, 2, 1, 1, false));
    close(&run(d, &[x, ones], &[1, 1, 2, 2]), &[1.0, 5.0, 11.0, 28.0]);
    // Dilation 2 across: x[i] + x[i + 2].
    let row = t(&[1, 1, 1, 5], &one_to(5));
    let d = LayerDescriptor::Convolution2d(conv(Padding2d::default(), 1, 2, 1, false));
    let y = run(d, &[row, t(&[1, 1, 1, 2], &[1.0, 1.0])], &[1, 1, 1, 3]);
    close(&y, &[4.0, 6.0, 8.0]);
    // Two groups of one channel each: channel 0 * 10, channel 1 * 100.
    let d = LayerDescriptor::Convolution2d(conv(Padding2d::default(), 1, 1, 2, false));
    let y = run(
        d,
        &[
            t(&[1, 2, 1, 1], &[2.0, 3.0]),
            t(&[2, 1, 1, 1], &[10.0, 100.0]),
        ],
        &[1, 2, 1, 1],
    );
    close(&y, &[20.0, 300.0]);
}

#[test]
fn depthwise_convolution_by_hand() {
    // Multiplier 2: output channels 0 and 1 read input channel 0, 2 and 3 read channel 1.
    let d = LayerDescriptor::DepthwiseConvolution2d(conv(Padding2d::default(), 1, 1, 1, true));
    let y = run(
        d,
        &[
            t(&[1, 2, 1, 1], &[2.0, 3.0]),
            t(&[4, 1, 1, 1], &[1.0, 2.0, 3.0, 4.0]),
            t(&[4], &[0.0, 0.0, 0.0, 1.0]),
        ],
        &[1, 4, 1, 1],
    );
    close(&y, &[2.0, 4.0, 9.0, 13.0]);
}

#[test]
fn fully_connected_by_hand() {
    let x = t(&[1, 2], &[1.0, 2.0]);
    let bias = t(&[3], &[1.0, 1.0, 1.0]);
    let fc = |transpose_weights| {
        LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights,
        })
    };
    let w = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    close(
        &run(fc(false), &[x.clone(), w, bias.clone()], &[1, 3]),
        &[10.0, 13.0, 16.0],
    );
    let wt = t(&[3, 2], &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    close(&run(fc(true), &[x, wt, bias], &[1, 3]), &[10.0, 13.0, 16.0]);
}

#[test]
fn elementwise_binary_by_hand() {
    let a = t(&[2, 1], &[1.0, 2.0]);
    let b = t(&[3], &[4.0, 2.0, 0.5]);
    let op = |op, want: &[f64]| {
        let y = run(
            LayerDescriptor::ElementwiseBinary(op),
            &[a.clone(), b.clone()],
            &[2, 3],
        );
        close(&y, want);
    };
    use BinaryOperation::*;
    op(Add, &[5.0, 3.0, 1.5, 6.0, 4.0, 2.5]);
    op(Sub, &[-3.0, -1.0, 0.5, -2.0, 0.0, 1.5]);
    op(Mul, &[4.0, 2.0, 0.5, 8.0, 4.0, 1.0]);
    op(Div, &[0.25, 0.5, 2.0, 0.5, 1.0, 4.0]);
    op(Maximum, &[4.0, 2.0, 1.0, 4.0, 2.0, 2.0]);
    op(Minimum, &[1.0, 1.0, 0.5, 2.0, 2.0, 0.5]);
    op(Power, &[1.0, 1.0, 1.0, 16.0, 4.0, 2f64.sqrt()]);
    op(SquaredDifference, &[9.0, 1.0, 0.25, 4.0, 0.0, 2.25]);
}

#[test]
fn activations_by_hand() {
    let act = |function, a, b, x: f64| {
        let d = ActivationDescriptor { function, a, b };
        run(LayerDescriptor::Activation(d), &[t(&[1], &[x])], &[1])[0]
    };
    use ActivationFunction::*;
    assert_eq!(act(ReLU, 0.0, 0.0, -2.0), 0.0);
    assert_eq!(act(ReLU, 0.0, 0.0, 1.5), 1.5);
    assert_eq!(act(BoundedReLU, 6.0, 0.0, 7.0), 6.0);
    assert_eq!(act(BoundedReLU, 6.0, 0.0, -1.0), 0.0);
    assert_eq!(act(BoundedReLU, 6.0, 0.0, 2.5), 2.5);
    assert_eq!(act(Sigmoid, 0.0, 0.0, 0.0), 0.5);
    // 1 / (1 + e^-ln 3) = 1 / (1 + 1/3).
    close(&[act(Sigmoid, 0.0, 0.0, 3f64.ln())], &[0.75]);
    assert_eq!(act(TanH, 2.0, 1.0, 0.0), 0.0);
    close(&[act(LeakyReLU, 0.5, 0.0, -2.0)], &[-1.0]);
    close(&[act(HardSwish, 0.0, 0.0, 1.0)], &[4.0 / 6.0]);
    assert_eq!(act(HardSwish, 0.0, 0.0, -4.0), 0.0);
    assert_eq!(act(HardSwish, 0.0, 0.0, 4.0), 4.0);
    close(&[act(Elu, 1.0, 0.0, -1.0)], &[-0.632_120_558_828_557_7]);
    assert_eq!(act(Elu, 1.0, 0.0, 2.0), 2.0);
    // x * Phi(x) at 1: Phi(1) = 0.841344746068543 (the normal distribution's table).
    close(&[act(Gelu, 0.0, 0.0, 1.0)], &[0.841_344_746_068_542_9]);
    assert_eq!(act(Gelu, 1.0, 0.0, 0.0), 0.0);
    assert!(act(ReLU, 0.0, 0.0, f64::NAN).is_nan());
}

#[test]
fn erf_by_hand() {
    // Values from Abramowitz and Stegun's table 7.1.
    assert_eq!(erf(0.0), 0.0);
    assert!((erf(0.5) - 0.520_499_877_813_046_5).abs() < 1e-15);
    assert!((erf(1.0) - 0.842_700_792_949_714_9).abs() < 1e-15);
    assert!((erf(-2.0) + 0.995_322_265_018_952_7).abs() < 1e-15);
    assert!((erf(3.5) - 0.999_999_256_901_627_6).abs() < 1e-15);
    // erfc(5) = 1.5374597944280349e-12, seen through erf's last bits.
    assert!((1.0 - erf(5.0) - 1.537_459_794_428_035e-12).abs() < 1e-15);
    assert_eq!(erf(10.0), 1.0);
}

fn pool(
    pool_type: PoolingType,
    padding: Padding2d,
    k: u32,
    s: u32,
    ceil: bool,
    include: bool,
) -> Pooling2dDescriptor {
    Pooling2dDescriptor {
        pool_type,
        padding,
        pool_width: k,
        pool_height: k,
        stride_x: s,
        stride_y: s,
        rounding: if ceil {
            OutputRounding::Ceiling
        } else {
            OutputRounding::Floor
        },
        count_include_pad: include,
        layout: DataLayout::Nchw,
    }
}

#[test]
fn pooling_by_hand() {
    use PoolingType::*;
    let p = |d| LayerDescriptor::Pooling2d(d);
    let none = Padding2d::default();
    let x16 = t(&[1, 1, 4, 4], &one_to(16));
    close(
        &run(
            p(pool(Max, none, 2, 2, false, false)),
            &[x16.clone()],
            &[1, 1, 2, 2],
        ),
        &[6.0, 8.0, 14.0, 16.0],
    );
    close(
        &run(
            p(pool(Average, none, 2, 2, false, false)),
            &[x16],
            &[1, 1, 2, 2],
        ),
        &[3.5, 5.5, 11.5, 13.5],
    );
    // Ceil mode on 3x3: the second window of each axis holds one input row/column.
    let x9 = t(&[1, 1, 3, 3], &one_to(9));
    close(
        &run(
            p(pool(Max, none, 2, 2, true, false)),
            &[x9.clone()],
            &[1, 1, 2, 2],
        ),
        &[5.0, 6.0, 8.0, 9.0],
    );
    close(
        &run(
            p(pool(Average, none, 2, 2, true, false)),
            &[x9.clone()],
            &[1, 1, 2, 2],
        ),
        &[3.0, 4.5, 7.5, 9.0],
    );
    // Without ceil mode the partial windows are not there.
    close(
        &run(p(pool(Max, none, 2, 2, false, false)), &[x9], &[1, 1, 1, 1]),
        &[5.0],
    );
    // Padding 1: each 2x2 window holds one input cell and three padding cells.
    let x4 = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    close(
        &run(
            p(pool(Average, PAD1, 2, 2, false, true)),
            &[x4.clone()],
            &[1, 1, 2, 2],
        ),
        &[0.25, 0.5, 0.75, 1.0],
    );
    close(
        &run(
            p(pool(Average, PAD1, 2, 2, false, false)),
            &[x4],
            &[1, 1, 2, 2],
        ),
        &[1.0, 2.0, 3.0, 4.0],
    );
    // Ceil mode with count_include_pad: a 1x4 row padded 1 on the left, window 2, stride 2:
    // padded [p 1 2 3 4]; windows [p 1], [2 3] and [4 .], the last reaching one cell past
    // the padded input, which does not count in the divisor.
    let row = t(&[1, 1, 1, 4], &[1.0, 2.0, 3.0, 4.0]);
    let d = |include| Pooling2dDescriptor {
        padding: Padding2d {
            left: 1,
            right: 0,
            top: 0,
            bottom: 0,
        },
        pool_height: 1,
        stride_y: 1,
        ..pool(Average, none, 2, 2, true, include)
    };
    close(
        &run(p(d(true)), &[row.clone()], &[1, 1, 1, 3]),
        &[0.5, 2.5, 4.0],
    );
    close(&run(p(d(false)), &[row], &[1, 1, 1, 3]), &[1.0, 2.5, 4.0]);
}

#[test]
fn dilated_pooling_by_hand() {
    let row = t(&[1, 1, 1, 5], &one_to(5));
    let d = |pool_type| {
        LayerDescriptor::DilatedPooling2d(backplane_api::DilatedPooling2dDescriptor {
            pooling: Pooling2dDescriptor {
                pool_height: 1,
                ..pool(pool_type, Padding2d::default(), 2, 1, false, false)
            },
            dilation_x: 2,
            dilation_y: 1,
        })
    };
    close(
        &run(d(PoolingType::Max), &[row.clone()], &[1, 1, 1, 3]),
        &[3.0, 4.0, 5.0],
    );
    close(
        &run(d(PoolingType::Average), &[row], &[1, 1, 1, 3]),
        &[2.0, 3.0, 4.0],
    );
}

#[test]
fn softmax_by_hand() {
    let s = |beta, axis| LayerDescriptor::Softmax(SoftmaxDescriptor { beta, axis });
    close(
        &run(s(1.0, -1), &[t(&[1, 2], &[0.0, 3f64.ln()])], &[1, 2]),
        &[0.25, 0.75],
    );
    close(
        &run(s(1.0, 0), &[t(&[2, 1], &[0.0, 3f64.ln()])], &[2, 1]),
        &[0.25, 0.75],
    );
    close(
        &run(s(2.0, 1), &[t(&[1, 2], &[0.0, 3f64.ln() / 2.0])], &[1, 2]),
        &[0.25, 0.75],
    );
}

#[test]
fn data_movement_by_hand() {
    let x = t(&[2, 3], &one_to(6));
    let y = run(
        LayerDescriptor::Reshape(ReshapeDescriptor {
            target_shape: vec![3, 2].into(),
        }),
        &[x.clone()],
        &[3, 2],
    );
    close(&y, &one_to(6));
    let y = run(
        LayerDescriptor::Flatten(FlattenDescriptor { axis: 1 }),
        &[t(&[2, 1, 2], &one_to(4))],
        &[2, 2],
    );
    close(&y, &one_to(4));
    let y = run(
        LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: vec![1, 0].into(),
        }),
        &[x],
        &[3, 2],
    );
    close(&y, &[1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let y = run(
        LayerDescriptor::Concat(ConcatDescriptor { axis: 1 }),
        &[t(&[2, 1], &[1.0, 2.0]), t(&[2, 2], &[3.0, 4.0, 5.0, 6.0])],
        &[2, 3],
    );
    close(&y, &[1.0, 3.0, 4.0, 2.0, 5.0, 6.0]);
}

#[test]
fn pad_by_hand() {
    let p = |mode| {
        LayerDescriptor::Pad(PadDescriptor {
            padding: vec![PadPair {
                before: 2,
                after: 1,
            }]
            .into(),
            value: 0.5,
            mode,
        })
    };
    let x = t(&[3], &[1.0, 2.0, 3.0]);
    close(
        &run(p(PadMode::Constant), &[x.clone()], &[6]),
        &[0.5, 0.5, 1.0, 2.0, 3.0, 0.5],
    );
    close(
        &run(p(PadMode::Reflect), &[x.clone()], &[6]),
        &[3.0, 2.0, 1.0, 2.0, 3.0, 2.0],
    );
    close(
        &run(p(PadMode::Edge), &[x], &[6]),
        &[1.0, 1.0, 1.0, 2.0, 3.0, 3.0],
    );
}

#[test]
fn mean_and_reduce_by_hand() {
    let x = t(&[2, 2], &[1.0, 2.0, 3.0, 5.0]);
    let y = run(
        LayerDescriptor::Mean(MeanDescriptor {
            axes: vec![1].into(),
            keep_dims: true,
        }),
        &[x.clone()],
        &[2, 1],
    );
    close(&y, &[1.5, 4.0]);
    let r = |operation, want: &[f64]| {
        let d = LayerDescriptor::Reduce(ReduceDescriptor {
            operation,
            axes: vec![0].into(),
            keep_dims: false,
        });
        close(&run(d, &[x.clone()], &[2]), want);
    };
    use ReduceOperation::*;
    r(Sum, &[4.0, 7.0]);
    r(Max, &[3.0, 5.0]);
    r(Min, &[1.0, 2.0]);
    r(Mean, &[2.0, 3.5]);
    r(Prod, &[3.0, 10.0]);
    let nan = reduce(&t(&[2], &[1.0, f64::NAN]), &[0], false, Max).unwrap();
    assert!(nan.data[0].is_nan());
}

#[test]
fn batch_normalization_by_hand() {
    // (3 - 1) / sqrt(3 + 1) * 2 + 1 = 3; (5 - 1) / 2 * 2 + 1 = 5.
    let d = LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor {
        epsilon: 1.0,
        layout: DataLayout::Nchw,
    });
    let one = |v| t(&[1], &[v]);
    let y = run(
        d,
        &[
            t(&[1, 1, 2], &[3.0, 5.0]),
            one(2.0),
            one(1.0),
            one(1.0),
            one(3.0),
        ],
        &[1, 1, 2],
    );
    close(&y, &[3.0, 5.0]);
}

#[test]
fn elementwise_unary_by_hand() {
    let u = |op, x: f64| {
        run(
            LayerDescriptor::ElementwiseUnary(op),
            &[t(&[1], &[x])],
            &[1],
        )[0]
    };
    use UnaryOperation::*;
    assert_eq!(u(Abs, -2.0), 2.0);
    assert_eq!(u(Neg, 2.0), -2.0);
    assert_eq!(u(Exp, 0.0), 1.0);
    assert_eq!(u(Log, 1.0), 0.0);
    assert!(u(Log, -1.0).is_nan());
    assert_eq!(u(Sqrt, 4.0), 2.0);
    assert_eq!(u(Rsqrt, 4.0), 0.5);
    assert_eq!(u(Reciprocal, 4.0), 0.25);
    assert_eq!(u(Sin, 0.0), 0.0);
    assert_eq!(u(Cos, 0.0), 1.0);
    close(&[u(Erf, 1.0)], &[0.842_700_792_949_714_9]);
    assert_eq!(u(Ceil, -1.5), -1.0);
    assert_eq!(u(Floor, -1.5), -2.0);
}

#[test]
fn local_response_normalization_by_hand() {
    // size 3, alpha 3, beta 1, k 1: y = x / (1 + sum of squares of the window).
    let d = LayerDescriptor::Normalization(NormalizationDescriptor {
        size: 3,
        alpha: 3.0,
        beta: 1.0,
        k: 1.0,
    });
    let y = run(d, &[t(&[1, 3, 1, 1], &[1.0, 2.0, 3.0])], &[1, 3, 1, 1]);
    close(&y, &[1.0 / 6.0, 2.0 / 15.0, 3.0 / 14.0]);
    // An even window of 2 looks at c and c + 1 only: lo = c, hi = c + 1.
    let d = LayerDescriptor::Normalization(NormalizationDescriptor {
        size: 2,
        alpha: 2.0,
        beta: 1.0,
        k: 1.0,
    });
    let y = run(d, &[t(&[1, 3, 1, 1], &[1.0, 2.0, 3.0])], &[1, 3, 1, 1]);
    close(&y, &[1.0 / 6.0, 2.0 / 14.0, 3.0 / 10.0]);
}

#[test]
fn batch_matmul_by_hand() {
    let a = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = t(&[2, 1], &[5.0, 6.0]);
    let mm = |transpose_a, transpose_b| {
        LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
            transpose_a,
            transpose_b,
        })
    };
    close(
        &run(mm(false, false), &[a.clone(), b.clone()], &[2, 1]),
        &[17.0, 39.0],
    );
    // aᵀ = [[1, 3], [2, 4]]: [5 + 18, 10 + 24].
    close(
        &run(mm(true, false), &[a.clone(), b], &[2, 1]),
        &[23.0, 34.0],
    );
    // bᵀ given as [1, 2]: the same product as the first.
    close(
        &run(mm(false, true), &[a, t(&[1, 2], &[5.0, 6.0])], &[2, 1]),
        &[17.0, 39.0],
    );
    // A batch of two [1, 1] matrices times one broadcast [1, 2].
    let y = run(
        mm(false, false),
        &[t(&[2, 1, 1], &[2.0, 3.0]), t(&[1, 2], &[1.0, 10.0])],
        &[2, 1, 2],
    );
    close(&y, &[2.0, 20.0, 3.0, 30.0]);
}

#[test]
fn slice_by_hand() {
    let d = LayerDescriptor::Slice(SliceDescriptor {
        begin: vec![3].into(),
        step: vec![-2].into(),
        size: vec![2].into(),
    });
    close(
        &run(d, &[t(&[4], &[0.0, 1.0, 2.0, 3.0])], &[2]),
        &[3.0, 1.0],
    );
}

fn resize_d(
    method: ResizeMethod,
    coordinates: CoordinateTransformation,
    nearest: NearestRounding,
    height: u32,
    width: u32,
    scale_y: f32,
    scale_x: f32,
) -> LayerDescriptor {
    LayerDescriptor::Resize(ResizeDescriptor {
        method,
        coordinates,
        nearest,
        height,
        width,
        scale_y,
        scale_x,
    })
}

#[test]
fn resize_by_hand() {
    use CoordinateTransformation::*;
    use NearestRounding::*;
    use ResizeMethod::*;
    let x = t(&[1, 1, 1, 2], &[1.0, 2.0]);
    // Asymmetric, floor: sources 0, 0.5, 1, 1.5.
    let d = resize_d(Nearest, Asymmetric, Floor, 1, 4, 1.0, 2.0);
    close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 1.0, 2.0, 2.0]);
    // Half pixel: sources -0.25, 0.25, 0.75, 1.25; round prefer ceil → 0, 0, 1, 1 (clamped).
    let d = resize_d(Nearest, HalfPixel, RoundPreferCeil, 1, 4, 1.0, 2.0);
    close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 1.0, 2.0, 2.0]);
    // Asymmetric, rounding the ties of sources 0, 0.5, 1, 1.5 down, then up (1.5 → 2,
    // clamped to 1).
    let d = resize_d(Nearest, Asymmetric, RoundPreferFloor, 1, 4, 1.0, 2.0);
    close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 1.0, 2.0, 2.0]);
    let d = resize_d(Nearest, Asymmetric, RoundPreferCeil, 1, 4, 1.0, 2.0);
    close(&run(d, &[x.clone()], &[1, 1, 1, 4]), &[1.0, 2.0, 2.0, 2.0]);
    // Linear, half pixel: sources clamped to 0, 0.25, 0.75, 1.
    let d = resize_d(Linear, HalfPixel, Floor, 1, 4, 1.0, 2.0);
    close(
        &run(d, &[x.clone()], &[1, 1, 1, 4]),
        &[1.0, 1.25, 1.75, 2.0],
    );
    // Linear, align corners to 3 wide: sources 0, 0.5, 1.
    let d = resize_d(Linear, AlignCorners, Floor, 1, 3, 1.0, 1.5);
    close(&run(d, &[x.clone()], &[1, 1, 1, 3]), &[1.0, 1.5, 2.0]);
    // PyTorch half pixel to 1 wide reads source 0 (half pixel would read 0.5).
    let d = resize_d(Linear, PytorchHalfPixel, Floor, 1, 1, 1.0, 0.5);
    close(&run(d, &[x.clone()], &[1, 1, 1, 1]), &[1.0]);
    let d = resize_d(Linear, HalfPixel, Floor, 1, 1, 1.0, 0.5);
    close(&run(d, &[x], &[1, 1, 1, 1]), &[1.5]);
}

#[test]
fn transpose_convolution_by_hand() {
    let x = t(&[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let ones = t(&[1, 1, 2, 2], &[1.0; 4]);
    let d = |stride, padding| {
        LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
            stride_x: stride,
            stride_y: stride,
            padding,
            ..Default::default()
        })
    };
    // Stride 2: each input pixel becomes a 2x2 block.
    let y = run(
        d(2, Padding2d::default()),
        &[x.clone(), ones.clone()],
        &[1, 1, 4, 4],
    );
    close(
        &y,
        &[
            1.0, 1.0, 2.0, 2.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0, 3.0, 3.0, 4.0, 4.0,
        ],
    );
    // Stride 1: overlapping blocks add up.
    let y = run(
        d(1, Padding2d::default()),
        &[x.clone(), ones.clone()],
        &[1, 1, 3, 3],
    );
    close(&y, &[1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 3.0, 7.0, 4.0]);
    // Padding 1 on every side takes the border off: the centre.
    close(&run(d(1, PAD1), &[x.clone(), ones], &[1, 1, 1, 1]), &[10.0]);
    // Two groups, output padding, bias: channel c scaled by w[c] into output channel c.
    let d = LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
        groups: 2,
        output_padding_x: 1,
        bias_enabled: true,
        ..Default::default()
    });
    let y = run(
        d,
        &[
            t(&[1, 2, 1, 1], &[2.0, 3.0]),
            t(&[2, 1, 1, 1], &[10.0, 100.0]),
            t(&[2], &[0.5, 0.25]),
        ],
        &[1, 2, 1, 2],
    );
    close(&y, &[20.5, 0.5, 300.25, 0.25]);
}

#[test]
fn gather_by_hand() {
    let d = LayerDescriptor::Gather(GatherDescriptor { axis: 0 });
    let data = t(&[3, 2], &one_to(6));
    let y = run(d, &[data.clone(), t(&[2], &[2.0, -3.0])], &[2, 2]);
    close(&y, &[5.0, 6.0, 1.0, 2.0]);
    let d = LayerDescriptor::Gather(GatherDescriptor { axis: 1 });
    let y = run(d, &[data.clone(), t(&[1, 1], &[1.0])], &[3, 1, 1]);
    close(&y, &[2.0, 4.0, 6.0]);
    assert!(gather(&data, &t(&[1], &[3.0]), 0).is_err());
}

#[test]
fn arg_min_max_by_hand() {
    let a = |function, select_last_index, x: &[f64]| {
        let d = LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
            function,
            axis: 0,
            keep_dims: false,
            select_last_index,
        });
        run(d, &[t(&[x.len()], x)], &[])[0]
    };
    use ArgMinMaxFunction::*;
    assert_eq!(a(Max, false, &[1.0, 3.0, 3.0, 0.0]), 1.0);
    assert_eq!(a(Max, true, &[1.0, 3.0, 3.0, 0.0]), 2.0);
    assert_eq!(a(Min, false, &[1.0, 3.0, 3.0, 0.0]), 3.0);
    assert_eq!(a(Max, false, &[1.0, f64::NAN, 5.0]), 1.0);
    assert_eq!(a(Min, false, &[1.0, -5.0, f64::NAN]), 2.0);
    let d = LayerDescriptor::ArgMinMax(ArgMinMaxDescriptor {
        function: Max,
        axis: 1,
        keep_dims: true,
        select_last_index: false,
    });
    close(
        &run(d, &[t(&[2, 2], &[1.0, 2.0, 4.0, 3.0])], &[2, 1]),
        &[1.0, 0.0],
    );
}

#[test]
fn layer_and_instance_normalization_by_hand() {
    // [1, 2, 3]: mean 2, variance 2/3, so (x - 2) / sqrt(2/3) = -1.2247.., 0, 1.2247...
    let r = 1.5f64.sqrt();
    let d = LayerDescriptor::LayerNormalization(LayerNormalizationDescriptor {
        axis: 1,
        epsilon: 0.0,
        bias_enabled: true,
    });
    let y = run(
        d,
        &[
            t(&[1, 3], &[1.0, 2.0, 3.0]),
            t(&[3], &[1.0, 1.0, 2.0]),
            t(&[3], &[0.0, 1.0, 0.0]),
        ],
        &[1, 3],
    );
    close(&y, &[-r, 1.0, 2.0 * r]);
    // [1, 3]: mean 2, variance 1: [-1, 1] * 2 + 1.
    let d =
        LayerDescriptor::InstanceNormalization(InstanceNormalizationDescriptor { epsilon: 0.0 });
    let y = run(
        d,
        &[t(&[1, 1, 2], &[1.0, 3.0]), t(&[1], &[2.0]), t(&[1], &[1.0])],
        &[1, 1, 2],
    );
    close(&y, &[-1.0, 3.0]);
}

#[test]
fn cast_by_hand() {
    let x = t(&[4], &[-1.7, 2.9, f64::NAN, 3e10]);
    let y = run(LayerDescriptor::Cast(DataType::Signed32), &[x], &[4]);
    assert_eq!(y, [-1.0, 2.0, 0.0, 2_147_483_647.0]);
    let y = run(
        LayerDescriptor::Cast(DataType::Boolean),
        &[t(&[3], &[0.0, -0.5, f64::NAN])],
        &[3],
    );
    assert_eq!(y, [0.0, 1.0, 1.0]);
    let y = run(
        LayerDescriptor::Cast(DataType::Float32),
        &[t(&[1], &[7.0])],
        &[1],
    );
    assert_eq!(y, [7.0]);
}

#[test]
fn comparison_where_and_broadcast_to_by_hand() {
    let y = run(
        LayerDescriptor::Comparison(ComparisonOperation::Less),
        &[t(&[3], &[1.0, 2.0, 3.0]), t(&[1], &[2.0])],
        &[3],
    );
    assert_eq!(y, [1.0, 0.0, 0.0]);
    let y = run(
        LayerDescriptor::Comparison(ComparisonOperation::NotEqual),
        &[t(&[2], &[f64::NAN, 1.0]), t(&[2], &[f64::NAN, 1.0])],
        &[2],
    );
    assert_eq!(y, [1.0, 0.0]);
    let y = run(
        LayerDescriptor::Where,
        &[
            t(&[2, 1], &[1.0, 0.0]),
            t(&[2], &[1.0, 2.0]),
            t(&[1], &[10.0]),
        ],
        &[2, 2],
    );
    assert_eq!(y, [1.0, 2.0, 10.0, 10.0]);
    let y = run(
        LayerDescriptor::BroadcastTo(backplane_api::BroadcastToDescriptor {
            shape: vec![2, 2].into(),
        }),
        &[t(&[2], &[1.0, 2.0])],
        &[2, 2],
    );
    assert_eq!(y, [1.0, 2.0, 1.0, 2.0]);
}

#[test]
fn window_count_matches_onnx_examples() {
    // ONNX's test_maxpool_2d_ceil: 4 wide, kernel 3, stride 2: 1 floored, 2 in ceil mode.
    assert_eq!(window_count(4, (0, 0), 3, 2, 1, false), Ok(1));
    assert_eq!(window_count(4, (0, 0), 3, 2, 1, true), Ok(2));
    // A last window that would start in the trailing padding is dropped.
    assert_eq!(window_count(2, (0, 1), 1, 2, 1, true), Ok(1));
}

#[test]
fn compare_uses_the_stated_tolerances() {
    let info = TensorInfo::new(&[3], DataType::Float32);
    let bytes = |v: [f32; 3]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let want = t(&[3], &[1.0, 1000.0, f64::NAN]);
    assert!(compare(&info, &bytes([1.000_05, 1000.05, f32::NAN]), &want).is_ok());
    assert!(compare(&info, &bytes([1.000_3, 1000.0, f32::NAN]), &want).is_err());
    assert!(compare(&info, &bytes([1.0, 1000.2, f32::NAN]), &want).is_err());
    assert!(compare(&info, &bytes([1.0, 1000.0, 0.0]), &want).is_err());
    let ints = TensorInfo::new(&[1], DataType::Signed32);
    assert!(compare(&ints, &2i32.to_le_bytes(), &t(&[1], &[2.0])).is_ok());
    assert!(compare(&ints, &2i32.to_le_bytes(), &t(&[1], &[1.0])).is_err());
}

#[test]
fn non_max_suppression_by_hand() {
    use backplane_api::NonMaxSuppressionDescriptor;
    // Two classes over three corner boxes: 0 and 1 overlap with IoU 0.9 / 1.1 (0.82), 2 is
    // apart. Class 0 prefers box 1 (box 0 suppressed); class 1 prefers box 0 (box 1
    // suppressed) and box 2 scores 0.1, not above the threshold 0.1.
    let boxes = t(
        &[1, 3, 4],
        &[0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, 5.0, 1.0, 6.0],
    );
    let scores = t(&[1, 2, 3], &[0.8, 0.9, 0.3, 0.7, 0.6, 0.1]);
    let d = NonMaxSuppressionDescriptor {
        center_point_box: false,
        max_output_boxes_per_class: 2,
        iou_threshold: 0.5,
        score_threshold: 0.1,
    };
    let y = run(
        LayerDescriptor::NonMaxSuppression(d),
        &[boxes, scores],
        &[4, 4],
    );
    #[rustfmt::skip]
    let want = [
        3.0, 0.0, 0.0, 0.0, // the count
        0.0, 0.0, 0.0, 0.0, // batches
        0.0, 0.0, 1.0, 0.0, // classes
        1.0, 2.0, 0.0, 0.0, // boxes
    ];
    assert_eq!(y, want);
}

#[test]
fn roi_align_by_hand() {
    use backplane_api::{RoiAlignDescriptor, RoiPooling};
    // A 3x3 plane 0..9; the region (0, 0)-(2, 2) at scale 1 without the half-pixel shift, two
    // bins across and one down, one sample each: bin (0, 0) samples (y, x) = (1, 0.5), the
    // mean of 3 and 4 = 3.5; bin (0, 1) samples (1, 1.5): 4.5. Max pooling: the largest
    // weighted corner, 0.5 * 4 = 2 and 0.5 * 5 = 2.5.
    let x = t(&[1, 1, 3, 3], &(0..9).map(f64::from).collect::<Vec<_>>());
    let rois = t(&[1, 4], &[0.0, 0.0, 2.0, 2.0]);
    let batch = t(&[1], &[0.0]);
    let d = RoiAlignDescriptor {
        pooling: RoiPooling::Average,
        output_height: 1,
        output_width: 2,
        sampling_ratio: 1,
        spatial_scale: 1.0,
        half_pixel: false,
    };
    let inputs = [x, rois, batch];
    let y = run(LayerDescriptor::RoiAlign(d), &inputs, &[1, 1, 1, 2]);
    close(&y, &[3.5, 4.5]);
    let max = RoiAlignDescriptor {
        pooling: RoiPooling::Max,
        ..d
    };
    let y = run(LayerDescriptor::RoiAlign(max), &inputs, &[1, 1, 1, 2]);
    close(&y, &[2.0, 2.5]);
}

#[test]
fn determinant_by_hand() {
    // [[1, 2], [3, 4]] = -2; [[0, 2, 1], [1, 1, 1], [2, 0, 3]] = -4.
    let x = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    close(&run(LayerDescriptor::Determinant, &[x], &[]), &[-2.0]);
    let x = t(&[1, 3, 3], &[0.0, 2.0, 1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 3.0]);
    close(&run(LayerDescriptor::Determinant, &[x], &[1]), &[-4.0]);
}

#[test]
fn bit_cast_by_hand() {
    // 1.0f32 = 0x3f800000 = 1065353216; -1i32 as u32 = 4294967295.
    let y = bit_cast(
        &t(&[2], &[1.0, -0.0]),
        DataType::Float32,
        DataType::Signed32,
    )
    .unwrap();
    assert_eq!(y.data, [1_065_353_216.0, f64::from(i32::MIN)]);
    let y = bit_cast(
        &t(&[1], &[-1.0]),
        DataType::Signed32,
        DataType::UnsignedInt32,
    )
    .unwrap();
    assert_eq!(y.data, [4_294_967_295.0]);
}
