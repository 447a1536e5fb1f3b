"""onnxruntime's com.microsoft operators that its optimiser and exporters write (and
SimplifiedLayerNormalization, which it registers in the default domain), imported as ONNX
operators (onnx/import/expand/microsoft.rs, activation.rs), each against onnxruntime itself."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane.onnxruntime as bort

RNG = np.random.default_rng(1302)
F = TensorProto.FLOAT


def floats(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def run_ms(node, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(
        [node], "ms", [helper.make_tensor_value_info(n, t, list(v.shape)) for n, (t, v) in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    feeds = {n: v for n, (_, v) in inputs.items()}
    so = onnxruntime.SessionOptions()
    # The node as written, not replaced by onnxruntime's own fusions.
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = bort.InferenceSession(data).run(None, feeds)
    for (name, _), g, w in zip(outputs, got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("op,bias", [("Gelu", False), ("BiasGelu", True), ("FastGelu", False),
                                     ("FastGelu", True), ("QuickGelu", False)])
def test_gelus(op, bias):
    inputs = {"x": (F, floats(3, 8, scale=2.0))}
    names = ["x"]
    if bias:
        inputs["b"] = (F, floats(8))
        names.append("b")
    run_ms(helper.make_node(op, names, ["y"], domain="com.microsoft"), inputs, [("y", F)])


@pytest.mark.parametrize("activation,params", [("Relu", None), ("LeakyRelu", [0.2]),
                                               ("Clip", [-0.5, 0.7]), ("Sigmoid", None),
                                               ("HardSigmoid", [0.3, 0.4]), ("Tanh", None)])
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv(activation, params, with_z):
    attrs = {"activation": activation, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    if params:
        attrs["activation_params"] = params
    inputs = {"x": (F, floats(1, 3, 6, 7)), "w": (F, floats(4, 3, 3, 3, scale=0.3)), "b": (F, floats(4))}
    names = ["x", "w", "b"]
    if with_z:
        inputs["z"] = (F, floats(1, 4, 6, 7))
        names.append("z")
    run_ms(helper.make_node("FusedConv", names, ["y"], domain="com.microsoft", **attrs), inputs, [("y", F)])


@pytest.mark.parametrize("ta,tb,alpha", [(0, 0, 1.0), (1, 0, 0.5), (0, 1, 2.0), (1, 1, -1.0)])
def test_fused_matmul(ta, tb, alpha):
    a = floats(2, 4, 3) if ta else floats(2, 3, 4)
    b = floats(2, 5, 4) if tb else floats(2, 4, 5)
    run_ms(helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", transA=ta,
                            transB=tb, alpha=alpha), {"a": (F, a), "b": (F, b)}, [("y", F)])


@pytest.mark.parametrize("op", ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_layer_norm(op, with_bias):
    inputs = {"x": (F, floats(2, 3, 8)), "s": (F, floats(2, 3, 8)), "g": (F, floats(8))}
    names = ["x", "s", "g"]
    if op == "SkipLayerNormalization":
        inputs["beta"] = (F, floats(8))
        names.append("beta")
    if with_bias:
        inputs["bias"] = (F, floats(8))
        names.append("bias")
    outputs = ["y", "", "", "sum"]
    run_ms(helper.make_node(op, names, outputs, domain="com.microsoft", epsilon=1e-5), inputs,
           [("y", F), ("sum", F)])


def test_simplified_layer_norm():
    run_ms(helper.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-6),
           {"x": (F, floats(2, 3, 8)), "g": (F, floats(8))}, [("y", F)])


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("with_mask", [False, True])
def test_attention(unidirectional, with_mask):
    hidden, heads = 16, 4
    inputs = {"x": (F, floats(2, 5, hidden)), "w": (F, floats(hidden, 3 * hidden, scale=0.3)),
              "b": (F, floats(3 * hidden, scale=0.1))}
    names = ["x", "w", "b"]
    if with_mask:
        mask = np.ones((2, 5), np.int32)
        mask[1, 3:] = 0
        inputs["m"] = (TensorProto.INT32, mask)
        names.append("m")
    run_ms(helper.make_node("Attention", names, ["y"], domain="com.microsoft", num_heads=heads,
                            unidirectional=unidirectional), inputs, [("y", F)])


@pytest.mark.parametrize("with_bias", [False, True])
def test_multi_head_attention(with_bias):
    inputs = {"q": (F, floats(2, 4, 16)), "k": (F, floats(2, 6, 16)), "v": (F, floats(2, 6, 16))}
    names = ["q", "k", "v"]
    if with_bias:
        inputs["b"] = (F, floats(48, scale=0.1))
        names.append("b")
    run_ms(helper.make_node("MultiHeadAttention", names, ["y"], domain="com.microsoft", num_heads=2),
           inputs, [("y", F)])


def test_embed_layer_normalization():
    ids = RNG.integers(0, 30, size=(2, 6)).astype(np.int32)
    seg = RNG.integers(0, 2, size=(2, 6)).astype(np.int32)
    mask = np.ones((2, 6), np.int32)
    mask[0, 4:] = 0
    inputs = {"ids": (TensorProto.INT32, ids), "seg": (TensorProto.INT32, seg),
              "wemb": (F, floats(30, 8)), "pemb": (F, floats(16, 8)), "semb": (F, floats(2, 8)),
              "g": (F, floats(8)), "b": (F, floats(8)), "m": (TensorProto.INT32, mask)}
    run_ms(helper.make_node("EmbedLayerNormalization", list(inputs), ["y", "mi"],
                            domain="com.microsoft", epsilon=1e-5),
           inputs, [("y", F), ("mi", TensorProto.INT32)])


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding(interleaved):
    x = floats(2, 5, 16)
    pos = RNG.integers(0, 10, size=(2, 5)).astype(np.int64)
    run_ms(helper.make_node("RotaryEmbedding", ["x", "p", "c", "s"], ["y"], domain="com.microsoft",
                            num_heads=2, interleaved=interleaved),
           {"x": (F, x), "p": (TensorProto.INT64, pos), "c": (F, floats(10, 4)), "s": (F, floats(10, 4))},
           [("y", F)])


@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_lstm_constant_weights(per_column):
    # DynamicQuantizeLSTM's dequantized weights made in one pass when they are constants
    # (onnx/import/expand/microsoft.rs) against the same model with the weights fed as inputs
    # (the general path: ONNX's Cast, Sub, Mul and Transpose); the same outputs, and near
    # onnxruntime's (which quantizes X and H at every step) where it runs the form.
    rng = np.random.default_rng(5)
    dirs, hidden, inp, seq, batch = 2, 6, 5, 4, 2
    shape = lambda cols: [dirs, cols] if per_column else [dirs]
    w = rng.integers(-128, 127, size=(dirs, inp, 4 * hidden), dtype=np.int8, endpoint=True)
    r = rng.integers(-128, 127, size=(dirs, hidden, 4 * hidden), dtype=np.int8, endpoint=True)
    ws = rng.uniform(0.002, 0.01, size=shape(4 * hidden)).astype(np.float32)
    rs = rng.uniform(0.002, 0.01, size=shape(4 * hidden)).astype(np.float32)
    wz = rng.integers(-3, 3, size=shape(4 * hidden), dtype=np.int8)
    rz = rng.integers(-3, 3, size=shape(4 * hidden), dtype=np.int8)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    values = {"W": w, "R": r, "W_scale": ws, "W_zp": wz, "R_scale": rs, "R_zp": rz}
    I8 = TensorProto.INT8

    def model(constant):
        names = ["X", "W", "R", "", "", "", "", "", "W_scale", "W_zp", "R_scale", "R_zp"]
        node = helper.make_node("DynamicQuantizeLSTM", names, ["Y"], domain="com.microsoft",
                                hidden_size=hidden, direction="bidirectional")
        code = lambda v: F if v.dtype == np.float32 else I8
        inits = [helper.make_tensor(k, code(v), v.shape, v.flatten().tolist())
                 for k, v in values.items() if constant]
        ins = [helper.make_tensor_value_info("X", F, list(x.shape))]
        ins += [helper.make_tensor_value_info(k, code(v), list(v.shape))
                for k, v in values.items() if not constant]
        graph = helper.make_graph([node], "dqlstm", ins, [helper.make_tensor_value_info("Y", F, None)],
                                  inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 8
        return m.SerializeToString()

    (constant,) = bort.InferenceSession(model(True)).run(None, {"X": x})
    (general,) = bort.InferenceSession(model(False)).run(None, {"X": x, **values})
    np.testing.assert_array_equal(constant, general)
    if not per_column:
        # onnxruntime refuses int8 weights with non-zero zero points per column.
        (ort,) = onnxruntime.InferenceSession(model(True), providers=["CPUExecutionProvider"]).run(
            None, {"X": x})
        np.testing.assert_allclose(constant, ort, atol=0.05)
