//! The cases of the layers that slide a window: convolutions, transposed convolution and pooling.

use backplane_api::{
    Convolution2dDescriptor, DataType, LayerDescriptor, OutputRounding, Padding2d,
    Pooling2dDescriptor, PoolingType, Quantization, TensorInfo, TransposeConvolution2dDescriptor,
};

use super::{Case, FloatCase, pad_one, qtensor, qtensor_axis};

/// `Convolution2d` with stride, padding, dilation and groups, and `DepthwiseConvolution2d` with a
/// channel multiplier.
pub(super) fn convolutions() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let c = |s: &[u32]| TensorInfo::new(s, DataType::Float32).constant();
    let pad1 = pad_one();
    let mut v: Vec<FloatCase> = Vec::new();
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
    v
}

/// `TransposeConvolution2d`: uneven padding, stride, dilation, groups and output padding at once.
pub(super) fn transpose_convolution() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let c = |s: &[u32]| TensorInfo::new(s, DataType::Float32).constant();
    vec![(
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
    )]
}

/// `Pooling2d`: max with ceiling rounding, average with padding counted or not.
pub(super) fn pooling() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let pad1 = pad_one();
    let mut v: Vec<FloatCase> = Vec::new();
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
    v
}

/// `Convolution2d` (u8 activations) and `DepthwiseConvolution2d` (s8) with s8 per-channel
/// weights and a Signed32 bias.
pub(super) fn quantized_convolutions() -> Vec<Case> {
    let u8q = DataType::QAsymmU8;
    let s8q = DataType::QAsymmS8;
    let s8s = DataType::QSymmS8;
    let per_tensor = Quantization::per_tensor;
    // A Signed32 bias of weights with `w_scales`, for an input of scale `x_scale`.
    let bias = |n: u32, x_scale: f32, w_scales: &[f32]| {
        let scales: Vec<f32> = w_scales.iter().map(|w| x_scale * w).collect();
        if scales.len() == 1 {
            qtensor(&[n], DataType::Signed32, scales[0], 0).constant()
        } else {
            qtensor_axis(&[n], DataType::Signed32, 0, &scales).constant()
        }
    };
    let pad1 = pad_one();
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
    let conv = Convolution2dDescriptor {
        padding: pad1,
        stride_x: 2,
        stride_y: 2,
        bias_enabled: true,
        ..Default::default()
    };
    let w4 = [0.004, 0.006, 0.003, 0.008];
    push(
        "Convolution2d/q_u8_s8_per_channel",
        LayerDescriptor::Convolution2d(conv.clone()),
        vec![
            qtensor(&[1, 3, 7, 7], u8q, 0.02, 128),
            qtensor_axis(&[4, 3, 3, 3], s8s, 0, &w4).constant(),
            bias(4, 0.02, &w4),
        ],
        Some(per_tensor(0.05, 100)),
    );
    let w6 = [0.01, 0.02, 0.015, 0.005, 0.03, 0.012];
    push(
        "DepthwiseConvolution2d/q_s8_per_channel",
        LayerDescriptor::DepthwiseConvolution2d(Convolution2dDescriptor {
            stride_x: 1,
            stride_y: 1,
            ..conv
        }),
        vec![
            qtensor(&[1, 3, 6, 6], s8q, 0.03, -3),
            qtensor_axis(&[6, 1, 3, 3], s8s, 0, &w6).constant(),
            bias(6, 0.03, &w6),
        ],
        Some(per_tensor(0.06, 2)),
    );
    v
}

/// `Pooling2d` on u8: average (computed on real values) and max (stored values).
pub(super) fn quantized_pooling() -> Vec<Case> {
    let u8q = DataType::QAsymmU8;
    let per_tensor = Quantization::per_tensor;
    let pad1 = pad_one();
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
    for (name, pool_type, out) in [
        (
            "q_avg_pad_exclude",
            PoolingType::Average,
            Some(per_tensor(0.015, 120)),
        ),
        ("q_max_ceil", PoolingType::Max, None),
    ] {
        push(
            &format!("Pooling2d/{name}"),
            LayerDescriptor::Pooling2d(Pooling2dDescriptor {
                pool_type,
                padding: pad1,
                pool_width: 3,
                pool_height: 3,
                stride_x: 2,
                stride_y: 2,
                rounding: if pool_type == PoolingType::Max {
                    OutputRounding::Ceiling
                } else {
                    OutputRounding::Floor
                },
                count_include_pad: false,
                layout: Default::default(),
            }),
            vec![qtensor(&[1, 2, 6, 6], u8q, 0.02, 128)],
            out,
        );
    }
    v
}
