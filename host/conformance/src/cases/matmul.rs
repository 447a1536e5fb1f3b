//! The cases of the matrix products: `BatchMatMul`; quantised `FullyConnected` and `BatchMatMul`.

use backplane_api::{BatchMatMulDescriptor, DataType, LayerDescriptor, Quantization, TensorInfo};

use super::{Case, FloatCase, qtensor, qtensor_axis};

/// `BatchMatMul`: broadcast batches, and both operands transposed.
pub(super) fn batch_matmul() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let mut v: Vec<FloatCase> = Vec::new();
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
    v
}

/// `FullyConnected` with u8 or s8 activations (per-column or per-tensor weights), dynamically
/// quantised (Float32 input), and `BatchMatMul` with per-column weights.
pub(super) fn quantized() -> Vec<Case> {
    let u8q = DataType::QAsymmU8;
    let s8q = DataType::QAsymmS8;
    let s8s = DataType::QSymmS8;
    let f = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
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
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
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
    v
}
