//! Tests of `layer_support.rs`.

use backplane_api::{BinaryOperation, PreCompiledDescriptor};

use super::*;
use crate::workloads::test_support::f32t;

#[test]
fn add_broadcast_support() {
    let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    let ok = is_layer_supported(&add, &[f32t(&[2, 3]), f32t(&[3])], &[f32t(&[2, 3])]);
    assert_eq!(ok, Support::Supported);
    let bad = is_layer_supported(&add, &[f32t(&[2, 3]), f32t(&[2])], &[f32t(&[2, 3])]);
    assert_eq!(
        bad,
        Support::unsupported("shapes [2, 3] and [2] do not broadcast")
    );
    let wrong_out = is_layer_supported(&add, &[f32t(&[2, 3]), f32t(&[3])], &[f32t(&[3, 2])]);
    assert_eq!(
        wrong_out,
        Support::unsupported("output shapes [[3, 2]] differ from the expected [[2, 3]]")
    );
    let int = is_layer_supported(
        &add,
        &[TensorInfo::new(&[2], DataType::Signed32), f32t(&[2])],
        &[f32t(&[2])],
    );
    assert_eq!(
        int,
        Support::unsupported("inputs must share one data type, got Signed32 and Float32")
    );
    let bools = TensorInfo::new(&[2], DataType::Boolean);
    assert_eq!(
        is_layer_supported(&add, &[bools.clone(), bools.clone()], &[bools]),
        Support::unsupported(
            "CpuRef runs this layer in every plain numeric type; input 0 is Boolean"
        )
    );
}

#[test]
fn refuses_backend_specific_layers_with_reason() {
    let p = LayerDescriptor::PreCompiled(PreCompiledDescriptor {
        backend: "CpuFast".into(),
        operation: "Conv2dBiasReLU".into(),
        payload: Default::default(),
    });
    let s = is_layer_supported(&p, &[f32t(&[1])], &[f32t(&[1])]);
    assert_eq!(
        s,
        Support::unsupported(
            "CpuRef does not run backend-specific layers (Conv2dBiasReLU of CpuFast)"
        )
    );
}

/// Quantised layers: supported combinations, and a specific reason for each refusal.
#[test]
fn quantized_support_and_reasons() {
    use backplane_api::{
        ActivationDescriptor, ActivationFunction, Convolution2dDescriptor, FullyConnectedDescriptor,
    };

    use crate::workloads::quantized::test_support::{qt, qt_axis};

    let (u8q, s8q, s8s) = (DataType::QAsymmU8, DataType::QAsymmS8, DataType::QSymmS8);
    let conv = LayerDescriptor::Convolution2d(Convolution2dDescriptor {
        bias_enabled: true,
        ..Default::default()
    });
    let x = qt(&[1, 2, 3, 3], u8q, 0.1, 128);
    let w = qt_axis(&[4, 2, 1, 1], s8s, 0, &[0.1, 0.2, 0.3, 0.4], 0);
    let bias = TensorInfo::new(&[4], DataType::Signed32);
    let y = qt(&[1, 4, 3, 3], u8q, 0.2, 3);
    let ok = [x.clone(), w.clone(), bias.clone()];
    assert_eq!(
        is_layer_supported(&conv, &ok, std::slice::from_ref(&y)),
        Support::Supported
    );
    let wrong_axis = qt_axis(&[4, 2, 1, 1], s8s, 1, &[0.1, 0.2], 0);
    assert_eq!(
        is_layer_supported(
            &conv,
            &[x.clone(), wrong_axis, bias.clone()],
            std::slice::from_ref(&y)
        ),
        Support::unsupported(
            "CpuRef needs weights [4, 2, 1, 1] QSymmS8 quantized per tensor or along axis 0 \
             (the output channels), got axis 1"
        )
    );
    let f32_bias = f32t(&[4]);
    assert_eq!(
        is_layer_supported(
            &conv,
            &[x.clone(), w.clone(), f32_bias],
            std::slice::from_ref(&y)
        ),
        Support::unsupported("CpuRef needs a Signed32 bias for quantized inputs, got Float32")
    );
    let bad_offset = qt(&[1, 2, 3, 3], u8q, 0.1, 300);
    assert_eq!(
        is_layer_supported(&conv, &[bad_offset, w, bias], std::slice::from_ref(&y)),
        Support::unsupported("[1, 2, 3, 3] QAsymmU8: zero point 300 is outside 0..=255")
    );
    let fc = LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
        bias_enabled: false,
        transpose_weights: false,
    });
    let fc_ok = is_layer_supported(
        &fc,
        &[
            qt(&[2, 3], s8q, 0.1, 0),
            qt_axis(&[3, 4], s8s, 1, &[0.1; 4], 0),
        ],
        &[qt(&[2, 4], s8q, 0.1, 0)],
    );
    assert_eq!(fc_ok, Support::Supported);
    let elu = LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::Elu,
        a: 1.0,
        b: 0.0,
    });
    let t = qt(&[4], u8q, 0.1, 0);
    assert_eq!(
        is_layer_supported(&elu, std::slice::from_ref(&t), std::slice::from_ref(&t)),
        Support::unsupported(
            "CpuRef runs quantized Activation ReLU, BoundedReLU, LeakyReLU, Sigmoid, TanH \
             and HardSwish, not Elu"
        )
    );
    let sub = LayerDescriptor::ElementwiseBinary(BinaryOperation::Sub);
    assert_eq!(
        is_layer_supported(&sub, &[t.clone(), t.clone()], std::slice::from_ref(&t)),
        Support::unsupported("CpuRef runs quantized ElementwiseBinary Add and Mul, not Sub")
    );
    let reshape = LayerDescriptor::Reshape(backplane_api::ReshapeDescriptor {
        target_shape: vec![2, 2].into(),
    });
    assert_eq!(
        is_layer_supported(
            &reshape,
            std::slice::from_ref(&t),
            &[qt(&[2, 2], u8q, 0.2, 0)]
        ),
        Support::unsupported(
            "CpuRef moves quantized elements only when the output has the input's data type \
             and quantization parameters"
        )
    );
    assert_eq!(
        is_layer_supported(
            &reshape,
            std::slice::from_ref(&t),
            &[qt(&[2, 2], u8q, 0.1, 0)]
        ),
        Support::Supported
    );
    let quantize = LayerDescriptor::Quantize(s8s);
    assert_eq!(
        is_layer_supported(
            &quantize,
            &[f32t(&[2, 3])],
            &[qt_axis(&[2, 3], s8s, 1, &[0.1, 0.2, 0.3], 0)]
        ),
        Support::Supported
    );
}

/// Dynamically quantised products: the supported combinations, and a reason for each
/// refusal.
#[test]
fn dynamic_quantized_support_and_reasons() {
    use backplane_api::{BatchMatMulDescriptor, FullyConnectedDescriptor};

    use crate::workloads::quantized::test_support::{qt, qt_axis};

    let fc = |transpose_weights| {
        LayerDescriptor::FullyConnected(FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights,
        })
    };
    let x = f32t(&[2, 3]);
    let y = f32t(&[2, 4]);
    let bias = f32t(&[4]).constant();
    for w_dt in [DataType::QSymmS8, DataType::QAsymmS8, DataType::QAsymmU8] {
        let per_tensor = qt(&[3, 4], w_dt, 0.1, 0).constant();
        let per_column = qt_axis(&[3, 4], w_dt, 1, &[0.1; 4], 0).constant();
        let transposed = qt_axis(&[4, 3], w_dt, 0, &[0.1; 4], 0).constant();
        for (layer, w) in [
            (fc(false), &per_tensor),
            (fc(false), &per_column),
            (fc(true), &transposed),
        ] {
            assert_eq!(
                is_layer_supported(
                    &layer,
                    &[x.clone(), w.clone(), bias.clone()],
                    std::slice::from_ref(&y)
                ),
                Support::Supported,
                "{layer:?} {w}"
            );
        }
    }
    let w = qt_axis(&[3, 4], DataType::QSymmS8, 1, &[0.1; 4], 0).constant();
    assert_eq!(
        is_layer_supported(
            &fc(false),
            &[
                x.clone(),
                w.clone(),
                TensorInfo::new(&[4], DataType::Signed32)
            ],
            std::slice::from_ref(&y)
        ),
        Support::unsupported(
            "CpuRef needs a Float32 bias for a dynamically quantized FullyConnected \
             (Float32 input), got Signed32"
        )
    );
    assert_eq!(
        is_layer_supported(
            &fc(false),
            &[x.clone(), w.clone(), bias.clone()],
            &[qt(&[2, 4], DataType::QAsymmU8, 0.1, 0)]
        ),
        Support::unsupported(
            "CpuRef runs a dynamically quantized FullyConnected (Float32 input, quantized \
             weights) into a Float32 output, got QAsymmU8"
        )
    );
    assert_eq!(
        is_layer_supported(
            &fc(true),
            &[
                x.clone(),
                qt_axis(&[4, 3], DataType::QSymmS8, 1, &[0.1; 3], 0),
                bias
            ],
            std::slice::from_ref(&y)
        ),
        Support::unsupported(
            "CpuRef needs weights [4, 3] QSymmS8 quantized per tensor or along axis 0 (the \
             output channels), got axis 1"
        )
    );
    let bmm = |transpose_b| {
        LayerDescriptor::BatchMatMul(BatchMatMulDescriptor {
            transpose_a: false,
            transpose_b,
        })
    };
    let a = f32t(&[5, 2, 3]);
    let out = f32t(&[5, 2, 4]);
    for (layer, b) in [
        (
            bmm(false),
            qt_axis(&[3, 4], DataType::QSymmS8, 1, &[0.1; 4], 0),
        ),
        (bmm(false), qt(&[5, 3, 4], DataType::QAsymmU8, 0.1, 7)),
        (
            bmm(true),
            qt_axis(&[4, 3], DataType::QAsymmS8, 0, &[0.1; 4], 0),
        ),
    ] {
        assert_eq!(
            is_layer_supported(&layer, &[a.clone(), b.clone()], std::slice::from_ref(&out)),
            Support::Supported,
            "{b}"
        );
    }
    assert_eq!(
        is_layer_supported(
            &bmm(false),
            &[
                a.clone(),
                qt_axis(&[3, 4], DataType::QSymmS8, 0, &[0.1; 3], 0)
            ],
            std::slice::from_ref(&out)
        ),
        Support::unsupported(
            "CpuRef needs weights [3, 4] QSymmS8 quantized per tensor or along axis 1 (the \
             output channels), got axis 0"
        )
    );
    assert_eq!(
        is_layer_supported(
            &bmm(false),
            &[a, qt(&[3, 4], DataType::QSymmS8, 0.1, 0)],
            &[qt(&[5, 2, 4], DataType::QAsymmS8, 0.1, 0)]
        ),
        Support::unsupported(
            "CpuRef runs a dynamically quantized BatchMatMul (Float32 input, quantized \
             weights) into a Float32 output, got QAsymmS8"
        )
    );
    // A quantised input with Float32 weights is not a dynamic product.
    assert_eq!(
        is_layer_supported(
            &fc(false),
            &[
                qt(&[2, 3], DataType::QAsymmU8, 0.1, 0),
                f32t(&[3, 4]),
                f32t(&[4])
            ],
            std::slice::from_ref(&y)
        ),
        Support::unsupported(
            "CpuRef runs this layer in QSymmS8, QAsymmS8, QAsymmU8; weights 0 is Float32"
        )
    );
}

/// Backend API 1.5: the layers that move, select or convert elements take every plain type;
/// arithmetic and comparisons every plain numeric type; a quantized or Boolean operand of
/// arithmetic is refused with the set named.
#[test]
fn the_1_5_types_where_cpuref_runs_them() {
    use backplane_api::{BinaryOperation, ComparisonOperation};
    let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
    let less = LayerDescriptor::Comparison(ComparisonOperation::Less);
    for dt in DataType::ALL {
        let t = TensorInfo::new(&[2], dt);
        let b = TensorInfo::new(&[2], DataType::Boolean);
        let numeric = !dt.is_quantized() && dt != DataType::Boolean;
        assert_eq!(
            is_layer_supported(&add, &[t.clone(), t.clone()], std::slice::from_ref(&t))
                == Support::Supported,
            numeric,
            "Add {dt}"
        );
        assert_eq!(
            is_layer_supported(&less, &[t.clone(), t.clone()], &[b]) == Support::Supported,
            numeric,
            "Less {dt}"
        );
        if !dt.is_quantized() {
            for to in DataType::ALL.into_iter().filter(|t| !t.is_quantized()) {
                assert_eq!(
                    is_layer_supported(
                        &LayerDescriptor::Cast(to),
                        std::slice::from_ref(&t),
                        &[TensorInfo::new(&[2], to)]
                    ),
                    Support::Supported,
                    "Cast {dt} to {to}"
                );
            }
        }
    }
    let i64t = TensorInfo::new(&[2], DataType::Signed64);
    let f16t = TensorInfo::new(&[2], DataType::Float16);
    assert_eq!(
        is_layer_supported(&add, &[f16t.clone(), i64t.clone()], &[f16t]),
        Support::unsupported("inputs must share one data type, got Float16 and Signed64")
    );
}
