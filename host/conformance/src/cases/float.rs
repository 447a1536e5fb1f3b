//! The layer cases with Float32 (and Signed32, Boolean) tensors: every v1 layer's sample, and
//! variants of its attributes.

use backplane::plugins::inspect;

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BatchMatMulDescriptor, BinaryOperation,
    Convolution2dDescriptor, CoordinateTransformation, DataType, LayerDescriptor, LayerKind,
    NearestRounding, NormalizationDescriptor, OutputRounding, PadDescriptor, PadMode, PadPair,
    Padding2d, Pooling2dDescriptor, PoolingType, ResizeDescriptor, ResizeMethod, SliceDescriptor,
    SoftmaxDescriptor, TensorInfo, TransposeConvolution2dDescriptor, UnaryOperation,
};

/// The layer cases: every v1 layer, and variants of its attributes.
pub(super) fn layer_cases() -> Vec<(String, LayerDescriptor, Vec<TensorInfo>)> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let c = |s: &[u32]| TensorInfo::new(s, DataType::Float32).constant();
    let mut v: Vec<(String, LayerDescriptor, Vec<TensorInfo>)> = Vec::new();
    for kind in LayerKind::ALL {
        if matches!(
            kind,
            LayerKind::Input
                | LayerKind::Output
                | LayerKind::PreCompiled
                | LayerKind::Quantize
                | LayerKind::Dequantize
                | LayerKind::Requantize
        ) {
            continue;
        }
        if let Some((d, ins, _)) = inspect::sample_layer(kind, DataType::Float32) {
            v.push((format!("layer/{kind}/basic"), d, ins));
        }
    }
    let conv = |padding, stride, dilation, groups, bias| Convolution2dDescriptor {
        padding,
        stride_x: stride,
        stride_y: stride,
        dilation_x: dilation,
        dilation_y: dilation,
        groups,
        bias_enabled: bias,
        ..Default::default()
    };
    let pad1 = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };
    v.push((
        "layer/Convolution2d/stride2_pad1".into(),
        LayerDescriptor::Convolution2d(conv(pad1, 2, 1, 1, true)),
        vec![t(&[1, 3, 9, 9]), c(&[4, 3, 3, 3]), c(&[4])],
    ));
    v.push((
        "layer/Convolution2d/dilation2".into(),
        LayerDescriptor::Convolution2d(conv(pad1, 1, 2, 1, false)),
        vec![t(&[1, 2, 8, 8]), c(&[3, 2, 3, 3])],
    ));
    v.push((
        "layer/Convolution2d/groups2".into(),
        LayerDescriptor::Convolution2d(conv(pad1, 1, 1, 2, true)),
        vec![t(&[1, 4, 6, 6]), c(&[6, 2, 3, 3]), c(&[6])],
    ));
    v.push((
        "layer/DepthwiseConvolution2d/multiplier2_stride2".into(),
        LayerDescriptor::DepthwiseConvolution2d(conv(pad1, 2, 1, 1, true)),
        vec![t(&[1, 3, 8, 8]), c(&[6, 1, 3, 3]), c(&[6])],
    ));
    for (name, f, a, b) in [
        ("ReLU", ActivationFunction::ReLU, 0.0, 0.0),
        ("ReLU6", ActivationFunction::BoundedReLU, 6.0, 0.0),
        ("Sigmoid", ActivationFunction::Sigmoid, 0.0, 0.0),
        ("TanH", ActivationFunction::TanH, 1.0, 1.0),
        ("LeakyReLU", ActivationFunction::LeakyReLU, 0.1, 0.0),
        ("HardSwish", ActivationFunction::HardSwish, 0.0, 0.0),
        ("Elu", ActivationFunction::Elu, 1.0, 0.0),
        ("Gelu", ActivationFunction::Gelu, 0.0, 0.0),
        ("Gelu_tanh", ActivationFunction::Gelu, 1.0, 0.0),
    ] {
        v.push((
            format!("layer/Activation/{name}"),
            LayerDescriptor::Activation(ActivationDescriptor { function: f, a, b }),
            vec![t(&[2, 3, 4])],
        ));
    }
    for op in BinaryOperation::ALL {
        v.push((
            format!("layer/ElementwiseBinary/{op:?}_broadcast"),
            LayerDescriptor::ElementwiseBinary(op),
            vec![t(&[2, 3, 4]), t(&[3, 1])],
        ));
    }
    for op in UnaryOperation::ALL {
        v.push((
            format!("layer/ElementwiseUnary/{op:?}"),
            LayerDescriptor::ElementwiseUnary(op),
            vec![t(&[2, 3, 4])],
        ));
    }
    for (name, method, coordinates, nearest) in [
        (
            "nearest_asymmetric_floor",
            ResizeMethod::Nearest,
            CoordinateTransformation::Asymmetric,
            NearestRounding::Floor,
        ),
        (
            "nearest_half_pixel",
            ResizeMethod::Nearest,
            CoordinateTransformation::HalfPixel,
            NearestRounding::RoundPreferCeil,
        ),
        (
            "linear_align_corners",
            ResizeMethod::Linear,
            CoordinateTransformation::AlignCorners,
            NearestRounding::RoundPreferFloor,
        ),
        (
            "linear_pytorch_half_pixel",
            ResizeMethod::Linear,
            CoordinateTransformation::PytorchHalfPixel,
            NearestRounding::RoundPreferFloor,
        ),
    ] {
        v.push((
            format!("layer/Resize/{name}"),
            LayerDescriptor::Resize(ResizeDescriptor {
                method,
                coordinates,
                nearest,
                height: 7,
                width: 3,
                scale_y: 7.0 / 4.0,
                scale_x: 0.5,
            }),
            vec![t(&[1, 2, 4, 6])],
        ));
    }
    v.push((
        "layer/TransposeConvolution2d/padded_dilated_groups".into(),
        LayerDescriptor::TransposeConvolution2d(TransposeConvolution2dDescriptor {
            padding: Padding2d {
                top: 1,
                left: 0,
                bottom: 0,
                right: 2,
            },
            stride_x: 2,
            stride_y: 3,
            dilation_x: 2,
            dilation_y: 1,
            groups: 2,
            output_padding_x: 1,
            output_padding_y: 0,
            bias_enabled: true,
        }),
        vec![t(&[1, 4, 3, 4]), c(&[4, 3, 3, 2]), c(&[6])],
    ));
    v.push((
        "layer/Slice/strided_backwards".into(),
        LayerDescriptor::Slice(SliceDescriptor {
            begin: vec![1, 4, 0].into(),
            step: vec![1, -2, 3].into(),
            size: vec![2, 3, 2].into(),
        }),
        vec![t(&[3, 5, 6])],
    ));
    for (name, a, b, transpose_a, transpose_b) in [
        (
            "broadcast_4d",
            &[2, 1, 3, 4][..],
            &[5, 4, 2][..],
            false,
            false,
        ),
        ("transposed", &[4, 3][..], &[2, 5, 4][..], true, true),
    ] {
        v.push((
            format!("layer/BatchMatMul/{name}"),
            LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
                transpose_a,
                transpose_b,
            }),
            vec![t(a), t(b)],
        ));
    }
    for (name, size, alpha, beta, k) in [
        ("alexnet", 5, 1e-4, 0.75, 1.0),
        ("even_window", 4, 0.3, 1.0, 2.0),
    ] {
        v.push((
            format!("layer/Normalization/{name}"),
            LayerDescriptor::Normalization(NormalizationDescriptor {
                size,
                alpha,
                beta,
                k,
            }),
            vec![t(&[2, 6, 3, 3])],
        ));
    }
    for (name, pool_type, rounding, include) in [
        ("max_ceil", PoolingType::Max, OutputRounding::Ceiling, false),
        (
            "avg_pad_include",
            PoolingType::Average,
            OutputRounding::Floor,
            true,
        ),
        (
            "avg_pad_exclude_ceil",
            PoolingType::Average,
            OutputRounding::Ceiling,
            false,
        ),
    ] {
        let d = Pooling2dDescriptor {
            pool_type,
            padding: pad1,
            pool_width: 3,
            pool_height: 3,
            stride_x: 2,
            stride_y: 2,
            rounding,
            count_include_pad: include,
            layout: Default::default(),
        };
        v.push((
            format!("layer/Pooling2d/{name}"),
            LayerDescriptor::Pooling2d(d),
            vec![t(&[1, 2, 6, 6])],
        ));
    }
    for axis in [0, 1, -1] {
        v.push((
            format!("layer/Softmax/axis{axis}"),
            LayerDescriptor::Softmax(SoftmaxDescriptor { beta: 1.0, axis }),
            vec![t(&[2, 3, 4])],
        ));
    }
    for (name, mode) in [
        ("constant", PadMode::Constant),
        ("reflect", PadMode::Reflect),
        ("edge", PadMode::Edge),
    ] {
        let d = PadDescriptor {
            padding: vec![
                PadPair {
                    before: 0,
                    after: 0,
                },
                PadPair {
                    before: 2,
                    after: 1,
                },
            ]
            .into(),
            value: 0.5,
            mode,
        };
        v.push((
            format!("layer/Pad/{name}"),
            LayerDescriptor::Pad(d),
            vec![t(&[2, 4])],
        ));
    }
    v
}
