"""Operators Backend API 1.5 added operations for (the trigonometric and hyperbolic functions,
Round, the bitwise operators and shifts), and QuantizeLinear with a scale computed at run
time, each on seeded data against onnxruntime (the oracle), through backplane.onnxruntime on
the default backends."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import backplane.onnxruntime as bort
from support import run_both

RNG = np.random.default_rng(1_5)
F = TensorProto.FLOAT
D = TensorProto.DOUBLE


@pytest.mark.parametrize("op,lo,hi", [
    ("Tan", -1.4, 1.4), ("Asin", -0.99, 0.99), ("Acos", -0.99, 0.99), ("Atan", -6.0, 6.0),
    ("Sinh", -4.0, 4.0), ("Cosh", -4.0, 4.0), ("Asinh", -6.0, 6.0), ("Acosh", 1.0, 6.0),
    ("Atanh", -0.99, 0.99), ("Round", -4.0, 4.0),
])
def test_unary_functions(op, lo, hi):
    x = RNG.uniform(lo, hi, size=(3, 7)).astype(np.float32)
    if op == "Round":
        # Halves of both parities and signs, where rounding to even differs from away-from-zero.
        x[0, :6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]
    run_both(helper.make_node(op, ["x"], ["y"]), {"x": (F, x)}, [("y", F)])


NUMPY = {"Tan": np.tan, "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh,
         "Cosh": np.cosh, "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
         "Round": np.round, "Exp": np.exp, "Log": np.log}


@pytest.mark.parametrize("op", sorted(NUMPY))
def test_unary_functions_in_double(op):
    # onnxruntime's CPU provider has these in float only (Round, Exp, Log also in double):
    # numpy (which rounds halves to even too) is the oracle, within a few ulps of f64.
    x = RNG.uniform(0.1, 0.9, size=(3, 7))
    if op == "Acosh":
        x = x + 1.0
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "double",
                              [helper.make_tensor_value_info("x", D, [3, 7])],
                              [helper.make_tensor_value_info("y", D, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    (got,) = bort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, NUMPY[op](x), rtol=1e-14, atol=0)


INTS = [(np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8), (np.int32, TensorProto.INT32),
        (np.int64, TensorProto.INT64), (np.uint16, TensorProto.UINT16), (np.uint64, TensorProto.UINT64)]


@pytest.mark.parametrize("dtype,code", INTS)
@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
def test_bitwise(op, dtype, code):
    info = np.iinfo(dtype)
    a = RNG.integers(info.min, info.max, size=(4, 5), dtype=dtype, endpoint=True)
    b = RNG.integers(info.min, info.max, size=(5,), dtype=dtype, endpoint=True)
    run_both(helper.make_node(op, ["a", "b"], ["y"]), {"a": (code, a), "b": (code, b)}, [("y", code)])


@pytest.mark.parametrize("dtype,code", INTS)
def test_bitwise_not(dtype, code):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, size=(3, 4), dtype=dtype, endpoint=True)
    run_both(helper.make_node("BitwiseNot", ["x"], ["y"]), {"x": (code, x)}, [("y", code)])


@pytest.mark.parametrize("dtype,code", [(np.uint8, TensorProto.UINT8), (np.uint32, TensorProto.UINT32),
                                        (np.uint64, TensorProto.UINT64)])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift(direction, dtype, code):
    bits = np.iinfo(dtype).bits
    x = RNG.integers(0, np.iinfo(dtype).max, size=(3, bits), dtype=dtype, endpoint=True)
    # Every shift from 0 to the width minus one (onnxruntime's result at the width or beyond is
    # the C++ shift's, undefined, so such shifts are checked by CpuRef's unit tests instead;
    # its CPU provider has no uint16 BitShift).
    y = np.arange(bits, dtype=dtype)
    run_both(helper.make_node("BitShift", ["x", "y"], ["z"], direction=direction),
             {"x": (code, x), "y": (code, y)}, [("z", code)])


@pytest.mark.parametrize("zp_type", [None, TensorProto.UINT8, TensorProto.INT8])
def test_quantize_linear_with_a_computed_scale(zp_type):
    # DynamicQuantizeLinear's own function body computes the scale; here the scale is an
    # input, so it is known only at run time.
    x = (RNG.standard_normal((4, 6)) * 3).astype(np.float32)
    inputs = {"x": (F, x), "s": (F, np.array(0.037, dtype=np.float32))}
    names = ["x", "s"]
    if zp_type is not None:
        zp = np.array(7 if zp_type == TensorProto.UINT8 else -5,
                      dtype=np.uint8 if zp_type == TensorProto.UINT8 else np.int8)
        inputs["z"] = (zp_type, zp)
        names.append("z")
    out = TensorProto.UINT8 if zp_type in (None, TensorProto.UINT8) else TensorProto.INT8
    run_both(helper.make_node("QuantizeLinear", names, ["y"]), inputs, [("y", out)], opset=13)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction, axis):
    data = RNG.standard_normal((4, 5)).astype(np.float32)
    size = data.shape[axis]
    # Distinct indices per line for "none" (repeated ones are the later update's in both).
    idx = np.stack([RNG.permutation(size)[:3] for _ in range(4 if axis != 0 else 5)])
    idx = idx if axis != 0 else idx.T
    idx = (idx - np.where(RNG.random(idx.shape) < 0.3, size, 0)).astype(np.int64)
    upd = RNG.standard_normal(idx.shape).astype(np.float32)
    run_both(helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=axis, reduction=reduction),
             {"d": (F, data), "i": (TensorProto.INT64, idx), "u": (F, upd)}, [("y", F)])


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype,code", [(np.float32, F), (np.int32, TensorProto.INT32)])
def test_scatter_nd(reduction, dtype, code):
    data = (RNG.standard_normal((4, 3, 2)) * 5).astype(dtype)
    idx = np.array([[0, 1], [3, 2], [1, 0]], dtype=np.int64)
    upd = (RNG.standard_normal((3, 2)) * 5).astype(dtype)
    run_both(helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=reduction),
             {"d": (code, data), "i": (TensorProto.INT64, idx), "u": (code, upd)}, [("y", code)])


@pytest.mark.parametrize("attrs", [
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 3]},
    {"output_shape": [10, 8], "strides": [3, 2]},
    {"output_shape": [11, 9], "strides": [3, 2], "auto_pad": "SAME_UPPER"},
])
def test_conv_transpose_pads_from_shape(attrs):
    x = RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    run_both(helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs),
             {"x": (F, x), "w": (F, w)}, [("y", F)], opset=13, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("dtype,code", [(np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64),
                                        (np.float32, F), (np.uint8, TensorProto.UINT8)])
def test_pad_every_type_and_mode(mode, dtype, code):
    x = (RNG.standard_normal((3, 4)) * 50).astype(dtype)
    pads = helper.make_tensor("p", TensorProto.INT64, [4], [1, 2, 2, 1])
    inits = [pads]
    names = ["x", "p"]
    if mode == "constant":
        inits.append(helper.make_tensor("v", code, [], [7]))
        names.append("v")
    run_both(helper.make_node("Pad", names, ["y"], mode=mode), {"x": (code, x)}, [("y", code)],
             inits=inits, opset=19)


@pytest.mark.parametrize("dtype,code", [(np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64),
                                        (np.uint8, TensorProto.UINT8)])
@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_integers(dtype, code, largest):
    # Repeated values: ties go to the lower index, as onnxruntime's.
    x = RNG.integers(0, 6, size=(3, 7)).astype(dtype)
    k = helper.make_tensor("k", TensorProto.INT64, [1], [4])
    run_both(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest),
             {"x": (code, x)}, [("v", code), ("i", TensorProto.INT64)], inits=[k], opset=11)
