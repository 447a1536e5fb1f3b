//! The layer cases with quantised tensors (Backend API 1.2).

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BatchMatMulDescriptor, BinaryOperation,
    Convolution2dDescriptor, DataType, LayerDescriptor, OutputRounding, Padding2d,
    PerAxisQuantization, Pooling2dDescriptor, PoolingType, Quantization, TensorInfo,
};

use super::Case;

/// A per-tensor quantised tensor.
fn qtensor(shape: &[u32], data_type: DataType, scale: f32, offset: i32) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization::per_tensor(scale, offset))
}

/// A tensor quantised along `axis` with `scales` (offset 0).
fn qtensor_axis(shape: &[u32], data_type: DataType, axis: u32, scales: &[f32]) -> TensorInfo {
    TensorInfo::new(shape, data_type).with_quantization(Quantization {
        scale: 0.0,
        offset: 0,
        per_axis: Some(PerAxisQuantization {
            axis,
            scales: scales.to_vec().into(),
        })
        .into(),
    })
}

/// The cases with quantised tensors (Backend API 1.2), as the layers doc defines them: the
/// three conversions per tensor and per axis; the products with u8 or s8 activations, s8
/// per-channel or per-tensor weights and a Signed32 bias; the dynamically quantised
/// `FullyConnected` (Float32 input); the layers that compute on real values; and the layers
/// that move stored values.
pub(super) fn quantized_cases() -> Vec<Case> {
    let (u8q, s8q, s8s) = (DataType::QAsymmU8, DataType::QAsymmS8, DataType::QSymmS8);
    let f = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let per_tensor = Quantization::per_tensor;
    let per_axis = |axis: u32, scales: &[f32]| Quantization {
        scale: 0.0,
        offset: 0,
        per_axis: Some(PerAxisQuantization {
            axis,
            scales: scales.to_vec().into(),
        })
        .into(),
    };
    // A Signed32 bias of weights with `w_scales`, for an input of scale `x_scale`.
    let bias = |n: u32, x_scale: f32, w_scales: &[f32]| {
        let scales: Vec<f32> = w_scales.iter().map(|w| x_scale * w).collect();
        if scales.len() == 1 {
            qtensor(&[n], DataType::Signed32, scales[0], 0).constant()
        } else {
            qtensor_axis(&[n], DataType::Signed32, 0, &scales).constant()
        }
    };
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
    push(
        "Quantize/u8_per_tensor",
        LayerDescriptor::Quantize(u8q),
        vec![f(&[2, 3, 4])],
        Some(per_tensor(0.01, 120)),
    );
    push(
        "Quantize/s8_per_axis",
        LayerDescriptor::Quantize(s8s),
        vec![f(&[2, 3, 4])],
        Some(per_axis(1, &[0.004, 0.01, 0.02])),
    );
    push(
        "Dequantize/u8_per_tensor",
        LayerDescriptor::Dequantize,
        vec![qtensor(&[2, 3, 4], u8q, 0.03, 131)],
        None,
    );
    push(
        "Dequantize/s8_per_axis",
        LayerDescriptor::Dequantize,
        vec![qtensor_axis(&[3, 4], s8s, 0, &[0.5, 0.01, 0.125])],
        None,
    );
    push(
        "Requantize/u8_to_s8_per_tensor",
        LayerDescriptor::Requantize(s8q),
        vec![qtensor(&[2, 3, 4], u8q, 0.02, 128)],
        Some(per_tensor(0.03, -5)),
    );
    push(
        "Requantize/per_axis_to_u8",
        LayerDescriptor::Requantize(u8q),
        vec![qtensor_axis(&[2, 3, 4], s8s, 2, &[0.01, 0.02, 0.04, 0.08])],
        Some(per_tensor(0.02, 100)),
    );
    let pad1 = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
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
    let w5 = [0.004, 0.01, 0.007, 0.002, 0.005];
    push(
        "FullyConnected/q_u8_s8_per_column",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: false,
        }),
        vec![
            qtensor(&[3, 8], u8q, 0.02, 128),
            qtensor_axis(&[8, 5], s8s, 1, &w5).constant(),
            bias(5, 0.02, &w5),
        ],
        Some(per_tensor(0.04, 120)),
    );
    push(
        "FullyConnected/q_s8_transposed_per_tensor",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: true,
        }),
        vec![
            qtensor(&[3, 8], s8q, 0.02, 4),
            qtensor(&[5, 8], s8q, 0.006, -7).constant(),
        ],
        Some(per_tensor(0.05, -10)),
    );
    push(
        "FullyConnected/dynamic_s8_per_column",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: false,
        }),
        vec![
            f(&[3, 8]),
            qtensor_axis(&[8, 5], s8s, 1, &w5).constant(),
            f(&[5]).constant(),
        ],
        None,
    );
    push(
        "FullyConnected/dynamic_u8_transposed",
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: true,
        }),
        vec![f(&[3, 8]), qtensor(&[5, 8], u8q, 0.01, 131).constant()],
        None,
    );
    let w4b = [0.01, 0.004, 0.02, 0.008];
    push(
        "BatchMatMul/q_u8_s8_per_column",
        LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
            transpose_a: false,
            transpose_b: false,
        }),
        vec![
            qtensor(&[2, 3, 6], u8q, 0.02, 128),
            qtensor_axis(&[6, 4], s8s, 1, &w4b).constant(),
        ],
        Some(per_tensor(0.05, 128)),
    );
    for (name, op, dt) in [
        ("Add", BinaryOperation::Add, u8q),
        ("Mul", BinaryOperation::Mul, s8q),
    ] {
        let offset = if dt == u8q { 128 } else { 0 };
        push(
            &format!("ElementwiseBinary/q_{name}_broadcast"),
            LayerDescriptor::ElementwiseBinary(op),
            vec![
                qtensor(&[2, 3, 4], dt, 0.02, offset),
                qtensor(&[3, 1], dt, 0.03, offset - 10),
            ],
            Some(per_tensor(0.04, offset + 5)),
        );
    }
    for (name, function, out) in [
        ("ReLU", ActivationFunction::ReLU, per_tensor(0.01, 0)),
        (
            "Sigmoid",
            ActivationFunction::Sigmoid,
            per_tensor(1.0 / 256.0, 0),
        ),
    ] {
        push(
            &format!("Activation/q_{name}"),
            LayerDescriptor::Activation(ActivationDescriptor {
                function,
                a: 0.0,
                b: 0.0,
            }),
            vec![qtensor(&[2, 3, 4], u8q, 0.04, 128)],
            Some(out),
        );
    }
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
    push(
        "Mean/q_global_average",
        LayerDescriptor::Mean(backplane_api::MeanDescriptor {
            axes: vec![2, 3].into(),
            keep_dims: true,
        }),
        vec![qtensor(&[1, 3, 4, 4], u8q, 0.02, 128)],
        Some(per_tensor(0.005, 128)),
    );
    push(
        "Concat/q_differing_parameters",
        LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 }),
        vec![
            qtensor(&[1, 2, 3], u8q, 0.02, 128),
            qtensor(&[1, 3, 3], u8q, 0.05, 100),
        ],
        Some(per_tensor(0.03, 110)),
    );
    push(
        "Concat/q_same_parameters",
        LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 }),
        vec![
            qtensor(&[1, 2, 3], s8q, 0.02, -3),
            qtensor(&[1, 3, 3], s8q, 0.02, -3),
        ],
        None,
    );
    push(
        "Reshape/q_u8",
        LayerDescriptor::Reshape(backplane_api::ReshapeDescriptor {
            target_shape: vec![6, 4].into(),
        }),
        vec![qtensor(&[2, 3, 4], u8q, 0.02, 128)],
        None,
    );
    push(
        "Transpose/q_s8",
        LayerDescriptor::Transpose(backplane_api::TransposeDescriptor {
            permutation: vec![2, 0, 1].into(),
        }),
        vec![qtensor(&[2, 3, 4], s8q, 0.02, -3)],
        None,
    );
    v
}
