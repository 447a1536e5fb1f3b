//! Tests of the ONNX importer: models are built with the [`proto`](super::proto) types,
//! encoded, and imported.

use backplane_api::{
    ActivationDescriptor, ActivationFunction, BinaryOperation, ConstTensor, DataType,
    LayerDescriptor, LayerKind, OutputRounding, PadMode, PadPair, Padding2d, PoolingType,
    TensorInfo,
};
use prost::Message;

use super::proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, TypeProtoTensor, ValueInfoProto, attribute_type, data_type,
};
use super::{ImportError, ImportOptions, UnsupportedNode, import_bytes, import_file};
use crate::graph::network::{Layer, Network};

// ---------------------------------------------------------------------------------------
// Model building

fn a_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        i: v,
        r#type: attribute_type::INT,
        ..Default::default()
    }
}

fn a_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        f: v,
        r#type: attribute_type::FLOAT,
        ..Default::default()
    }
}

fn a_str(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        s: v.as_bytes().to_vec(),
        r#type: attribute_type::STRING,
        ..Default::default()
    }
}

fn a_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        ints: v.to_vec(),
        r#type: attribute_type::INTS,
        ..Default::default()
    }
}

fn a_tensor(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        t: Some(t),
        r#type: attribute_type::TENSOR,
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        name: String::new(),
        op_type: op.into(),
        domain: String::new(),
        attribute,
    }
}

fn named(mut n: NodeProto, name: &str) -> NodeProto {
    n.name = name.into();
    n
}

/// A tensor value info; a negative dimension is symbolic (`"N"`).
fn value_info(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            tensor_type: Some(TypeProtoTensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            dim_value: (d >= 0).then_some(d),
                            dim_param: (d < 0).then(|| "N".to_owned()),
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

fn input(name: &str, dims: &[i64]) -> ValueInfoProto {
    value_info(name, data_type::FLOAT, dims)
}

fn output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: None,
    }
}

fn f32_tensor(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        float_data: values.to_vec(),
        name: name.into(),
        ..Default::default()
    }
}

fn f32_raw(name: &str, dims: &[i64], values: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: data_type::FLOAT,
        raw_data: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        name: name.into(),
        ..Default::default()
    }
}

fn i64_tensor(name: &str, dims: &[i64], values: &[i64]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: data_type::INT64,
        int64_data: values.to_vec(),
        name: name.into(),
        ..Default::default()
    }
}

fn filled(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    let values: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.25).collect();
    f32_raw(name, dims, &values)
}

struct Model {
    opset: i64,
    nodes: Vec<NodeProto>,
    inits: Vec<TensorProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
}

impl Model {
    fn new(opset: i64) -> Self {
        Self {
            opset,
            nodes: vec![],
            inits: vec![],
            inputs: vec![],
            outputs: vec![],
        }
    }
    fn input(mut self, name: &str, dims: &[i64]) -> Self {
        self.inputs.push(input(name, dims));
        self
    }
    fn init(mut self, t: TensorProto) -> Self {
        self.inits.push(t);
        self
    }
    fn node(mut self, n: NodeProto) -> Self {
        self.nodes.push(n);
        self
    }
    fn output(mut self, name: &str) -> Self {
        self.outputs.push(output(name));
        self
    }
    fn proto(self) -> ModelProto {
        ModelProto {
            ir_version: 8,
            opset_import: vec![OperatorSetIdProto {
                domain: String::new(),
                version: self.opset,
            }],
            graph: Some(GraphProto {
                node: self.nodes,
                name: "test".into(),
                initializer: self.inits,
                input: self.inputs,
                output: self.outputs,
                value_info: vec![],
                ..GraphProto::default()
            }),
            ..ModelProto::default()
        }
    }
    fn bytes(self) -> Vec<u8> {
        self.proto().encode_to_vec()
    }
    fn import(self) -> Result<Network, ImportError> {
        import_bytes(&self.bytes(), &ImportOptions::default())
    }
    fn import_with(self, options: &ImportOptions) -> Result<Network, ImportError> {
        import_bytes(&self.bytes(), options)
    }
}

// ---------------------------------------------------------------------------------------
// Inspecting networks

/// The kinds of the layers other than Input, Output and Constant, in order.
fn compute_kinds(net: &Network) -> Vec<LayerKind> {
    net.layers()
        .iter()
        .map(Layer::kind)
        .filter(|k| {
            !matches!(
                k,
                LayerKind::Input | LayerKind::Output | LayerKind::Constant
            )
        })
        .collect()
}

fn layer<'a>(net: &'a Network, name: &str) -> &'a Layer {
    net.layers()
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no layer {name} in\n{net}"))
}

fn out_shape(net: &Network, name: &str) -> Vec<u32> {
    let (_, info) = net
        .outputs()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no output {name}"));
    info.shape.to_vec()
}

/// The value of a Constant layer feeding input `slot` of `l`.
fn const_input(net: &Network, l: &Layer, slot: usize) -> Vec<f32> {
    match &*net.layers()[l.inputs[slot].layer].descriptor {
        LayerDescriptor::Constant(c) => c.to_f32_vec().unwrap(),
        d => panic!("input {slot} of {} is {d:?}, not a constant", l.name),
    }
}

fn unsupported(e: ImportError) -> Vec<UnsupportedNode> {
    match e {
        ImportError::Unsupported { nodes } => nodes,
        e => panic!("expected Unsupported, got {e:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Convolution, Gemm, MatMul

fn conv_model(pad: AttributeProto, kernel: i64, x: &[i64]) -> Model {
    Model::new(13)
        .input("x", x)
        .init(filled("w", &[8, 3, kernel, kernel]))
        .init(filled("b", &[8]))
        .node(named(
            node(
                "Conv",
                &["x", "w", "b"],
                &["y"],
                vec![pad, a_ints("strides", &[2, 2])],
            ),
            "conv",
        ))
        .output("y")
}

fn conv_desc(l: &Layer) -> &backplane_api::Convolution2dDescriptor {
    match &*l.descriptor {
        LayerDescriptor::Convolution2d(d) | LayerDescriptor::DepthwiseConvolution2d(d) => d,
        d => panic!("not a convolution: {d:?}"),
    }
}

#[test]
fn conv_same_upper_stride_2_on_7x7() {
    let net = conv_model(a_str("auto_pad", "SAME_UPPER"), 3, &[1, 3, 7, 7])
        .import()
        .unwrap();
    assert_eq!(compute_kinds(&net), [LayerKind::Convolution2d]);
    let d = conv_desc(layer(&net, "conv"));
    let one = Padding2d {
        left: 1,
        right: 1,
        top: 1,
        bottom: 1,
    };
    assert_eq!(d.padding, one);
    assert_eq!((d.stride_x, d.stride_y, d.groups), (2, 2, 1));
    assert!(d.bias_enabled);
    assert_eq!(out_shape(&net, "y"), [1, 8, 4, 4]);
    assert_eq!(layer(&net, "conv").inputs.len(), 3);

    // An even kernel pads unevenly: SAME_UPPER puts the extra row at the end...
    let net = conv_model(a_str("auto_pad", "SAME_UPPER"), 2, &[1, 3, 7, 7])
        .import()
        .unwrap();
    let d = conv_desc(layer(&net, "conv"));
    assert_eq!(
        d.padding,
        Padding2d {
            left: 0,
            right: 1,
            top: 0,
            bottom: 1
        }
    );
    assert_eq!(out_shape(&net, "y"), [1, 8, 4, 4]);
    // ... SAME_LOWER at the beginning.
    let net = conv_model(a_str("auto_pad", "SAME_LOWER"), 2, &[1, 3, 7, 7])
        .import()
        .unwrap();
    assert_eq!(
        conv_desc(layer(&net, "conv")).padding,
        Padding2d {
            left: 1,
            right: 0,
            top: 1,
            bottom: 0
        }
    );
    // VALID: no padding, floor((7 - 3) / 2) + 1 = 3.
    let net = conv_model(a_str("auto_pad", "VALID"), 3, &[1, 3, 7, 7])
        .import()
        .unwrap();
    assert_eq!(conv_desc(layer(&net, "conv")).padding, Padding2d::default());
    assert_eq!(out_shape(&net, "y"), [1, 8, 3, 3]);
}

#[test]
fn conv_explicit_pads_and_dilations() {
    let net = Model::new(11)
        .input("x", &[1, 3, 10, 12])
        .init(filled("w", &[4, 3, 3, 3]))
        .node(named(
            node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![
                    a_ints("pads", &[1, 2, 3, 4]),
                    a_ints("dilations", &[2, 1]),
                    a_ints("kernel_shape", &[3, 3]),
                ],
            ),
            "conv",
        ))
        .output("y")
        .import()
        .unwrap();
    let d = conv_desc(layer(&net, "conv"));
    assert_eq!(
        d.padding,
        Padding2d {
            top: 1,
            left: 2,
            bottom: 3,
            right: 4
        }
    );
    assert_eq!((d.dilation_y, d.dilation_x), (2, 1));
    assert!(!d.bias_enabled);
    // H: 10 + 4 - 5 + 1 = 10; W: 12 + 6 - 3 + 1 = 16.
    assert_eq!(out_shape(&net, "y"), [1, 4, 10, 16]);
}

#[test]
fn grouped_conv_becomes_depthwise_or_grouped() {
    let dw = |group: i64, w: &[i64]| {
        Model::new(13)
            .input("x", &[1, 4, 8, 8])
            .init(filled("w", w))
            .node(named(
                node(
                    "Conv",
                    &["x", "w"],
                    &["y"],
                    vec![a_int("group", group), a_ints("pads", &[1, 1, 1, 1])],
                ),
                "conv",
            ))
            .output("y")
            .import()
            .unwrap()
    };
    let net = dw(4, &[8, 1, 3, 3]);
    assert_eq!(compute_kinds(&net), [LayerKind::DepthwiseConvolution2d]);
    assert_eq!(out_shape(&net, "y"), [1, 8, 8, 8]);
    let net = dw(2, &[6, 2, 3, 3]);
    assert_eq!(compute_kinds(&net), [LayerKind::Convolution2d]);
    assert_eq!(conv_desc(layer(&net, "conv")).groups, 2);
    assert_eq!(out_shape(&net, "y"), [1, 6, 8, 8]);
}

#[test]
fn conv_3d_and_bad_weights() {
    // 3-D: one 2-D convolution per kernel depth (expand/volume.rs).
    let net = Model::new(13)
        .input("x", &[1, 3, 4, 8, 8])
        .init(filled("w", &[4, 3, 3, 3, 3]))
        .node(named(node("Conv", &["x", "w"], &["y"], vec![]), "conv3d"))
        .output("y")
        .import()
        .unwrap();
    let convs = compute_kinds(&net)
        .into_iter()
        .filter(|k| *k == LayerKind::Convolution2d)
        .count();
    assert_eq!(convs, 3);
    assert_eq!(out_shape(&net, "y"), [1, 4, 2, 6, 6]);

    // Channel mismatch: the builder's shape check names the layer.
    let e = Model::new(13)
        .input("x", &[1, 5, 8, 8])
        .init(filled("w", &[4, 3, 3, 3]))
        .node(named(node("Conv", &["x", "w"], &["y"], vec![]), "conv"))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(&e, ImportError::Network(_)), "{e:?}");
    assert!(e.to_string().contains("conv"), "{e}");
}

#[test]
fn gemm_trans_b_alpha_beta_and_bias_forms() {
    let gemm = |attrs: Vec<AttributeProto>, c_dims: &[i64]| {
        let cn: i64 = c_dims.iter().product();
        Model::new(13)
            .input("a", &[2, 8])
            .init(filled("b", &[4, 8]))
            .init(f32_tensor("c", c_dims, &vec![1.0; cn as usize]))
            .node(named(node("Gemm", &["a", "b", "c"], &["y"], attrs), "fc"))
            .output("y")
            .import()
            .unwrap()
    };
    let net = gemm(vec![a_int("transB", 1)], &[4]);
    assert_eq!(compute_kinds(&net), [LayerKind::FullyConnected]);
    let fc = layer(&net, "fc");
    assert_eq!(
        *fc.descriptor,
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: true,
            transpose_weights: true,
        })
    );
    assert_eq!(out_shape(&net, "y"), [2, 4]);

    // alpha and beta are folded into the constants; a [1, N] bias becomes [N].
    let net = gemm(
        vec![
            a_int("transB", 1),
            a_float("alpha", 2.0),
            a_float("beta", 3.0),
        ],
        &[1, 4],
    );
    let fc = layer(&net, "fc");
    let w = const_input(&net, fc, 1);
    assert_eq!(w[..3], [0.0, 0.5, 1.0]);
    assert_eq!(const_input(&net, fc, 2), [3.0; 4]);
    assert_eq!(net.tensor_info(fc.inputs[2]).shape.as_slice(), [4]);

    // A [2, 4] C cannot be a bias: FullyConnected then Add.
    let net = gemm(vec![a_int("transB", 1)], &[2, 4]);
    assert_eq!(
        compute_kinds(&net),
        [LayerKind::FullyConnected, LayerKind::ElementwiseBinary]
    );
    assert_eq!(out_shape(&net, "y"), [2, 4]);

    // transA = 1 transposes A with a Transpose layer first.
    let net = Model::new(13)
        .input("a", &[8, 2])
        .init(filled("b", &[8, 4]))
        .node(named(
            node("Gemm", &["a", "b"], &["y"], vec![a_int("transA", 1)]),
            "fc",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [LayerKind::Transpose, LayerKind::FullyConnected]
    );
    assert_eq!(
        *layer(&net, "fc/transposeA").descriptor,
        LayerDescriptor::Transpose(backplane_api::TransposeDescriptor {
            permutation: vec![1, 0].into(),
        })
    );
    assert_eq!(
        layer(&net, "fc/transposeA").outputs[0].shape.as_slice(),
        [2, 8]
    );
    assert_eq!(out_shape(&net, "y"), [2, 4]);
}

#[test]
fn matmul_is_fully_connected_or_batch_matmul() {
    let net = Model::new(13)
        .input("x", &[3, 8])
        .init(filled("w", &[8, 5]))
        .node(named(node("MatMul", &["x", "w"], &["y"], vec![]), "mm"))
        .output("y")
        .import()
        .unwrap();
    let mm = layer(&net, "mm");
    assert_eq!(
        *mm.descriptor,
        LayerDescriptor::FullyConnected(backplane_api::FullyConnectedDescriptor {
            bias_enabled: false,
            transpose_weights: false,
        })
    );
    assert_eq!(out_shape(&net, "y"), [3, 5]);

    // Non-constant weights, batched operands: Backend API 1.1's BatchMatMul.
    let net = Model::new(13)
        .input("x", &[2, 3, 8])
        .input("w", &[8, 5])
        .node(named(
            node("MatMul", &["x", "w"], &["y"], vec![]),
            "dynamic",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "dynamic").descriptor,
        LayerDescriptor::BatchMatMul(backplane_api::BatchMatMulDescriptor::default())
    );
    assert_eq!(out_shape(&net, "y"), [2, 3, 5]);

    // 1-D operands gain a unit dimension that the result loses: [4] x [2, 4, 3] is [2, 3].
    let net = Model::new(13)
        .input("a", &[4])
        .input("b", &[2, 4, 3])
        .node(named(node("MatMul", &["a", "b"], &["y"], vec![]), "vm"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::Reshape,
            LayerKind::BatchMatMul,
            LayerKind::Reshape
        ]
    );
    assert_eq!(layer(&net, "vm").outputs[0].shape.as_slice(), [2, 1, 3]);
    assert_eq!(out_shape(&net, "y"), [2, 3]);
}

// ---------------------------------------------------------------------------------------
// Element-wise and activations

/// Each ONNX unary operator becomes Backend API 1.1's `ElementwiseUnary` of the same shape.
#[test]
fn elementwise_unary_ops() {
    use backplane_api::UnaryOperation as U;
    for (op, want) in [
        ("Abs", U::Abs),
        ("Neg", U::Neg),
        ("Exp", U::Exp),
        ("Log", U::Log),
        ("Sqrt", U::Sqrt),
        ("Reciprocal", U::Reciprocal),
        ("Sin", U::Sin),
        ("Cos", U::Cos),
        ("Erf", U::Erf),
        ("Ceil", U::Ceil),
        ("Floor", U::Floor),
    ] {
        let net = Model::new(13)
            .input("x", &[2, 3])
            .node(named(node(op, &["x"], &["y"], vec![]), "op"))
            .output("y")
            .import()
            .unwrap();
        assert_eq!(
            *layer(&net, "op").descriptor,
            LayerDescriptor::ElementwiseUnary(want),
            "{op}"
        );
        assert_eq!(out_shape(&net, "y"), [2, 3]);
    }
}

#[test]
fn elementwise_binary_ops() {
    for (op, want) in [
        ("Add", BinaryOperation::Add),
        ("Sub", BinaryOperation::Sub),
        ("Mul", BinaryOperation::Mul),
        ("Div", BinaryOperation::Div),
        ("Max", BinaryOperation::Maximum),
        ("Min", BinaryOperation::Minimum),
        ("Pow", BinaryOperation::Power),
    ] {
        let net = Model::new(13)
            .input("x", &[1, 3, 4, 4])
            .init(f32_tensor("k", &[3, 1, 1], &[1.0, 2.0, 3.0]))
            .node(named(node(op, &["x", "k"], &["y"], vec![]), "op"))
            .output("y")
            .import()
            .unwrap();
        assert_eq!(
            *layer(&net, "op").descriptor,
            LayerDescriptor::ElementwiseBinary(want)
        );
        assert_eq!(out_shape(&net, "y"), [1, 3, 4, 4]);
    }
    // Two activations broadcast.
    let net = Model::new(13)
        .input("a", &[2, 1, 5])
        .input("b", &[3, 1])
        .node(node("Sub", &["a", "b"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [2, 3, 5]);
    // Max of three inputs is two layers, left to right; Min of one is the identity.
    let net = Model::new(13)
        .input("a", &[2])
        .input("b", &[2])
        .input("c", &[3, 1])
        .node(named(node("Max", &["a", "b", "c"], &["y"], vec![]), "m"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [LayerKind::ElementwiseBinary, LayerKind::ElementwiseBinary]
    );
    assert_eq!(
        *layer(&net, "m/2").descriptor,
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Maximum)
    );
    assert_eq!(layer(&net, "m/1").outputs[0].shape.as_slice(), [2]);
    assert_eq!(out_shape(&net, "y"), [3, 2]);
    // Sum of three is two Adds (ResNet's residual sums); Mean of two is an Add, then a
    // Div by the constant 2.
    let net = Model::new(13)
        .input("a", &[2])
        .input("b", &[2])
        .input("c", &[3, 1])
        .node(named(node("Sum", &["a", "b", "c"], &["y"], vec![]), "s"))
        .node(named(node("Mean", &["a", "b"], &["z"], vec![]), "m"))
        .output("y")
        .output("z")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "s/2").descriptor,
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add)
    );
    assert_eq!(out_shape(&net, "y"), [3, 2]);
    assert_eq!(
        *layer(&net, "m").descriptor,
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Add)
    );
    let div = layer(&net, "m/mean");
    assert_eq!(
        *div.descriptor,
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Div)
    );
    assert_eq!(const_input(&net, div, 1), [2.0]);
    assert_eq!(out_shape(&net, "z"), [2]);
    let net = Model::new(13)
        .input("a", &[2])
        .node(node("Min", &["a"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(compute_kinds(&net), []);
    let e = Model::new(13)
        .input("a", &[2])
        .node(node("Max", &[], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        matches!(e, ImportError::InvalidNode { ref reason, .. } if reason == "expects at least 1 input"),
        "{e}"
    );
    // Constants fold: (k / 2) feeds the Add as one constant.
    let net = Model::new(13)
        .input("x", &[3])
        .init(f32_tensor("k", &[3], &[2.0, 4.0, 6.0]))
        .init(f32_tensor("two", &[], &[2.0]))
        .node(node("Div", &["k", "two"], &["h"], vec![]))
        .node(named(node("Add", &["x", "h"], &["y"], vec![]), "add"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(compute_kinds(&net), [LayerKind::ElementwiseBinary]);
    assert_eq!(const_input(&net, layer(&net, "add"), 1), [1.0, 2.0, 3.0]);
}

#[test]
fn opsets_1_to_5_read_as_opset_6_unless_an_operator_changed() {
    // Operators unchanged since opset 1 (Softmax, Greater, Not) read at opsets 1 to 5; those
    // that changed by opset 6 (Relu, Floor) are refused, each node named.
    let unchanged = |opset| {
        Model::new(opset)
            .input("x", &[2, 3])
            .init(f32_tensor("t", &[1], &[0.5]))
            .node(named(node("Softmax", &["x"], &["s"], vec![]), "soft"))
            .node(named(node("Greater", &["s", "t"], &["g"], vec![]), "gt"))
            .node(named(node("Not", &["g"], &["y"], vec![]), "not"))
            .output("y")
    };
    for opset in 1..=5 {
        let net = unchanged(opset).import().unwrap();
        assert_eq!(out_shape(&net, "y"), [2, 3], "opset {opset}");
    }
    let changed = Model::new(3)
        .input("x", &[2, 3])
        .node(named(node("Relu", &["x"], &["r"], vec![]), "relu"))
        .node(named(node("Floor", &["r"], &["y"], vec![]), "floor"))
        .output("y")
        .import()
        .unwrap_err();
    let ImportError::Unsupported { nodes } = changed else {
        panic!("{changed:?}");
    };
    let named_nodes: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| (n.node.as_str(), n.op.as_str()))
        .collect();
    assert_eq!(named_nodes, [("relu", "Relu"), ("floor", "Floor")]);
    assert!(
        nodes[0].missing.starts_with(
            "Relu of ai.onnx opset 3: its definition changed by opset 6, the oldest the importer reads"
        ),
        "{}",
        nodes[0].missing
    );
    let zero = unchanged(0).import().unwrap_err();
    assert!(
        format!("{zero}").contains("ai.onnx opset 0 (supported: 6 to 27)"),
        "{zero}"
    );
}

#[test]
fn legacy_broadcast_along_axis_opset_6() {
    let net = Model::new(6)
        .input("x", &[1, 3, 4, 4])
        .init(f32_tensor("b", &[3], &[1.0, 2.0, 3.0]))
        .node(named(
            node(
                "Add",
                &["x", "b"],
                &["y"],
                vec![a_int("broadcast", 1), a_int("axis", 1)],
            ),
            "add",
        ))
        .output("y")
        .import()
        .unwrap();
    let add = layer(&net, "add");
    assert_eq!(net.tensor_info(add.inputs[1]).shape.as_slice(), [3, 1, 1]);
    assert_eq!(out_shape(&net, "y"), [1, 3, 4, 4]);
}

fn activation(l: &Layer) -> ActivationDescriptor {
    match &*l.descriptor {
        LayerDescriptor::Activation(d) => *d,
        d => panic!("{} is {d:?}", l.name),
    }
}

#[test]
fn activations() {
    let cases = [
        ("Relu", vec![], ActivationFunction::ReLU, 0.0, 0.0),
        ("Sigmoid", vec![], ActivationFunction::Sigmoid, 0.0, 0.0),
        ("Tanh", vec![], ActivationFunction::TanH, 1.0, 1.0),
        ("HardSwish", vec![], ActivationFunction::HardSwish, 0.0, 0.0),
        (
            "LeakyRelu",
            vec![],
            ActivationFunction::LeakyReLU,
            0.01,
            0.0,
        ),
        (
            "LeakyRelu",
            vec![a_float("alpha", 0.2)],
            ActivationFunction::LeakyReLU,
            0.2,
            0.0,
        ),
        ("Elu", vec![], ActivationFunction::Elu, 1.0, 0.0),
        (
            "Elu",
            vec![a_float("alpha", 0.5)],
            ActivationFunction::Elu,
            0.5,
            0.0,
        ),
    ];
    for (op, attrs, function, a, b) in cases {
        let net = Model::new(14)
            .input("x", &[1, 4])
            .node(named(node(op, &["x"], &["y"], attrs), "act"))
            .output("y")
            .import()
            .unwrap();
        assert_eq!(
            activation(layer(&net, "act")),
            ActivationDescriptor { function, a, b },
            "{op}"
        );
        assert_eq!(out_shape(&net, "y"), [1, 4]);
    }
}

#[test]
fn clip_opset_6_attributes_vs_opset_11_inputs() {
    let net = Model::new(6)
        .input("x", &[1, 4])
        .node(named(
            node(
                "Clip",
                &["x"],
                &["y"],
                vec![a_float("min", 0.0), a_float("max", 6.0)],
            ),
            "relu6",
        ))
        .output("y")
        .import()
        .unwrap();
    let d = activation(layer(&net, "relu6"));
    assert_eq!(
        (d.function, d.a, d.b),
        (ActivationFunction::BoundedReLU, 6.0, 0.0)
    );

    let net = Model::new(11)
        .input("x", &[1, 4])
        .init(f32_tensor("lo", &[], &[-1.0]))
        .init(f32_tensor("hi", &[], &[1.0]))
        .node(named(
            node("Clip", &["x", "lo", "hi"], &["y"], vec![]),
            "clip",
        ))
        .output("y")
        .import()
        .unwrap();
    let d = activation(layer(&net, "clip"));
    assert_eq!((d.a, d.b), (1.0, -1.0));
    // No layer reads the bounds.
    assert_eq!(net.layers().len(), 3);

    // Missing max: +inf.
    let net = Model::new(11)
        .input("x", &[1, 4])
        .init(f32_tensor("lo", &[], &[0.0]))
        .node(named(node("Clip", &["x", "lo"], &["y"], vec![]), "clip"))
        .output("y")
        .import()
        .unwrap();
    let d = activation(layer(&net, "clip"));
    assert_eq!((d.a, d.b), (f32::INFINITY, 0.0));

    // From opset 11, min/max attributes are not read; non-constant bounds are unsupported.
    let e = Model::new(11)
        .input("x", &[1, 4])
        .input("lo", &[])
        .node(node("Clip", &["x", "lo"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(unsupported(e)[0].op, "Clip");
}

#[test]
fn hard_sigmoid_is_mul_add_bounded_relu() {
    let net = Model::new(13)
        .input("x", &[1, 8, 2, 2])
        .node(named(
            node(
                "HardSigmoid",
                &["x"],
                &["y"],
                vec![a_float("alpha", 1.0 / 6.0)],
            ),
            "hs",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::ElementwiseBinary,
            LayerKind::ElementwiseBinary,
            LayerKind::Activation
        ]
    );
    let mul = layer(&net, "hs/mul");
    assert_eq!(
        *mul.descriptor,
        LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul)
    );
    assert_eq!(const_input(&net, mul, 1), [1.0 / 6.0]);
    let add = layer(&net, "hs/add");
    assert_eq!(const_input(&net, add, 1), [0.5]);
    let d = activation(layer(&net, "hs"));
    assert_eq!(
        (d.function, d.a, d.b),
        (ActivationFunction::BoundedReLU, 1.0, 0.0)
    );
    assert_eq!(out_shape(&net, "y"), [1, 8, 2, 2]);
}

// ---------------------------------------------------------------------------------------
// Pooling, Softmax

fn pool_desc(l: &Layer) -> &backplane_api::Pooling2dDescriptor {
    match &*l.descriptor {
        LayerDescriptor::Pooling2d(d) => d,
        d => panic!("not pooling: {d:?}"),
    }
}

#[test]
fn max_and_average_pool() {
    let net = Model::new(12)
        .input("x", &[1, 2, 6, 6])
        .node(named(
            node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![
                    a_ints("kernel_shape", &[3, 3]),
                    a_ints("strides", &[2, 2]),
                    a_int("ceil_mode", 1),
                ],
            ),
            "mp",
        ))
        .output("y")
        .import()
        .unwrap();
    let d = pool_desc(layer(&net, "mp"));
    assert_eq!(d.pool_type, PoolingType::Max);
    assert_eq!(d.rounding, OutputRounding::Ceiling);
    assert_eq!(
        (d.pool_height, d.pool_width, d.stride_y, d.stride_x),
        (3, 3, 2, 2)
    );
    // ceil((6 - 3) / 2) + 1 = 3 (floor would give 2).
    assert_eq!(out_shape(&net, "y"), [1, 2, 3, 3]);

    let net = Model::new(12)
        .input("x", &[1, 2, 5, 5])
        .node(named(
            node(
                "AveragePool",
                &["x"],
                &["y"],
                vec![
                    a_ints("kernel_shape", &[3, 3]),
                    a_ints("pads", &[1, 1, 1, 1]),
                    a_int("count_include_pad", 1),
                ],
            ),
            "ap",
        ))
        .output("y")
        .import()
        .unwrap();
    let d = pool_desc(layer(&net, "ap"));
    assert_eq!(d.pool_type, PoolingType::Average);
    assert!(d.count_include_pad);
    assert_eq!(d.padding.left, 1);
    assert_eq!(out_shape(&net, "y"), [1, 2, 5, 5]);

    let net = Model::new(12)
        .input("x", &[1, 2, 7, 7])
        .node(named(
            node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![
                    a_ints("kernel_shape", &[2, 2]),
                    a_ints("strides", &[2, 2]),
                    a_str("auto_pad", "SAME_UPPER"),
                ],
            ),
            "mp",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(pool_desc(layer(&net, "mp")).padding.right, 1);
    assert_eq!(out_shape(&net, "y"), [1, 2, 4, 4]);

    let net = Model::new(13)
        .input("x", &[1, 2, 7, 7])
        .node(named(
            node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![
                    a_ints("kernel_shape", &[2, 2]),
                    a_ints("dilations", &[2, 2]),
                ],
            ),
            "pool",
        ))
        .output("y")
        .import()
        .unwrap();
    // Dilated windows are the 1.1 DilatedPooling2d; a 2x2 window 2 apart spans 3 cells.
    let l = layer(&net, "pool");
    assert!(matches!(&*l.descriptor,
        LayerDescriptor::DilatedPooling2d(d) if d.dilation_x == 2 && d.dilation_y == 2
    ));
    assert_eq!(l.outputs[0].shape.as_slice(), [1, 2, 5, 5]);
}

#[test]
fn global_pools() {
    let net = Model::new(13)
        .input("x", &[1, 16, 7, 7])
        .node(named(
            node("GlobalAveragePool", &["x"], &["y"], vec![]),
            "gap",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "gap").descriptor,
        LayerDescriptor::Mean(backplane_api::MeanDescriptor {
            axes: vec![2, 3].into(),
            keep_dims: true,
        })
    );
    assert_eq!(out_shape(&net, "y"), [1, 16, 1, 1]);

    let net = Model::new(13)
        .input("x", &[1, 16, 7, 5])
        .node(named(node("GlobalMaxPool", &["x"], &["y"], vec![]), "gmp"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [1, 16, 1, 1]);

    // A 3-D input (1-D pooling, as magika's model has): a Reduce of the last axis.
    let net = Model::new(13)
        .input("x", &[1, 512, 508])
        .node(named(node("GlobalMaxPool", &["x"], &["y"], vec![]), "gmp"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "gmp").descriptor,
        LayerDescriptor::Reduce(backplane_api::ReduceDescriptor {
            operation: backplane_api::ReduceOperation::Max,
            axes: vec![2].into(),
            keep_dims: true,
        })
    );
    assert_eq!(out_shape(&net, "y"), [1, 512, 1]);
}

fn softmax_net(opset: i64, dims: &[i64], attrs: Vec<AttributeProto>) -> Network {
    Model::new(opset)
        .input("x", dims)
        .node(named(node("Softmax", &["x"], &["y"], attrs), "sm"))
        .output("y")
        .import()
        .unwrap()
}

fn softmax_axis(l: &Layer) -> i32 {
    match &*l.descriptor {
        LayerDescriptor::Softmax(d) => {
            assert_eq!(d.beta, 1.0);
            d.axis
        }
        d => panic!("not softmax: {d:?}"),
    }
}

#[test]
fn softmax_opset_11_vs_13() {
    // Opset 11, default axis 1 on [N, C]: the last axis.
    let net = softmax_net(11, &[1, 10], vec![]);
    assert_eq!(softmax_axis(layer(&net, "sm")), 1);
    // Opset 11 on [1, 10, 1, 1]: only axis 1 is wide, so a softmax along it is equivalent.
    let net = softmax_net(11, &[1, 10, 1, 1], vec![]);
    assert_eq!(compute_kinds(&net), [LayerKind::Softmax]);
    assert_eq!(softmax_axis(layer(&net, "sm")), 1);
    // Opset 11 on [2, 3, 4], axis 1: coerced to [2, 12] -> Flatten, Softmax, Reshape.
    let net = softmax_net(11, &[2, 3, 4], vec![]);
    assert_eq!(
        compute_kinds(&net),
        [LayerKind::Flatten, LayerKind::Softmax, LayerKind::Reshape]
    );
    assert_eq!(softmax_axis(layer(&net, "sm/softmax")), 1);
    assert_eq!(out_shape(&net, "y"), [2, 3, 4]);
    // Opset 13: default axis -1, a single layer along the last axis.
    let net = softmax_net(13, &[2, 3, 4], vec![]);
    assert_eq!(compute_kinds(&net), [LayerKind::Softmax]);
    assert_eq!(softmax_axis(layer(&net, "sm")), 2);
    let net = softmax_net(13, &[2, 3, 4], vec![a_int("axis", 1)]);
    assert_eq!(softmax_axis(layer(&net, "sm")), 1);
}

// ---------------------------------------------------------------------------------------
// Shapes: Reshape, Flatten, Concat, Transpose, Squeeze, folding

fn reshape_target(l: &Layer) -> Vec<u32> {
    match &*l.descriptor {
        LayerDescriptor::Reshape(d) => d.target_shape.to_vec(),
        d => panic!("not reshape: {d:?}"),
    }
}

#[test]
fn reshape_with_zero_and_minus_one() {
    let net = Model::new(13)
        .input("x", &[2, 3, 4])
        .init(i64_tensor("s", &[2], &[0, -1]))
        .node(named(node("Reshape", &["x", "s"], &["y"], vec![]), "r"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(reshape_target(layer(&net, "r")), [2, 12]);
    assert_eq!(out_shape(&net, "y"), [2, 12]);

    let net = Model::new(13)
        .input("x", &[2, 3, 4])
        .init(i64_tensor("s", &[3], &[-1, 0, 2]))
        .node(named(node("Reshape", &["x", "s"], &["y"], vec![]), "r"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [4, 3, 2]);

    for bad in [vec![-1, -1], vec![5, -1], vec![0, 0, 0, 0], vec![-2, 12]] {
        let e = Model::new(13)
            .input("x", &[2, 3, 4])
            .init(i64_tensor("s", &[bad.len() as i64], &bad))
            .node(node("Reshape", &["x", "s"], &["y"], vec![]))
            .output("y")
            .import()
            .unwrap_err();
        assert!(
            matches!(e, ImportError::InvalidNode { .. }),
            "{bad:?}: {e:?}"
        );
    }
    // A non-constant shape is unsupported.
    let e = Model::new(13)
        .input("x", &[2, 3, 4])
        .input("s", &[2])
        .node(node("Reshape", &["x", "s"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::Unsupported { .. }), "{e:?}");
}

/// `x.view(x.size(0), -1)` as PyTorch exports it.
fn folding_chain(opset: i64) -> Network {
    let unsqueeze = if opset >= 13 {
        node("Unsqueeze", &["n", "axes"], &["n1"], vec![])
    } else {
        node("Unsqueeze", &["n"], &["n1"], vec![a_ints("axes", &[0])])
    };
    Model::new(opset)
        .input("x", &[-1, 3, 4, 4])
        .init(i64_tensor("axes", &[1], &[0]))
        .node(node("Shape", &["x"], &["s"], vec![]))
        .node(node(
            "Constant",
            &[],
            &["zero"],
            vec![a_tensor("value", i64_tensor("", &[], &[0]))],
        ))
        .node(node(
            "Gather",
            &["s", "zero"],
            &["n"],
            vec![a_int("axis", 0)],
        ))
        .node(unsqueeze)
        .node(node(
            "Constant",
            &[],
            &["minus1"],
            vec![a_tensor("value", i64_tensor("", &[1], &[-1]))],
        ))
        .node(node(
            "Concat",
            &["n1", "minus1"],
            &["shape"],
            vec![a_int("axis", 0)],
        ))
        .node(named(
            node("Reshape", &["x", "shape"], &["y"], vec![]),
            "view",
        ))
        .output("y")
        .import()
        .unwrap()
}

#[test]
fn shape_gather_unsqueeze_concat_reshape_folds() {
    for opset in [11, 13] {
        let net = folding_chain(opset);
        let kinds: Vec<LayerKind> = net.layers().iter().map(Layer::kind).collect();
        assert_eq!(
            kinds,
            [LayerKind::Input, LayerKind::Reshape, LayerKind::Output],
            "opset {opset}"
        );
        assert_eq!(reshape_target(layer(&net, "view")), [1, 48]);
        assert_eq!(out_shape(&net, "y"), [1, 48]);
    }
}

#[test]
fn slice_cast_and_arithmetic_fold() {
    // Reshape x [2, 3, 4, 5] to [H*W / 4 ... ]: shape[2:] -> prod via Mul -> Concat.
    for opset in [9, 13] {
        let slice = if opset >= 10 {
            node("Slice", &["s", "st", "en"], &["hw"], vec![])
        } else {
            node(
                "Slice",
                &["s"],
                &["hw"],
                vec![a_ints("starts", &[2]), a_ints("ends", &[i64::MAX])],
            )
        };
        let net = Model::new(opset)
            .input("x", &[2, 3, 4, 5])
            .init(i64_tensor("st", &[1], &[2]))
            .init(i64_tensor("en", &[1], &[i64::MAX]))
            .init(i64_tensor("i0", &[1], &[0]))
            .init(i64_tensor("i1", &[1], &[1]))
            .node(node("Shape", &["x"], &["s"], vec![]))
            .node(slice)
            .node(node("Gather", &["hw", "i0"], &["h"], vec![]))
            .node(node("Gather", &["hw", "i1"], &["w"], vec![]))
            .node(node("Mul", &["h", "w"], &["hxw"], vec![]))
            .node(node("Cast", &["hxw"], &["f"], vec![a_int("to", 1)]))
            .node(node("Cast", &["f"], &["i"], vec![a_int("to", 7)]))
            .node(node("Slice", &["s", "i0", "st"], &["nc"], vec![]))
            .node(node(
                "Concat",
                &["nc", "i"],
                &["shape"],
                vec![a_int("axis", -1)],
            ))
            .node(named(node("Reshape", &["x", "shape"], &["y"], vec![]), "r"))
            .output("y");
        let net = if opset < 10 {
            // Opset 9 Slice has no inputs for starts/ends: replace the second Slice.
            let mut m = net;
            m.nodes[7] = node(
                "Slice",
                &["s"],
                &["nc"],
                vec![a_ints("starts", &[0]), a_ints("ends", &[2])],
            );
            m.import().unwrap()
        } else {
            net.import().unwrap()
        };
        assert_eq!(
            reshape_target(layer(&net, "r")),
            [2, 3, 20],
            "opset {opset}"
        );
    }
}

#[test]
fn flatten_concat_transpose_squeeze() {
    let net = Model::new(13)
        .input("x", &[2, 3, 4])
        .node(named(
            node("Flatten", &["x"], &["y"], vec![a_int("axis", -1)]),
            "f",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "f").descriptor,
        LayerDescriptor::Flatten(backplane_api::FlattenDescriptor { axis: 2 })
    );
    assert_eq!(out_shape(&net, "y"), [6, 4]);

    let net = Model::new(13)
        .input("a", &[1, 2, 4])
        .input("b", &[1, 3, 4])
        .init(filled("k", &[1, 1, 4]))
        .node(named(
            node("Concat", &["a", "b", "k"], &["y"], vec![a_int("axis", -2)]),
            "cat",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "cat").descriptor,
        LayerDescriptor::Concat(backplane_api::ConcatDescriptor { axis: 1 })
    );
    assert_eq!(out_shape(&net, "y"), [1, 6, 4]);

    let net = Model::new(13)
        .input("x", &[2, 3, 4])
        .node(named(node("Transpose", &["x"], &["y"], vec![]), "t"))
        .node(named(
            node(
                "Transpose",
                &["x"],
                &["z"],
                vec![a_ints("perm", &[0, 2, 1])],
            ),
            "t2",
        ))
        .output("y")
        .output("z")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [4, 3, 2]);
    assert_eq!(out_shape(&net, "z"), [2, 4, 3]);

    // Squeeze / Unsqueeze of activations are Reshape layers (attribute before 13, input from 13).
    let net = Model::new(11)
        .input("x", &[1, 8, 1, 1])
        .node(node(
            "Squeeze",
            &["x"],
            &["s"],
            vec![a_ints("axes", &[2, 3])],
        ))
        .node(node(
            "Unsqueeze",
            &["s"],
            &["y"],
            vec![a_ints("axes", &[-1])],
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [LayerKind::Reshape, LayerKind::Reshape]
    );
    assert_eq!(out_shape(&net, "y"), [1, 8, 1]);
    let net = Model::new(13)
        .input("x", &[1, 8, 1, 1])
        .init(i64_tensor("ax", &[1], &[0]))
        .node(node("Squeeze", &["x"], &["s"], vec![]))
        .node(node("Unsqueeze", &["s", "ax"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [1, 8]);
    let e = Model::new(13)
        .input("x", &[1, 8])
        .init(i64_tensor("ax", &[1], &[1]))
        .node(node("Squeeze", &["x", "ax"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
}

// ---------------------------------------------------------------------------------------
// Pad, BatchNormalization, ReduceMean, Constant, Identity, Dropout

fn pad_desc(l: &Layer) -> &backplane_api::PadDescriptor {
    match &*l.descriptor {
        LayerDescriptor::Pad(d) => d,
        d => panic!("not pad: {d:?}"),
    }
}

#[test]
fn pad_opset_2_vs_11() {
    let p = |before, after| PadPair { before, after };
    let net = Model::new(6)
        .input("x", &[1, 2, 4, 4])
        .node(named(
            node(
                "Pad",
                &["x"],
                &["y"],
                vec![
                    a_ints("pads", &[0, 0, 1, 2, 0, 0, 3, 1]),
                    a_str("mode", "reflect"),
                ],
            ),
            "pad",
        ))
        .output("y")
        .import()
        .unwrap();
    let d = pad_desc(layer(&net, "pad"));
    assert_eq!(d.mode, PadMode::Reflect);
    assert_eq!(d.padding.as_slice(), [p(0, 0), p(0, 0), p(1, 3), p(2, 1)]);
    assert_eq!(out_shape(&net, "y"), [1, 2, 8, 7]);

    let net = Model::new(11)
        .input("x", &[1, 2, 4, 4])
        .init(i64_tensor("pads", &[8], &[0, 0, 1, 1, 0, 0, 1, 1]))
        .init(f32_tensor("v", &[], &[-1.5]))
        .node(named(
            node("Pad", &["x", "pads", "v"], &["y"], vec![]),
            "pad",
        ))
        .output("y")
        .import()
        .unwrap();
    let d = pad_desc(layer(&net, "pad"));
    assert_eq!((d.mode, d.value), (PadMode::Constant, -1.5));
    assert_eq!(out_shape(&net, "y"), [1, 2, 6, 6]);

    // Opset 18: axes select the padded dimensions; edge mode.
    let net = Model::new(18)
        .input("x", &[1, 2, 4, 4])
        .init(i64_tensor("pads", &[4], &[1, 2, 3, 4]))
        .init(i64_tensor("axes", &[2], &[-2, -1]))
        .node(named(
            node(
                "Pad",
                &["x", "pads", "", "axes"],
                &["y"],
                vec![a_str("mode", "edge")],
            ),
            "pad",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        pad_desc(layer(&net, "pad")).padding.as_slice(),
        [p(0, 0), p(0, 0), p(1, 3), p(2, 4)]
    );
    // Negative pads (cropping) are unsupported.
    let e = Model::new(11)
        .input("x", &[1, 4])
        .init(i64_tensor("pads", &[4], &[0, -1, 0, 0]))
        .node(node("Pad", &["x", "pads"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::Unsupported { .. }));
}

#[test]
fn batch_normalization_needs_constants() {
    let net = Model::new(15)
        .input("x", &[1, 3, 4, 4])
        .init(filled("s", &[3]))
        .init(filled("b", &[3]))
        .init(filled("m", &[3]))
        .init(f32_tensor("v", &[3], &[1.0, 1.0, 1.0]))
        .node(named(
            node(
                "BatchNormalization",
                &["x", "s", "b", "m", "v"],
                &["y"],
                vec![a_float("epsilon", 1e-3)],
            ),
            "bn",
        ))
        .output("y")
        .import()
        .unwrap();
    let bn = layer(&net, "bn");
    assert_eq!(
        *bn.descriptor,
        LayerDescriptor::BatchNormalization(backplane_api::BatchNormalizationDescriptor {
            epsilon: 1e-3,
            layout: backplane_api::DataLayout::Nchw,
        })
    );
    assert_eq!(bn.inputs.len(), 5);
    assert_eq!(out_shape(&net, "y"), [1, 3, 4, 4]);

    let e = Model::new(15)
        .input("x", &[1, 3, 4, 4])
        .input("m", &[3])
        .init(filled("s", &[3]))
        .init(filled("b", &[3]))
        .init(filled("v", &[3]))
        .node(node(
            "BatchNormalization",
            &["x", "s", "b", "m", "v"],
            &["y"],
            vec![],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(unsupported(e)[0].missing.contains("mean"));
}

fn mean(l: &Layer) -> (Vec<u32>, bool) {
    match &*l.descriptor {
        LayerDescriptor::Mean(d) => (d.axes.to_vec(), d.keep_dims),
        d => panic!("not mean: {d:?}"),
    }
}

#[test]
fn reduce_mean_axes_attribute_vs_input() {
    let net = Model::new(13)
        .input("x", &[2, 3, 4])
        .node(named(
            node(
                "ReduceMean",
                &["x"],
                &["y"],
                vec![a_ints("axes", &[-1, 1]), a_int("keepdims", 0)],
            ),
            "rm",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(mean(layer(&net, "rm")), (vec![1, 2], false));
    assert_eq!(out_shape(&net, "y"), [2]);

    let net = Model::new(18)
        .input("x", &[2, 3, 4])
        .init(i64_tensor("axes", &[1], &[-1]))
        .node(named(
            node("ReduceMean", &["x", "axes"], &["y"], vec![]),
            "rm",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(mean(layer(&net, "rm")), (vec![2], true));
    assert_eq!(out_shape(&net, "y"), [2, 3, 1]);

    // No axes: every axis.
    let net = Model::new(13)
        .input("x", &[2, 3, 4])
        .node(named(node("ReduceMean", &["x"], &["y"], vec![]), "rm"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(mean(layer(&net, "rm")), (vec![0, 1, 2], true));
    assert_eq!(out_shape(&net, "y"), [1, 1, 1]);

    // Repeated axes are invalid.
    let e = Model::new(13)
        .input("x", &[2, 3, 4])
        .node(node(
            "ReduceMean",
            &["x"],
            &["y"],
            vec![a_ints("axes", &[1, -2])],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
}

#[test]
fn constant_identity_dropout() {
    let net = Model::new(13)
        .input("x", &[2, 2])
        .node(named(
            node(
                "Constant",
                &[],
                &["k"],
                vec![a_tensor("value", f32_raw("", &[2], &[10.0, 20.0]))],
            ),
            "const",
        ))
        .node(node("Identity", &["x"], &["x1"], vec![]))
        .node(node("Dropout", &["x1"], &["x2", ""], vec![]))
        .node(named(node("Add", &["x2", "k"], &["y"], vec![]), "add"))
        .output("y")
        .import()
        .unwrap();
    let kinds: Vec<LayerKind> = net.layers().iter().map(Layer::kind).collect();
    assert_eq!(
        kinds,
        [
            LayerKind::Input,
            LayerKind::Constant,
            LayerKind::ElementwiseBinary,
            LayerKind::Output
        ]
    );
    let add = layer(&net, "add");
    assert_eq!(add.inputs[0], net.output_of(0));
    assert_eq!(const_input(&net, add, 1), [10.0, 20.0]);

    // value_floats / value_ints forms.
    let net = Model::new(13)
        .input("x", &[2])
        .node(node(
            "Constant",
            &[],
            &["k"],
            vec![AttributeProto {
                name: "value_floats".into(),
                floats: vec![1.0, 2.0],
                r#type: attribute_type::FLOATS,
                ..Default::default()
            }],
        ))
        .node(named(node("Mul", &["x", "k"], &["y"], vec![]), "mul"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(const_input(&net, layer(&net, "mul"), 1), [1.0, 2.0]);

    // Opset 12's training mode drops at random unless the ratio is 0.
    let dropout = |ratio: f32, training: i64| {
        Model::new(13)
            .input("x", &[2])
            .init(f32_tensor("r", &[], &[ratio]))
            .init(i64_tensor("t", &[], &[training]))
            .node(node("Dropout", &["x", "r", "t"], &["y"], vec![]))
            .output("y")
            .import()
    };
    let e = dropout(0.5, 1).unwrap_err();
    assert_eq!(
        unsupported(e)[0].missing,
        "training mode with ratio 0.5 (random dropout has no v1 layer)"
    );
    assert!(dropout(0.0, 1).is_ok());
    assert!(dropout(0.5, 0).is_ok());

    // In inference nothing is dropped: the mask is a Boolean constant of ones.
    let net = Model::new(13)
        .input("x", &[2])
        .node(node("Dropout", &["x"], &["y", "mask"], vec![]))
        .output("mask")
        .import()
        .unwrap();
    let mask = net
        .layers()
        .iter()
        .find_map(|l| match &*l.descriptor {
            LayerDescriptor::Constant(c)
                if c.info.data_type == backplane_api::DataType::Boolean =>
            {
                Some(c.data.to_vec())
            }
            _ => None,
        })
        .expect("a Boolean constant");
    assert_eq!(mask, [1, 1]);
}

// ---------------------------------------------------------------------------------------
// Names, inputs, options

#[test]
fn layer_names_are_node_names_made_unique() {
    let net = Model::new(13)
        .input("x", &[1, 4])
        .node(node("Relu", &["x"], &["a"], vec![]))
        .node(named(node("Sigmoid", &["a"], &["b"], vec![]), "same"))
        .node(named(node("Tanh", &["b"], &["c"], vec![]), "same"))
        .node(named(node("Relu", &["c"], &["y"], vec![]), "y"))
        .node(named(node("Relu", &["c"], &["z"], vec![]), "x"))
        .output("y")
        .output("z")
        .import()
        .unwrap();
    let names: Vec<&str> = net.layers().iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["x", "Relu_0", "same", "same_1", "y_1", "x_1", "y", "z"]
    );
    assert_eq!(net.inputs()[0].0, "x");
    assert_eq!(
        net.outputs().iter().map(|o| o.0).collect::<Vec<_>>(),
        ["y", "z"]
    );
}

#[test]
fn input_shapes_and_constant_inputs() {
    let model = || {
        Model::new(13)
            .input("x", &[-1, 3])
            .input("k", &[3])
            .node(named(node("Add", &["x", "k"], &["y"], vec![]), "add"))
            .output("y")
    };
    // A symbolic dimension after the batch needs a shape: the error names the input and
    // its declared dimensions.
    let e = Model::new(13)
        .input("x", &[1, -1])
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        e,
        ImportError::SymbolicInput {
            input: "x".into(),
            declared: "[1, N]".into()
        }
    );
    // A symbolic batch is 1 by default.
    let net = model().import().unwrap();
    assert_eq!(
        net.inputs()[0].1,
        &TensorInfo::new(&[1, 3], DataType::Float32)
    );
    assert_eq!(net.inputs().len(), 2);

    let mut options = ImportOptions::default();
    options.input_shapes.insert("x".into(), vec![8, 3]);
    options
        .constant_inputs
        .insert("k".into(), ConstTensor::from_f32(&[3], &[1.0, 2.0, 3.0]));
    let net = model().import_with(&options).unwrap();
    assert_eq!(net.inputs().len(), 1);
    assert_eq!(out_shape(&net, "y"), [8, 3]);
    assert_eq!(const_input(&net, layer(&net, "add"), 1), [1.0, 2.0, 3.0]);

    // A given shape must agree with the fixed dimensions.
    let mut bad = ImportOptions::default();
    bad.input_shapes.insert("x".into(), vec![8, 4]);
    let e = model().import_with(&bad).unwrap_err();
    assert!(
        matches!(e, ImportError::InvalidNode { ref op, .. } if op == "Input"),
        "{e:?}"
    );
    // Options naming no input.
    let mut bad = ImportOptions::default();
    bad.input_shapes.insert("nope".into(), vec![1]);
    let e = model().import_with(&bad).unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { ref op, .. } if op == "ImportOptions"));

    // Graph inputs that are initializers are constants.
    let net = Model::new(13)
        .input("x", &[3])
        .input("k", &[3])
        .init(f32_tensor("k", &[3], &[4.0, 5.0, 6.0]))
        .node(named(node("Add", &["x", "k"], &["y"], vec![]), "add"))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(net.inputs().len(), 1);
    assert_eq!(const_input(&net, layer(&net, "add"), 1), [4.0, 5.0, 6.0]);

    // An int64 graph input is a Signed64 input (Backend API 1.5); Cast to float is a Cast
    // layer.
    let net = Model {
        inputs: vec![value_info("ids", data_type::INT64, &[4])],
        ..Model::new(13)
    }
    .node(node("Cast", &["ids"], &["y"], vec![a_int("to", 1)]))
    .output("y")
    .import()
    .unwrap();
    assert_eq!(net.inputs()[0].1.data_type, DataType::Signed64);
    assert_eq!(
        *net.layers()[1].descriptor,
        LayerDescriptor::Cast(DataType::Float32)
    );
    // A string input is not.
    let e = Model {
        inputs: vec![value_info("s", data_type::STRING, &[4])],
        ..Model::new(13)
    }
    .node(node("Identity", &["s"], &["y"], vec![]))
    .output("y")
    .import()
    .unwrap_err();
    assert_eq!(unsupported(e)[0].op, "Input");
}

/// An integer constant used as a tensor keeps its ONNX type (Backend API 1.5): int64 is
/// Signed64, whatever its values; an int32 initializer is Signed32; an int16 one Signed16. A
/// value never wraps.
#[test]
fn integer_constants_keep_their_type() {
    let gather = |table: TensorProto| {
        Model {
            inputs: vec![value_info("ids", data_type::INT64, &[2])],
            ..Model::new(13)
        }
        .init(table)
        .node(named(
            node("Gather", &["table", "ids"], &["y"], vec![]),
            "g",
        ))
        .output("y")
        .import()
    };
    let net = gather(i64_tensor("table", &[2], &[1 << 40, -3])).unwrap();
    let g = layer(&net, "g");
    assert_eq!(
        *g.descriptor,
        LayerDescriptor::Gather(backplane_api::GatherDescriptor { axis: 0 })
    );
    assert_eq!(g.outputs[0].data_type, DataType::Signed64);
    assert_eq!(net.inputs()[0].1.data_type, DataType::Signed64);
    // The constant's bytes are the int64 values themselves.
    let table = net.layers().iter().find(|l| l.name == "table").unwrap();
    let LayerDescriptor::Constant(c) = &*table.descriptor else {
        panic!("{:?}", table.descriptor)
    };
    let want: Vec<u8> = [1i64 << 40, -3]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    assert_eq!(
        (c.info.data_type, c.data.as_slice()),
        (DataType::Signed64, want.as_slice())
    );

    let mut int32 = i64_tensor("table", &[2], &[7, -3]);
    int32.data_type = data_type::INT32;
    int32.int32_data = vec![7, -3];
    int32.int64_data.clear();
    let net = gather(int32).unwrap();
    assert_eq!(layer(&net, "g").outputs[0].data_type, DataType::Signed32);
}

// ---------------------------------------------------------------------------------------
// Adversarial inputs: errors, never panics

fn small_model() -> Model {
    Model::new(13)
        .input("x", &[1, 3, 8, 8])
        .init(filled("w", &[4, 3, 3, 3]))
        .node(node(
            "Conv",
            &["x", "w"],
            &["c"],
            vec![a_ints("pads", &[1, 1, 1, 1])],
        ))
        .node(node("Relu", &["c"], &["y"], vec![]))
        .output("y")
}

#[test]
fn empty_and_random_bytes_are_errors() {
    let options = ImportOptions::default();
    assert!(matches!(
        import_bytes(&[], &options),
        Err(ImportError::Malformed(_))
    ));
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for len in [1usize, 2, 7, 64, 1000, 4096] {
        for _ in 0..50 {
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            assert!(import_bytes(&bytes, &options).is_err());
        }
    }
    // Random mutations of a valid model.
    let good = small_model().bytes();
    for _ in 0..300 {
        let mut bytes = good.clone();
        for _ in 0..4 {
            let i = (next() as usize) % bytes.len();
            bytes[i] = next() as u8;
        }
        let _ = import_bytes(&bytes, &options);
    }
}

#[test]
fn every_truncation_of_a_valid_model_is_an_error() {
    let bytes = small_model().bytes();
    assert!(import_bytes(&bytes, &ImportOptions::default()).is_ok());
    for len in 0..bytes.len() {
        assert!(
            import_bytes(&bytes[..len], &ImportOptions::default()).is_err(),
            "prefix of {len} bytes"
        );
    }
}

#[test]
fn huge_and_negative_dims_are_errors() {
    let e = Model::new(13)
        .input("x", &[1, 1 << 40])
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        matches!(e, ImportError::InvalidNode { ref node, .. } if node == "x"),
        "{e:?}"
    );

    // A negative fixed dimension (not symbolic).
    let mut vi = input("x", &[1, 2]);
    if let Some(t) = vi.r#type.as_mut().and_then(|t| t.tensor_type.as_mut())
        && let Some(s) = t.shape.as_mut()
    {
        s.dim[1].dim_value = Some(-3);
    }
    let e = Model {
        inputs: vec![vi],
        ..Model::new(13)
    }
    .node(node("Relu", &["x"], &["y"], vec![]))
    .output("y")
    .import()
    .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");

    // -1 is how some exporters (PaddlePaddle) mark a dynamic dimension: it is symbolic.
    let mut vi = input("x", &[1, 2]);
    if let Some(t) = vi.r#type.as_mut().and_then(|t| t.tensor_type.as_mut())
        && let Some(s) = t.shape.as_mut()
    {
        s.dim[0].dim_value = Some(-1);
    }
    let net = Model {
        inputs: vec![vi],
        ..Model::new(13)
    }
    .node(node("Relu", &["x"], &["y"], vec![]))
    .output("y")
    .import()
    .unwrap();
    assert_eq!(net.inputs()[0].1.shape.as_slice(), [1, 2]);

    // Initializers: huge (no data), negative, and a product beyond every limit.
    for dims in [vec![1i64 << 40], vec![-1], vec![1 << 20, 1 << 20, 1 << 20]] {
        let e = Model::new(13)
            .input("x", &[2])
            .init(TensorProto {
                dims,
                data_type: data_type::FLOAT,
                name: "k".into(),
                ..Default::default()
            })
            .node(node("Add", &["x", "k"], &["y"], vec![]))
            .output("y")
            .import()
            .unwrap_err();
        assert!(
            matches!(e, ImportError::InvalidNode { ref op, .. } if op == "Initializer"),
            "{e:?}"
        );
    }
    // Huge values in shape arguments.
    let e = Model::new(13)
        .input("x", &[2, 3])
        .init(i64_tensor("s", &[2], &[1 << 40, -1]))
        .node(node("Reshape", &["x", "s"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
    let e = Model::new(13)
        .input("x", &[1, 3, 8, 8])
        .node(node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![
                a_ints("kernel_shape", &[2, 2]),
                a_ints("pads", &[1 << 40, 0, 0, 0]),
            ],
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
    // Extreme but valid: SAME padding of a u32::MAX window is computed without overflow.
    let net = Model::new(13)
        .input("x", &[1, 3, 8, 8])
        .node(node(
            "MaxPool",
            &["x"],
            &["y"],
            vec![
                a_ints("kernel_shape", &[i64::from(u32::MAX), 2]),
                a_ints("strides", &[i64::from(u32::MAX), 1]),
                a_str("auto_pad", "SAME_UPPER"),
            ],
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [1, 3, 1, 8]);
    // ConstantOfShape of a huge shape.
    let e = Model::new(13)
        .input("x", &[2])
        .init(i64_tensor("s", &[2], &[1 << 20, 1 << 20]))
        .node(node("ConstantOfShape", &["s"], &["k"], vec![]))
        .node(node("Add", &["x", "k"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
}

#[test]
fn undefined_inputs_and_cycles() {
    let e = Model::new(13)
        .input("x", &[2])
        .node(named(node("Add", &["x", "ghost"], &["y"], vec![]), "add"))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        e,
        ImportError::MissingInput {
            node: "add".into(),
            input: "ghost".into()
        }
    );
    // A cycle: a reads b's output, b reads a's.
    let e = Model::new(13)
        .input("x", &[2])
        .node(named(node("Add", &["x", "b"], &["a"], vec![]), "first"))
        .node(named(node("Relu", &["a"], &["b"], vec![]), "second"))
        .output("b")
        .import()
        .unwrap_err();
    assert_eq!(
        e,
        ImportError::MissingInput {
            node: "first".into(),
            input: "b".into()
        }
    );
    // An output nothing produces.
    let e = Model::new(13)
        .input("x", &[2])
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("nope")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::MissingInput { .. }), "{e:?}");
    // A value defined twice.
    let e = Model::new(13)
        .input("x", &[2])
        .node(node("Relu", &["x"], &["y"], vec![]))
        .node(node("Relu", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
    // No graph, no opset, an unknown opset.
    let mut m = small_model().proto();
    m.graph = None;
    assert!(matches!(
        super::import_model(&m, &ImportOptions::default()),
        Err(ImportError::Malformed(_))
    ));
    let mut m = small_model().proto();
    m.opset_import.clear();
    assert!(matches!(
        super::import_model(&m, &ImportOptions::default()),
        Err(ImportError::Malformed(_))
    ));
    let mut m = small_model().proto();
    m.opset_import[0].version = 99;
    assert_eq!(
        unsupported(super::import_model(&m, &ImportOptions::default()).unwrap_err())[0].op,
        "opset"
    );
}

#[test]
fn every_unsupported_node_is_listed() {
    let e = Model::new(13)
        .input("x", &[1, 4])
        .node(node("Relu", &["x"], &["a"], vec![]))
        .node(named(
            node("ImageDecoder", &["a"], &["b"], vec![]),
            "decode",
        ))
        // Downstream of an unsupported node, still checked.
        .node(named(
            node("StringNormalizer", &["b"], &["c"], vec![]),
            "strings",
        ))
        // Supported, but downstream: not reported.
        .node(node("Relu", &["c"], &["d"], vec![]))
        .node(named(node("Relu", &["x"], &["e"], vec![]), "fine"))
        .node(NodeProto {
            domain: "com.microsoft".into(),
            ..named(node("WordConvEmbedding", &["e"], &["f"], vec![]), "custom")
        })
        .node(node("Add", &["d", "f"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    let nodes = unsupported(e.clone());
    let names: Vec<(&str, &str)> = nodes
        .iter()
        .map(|n| (n.node.as_str(), n.op.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("decode", "ImageDecoder"),
            ("strings", "StringNormalizer"),
            ("custom", "WordConvEmbedding")
        ]
    );
    let text = e.to_string();
    assert!(
        text.starts_with("3 unsupported node(s): decode (ImageDecoder)"),
        "{text}"
    );
}

#[test]
fn malformed_constants_and_attributes() {
    // A Constant whose raw_data is one byte short.
    let mut t = f32_raw("", &[3], &[1.0, 2.0, 3.0]);
    t.raw_data.pop();
    let e = Model::new(13)
        .input("x", &[3])
        .node(named(
            node("Constant", &[], &["k"], vec![a_tensor("value", t)]),
            "k",
        ))
        .node(node("Add", &["x", "k"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    match e {
        ImportError::InvalidNode { node, op, reason } => {
            assert_eq!((node.as_str(), op.as_str()), ("k", "Constant"));
            assert!(reason.contains("needs 3 values"), "{reason}");
        }
        e => panic!("{e:?}"),
    }
    // An initializer with too few float_data values.
    let e = Model::new(13)
        .input("x", &[3])
        .init(f32_tensor("k", &[3], &[1.0]))
        .node(node("Add", &["x", "k"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { ref op, .. } if op == "Initializer"));
    // An attribute of the wrong type.
    let e = Model::new(13)
        .input("x", &[1, 3, 8, 8])
        .init(filled("w", &[4, 3, 3, 3]))
        .node(node(
            "Conv",
            &["x", "w"],
            &["y"],
            vec![a_float("strides", 2.0)],
        ))
        .output("y")
        .import()
        .unwrap_err();
    match e {
        ImportError::InvalidNode { reason, .. } => {
            assert!(
                reason.contains("strides must be INTS, got FLOAT"),
                "{reason}"
            )
        }
        e => panic!("{e:?}"),
    }
    // A float16 constant is a Float16 constant (Backend API 1.5): added to a float32 input it
    // is an invalid layer naming both types; a float16 one of the wrong size is malformed.
    let half = |raw: Vec<u8>| TensorProto {
        dims: vec![2],
        data_type: data_type::FLOAT16,
        raw_data: raw,
        name: "h".into(),
        ..Default::default()
    };
    let e = Model::new(13)
        .input("x", &[2])
        .init(half(vec![0; 4]))
        .node(node("Add", &["x", "h"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("inputs must share one data type, got Float32 and Float16"),
        "{e}"
    );
    let e = Model::new(13)
        .input("x", &[2])
        .init(half(vec![0; 3]))
        .node(node("Add", &["x", "h"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("FLOAT16 tensor of shape [2] needs 2 values"),
        "{e}"
    );
    // Gather out of range, Split with a silly number of outputs.
    let e = Model::new(13)
        .input("x", &[2, 3])
        .init(i64_tensor("i", &[], &[7]))
        .node(node("Shape", &["x"], &["s"], vec![]))
        .node(node("Gather", &["s", "i"], &["g"], vec![]))
        .node(node("Reshape", &["x", "g"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
    let e = Model::new(18)
        .input("x", &[2, 3])
        .node(node("Shape", &["x"], &["s"], vec![]))
        .node(node(
            "Split",
            &["s"],
            &["a"],
            vec![a_int("num_outputs", i64::MAX)],
        ))
        .output("a")
        .import()
        .unwrap_err();
    assert!(matches!(e, ImportError::InvalidNode { .. }), "{e:?}");
}

#[test]
fn import_file_reads_and_reports_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, small_model().bytes()).unwrap();
    let net = import_file(&path, &ImportOptions::default()).unwrap();
    assert_eq!(out_shape(&net, "y"), [1, 4, 8, 8]);
    let e = import_file(&dir.path().join("missing.onnx"), &ImportOptions::default()).unwrap_err();
    assert!(matches!(e, ImportError::Io { .. }));
}

#[test]
fn mobilenet_v3_style_block() {
    // Conv-BN folded 3x3 stride 2, HardSwish, depthwise 3x3, squeeze-excite with
    // HardSigmoid, projection, global pool, flatten, classifier.
    let net = Model::new(17)
        .input("image", &[-1, 3, 16, 16])
        .init(filled("c1.w", &[8, 3, 3, 3]))
        .init(filled("c1.b", &[8]))
        .init(filled("dw.w", &[8, 1, 3, 3]))
        .init(filled("dw.b", &[8]))
        .init(filled("se1.w", &[4, 8, 1, 1]))
        .init(filled("se1.b", &[4]))
        .init(filled("se2.w", &[8, 4, 1, 1]))
        .init(filled("se2.b", &[8]))
        .init(filled("fc.w", &[10, 8]))
        .init(filled("fc.b", &[10]))
        .node(node(
            "Conv",
            &["image", "c1.w", "c1.b"],
            &["c1"],
            vec![a_ints("strides", &[2, 2]), a_ints("pads", &[1, 1, 1, 1])],
        ))
        .node(node("HardSwish", &["c1"], &["h1"], vec![]))
        .node(node(
            "Conv",
            &["h1", "dw.w", "dw.b"],
            &["dw"],
            vec![a_int("group", 8), a_ints("pads", &[1, 1, 1, 1])],
        ))
        .node(node("Relu", &["dw"], &["r"], vec![]))
        .node(node("GlobalAveragePool", &["r"], &["p"], vec![]))
        .node(node("Conv", &["p", "se1.w", "se1.b"], &["s1"], vec![]))
        .node(node("Relu", &["s1"], &["s2"], vec![]))
        .node(node("Conv", &["s2", "se2.w", "se2.b"], &["s3"], vec![]))
        .node(node(
            "HardSigmoid",
            &["s3"],
            &["s4"],
            vec![a_float("alpha", 1.0 / 6.0)],
        ))
        .node(node("Mul", &["r", "s4"], &["se"], vec![]))
        .node(node("GlobalAveragePool", &["se"], &["g"], vec![]))
        .node(node("Flatten", &["g"], &["f"], vec![a_int("axis", 1)]))
        .node(node(
            "Gemm",
            &["f", "fc.w", "fc.b"],
            &["logits"],
            vec![a_int("transB", 1)],
        ))
        .output("logits")
        .import()
        .unwrap();
    assert_eq!(net.inputs()[0].1.shape.as_slice(), [1, 3, 16, 16]);
    assert_eq!(out_shape(&net, "logits"), [1, 10]);
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::Convolution2d,
            LayerKind::Activation,
            LayerKind::DepthwiseConvolution2d,
            LayerKind::Activation,
            LayerKind::Mean,
            LayerKind::Convolution2d,
            LayerKind::Activation,
            LayerKind::Convolution2d,
            LayerKind::ElementwiseBinary,
            LayerKind::ElementwiseBinary,
            LayerKind::Activation,
            LayerKind::ElementwiseBinary,
            LayerKind::Mean,
            LayerKind::Flatten,
            LayerKind::FullyConnected,
        ]
    );
    let names: Vec<&str> = net.layers().iter().map(|l| l.name.as_str()).collect();
    assert!(names.contains(&"Conv_0") && names.contains(&"HardSigmoid_8/mul"));
}

/// `LRN` becomes Backend API 1.1's `Normalization` with ONNX's defaults; only 4-D inputs.
#[test]
fn lrn_is_normalization() {
    let net = Model::new(13)
        .input("x", &[1, 6, 4, 4])
        .node(named(
            node(
                "LRN",
                &["x"],
                &["y"],
                vec![a_int("size", 5), a_float("beta", 0.5)],
            ),
            "lrn",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "lrn").descriptor,
        LayerDescriptor::Normalization(backplane_api::NormalizationDescriptor {
            size: 5,
            alpha: 1e-4,
            beta: 0.5,
            k: 1.0,
        })
    );
    assert_eq!(out_shape(&net, "y"), [1, 6, 4, 4]);
    let e = Model::new(13)
        .input("x", &[1, 6, 4])
        .node(node("LRN", &["x"], &["y"], vec![a_int("size", 3)]))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        unsupported(e)[0].missing,
        "LRN of a 3-D tensor (only 4-D NCHW)"
    );
    let e = Model::new(13)
        .input("x", &[1, 6, 4, 4])
        .node(node("LRN", &["x"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        matches!(e, ImportError::InvalidNode { ref reason, .. } if reason == "the size attribute is required"),
        "{e}"
    );
}

/// A 1-D Conv or pooling (`[N, C, L]`) is the 2-D one with a unit height, between reshapes;
/// constant weights are reshaped at import.
#[test]
fn one_d_conv_and_pool_are_2d_with_unit_height() {
    let net = Model::new(13)
        .input("x", &[1, 2, 7])
        .init(filled("w", &[3, 2, 3]))
        .node(named(
            node(
                "Conv",
                &["x", "w"],
                &["c"],
                vec![a_ints("pads", &[1, 1]), a_ints("strides", &[2])],
            ),
            "conv",
        ))
        .node(named(
            node(
                "MaxPool",
                &["c"],
                &["y"],
                vec![a_ints("kernel_shape", &[2])],
            ),
            "pool",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::Reshape,
            LayerKind::Convolution2d,
            LayerKind::Reshape,
            LayerKind::Reshape,
            LayerKind::Pooling2d,
            LayerKind::Reshape,
        ]
    );
    let d = conv_desc(layer(&net, "conv"));
    assert_eq!((d.stride_x, d.stride_y), (2, 1));
    assert_eq!((d.padding.left, d.padding.right, d.padding.top), (1, 1, 0));
    assert_eq!(
        layer(&net, "conv").outputs[0].shape.as_slice(),
        [1, 3, 1, 4]
    );
    assert_eq!(
        layer(&net, "conv/as_1d").outputs[0].shape.as_slice(),
        [1, 3, 4]
    );
    assert_eq!(pool_desc(layer(&net, "pool")).pool_width, 2);
    assert_eq!(out_shape(&net, "y"), [1, 3, 3]);
}

/// `Slice` of a graph tensor is Backend API 1.1's `Slice`, its ONNX ranges resolved on the
/// input's shape (negative indices, clamping, negative steps, unnamed axes whole).
#[test]
fn slice_of_a_tensor_is_a_slice_layer() {
    let net = Model::new(13)
        .input("x", &[4, 6, 5])
        .init(i64_tensor("starts", &[2], &[-1, 1]))
        .init(i64_tensor("ends", &[2], &[i64::MIN, 100]))
        .init(i64_tensor("axes", &[2], &[1, 0]))
        .init(i64_tensor("steps", &[2], &[-2, 2]))
        .node(named(
            node(
                "Slice",
                &["x", "starts", "ends", "axes", "steps"],
                &["y"],
                vec![],
            ),
            "s",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        *layer(&net, "s").descriptor,
        LayerDescriptor::Slice(backplane_api::SliceDescriptor {
            begin: vec![1, 5, 0].into(),
            step: vec![2, -2, 1].into(),
            size: vec![2, 3, 5].into(),
        })
    );
    assert_eq!(out_shape(&net, "y"), [2, 3, 5]);
}

/// A `Slice` that takes every index of every axis in order is its input (no layer, no copy);
/// one that reverses an axis is a `Slice` layer still.
#[test]
fn a_whole_slice_is_its_input() {
    let model = |(start, end, step): (i64, i64, i64)| {
        Model::new(13)
            .input("x", &[2, 3, 1])
            .init(i64_tensor("starts", &[3], &[0, start, 0]))
            .init(i64_tensor("ends", &[3], &[1_000_000_000, end, 1]))
            .init(i64_tensor("axes", &[3], &[0, 1, 2]))
            .init(i64_tensor("steps", &[3], &[1, step, 1]))
            .node(node(
                "Slice",
                &["x", "starts", "ends", "axes", "steps"],
                &["s"],
                vec![],
            ))
            .node(node("Relu", &["s"], &["y"], vec![]))
            .output("y")
            .import()
            .unwrap()
    };
    assert_eq!(
        compute_kinds(&model((-9, i64::MAX, 1))),
        [LayerKind::Activation]
    );
    let reversed = model((-1, i64::MIN, -1));
    assert_eq!(
        compute_kinds(&reversed),
        [LayerKind::Slice, LayerKind::Activation]
    );
    assert_eq!(out_shape(&reversed, "y"), [2, 3, 1]);
}

/// `Resize` (opset 11+) of H and W is Backend API 1.1's `Resize`; scales keep their value for
/// the coordinate transformation, sizes give out/in; changing N or C is refused.
#[test]
fn resize_scales_sizes_and_refusals() {
    let model = |scales: &[f32], attrs: Vec<AttributeProto>| {
        Model::new(13)
            .input("x", &[1, 2, 5, 4])
            .init(f32_tensor("roi", &[0], &[]))
            .init(f32_tensor("scales", &[4], scales))
            .node(named(
                node("Resize", &["x", "roi", "scales"], &["y"], attrs),
                "r",
            ))
            .output("y")
    };
    let net = model(
        &[1.0, 1.0, 1.5, 2.0],
        vec![
            a_str("mode", "nearest"),
            a_str("coordinate_transformation_mode", "asymmetric"),
            a_str("nearest_mode", "floor"),
        ],
    )
    .import()
    .unwrap();
    assert_eq!(
        *layer(&net, "r").descriptor,
        LayerDescriptor::Resize(backplane_api::ResizeDescriptor {
            method: backplane_api::ResizeMethod::Nearest,
            coordinates: backplane_api::CoordinateTransformation::Asymmetric,
            nearest: backplane_api::NearestRounding::Floor,
            height: 7,
            width: 8,
            scale_y: 1.5,
            scale_x: 2.0,
        })
    );
    assert_eq!(out_shape(&net, "y"), [1, 2, 7, 8]);
    // Forms the Resize layer lacks are expanded: scaling C (nearest: a Gather), cubic (a
    // product with each axis's interpolation matrix).
    let net = model(&[1.0, 2.0, 1.0, 1.0], vec![]).import().unwrap();
    assert_eq!(compute_kinds(&net), [LayerKind::Gather]);
    assert_eq!(out_shape(&net, "y"), [1, 4, 5, 4]);
    let net = model(&[1.0, 1.0, 2.0, 2.0], vec![a_str("mode", "cubic")])
        .import()
        .unwrap();
    assert!(
        compute_kinds(&net).contains(&LayerKind::BatchMatMul),
        "{:?}",
        compute_kinds(&net)
    );
    assert_eq!(out_shape(&net, "y"), [1, 2, 10, 8]);
    // Sizes: the scale is out / in.
    let net = Model::new(13)
        .input("x", &[1, 2, 5, 4])
        .init(i64_tensor("sizes", &[4], &[1, 2, 10, 3]))
        .node(named(
            node(
                "Resize",
                &["x", "", "", "sizes"],
                &["y"],
                vec![a_str("mode", "linear")],
            ),
            "r",
        ))
        .output("y")
        .import()
        .unwrap();
    let LayerDescriptor::Resize(d) = &*layer(&net, "r").descriptor else {
        panic!("not a Resize")
    };
    assert_eq!(
        (d.height, d.width, d.scale_y, d.scale_x),
        (10, 3, 2.0, 0.75)
    );
}

/// `ConvTranspose` is Backend API 1.1's `TransposeConvolution2d` (1-D as 2-D with a unit
/// height); output_shape and auto_pad are refused with a reason.
#[test]
fn conv_transpose_is_transpose_convolution() {
    let net = Model::new(13)
        .input("x", &[1, 4, 3, 3])
        .init(filled("w", &[4, 2, 2, 2]))
        .node(named(
            node(
                "ConvTranspose",
                &["x", "w"],
                &["y"],
                vec![
                    a_ints("strides", &[2, 2]),
                    a_ints("output_padding", &[1, 0]),
                ],
            ),
            "ct",
        ))
        .output("y")
        .import()
        .unwrap();
    let LayerDescriptor::TransposeConvolution2d(d) = &*layer(&net, "ct").descriptor else {
        panic!("not a TransposeConvolution2d")
    };
    assert_eq!(
        (d.stride_y, d.output_padding_y, d.output_padding_x),
        (2, 1, 0)
    );
    assert_eq!(out_shape(&net, "y"), [1, 2, 7, 6]);
    let net = Model::new(13)
        .input("x", &[1, 4, 3])
        .init(filled("w", &[4, 2, 3]))
        .node(named(
            node(
                "ConvTranspose",
                &["x", "w"],
                &["y"],
                vec![a_ints("pads", &[1, 1])],
            ),
            "ct1",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [1, 2, 3]);
    // output_shape gives the pads: (3 - 1) * 2 + 2 - 7 = -1 is one more output padding.
    let net = Model::new(13)
        .input("x", &[1, 4, 3, 3])
        .init(filled("w", &[4, 2, 2, 2]))
        .node(named(
            node(
                "ConvTranspose",
                &["x", "w"],
                &["y"],
                vec![a_ints("output_shape", &[7, 7]), a_ints("strides", &[2, 2])],
            ),
            "ct",
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(out_shape(&net, "y"), [1, 2, 7, 7]);
}

/// A model's metadata survives the bytes: producer, versions, descriptions, the graph's name
/// and its named strings in order, as `ModelMetadata` reads them (the Python test checks the
/// same against the onnx package on real models).
#[test]
fn metadata_is_read_from_the_bytes() {
    let mut proto = Model::new(17).proto();
    proto.producer_name = "a tool".into();
    proto.producer_version = "1.2".into();
    proto.domain = "org.example".into();
    proto.model_version = 7;
    proto.doc_string = "a model".into();
    proto.metadata_props = vec![
        super::proto::StringStringEntryProto {
            key: "character".into(),
            value: "a\nb".into(),
        },
        super::proto::StringStringEntryProto {
            key: "z".into(),
            value: String::new(),
        },
    ];
    let bytes = proto.encode_to_vec();
    let decoded = ModelProto::decode(bytes.as_slice()).unwrap();
    let m = super::ModelMetadata::of(&decoded);
    assert_eq!(m.producer_name, "a tool");
    assert_eq!(m.producer_version, "1.2");
    assert_eq!(m.domain, "org.example");
    assert_eq!(m.model_version, 7);
    assert_eq!(m.doc_string, "a model");
    assert_eq!(m.graph_name, "test");
    assert_eq!(
        m.custom,
        [
            ("character".to_owned(), "a\nb".to_owned()),
            ("z".to_owned(), String::new())
        ]
    );
    assert_eq!(m.get("character"), Some("a\nb"));
    assert_eq!(m.get("missing"), None);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &bytes).unwrap();
    assert_eq!(
        super::ModelMetadata::of(&super::read_model(file.path()).unwrap()),
        m
    );
}

// ---------------------------------------------------------------------------------------
// Quantized models (QDQ and QOperator forms)

/// An integer initializer of ONNX element type `elem` (uint8, int8 or int32) in raw bytes.
fn int_tensor(name: &str, elem: i32, dims: &[i64], values: &[i64]) -> TensorProto {
    let raw_data = match elem {
        data_type::INT32 => values
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect(),
        _ => values.iter().map(|&v| v as u8).collect(),
    };
    TensorProto {
        dims: dims.to_vec(),
        data_type: elem,
        raw_data,
        name: name.into(),
        ..Default::default()
    }
}

/// The info of the first output of the layer called `name`.
fn output_info<'a>(net: &'a Network, name: &str) -> &'a TensorInfo {
    &net.layers()
        .iter()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no layer {name}"))
        .outputs[0]
}

/// x → Q → DQ → Conv(DQ(w), DQ(b)) → Relu → Q → DQ → y, as onnxruntime's quantiser writes a
/// per-channel QDQ convolution.
fn qdq_conv(y_scale: f32) -> Model {
    let w: Vec<i64> = (0..54).map(|i| (i * 37 % 255) - 127).collect();
    let w_scales = [0.01f32, 0.02, 0.03];
    let bias: Vec<i64> = vec![100, -200, 300];
    let b_scales: Vec<f32> = w_scales.iter().map(|s| 0.02 * s).collect();
    Model::new(13)
        .input("x", &[1, 2, 4, 4])
        .init(f32_tensor("x_s", &[], &[0.02]))
        .init(int_tensor("x_z", data_type::UINT8, &[], &[128]))
        .init(int_tensor("w", data_type::INT8, &[3, 2, 3, 3], &w))
        .init(f32_tensor("w_s", &[3], &w_scales))
        .init(int_tensor("w_z", data_type::INT8, &[3], &[0, 0, 0]))
        .init(int_tensor("b", data_type::INT32, &[3], &bias))
        .init(f32_tensor("b_s", &[3], &b_scales))
        .init(int_tensor("b_z", data_type::INT32, &[3], &[0, 0, 0]))
        .init(f32_tensor("y_s", &[], &[y_scale]))
        .init(int_tensor("y_z", data_type::UINT8, &[], &[0]))
        .node(named(
            node("QuantizeLinear", &["x", "x_s", "x_z"], &["xq"], vec![]),
            "qx",
        ))
        .node(node(
            "DequantizeLinear",
            &["xq", "x_s", "x_z"],
            &["xf"],
            vec![],
        ))
        .node(node(
            "DequantizeLinear",
            &["w", "w_s", "w_z"],
            &["wf"],
            vec![a_int("axis", 0)],
        ))
        .node(node(
            "DequantizeLinear",
            &["b", "b_s", "b_z"],
            &["bf"],
            vec![a_int("axis", 0)],
        ))
        .node(named(
            node("Conv", &["xf", "wf", "bf"], &["c"], vec![]),
            "conv",
        ))
        .node(named(node("Relu", &["c"], &["r"], vec![]), "relu"))
        .node(node(
            "QuantizeLinear",
            &["r", "y_s", "y_z"],
            &["rq"],
            vec![],
        ))
        .node(node(
            "DequantizeLinear",
            &["rq", "y_s", "y_z"],
            &["y"],
            vec![],
        ))
        .output("y")
}

#[test]
fn qdq_convolution_folds_into_quantized_layers() {
    let net = qdq_conv(0.05).import().unwrap();
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::Quantize,
            LayerKind::Convolution2d,
            LayerKind::Activation,
            LayerKind::Dequantize
        ]
    );
    let q = |scale, offset| Some(backplane_api::Quantization::per_tensor(scale, offset));
    assert_eq!(output_info(&net, "qx").data_type, DataType::QAsymmU8);
    assert_eq!(
        output_info(&net, "qx").quantization.clone().into_option(),
        q(0.02, 128)
    );
    // The convolution and the ReLU take the parameters of the QuantizeLinear after the ReLU.
    for layer in ["conv", "relu"] {
        let out = output_info(&net, layer);
        assert_eq!(out.data_type, DataType::QAsymmU8, "{layer}");
        assert_eq!(
            out.quantization.clone().into_option(),
            q(0.05, 0),
            "{layer}"
        );
    }
    let conv = net.layers().iter().find(|l| l.name == "conv").unwrap();
    let w = net.tensor_info(conv.inputs[1]);
    let b = net.tensor_info(conv.inputs[2]);
    assert_eq!((w.data_type, w.is_constant), (DataType::QSymmS8, true));
    assert_eq!(w.scale_at(2), Some(0.03));
    // The weights are the initializer's stored bytes (taken as they are, not narrowed again).
    let LayerDescriptor::Constant(wc) = &*net.layers()[conv.inputs[1].layer].descriptor else {
        panic!("the weights are not a constant");
    };
    let want: Vec<u8> = (0..54).map(|i| ((i * 37 % 255) - 127) as u8).collect();
    assert_eq!(wc.data.as_slice(), want);
    assert_eq!(b.data_type, DataType::Signed32);
    assert_eq!(b.scale_at(1), Some(0.02 * 0.02));
    // Only the graph output is dequantized: no layer for the DequantizeLinear nodes inside.
    let deq: Vec<&str> = net
        .layers()
        .iter()
        .filter(|l| l.kind() == LayerKind::Dequantize)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(deq.len(), 1);
}

#[test]
fn a_float_island_between_quantized_parts_is_dequantized_and_quantized_again() {
    let net = Model::new(13)
        .input("x", &[1, 4])
        .init(f32_tensor("s", &[], &[0.1]))
        .init(int_tensor("z", data_type::INT8, &[], &[-3]))
        .node(node("QuantizeLinear", &["x", "s", "z"], &["xq"], vec![]))
        .node(node("DequantizeLinear", &["xq", "s", "z"], &["xf"], vec![]))
        .node(named(node("Exp", &["xf"], &["e"], vec![]), "exp"))
        .node(node("QuantizeLinear", &["e", "s", "z"], &["eq"], vec![]))
        .node(node("DequantizeLinear", &["eq", "s", "z"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::Quantize,
            LayerKind::Dequantize,
            LayerKind::ElementwiseUnary,
            LayerKind::Quantize,
            LayerKind::Dequantize
        ]
    );
    // An int8 zero point makes the activations QAsymmS8.
    let q = net
        .layers()
        .iter()
        .find(|l| l.kind() == LayerKind::Quantize)
        .unwrap();
    assert_eq!(q.outputs[0].data_type, DataType::QAsymmS8);
}

#[test]
fn qlinear_conv_imports_as_the_qdq_form_does() {
    let w: Vec<i64> = (0..54).map(|i| (i * 37 % 255) - 127).collect();
    let net = Model::new(13)
        .input("x", &[1, 2, 4, 4])
        .init(f32_tensor("x_s", &[], &[0.02]))
        .init(int_tensor("x_z", data_type::UINT8, &[], &[128]))
        .init(int_tensor("w", data_type::INT8, &[3, 2, 3, 3], &w))
        .init(f32_tensor("w_s", &[3], &[0.01, 0.02, 0.03]))
        .init(int_tensor("w_z", data_type::INT8, &[3], &[0, 0, 0]))
        .init(int_tensor("b", data_type::INT32, &[3], &[100, -200, 300]))
        .init(f32_tensor("y_s", &[], &[0.05]))
        .init(int_tensor("y_z", data_type::UINT8, &[], &[10]))
        .node(node(
            "QuantizeLinear",
            &["x", "x_s", "x_z"],
            &["xq"],
            vec![],
        ))
        .node(named(
            node(
                "QLinearConv",
                &["xq", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z", "b"],
                &["yq"],
                vec![a_ints("pads", &[1, 1, 1, 1])],
            ),
            "qconv",
        ))
        .node(node(
            "DequantizeLinear",
            &["yq", "y_s", "y_z"],
            &["y"],
            vec![],
        ))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::Quantize,
            LayerKind::Convolution2d,
            LayerKind::Dequantize
        ]
    );
    let conv = net
        .layers()
        .iter()
        .find(|l| l.kind() == LayerKind::Convolution2d)
        .unwrap();
    assert_eq!(conv.outputs[0].shape.as_slice(), [1, 3, 4, 4]);
    assert_eq!(
        conv.outputs[0].quantization.clone().into_option(),
        Some(backplane_api::Quantization::per_tensor(0.05, 10))
    );
    let b = net.tensor_info(conv.inputs[2]);
    assert_eq!(
        (b.data_type, b.scale_at(2)),
        (DataType::Signed32, Some(0.02 * 0.03))
    );
    for l in net.layers() {
        assert!(!l.name.contains('\0'), "{:?}", l.name);
    }
}

#[test]
fn dequantizing_with_other_parameters_than_quantized_is_refused() {
    let err = Model::new(13)
        .input("x", &[4])
        .init(f32_tensor("s", &[], &[0.1]))
        .init(f32_tensor("s2", &[], &[0.2]))
        .init(int_tensor("z", data_type::UINT8, &[], &[0]))
        .node(node("QuantizeLinear", &["x", "s", "z"], &["xq"], vec![]))
        .node(named(
            node("DequantizeLinear", &["xq", "s2", "z"], &["y"], vec![]),
            "dq",
        ))
        .output("y")
        .import()
        .unwrap_err();
    assert_eq!(
        err,
        ImportError::Unsupported {
            nodes: vec![UnsupportedNode {
                node: "dq".into(),
                op: "DequantizeLinear".into(),
                missing: "DequantizeLinear of xq with parameters other than those it was \
                          quantized with ([4] QAsymmU8)"
                    .into(),
            }]
        }
    );
}

#[test]
fn microsoft_operators_are_read_and_other_domains_refused() {
    let mut add = node(
        "QLinearAdd",
        &["aq", "s", "z", "aq", "s", "z", "s2", "z"],
        &["cq"],
        vec![],
    );
    add.domain = "com.microsoft".into();
    let net = Model::new(13)
        .input("a", &[2, 3])
        .init(f32_tensor("s", &[], &[0.1]))
        .init(f32_tensor("s2", &[], &[0.2]))
        .init(int_tensor("z", data_type::UINT8, &[], &[128]))
        .node(node("QuantizeLinear", &["a", "s", "z"], &["aq"], vec![]))
        .node(named(add, "qadd"))
        .node(node("DequantizeLinear", &["cq", "s2", "z"], &["y"], vec![]))
        .output("y")
        .import()
        .unwrap();
    assert_eq!(
        compute_kinds(&net),
        [
            LayerKind::Quantize,
            LayerKind::ElementwiseBinary,
            LayerKind::Dequantize
        ]
    );
    assert_eq!(
        output_info(&net, "qadd").quantization.clone().into_option(),
        Some(backplane_api::Quantization::per_tensor(0.2, 128))
    );
    let mut other = node("QLinearAdd", &["a", "a"], &["y"], vec![]);
    other.domain = "com.example".into();
    let err = Model::new(13)
        .input("a", &[2])
        .node(named(other, "odd"))
        .output("y")
        .import()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("odd (QLinearAdd): operators of domain \"com.example\" are not supported"),
        "{err}"
    );
}

/// onnxruntime's dynamic quantization pattern (`quantize_dynamic`): DynamicQuantizeLinear,
/// MatMulInteger, Cast, Mul of the scales, Mul: one FullyConnected with a Float32 input and
/// quantized constant weights (Backend API 1.2's dynamic quantization); with any other
/// reader of the pattern's parts, the parts are computed by their definitions.
#[test]
fn dynamic_quantization_is_one_dynamically_quantized_layer() {
    let w: Vec<i64> = (0..12).map(|i| i * 20 - 120).collect();
    let model = |extra: Option<NodeProto>| {
        let mut m = Model::new(13)
            .input("x", &[2, 4])
            .init(int_tensor("w", data_type::INT8, &[4, 3], &w))
            .init(int_tensor("w_z", data_type::INT8, &[], &[0]))
            .init(f32_tensor("w_s", &[], &[0.05]))
            .node(node(
                "DynamicQuantizeLinear",
                &["x"],
                &["xq", "xs", "xz"],
                vec![],
            ))
            .node(named(
                node("MatMulInteger", &["xq", "w", "xz", "w_z"], &["acc"], vec![]),
                "mmi",
            ))
            .node(node("Cast", &["acc"], &["accf"], vec![a_int("to", 1)]))
            .node(node("Mul", &["xs", "w_s"], &["s"], vec![]))
            .node(named(node("Mul", &["accf", "s"], &["y"], vec![]), "scale"))
            .output("y");
        if let Some(n) = extra {
            m = m.node(n).output("z");
        }
        m
    };
    let net = model(None).import().unwrap();
    assert_eq!(compute_kinds(&net), [LayerKind::FullyConnected]);
    let fc = net
        .layers()
        .iter()
        .find(|l| l.kind() == LayerKind::FullyConnected)
        .unwrap();
    assert_eq!(fc.name, "scale");
    let (x, w) = (net.tensor_info(fc.inputs[0]), net.tensor_info(fc.inputs[1]));
    assert_eq!(x.data_type, DataType::Float32);
    // Per tensor, int8 with zero point 0 is QAsymmS8 (QSymmS8 is per-axis weights).
    assert_eq!(
        (w.data_type, w.scale_at(0)),
        (DataType::QAsymmS8, Some(0.05))
    );
    assert_eq!(fc.outputs[0].data_type, DataType::Float32);

    // Another reader of the scale: the pattern does not apply, and the
    // DynamicQuantizeLinear is computed by its definition in floats (a Reduce of x for its
    // range), the MatMulInteger as an exact product in doubles.
    let stray = named(node("Relu", &["xs"], &["z"], vec![]), "stray");
    let net = model(Some(stray)).import().unwrap();
    let kinds = compute_kinds(&net);
    assert!(kinds.contains(&LayerKind::Reduce), "{kinds:?}");
    assert!(kinds.contains(&LayerKind::BatchMatMul), "{kinds:?}");
    assert!(!kinds.contains(&LayerKind::FullyConnected), "{kinds:?}");
}

/// A node that reads one dequantized value twice (x·x) leaves that value as it found it: a
/// later reader still gets the float value (here a graph output, Float32).
#[test]
fn a_value_read_twice_by_a_quantized_node_stays_dequantized() {
    let net = Model::new(13)
        .input("x", &[2, 3])
        .init(f32_tensor("s", &[], &[0.1]))
        .init(f32_tensor("s2", &[], &[0.5]))
        .init(int_tensor("z", data_type::UINT8, &[], &[128]))
        .node(node("QuantizeLinear", &["x", "s", "z"], &["xq"], vec![]))
        .node(node("DequantizeLinear", &["xq", "s", "z"], &["xf"], vec![]))
        .node(named(node("Mul", &["xf", "xf"], &["sq"], vec![]), "square"))
        .node(node("QuantizeLinear", &["sq", "s2", "z"], &["sqq"], vec![]))
        .node(node(
            "DequantizeLinear",
            &["sqq", "s2", "z"],
            &["y"],
            vec![],
        ))
        .output("y")
        .output("xf")
        .import()
        .unwrap();
    assert_eq!(
        output_info(&net, "square")
            .quantization
            .clone()
            .into_option(),
        Some(backplane_api::Quantization::per_tensor(0.5, 128))
    );
    let outputs = net.outputs();
    assert_eq!(outputs.len(), 2);
    for (name, info) in outputs {
        assert_eq!(info.data_type, DataType::Float32, "{name}");
    }
}

// ---------------------------------------------------------------------------------------
// Operators imported as graphs of simpler ones (onnx/import/expand/)

/// An expansion's layers are named after its node (`<node>/<k>_<op>`), so that `--explain`
/// and errors point at the model's node; a 3-D convolution runs as 2-D ones.
#[test]
fn expansions_name_their_layers_after_the_node() {
    let net = Model::new(13)
        .input("x", &[1, 2, 4, 5, 6])
        .init(f32_tensor("w", &[3, 2, 2, 2, 2], &[0.5; 48]))
        .node(named(node("Conv", &["x", "w"], &["y"], vec![]), "conv3d"))
        .output("y")
        .import()
        .unwrap();
    let convs: Vec<&str> = net
        .layers()
        .iter()
        .filter(|l| l.kind() == LayerKind::Convolution2d)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(convs.len(), 2, "one 2-D convolution per kernel depth");
    assert!(convs.iter().all(|n| n.starts_with("conv3d/")), "{convs:?}");
    assert_eq!(out_shape(&net, "y"), [1, 3, 3, 4, 5]);
}

/// Sizes a model declares never drive an expansion's constants past their bound: a huge
/// OneHot depth or Resize is refused at import, naming what, before anything is allocated.
#[test]
fn expansion_constants_are_bounded() {
    let e = Model::new(13)
        .input("i", &[2])
        .init(i64_tensor("d", &[], &[1_000_000_000_000]))
        .init(f32_tensor("v", &[2], &[0.0, 1.0]))
        .node(named(
            node("OneHot", &["i", "d", "v"], &["y"], vec![]),
            "hot",
        ))
        .output("y")
        .import()
        .unwrap_err();
    let nodes = unsupported(e);
    assert_eq!(nodes[0].node, "hot");
    assert!(
        nodes[0]
            .missing
            .starts_with("OneHot's positions of 1000000000000 elements"),
        "{}",
        nodes[0].missing
    );
    let e = Model::new(19)
        .input("x", &[1, 1, 4, 4])
        .init(f32_tensor("roi", &[0], &[]))
        .init(f32_tensor("s", &[4], &[1.0, 1.0, 10_000_000.0, 1.0]))
        .node(named(
            node(
                "Resize",
                &["x", "roi", "s"],
                &["y"],
                vec![a_str("mode", "cubic")],
            ),
            "big",
        ))
        .output("y")
        .import()
        .unwrap_err();
    let nodes = unsupported(e);
    assert!(
        nodes[0]
            .missing
            .starts_with("a Resize interpolation matrix of 160000000 elements"),
        "{}",
        nodes[0].missing
    );
}
