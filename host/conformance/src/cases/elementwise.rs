//! The cases of the element-wise layers: `Activation`, `ElementwiseBinary`, `ElementwiseUnary`.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BinaryOperation, DataType, LayerDescriptor,
    Quantization, TensorInfo, UnaryOperation,
};

use super::{Case, FloatCase, qtensor};

/// `Activation`: every function, Gelu in both forms.
pub(super) fn activations() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let mut v: Vec<FloatCase> = Vec::new();
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
    v
}

/// `ElementwiseBinary`: every operation, broadcast; on Float32, but the bitwise operations on
/// Signed32 and the shifts on UnsignedInt32 (the types they are defined on).
pub(super) fn binary() -> Vec<FloatCase> {
    let mut v: Vec<FloatCase> = Vec::new();
    for op in BinaryOperation::ALL {
        let dt = match op {
            BinaryOperation::ShiftLeft | BinaryOperation::ShiftRight => DataType::UnsignedInt32,
            op if op.is_integer_only() => DataType::Signed32,
            _ => DataType::Float32,
        };
        let t = |s: &[u32]| TensorInfo::new(s, dt);
        v.push((
            format!("layer/ElementwiseBinary/{op:?}_broadcast"),
            LayerDescriptor::ElementwiseBinary(op),
            vec![t(&[2, 3, 4]), t(&[3, 1])],
        ));
    }
    v
}

/// `ElementwiseUnary`: every function.
pub(super) fn unary() -> Vec<FloatCase> {
    let t = |s: &[u32]| TensorInfo::new(s, DataType::Float32);
    let mut v: Vec<FloatCase> = Vec::new();
    for op in UnaryOperation::ALL {
        v.push((
            format!("layer/ElementwiseUnary/{op:?}"),
            LayerDescriptor::ElementwiseUnary(op),
            vec![t(&[2, 3, 4])],
        ));
    }
    v
}

/// `ElementwiseBinary` (Add on u8, Mul on s8, broadcast) and `Activation` (ReLU, Sigmoid) on
/// quantised tensors: computed on real values.
pub(super) fn quantized() -> Vec<Case> {
    let u8q = DataType::QAsymmU8;
    let s8q = DataType::QAsymmS8;
    let per_tensor = Quantization::per_tensor;
    let mut v: Vec<Case> = Vec::new();
    let mut push = |name: &str, layer, inputs, out: Option<Quantization>| {
        v.push((format!("layer/{name}"), layer, inputs, out));
    };
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
    v
}
