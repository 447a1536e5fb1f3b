use backplane_api::{
    ActivationFunction, BatchNormalizationDescriptor, Convolution2dDescriptor,
    FullyConnectedDescriptor, OutputRounding, Padding2d, PoolingType, ROption, RSlice,
    SubgraphTensor, TensorInfo, TransposeDescriptor, shapes,
};

use super::*;
use crate::workloads::test_support::f32t;

/// Bytes for every constant of the tests (fusion looks at presence, not values).
static ZEROS: [u8; 16384] = [0; 16384];

/// Builds a subgraph by hand; tensor ids are allocated in order.
struct Builder {
    view: Option<SubgraphView<'static>>,
    next: u32,
}

impl Builder {
    fn new() -> Self {
        Self {
            view: Some(SubgraphView {
                layers: Default::default(),
                tensors: Default::default(),
                inputs: Default::default(),
                outputs: Default::default(),
            }),
            next: 0,
        }
    }

    fn v(&mut self) -> &mut SubgraphView<'static> {
        self.view.as_mut().expect("built once")
    }

    fn tensor(&mut self, info: TensorInfo, constant: bool) -> TensorId {
        let id = self.next;
        self.next += 1;
        let bytes = info.num_bytes().unwrap();
        let value = if constant {
            ROption::RSome(RSlice::from_slice(&ZEROS[..bytes]))
        } else {
            ROption::RNone
        };
        self.v().tensors.push(SubgraphTensor { id, info, value });
        id
    }

    /// A tensor produced outside the subgraph.
    fn input(&mut self, shape: &[u32]) -> TensorId {
        let t = self.tensor(f32t(shape), false);
        self.v().inputs.push(t);
        t
    }

    /// A constant produced outside the subgraph.
    fn constant(&mut self, shape: &[u32]) -> TensorId {
        let t = self.tensor(f32t(shape).constant(), true);
        self.v().inputs.push(t);
        t
    }

    /// A layer of the subgraph; returns its output tensor.
    fn layer(&mut self, name: &str, descriptor: LayerDescriptor, inputs: &[TensorId]) -> TensorId {
        let infos: Vec<TensorInfo> = inputs
            .iter()
            .map(|&t| {
                self.v()
                    .tensors
                    .iter()
                    .find(|x| x.id == t)
                    .unwrap()
                    .info
                    .clone()
            })
            .collect();
        let shape = shapes::output_shapes(&descriptor, &infos)
            .unwrap()
            .swap_remove(0);
        let out = self.tensor(f32t(&shape), false);
        let id = out + 1000;
        self.v().layers.push(SubgraphLayer {
            id,
            name: name.into(),
            descriptor,
            inputs: inputs.iter().copied().collect(),
            outputs: vec![out].into(),
        });
        out
    }

    /// A layer whose output is `out` (a quantised one, say); returns its output tensor.
    fn layer_with(
        &mut self,
        name: &str,
        descriptor: LayerDescriptor,
        inputs: &[TensorId],
        out: TensorInfo,
    ) -> TensorId {
        let t = self.tensor(out, false);
        self.v().layers.push(SubgraphLayer {
            id: t + 1000,
            name: name.into(),
            descriptor,
            inputs: inputs.iter().copied().collect(),
            outputs: vec![t].into(),
        });
        t
    }

    /// Marks `t` as read outside the subgraph.
    fn output(&mut self, t: TensorId) {
        self.v().outputs.push(t);
    }

    fn optimize(&mut self) -> (SubgraphView<'static>, OptimizationViews) {
        let view = self.view.take().unwrap();
        let views = optimize(&view);
        (view, views)
    }
}

/// The id of the layer producing tensor `t`.
fn layer_of(t: TensorId) -> LayerId {
    t + 1000
}

fn conv(bias: bool) -> LayerDescriptor {
    LayerDescriptor::Convolution2d(Convolution2dDescriptor {
        padding: Padding2d {
            left: 1,
            right: 1,
            top: 1,
            bottom: 1,
        },
        bias_enabled: bias,
        ..Default::default()
    })
}

fn act(function: ActivationFunction) -> LayerDescriptor {
    let a = if function == ActivationFunction::BoundedReLU {
        6.0
    } else {
        0.0
    };
    LayerDescriptor::Activation(ActivationDescriptor {
        function,
        a,
        b: 0.0,
    })
}

fn max_pool() -> LayerDescriptor {
    LayerDescriptor::Pooling2d(Pooling2dDescriptor {
        pool_type: PoolingType::Max,
        padding: Padding2d::default(),
        pool_width: 2,
        pool_height: 2,
        stride_x: 2,
        stride_y: 2,
        rounding: OutputRounding::Floor,
        count_include_pad: false,
        layout: DataLayout::Nchw,
    })
}

const ADD: LayerDescriptor = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);

/// A conv head: x [1,3,8,8] and constant weights [4,3,3,3] (and bias [4]).
fn conv_head(b: &mut Builder, bias: bool) -> TensorId {
    let x = b.input(&[1, 3, 8, 8]);
    let w = b.constant(&[4, 3, 3, 3]);
    let mut ins = vec![x, w];
    if bias {
        ins.push(b.constant(&[4]));
    }
    b.layer("conv", conv(bias), &ins)
}

/// The one substitution: its replaced layers, name, operation and input count.
fn only_substitution(views: &OptimizationViews) -> (Vec<LayerId>, String, String, usize) {
    assert_eq!(views.substitutions.len(), 1, "{views:?}");
    let s = &views.substitutions[0];
    let LayerDescriptor::PreCompiled(p) = &s.replacement.descriptor else {
        panic!("not PreCompiled")
    };
    (
        s.replaced.to_vec(),
        s.replacement.name.to_string(),
        p.operation.to_string(),
        s.replacement.inputs.len(),
    )
}

const MUL: LayerDescriptor = LayerDescriptor::ElementwiseBinary(BinaryOperation::Mul);

/// PP-OCRv4's blocks: Conv→Mul→Add (one-element constants, either operand order)→
/// HardSwish→Mul→Add, one substitution; a per-channel Mul after the activation is no
/// affine, so the chain ends before it.
#[test]
fn conv_scale_bias_activation_affine() {
    let mut b = Builder::new();
    let c = conv_head(&mut b, true);
    let (s1, t1, s2, t2) = (
        b.constant(&[1]),
        b.constant(&[1]),
        b.constant(&[1]),
        b.constant(&[]),
    );
    let m1 = b.layer("mul1", MUL, &[s1, c]);
    let a1 = b.layer("add1", ADD, &[m1, t1]);
    let h = b.layer("hs", act(ActivationFunction::HardSwish), &[a1]);
    let m2 = b.layer("mul2", MUL, &[h, s2]);
    let a2 = b.layer("add2", ADD, &[t2, m2]);
    b.output(a2);
    let (_, views) = b.optimize();
    assert_eq!(
        only_substitution(&views),
        (
            [c, m1, a1, h, m2, a2].map(layer_of).to_vec(),
            "conv+scale+bias+hardswish+affine".to_owned(),
            "Conv2dScaleBiasHardSwishAffine".to_owned(),
            7
        )
    );

    let mut b = Builder::new();
    let c = conv_head(&mut b, false);
    let s1 = b.constant(&[1, 4, 1, 1]);
    let s2 = b.constant(&[1, 4, 1, 1]);
    let m1 = b.layer("mul1", MUL, &[c, s1]);
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[m1]);
    let m2 = b.layer("mul2", MUL, &[r, s2]);
    b.output(m2);
    let (_, views) = b.optimize();
    assert_eq!(only_substitution(&views).1, "conv+scale+relu");
}

/// A residual Add (ResNet's Conv→BatchNorm→Add→ReLU): the other operand becomes an input
/// of the fused layer. An Add of a tensor that broadcasts (another shape) or of a constant
/// of the whole shape ends the chain.
#[test]
fn conv_residual_activation() {
    let mut b = Builder::new();
    let skip = b.input(&[1, 4, 8, 8]);
    let c = conv_head(&mut b, true);
    let a = b.layer("add", ADD, &[skip, c]);
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[a]);
    b.output(r);
    let (_, views) = b.optimize();
    let (replaced, name, operation, inputs) = only_substitution(&views);
    assert_eq!(
        (replaced, name.as_str(), operation.as_str(), inputs),
        (
            [c, a, r].map(layer_of).to_vec(),
            "conv+add+relu",
            "Conv2dBiasResidualReLU",
            4
        )
    );
    // Data input, weights and head bias (made after `skip`, in this order), then the
    // residual.
    assert_eq!(
        views.substitutions[0].replacement.inputs.as_slice(),
        [skip + 1, skip + 2, skip + 3, skip]
    );

    // Two chains meeting at one Add: the first takes it, the second stops before it and
    // keeps its own bias.
    let mut b = Builder::new();
    let c1 = conv_head(&mut b, true);
    let c2 = conv_head(&mut b, false);
    let bias = b.constant(&[1, 4, 1, 1]);
    let a2 = b.layer("bias2", ADD, &[c2, bias]);
    let sum = b.layer("sum", ADD, &[c1, a2]);
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[sum]);
    b.output(r);
    let (_, views) = b.optimize();
    let found: Vec<(Vec<LayerId>, String)> = views
        .substitutions
        .iter()
        .map(|s| (s.replaced.to_vec(), s.replacement.name.to_string()))
        .collect();
    assert_eq!(
        found,
        [
            (
                [c1, sum, r].map(layer_of).to_vec(),
                "conv+add+relu".to_owned()
            ),
            ([c2, a2].map(layer_of).to_vec(), "conv+bias".to_owned()),
        ]
    );

    // `x + conv(x)`: the residual would be the head's own input a second time, which the
    // host refuses; the chain stops before the Add (a chain of one: no fusion).
    let mut b = Builder::new();
    let x = b.input(&[1, 4, 8, 8]);
    let w = b.constant(&[4, 4, 3, 3]);
    let c = b.layer("conv", conv(false), &[x, w]);
    let a = b.layer("add", ADD, &[x, c]);
    b.output(a);
    let (_, views) = b.optimize();
    assert!(views.substitutions.is_empty(), "{views:?}");

    for (shape, constant) in [(&[1, 4, 1, 8][..], false), (&[1, 4, 8, 8], true)] {
        let mut b = Builder::new();
        let other = if constant {
            b.constant(shape)
        } else {
            b.input(shape)
        };
        let c = conv_head(&mut b, true);
        let a = b.layer("add", ADD, &[c, other]);
        let r = b.layer("relu", act(ActivationFunction::ReLU), &[a]);
        b.output(r);
        let (_, views) = b.optimize();
        assert!(views.substitutions.is_empty(), "{shape:?} {constant}");
    }
}

#[test]
fn conv_bias_activation_pool() {
    let mut b = Builder::new();
    let c = conv_head(&mut b, false);
    let bias = b.constant(&[1, 4, 1, 1]);
    let a = b.layer("add", ADD, &[c, bias]);
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[a]);
    let p = b.layer("pool", max_pool(), &[r]);
    b.output(p);
    let (view, views) = b.optimize();
    let (replaced, name, op, inputs) = only_substitution(&views);
    assert_eq!(replaced, [c, a, r, p].map(layer_of));
    assert_eq!(name, "conv+bias+relu+pool");
    assert_eq!(op, "Conv2dBiasReLUMaxPool");
    assert_eq!(inputs, 3);
    assert_eq!(views.substitutions[0].replacement.outputs.as_slice(), [p]);
    assert!(views.untouched.is_empty() && views.failed.is_empty());
    // The payload round-trips to what the workload will run.
    let LayerDescriptor::PreCompiled(pc) = &views.substitutions[0].replacement.descriptor else {
        unreachable!()
    };
    let fused = FusedOp::decode(&pc.payload).unwrap();
    assert_eq!((fused.weights, fused.bias), (1, Some(2)));
    drop(view);
}

#[test]
fn each_shorter_pattern() {
    // Conv→Add→ReLU6, the Add with the bias first and as [C, 1, 1].
    let mut b = Builder::new();
    let c = conv_head(&mut b, true);
    let bias = b.constant(&[4, 1, 1]);
    let a = b.layer("add", ADD, &[bias, c]);
    let r = b.layer("relu6", act(ActivationFunction::BoundedReLU), &[a]);
    b.output(r);
    let (_, views) = b.optimize();
    let (replaced, name, op, inputs) = only_substitution(&views);
    assert_eq!(
        (replaced, name.as_str(), op.as_str(), inputs),
        (
            [c, a, r].map(layer_of).to_vec(),
            "conv+bias+boundedrelu",
            "Conv2dBiasBoundedReLU",
            4
        )
    );

    // Conv→Add→Pool.
    let mut b = Builder::new();
    let c = conv_head(&mut b, false);
    let bias = b.constant(&[1, 4, 1, 1]);
    let a = b.layer("add", ADD, &[c, bias]);
    let p = b.layer("pool", max_pool(), &[a]);
    b.output(p);
    let (_, views) = b.optimize();
    assert_eq!(only_substitution(&views).1, "conv+bias+pool");

    // Conv→Add.
    let mut b = Builder::new();
    let c = conv_head(&mut b, false);
    let bias = b.constant(&[4, 1, 1]);
    let a = b.layer("add", ADD, &[c, bias]);
    b.output(a);
    let (_, views) = b.optimize();
    assert_eq!(only_substitution(&views).0, [c, a].map(layer_of));

    // Depthwise→HardSwish.
    let mut b = Builder::new();
    let x = b.input(&[1, 3, 8, 8]);
    let w = b.constant(&[3, 1, 3, 3]);
    let bias = b.constant(&[3]);
    let d = b.layer(
        "dw",
        LayerDescriptor::DepthwiseConvolution2d(Convolution2dDescriptor {
            bias_enabled: true,
            ..Default::default()
        }),
        &[x, w, bias],
    );
    let h = b.layer("hs", act(ActivationFunction::HardSwish), &[d]);
    b.output(h);
    let (_, views) = b.optimize();
    assert_eq!(only_substitution(&views).2, "DepthwiseConv2dBiasHardSwish");
}

#[test]
fn fully_connected_patterns() {
    for with_activation in [false, true] {
        let mut b = Builder::new();
        let x = b.input(&[2, 8]);
        let w = b.constant(&[8, 5]);
        let f = b.layer(
            "fc",
            LayerDescriptor::FullyConnected(FullyConnectedDescriptor::default()),
            &[x, w],
        );
        let bias = b.constant(&[1, 5]);
        let mut last = b.layer("add", ADD, &[f, bias]);
        if with_activation {
            last = b.layer("sig", act(ActivationFunction::Sigmoid), &[last]);
        }
        b.output(last);
        let (_, views) = b.optimize();
        let (replaced, name, _, _) = only_substitution(&views);
        let expected = if with_activation {
            "fc+bias+sigmoid"
        } else {
            "fc+bias"
        };
        assert_eq!(name, expected);
        assert_eq!(replaced.len(), 2 + usize::from(with_activation));
    }
    // A [N, M] operand is not a bias: the Add stays, and so does the FC.
    let mut b = Builder::new();
    let x = b.input(&[2, 8]);
    let w = b.constant(&[8, 5]);
    let f = b.layer(
        "fc",
        LayerDescriptor::FullyConnected(FullyConnectedDescriptor::default()),
        &[x, w],
    );
    let full = b.constant(&[2, 5]);
    let a = b.layer("add", ADD, &[f, full]);
    b.output(a);
    let (_, views) = b.optimize();
    assert!(views.substitutions.is_empty());
    assert_eq!(views.untouched.len(), 2);
}

/// The transformer's layers: MatMul→Add→Gelu (the feed-forward layer, the bias on
/// either side of the Add), MatMul→Add (a projection), FC→Gelu; the attention's products
/// (no constant operand) stay untouched, and so does an Add that is no bias.
#[test]
fn batch_matmul_patterns() {
    let bmm = |transpose_b| {
        LayerDescriptor::BatchMatMul(backplane_api::BatchMatMulDescriptor {
            transpose_a: false,
            transpose_b,
        })
    };
    let gelu = LayerDescriptor::Activation(ActivationDescriptor {
        function: ActivationFunction::Gelu,
        a: 0.0,
        b: 0.0,
    });
    for (bias_first, transpose_b) in [(false, false), (true, true)] {
        let mut b = Builder::new();
        let x = b.input(&[1, 16, 32]);
        let w = b.constant(if transpose_b { &[64, 32] } else { &[32, 64] });
        let mm = b.layer("ffn", bmm(transpose_b), &[x, w]);
        let bias = b.constant(&[64]);
        let add_inputs = if bias_first { [bias, mm] } else { [mm, bias] };
        let a = b.layer("add", ADD, &add_inputs);
        let g = b.layer("gelu", gelu.clone(), &[a]);
        b.output(g);
        let (_, views) = b.optimize();
        let (replaced, name, op, inputs) = only_substitution(&views);
        assert_eq!(
            (replaced, name.as_str(), op.as_str(), inputs),
            (
                [mm, a, g].map(layer_of).to_vec(),
                "ffn+bias+gelu",
                "BatchMatMulBiasGelu",
                3
            )
        );
    }
    // A projection with a [1, 1, C] bias.
    let mut b = Builder::new();
    let x = b.input(&[2, 16, 32]);
    let w = b.constant(&[32, 48]);
    let mm = b.layer("q", bmm(false), &[x, w]);
    let bias = b.constant(&[1, 1, 48]);
    let a = b.layer("add", ADD, &[mm, bias]);
    b.output(a);
    let (_, views) = b.optimize();
    assert_eq!(only_substitution(&views).1, "q+bias");
    // FullyConnected→Gelu.
    let mut b = Builder::new();
    let x = b.input(&[2, 8]);
    let w = b.constant(&[8, 5]);
    let f = b.layer(
        "fc",
        LayerDescriptor::FullyConnected(FullyConnectedDescriptor::default()),
        &[x, w],
    );
    let g = b.layer("gelu", gelu.clone(), &[f]);
    b.output(g);
    let (_, views) = b.optimize();
    assert_eq!(only_substitution(&views).2, "FullyConnectedGelu");
    // Attention: Q · K^T of two computed tensors, then an Add of a computed mask; a
    // per-row [16, 1] constant is no bias either.
    let mut b = Builder::new();
    let q = b.input(&[1, 4, 16, 8]);
    let k = b.input(&[1, 4, 16, 8]);
    let scores = b.layer("scores", bmm(true), &[q, k]);
    let mask = b.input(&[1, 1, 1, 16]);
    let masked = b.layer("mask", ADD, &[scores, mask]);
    b.output(masked);
    let x = b.input(&[16, 32]);
    let w = b.constant(&[32, 64]);
    let mm = b.layer("mm", bmm(false), &[x, w]);
    let rows = b.constant(&[16, 1]);
    let a = b.layer("rows", ADD, &[mm, rows]);
    b.output(a);
    let (view, views) = b.optimize();
    assert!(views.substitutions.is_empty(), "{views:?}");
    assert_eq!(views.untouched.len(), view.layers.len());
}

#[test]
fn conv_batch_norm_relu() {
    let mut b = Builder::new();
    let c = conv_head(&mut b, false);
    let params: Vec<TensorId> = (0..4).map(|_| b.constant(&[4])).collect();
    let bn = b.layer(
        "bn",
        LayerDescriptor::BatchNormalization(BatchNormalizationDescriptor {
            epsilon: 1e-5,
            layout: DataLayout::Nchw,
        }),
        &[c, params[0], params[1], params[2], params[3]],
    );
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[bn]);
    b.output(r);
    let (_, views) = b.optimize();
    let (replaced, name, op, inputs) = only_substitution(&views);
    assert_eq!(replaced, [c, bn, r].map(layer_of));
    assert_eq!(
        (name.as_str(), op.as_str(), inputs),
        ("conv+bn+relu", "Conv2dBatchNormReLU", 6)
    );
}

/// Partial matches: an Add of a non-constant that broadcasts (not a residual), or of a
/// constant that is not a per-channel bias (`[8]` broadcasts along the width of
/// `[1, 4, 8, 8]`), ends the chain before it starts; the layers stay untouched.
#[test]
fn partial_matches_are_untouched() {
    for other_shape in [
        None,
        Some(&[8][..]),
        Some(&[1, 1, 8, 1][..]),
        Some(&[1, 4, 8, 8][..]),
    ] {
        let mut b = Builder::new();
        let c = conv_head(&mut b, false);
        let other = match other_shape {
            None => b.input(&[1, 1, 8, 8]),
            Some(s) => b.constant(s),
        };
        let a = b.layer("add", ADD, &[c, other]);
        b.output(a);
        let (view, views) = b.optimize();
        assert!(views.substitutions.is_empty(), "{other_shape:?}");
        assert_eq!(views.untouched.len(), view.layers.len());
    }
    // Non-constant weights: nothing to fold.
    let mut b = Builder::new();
    let x = b.input(&[1, 3, 8, 8]);
    let w = b.input(&[4, 3, 3, 3]);
    let c = b.layer("conv", conv(false), &[x, w]);
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[c]);
    b.output(r);
    assert!(b.optimize().1.substitutions.is_empty());
}

/// An intermediate tensor read twice, or read outside the subgraph, stops the chain.
#[test]
fn multi_consumer_tensors_are_not_fused() {
    let mut b = Builder::new();
    let c = conv_head(&mut b, true);
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[c]);
    let s = b.layer("sig", act(ActivationFunction::Sigmoid), &[c]);
    b.output(r);
    b.output(s);
    let (_, views) = b.optimize();
    assert!(views.substitutions.is_empty());
    assert_eq!(views.untouched.len(), 3);

    // Conv→ReLU→Pool where the ReLU's output is also a subgraph output: only Conv→ReLU.
    let mut b = Builder::new();
    let c = conv_head(&mut b, true);
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[c]);
    let p = b.layer("pool", max_pool(), &[r]);
    b.output(r);
    b.output(p);
    let (_, views) = b.optimize();
    let (replaced, name, _, _) = only_substitution(&views);
    assert_eq!(
        (replaced, name.as_str()),
        ([c, r].map(layer_of).to_vec(), "conv+relu")
    );
    assert_eq!(views.untouched.as_slice(), [layer_of(p)]);
}

/// Layers CpuFast does not run are failed; the rest untouched.
#[test]
fn unsupported_layers_fail() {
    let mut b = Builder::new();
    let x = b.input(&[1, 4]);
    let s = b.layer(
        "transpose",
        LayerDescriptor::Transpose(TransposeDescriptor {
            permutation: vec![1, 0].into(),
        }),
        &[x],
    );
    let r = b.layer("relu", act(ActivationFunction::ReLU), &[s]);
    b.output(r);
    let (_, views) = b.optimize();
    assert_eq!(views.failed.as_slice(), [layer_of(s)]);
    assert_eq!(views.untouched.as_slice(), [layer_of(r)]);
}

/// Dequantize, Dequantize, Add, ReLU, Quantize (ResNet's residual junction) become one
/// CpuFast layer reading the two quantised tensors; a dequantised tensor read twice stops
/// it.
#[test]
fn a_quantized_island_becomes_one_layer() {
    let shape = [1u32, 4, 5, 5];
    let q = |scale| {
        TensorInfo::new(&shape, DataType::QAsymmU8)
            .with_quantization(backplane_api::Quantization::per_tensor(scale, 3))
    };
    for shared in [false, true] {
        let mut b = Builder::new();
        let (x, y) = (b.tensor(q(0.1), false), b.tensor(q(0.2), false));
        b.v().inputs.extend([x, y]);
        let dx = b.layer_with("dqx", LayerDescriptor::Dequantize, &[x], f32t(&shape));
        let dy = b.layer_with("dqy", LayerDescriptor::Dequantize, &[y], f32t(&shape));
        let add = LayerDescriptor::ElementwiseBinary(BinaryOperation::Add);
        let s = b.layer("add", add, &[dx, dy]);
        let r = b.layer("relu", act(ActivationFunction::ReLU), &[s]);
        let out = b.layer_with(
            "q",
            LayerDescriptor::Quantize(DataType::QAsymmU8),
            &[r],
            q(0.3),
        );
        if shared {
            b.output(dy);
        }
        let (_, views) = b.optimize();
        if shared {
            assert!(views.substitutions.is_empty());
            continue;
        }
        let [sub] = views.substitutions.as_slice() else {
            panic!("one substitution, got {:?}", views.substitutions);
        };
        let mut replaced = sub.replaced.to_vec();
        replaced.sort();
        let mut want: Vec<LayerId> = [dx, dy, s, r, out].map(layer_of).to_vec();
        want.sort();
        assert_eq!(replaced, want);
        assert_eq!(sub.replacement.inputs.as_slice(), [x, y]);
        assert_eq!(sub.replacement.outputs.as_slice(), [out]);
        let LayerDescriptor::PreCompiled(p) = &sub.replacement.descriptor else {
            panic!("a PreCompiled layer");
        };
        assert_eq!(p.operation.as_str(), "QuantizedAddRelu");
    }
}

/// A quantised convolution followed by a quantised ReLU of the same parameters becomes
/// one layer (the ReLU is a clamp of the requantisation); with other parameters it does
/// not.
#[test]
fn a_quantized_convolution_takes_a_clamping_relu() {
    let q = |shape: &[u32], dt, scale, zp| {
        TensorInfo::new(shape, dt)
            .with_quantization(backplane_api::Quantization::per_tensor(scale, zp))
    };
    for same in [true, false] {
        let mut b = Builder::new();
        let x = b.tensor(q(&[1, 2, 5, 5], DataType::QAsymmU8, 0.1, 3), false);
        b.v().inputs.push(x);
        let w = b.tensor(
            q(&[3, 2, 3, 3], DataType::QSymmS8, 0.01, 0).constant(),
            true,
        );
        b.v().inputs.push(w);
        let y = q(&[1, 3, 5, 5], DataType::QAsymmU8, 0.05, 7);
        let c = b.layer_with("conv", conv(false), &[x, w], y.clone());
        let after = if same {
            y
        } else {
            q(&[1, 3, 5, 5], DataType::QAsymmU8, 0.05, 8)
        };
        let r = b.layer_with("relu", act(ActivationFunction::ReLU), &[c], after);
        let (_, views) = b.optimize();
        if !same {
            assert!(views.substitutions.is_empty());
            continue;
        }
        let [sub] = views.substitutions.as_slice() else {
            panic!("one substitution, got {:?}", views.substitutions);
        };
        assert_eq!(sub.replaced.as_slice(), [layer_of(c), layer_of(r)]);
        assert_eq!(sub.replacement.inputs.as_slice(), [x, w]);
        assert_eq!(sub.replacement.outputs.as_slice(), [r]);
    }
}
