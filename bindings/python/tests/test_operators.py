"""Operators Backend API 1.5 added operations or layers for (the trigonometric and hyperbolic
functions, Round, the bitwise operators and shifts, NonMaxSuppression, RoiAlign), and QuantizeLinear with a scale computed at run
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


def _boxes(batches, n, center):
    """Seeded boxes: corners in either order, or centre points with positive extents."""
    if center:
        xy = RNG.uniform(0, 10, size=(batches, n, 2))
        wh = RNG.uniform(0.5, 4, size=(batches, n, 2))
        return np.concatenate([xy, wh], axis=2).astype(np.float32)
    return RNG.uniform(0, 10, size=(batches, n, 4)).astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(5, 0.3, 0.2), (50, 0.6, None), (2, 0.0, -1.0)])
def test_non_max_suppression(center, max_out, iou, score):
    # Two batches, three classes, forty boxes; the scalars as initializers (what exporters
    # write), the score threshold left out in one form.
    boxes = _boxes(2, 40, center)
    scores = RNG.uniform(0, 1, size=(2, 3, 40)).astype(np.float32)
    inits = [helper.make_tensor("max", TensorProto.INT64, [1], [max_out]),
             helper.make_tensor("iou", F, [1], [iou])]
    names = ["boxes", "scores", "max", "iou"]
    if score is not None:
        inits.append(helper.make_tensor("score", F, [1], [score]))
        names.append("score")
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center)
    run_both(node, {"boxes": (F, boxes), "scores": (F, scores)}, [("selected", TensorProto.INT64)],
             inits=inits)


def test_non_max_suppression_with_a_computed_threshold():
    # The IoU threshold computed from an input: known only when a run gives it (a session runs
    # the model in segments), as exporters' post-processing graphs do.
    boxes = _boxes(1, 30, 0)
    scores = RNG.uniform(0, 1, size=(1, 2, 30)).astype(np.float32)
    half = np.array([0.5], np.float32)
    nodes = [helper.make_node("Mul", ["t", "half"], ["iou"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["selected"])]
    graph = helper.make_graph(
        nodes, "nms",
        [helper.make_tensor_value_info("boxes", F, [1, 30, 4]),
         helper.make_tensor_value_info("scores", F, [1, 2, 30]),
         helper.make_tensor_value_info("t", F, [1])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, None)],
        [helper.make_tensor("max", TensorProto.INT64, [1], [10]),
         helper.make_tensor("half", F, [1], half)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    data = model.SerializeToString()
    import onnxruntime
    for t in (0.2, 0.9):
        feeds = {"boxes": boxes, "scores": scores, "t": np.array([t], np.float32)}
        want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
        got = bort.InferenceSession(data).run(None, feeds)
        np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("opset,attrs", [
    (16, {"mode": "avg", "output_height": 3, "output_width": 4, "sampling_ratio": 2, "spatial_scale": 0.5}),
    (16, {"mode": "max", "output_height": 2, "output_width": 2, "sampling_ratio": 0, "spatial_scale": 0.25}),
    (16, {"coordinate_transformation_mode": "output_half_pixel", "output_height": 5, "output_width": 3}),
    (10, {"mode": "avg", "output_height": 2, "output_width": 3, "spatial_scale": 0.5}),
])
def test_roi_align(opset, attrs):
    x = RNG.normal(size=(2, 3, 12, 10)).astype(np.float32)
    # Regions inside, across the edge and outside the image; some narrower than a pixel.
    corners = RNG.uniform(-4, 26, size=(7, 2, 2))
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1).astype(np.float32)
    rois[0] = [3.0, 4.0, 3.4, 4.2]
    batch = np.array([0, 1, 1, 0, 1, 0, 0], np.int64)
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    run_both(node, {"x": (F, x), "rois": (F, rois), "batch": (TensorProto.INT64, batch)}, [("y", F)],
             opset=opset, rtol=1e-5, atol=1e-5)


def test_roi_align_in_double():
    x = RNG.normal(size=(1, 2, 8, 8))
    rois = np.array([[0.5, 1.0, 6.0, 7.5], [2.0, 2.0, 3.0, 9.0]])
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], output_height=3, output_width=3)
    run_both(node, {"x": (D, x), "rois": (D, rois), "batch": (TensorProto.INT64, np.zeros(2, np.int64))},
             [("y", D)], rtol=1e-12, atol=1e-12)


def test_non_max_suppression_selecting_nothing_fails_that_run_only():
    # No score above the threshold: an empty result, which backplane refuses for now (empty
    # tensors are not supported yet), naming the node; the session then runs the next input.
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["b", "s", "max", "iou", "st"], ["sel"])], "nms",
        [helper.make_tensor_value_info("b", F, [1, 5, 4]), helper.make_tensor_value_info("s", F, [1, 1, 5]),
         helper.make_tensor_value_info("st", F, [1])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, None)],
        [helper.make_tensor("max", TensorProto.INT64, [1], [3]), helper.make_tensor("iou", F, [1], [0.5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    session = bort.InferenceSession(model.SerializeToString())
    b = _boxes(1, 5, 0)
    s = RNG.uniform(0, 1, size=(1, 1, 5)).astype(np.float32)
    with pytest.raises(Exception, match="NonMaxSuppression selected no element: empty tensors"):
        session.run(None, {"b": b, "s": s, "st": np.array([2.0], np.float32)})
    (got,) = session.run(None, {"b": b, "s": s, "st": np.array([-1.0], np.float32)})
    assert got.shape[1] == 3 and got.shape[0] >= 1


@pytest.mark.parametrize("dtype,code", [(np.int16, TensorProto.INT16), (np.uint16, TensorProto.UINT16),
                                        (np.int8, TensorProto.INT8), (np.uint8, TensorProto.UINT8)])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize_in_every_integer_width(dtype, code, per_axis):
    # QuantizeLinear and DequantizeLinear in 16 bits (computed in floats), and per axis with
    # zero points that differ (which the API's one offset per tensor cannot say), against
    # onnxruntime; 8 bits with differing zero points too.
    info = np.iinfo(dtype)
    x = RNG.normal(scale=3000.0 if info.bits == 16 else 30.0, size=(2, 3, 4)).astype(np.float32)
    if per_axis:
        scale = np.array([0.5, 0.25, 2.0], np.float32)
        zero = np.array([info.min // 4 + info.max // 2, info.max // 3, 0], dtype)
        attrs = {"axis": 1}
    else:
        scale, zero, attrs = np.array(0.75, np.float32), np.array(info.max // 5, dtype), {}
    inits = [helper.make_tensor("scale", F, list(scale.shape), scale.flatten()),
             helper.make_tensor("zero", code, list(zero.shape), zero.flatten())]
    run_both(helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], **attrs),
             {"x": (F, x)}, [("q", code)], inits=inits, opset=21)
    q = RNG.integers(info.min, info.max, size=(2, 3, 4), dtype=dtype, endpoint=True)
    run_both(helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], **attrs),
             {"q": (code, q)}, [("y", F)], inits=inits, opset=21)


@pytest.mark.parametrize("code", [TensorProto.UINT8, TensorProto.INT8, TensorProto.INT16])
def test_blocked_quantization(code):
    # block_size 3 along axis 1 of a [4, 8] tensor: three blocks, the last one short.
    dtype = helper.tensor_dtype_to_np_dtype(code)
    info = np.iinfo(dtype)
    x = RNG.normal(scale=20.0, size=(4, 8)).astype(np.float32)
    scale = RNG.uniform(0.1, 0.5, size=(4, 3)).astype(np.float32)
    zero = RNG.integers(info.min // 2, info.max // 2, size=(4, 3), dtype=dtype)
    inits = [helper.make_tensor("scale", F, [4, 3], scale.flatten()),
             helper.make_tensor("zero", code, [4, 3], zero.flatten())]
    attrs = {"axis": 1, "block_size": 3}
    run_both(helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], **attrs),
             {"x": (F, x)}, [("q", code)], inits=inits, opset=21)
    q = RNG.integers(info.min, info.max, size=(4, 8), dtype=dtype, endpoint=True)
    run_both(helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], **attrs),
             {"q": (code, q)}, [("y", F)], inits=inits, opset=21)


@pytest.mark.parametrize("scale", [1.0, 40.0])
def test_dynamic_quantize_linear_alone(scale):
    # Its three outputs as graph outputs (not onnxruntime's dynamic pattern): computed by its
    # definition in floats.
    x = (RNG.normal(size=(3, 17)) * scale).astype(np.float32)
    run_both(helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), {"x": (F, x)},
             [("y", TensorProto.UINT8), ("s", F), ("z", TensorProto.UINT8)], opset=11)


@pytest.mark.parametrize("a_code,b_code", [(TensorProto.UINT8, TensorProto.UINT8),
                                           (TensorProto.UINT8, TensorProto.INT8),
                                           (TensorProto.INT8, TensorProto.INT8)])
@pytest.mark.parametrize("b_per_column", [False, True])
def test_matmul_integer_alone(a_code, b_code, b_per_column):
    # Operands fed at run time (onnxruntime's dynamic pattern needs constant weights): the
    # exact integer product with the zero points taken off, in int32; per-column b zero points.
    a_t, b_t = helper.tensor_dtype_to_np_dtype(a_code), helper.tensor_dtype_to_np_dtype(b_code)
    a = RNG.integers(np.iinfo(a_t).min, np.iinfo(a_t).max, size=(2, 5, 64), dtype=a_t, endpoint=True)
    b = RNG.integers(np.iinfo(b_t).min, np.iinfo(b_t).max, size=(64, 6), dtype=b_t, endpoint=True)
    bz = (RNG.integers(-20, 20, size=(6,)) if b_per_column else np.array(7)).astype(b_t)
    inits = [helper.make_tensor("az", a_code, [], [3]),
             helper.make_tensor("bz", b_code, list(bz.shape), bz.flatten())]
    run_both(helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]),
             {"a": (a_code, a), "b": (b_code, b)}, [("y", TensorProto.INT32)], inits=inits, opset=10)


CONV_ATTRS = [{}, {"pads": [1, 0, 2, 1], "strides": [2, 1]}, {"group": 2, "dilations": [2, 1], "pads": [2, 1, 2, 1]}]


@pytest.mark.parametrize("attrs", CONV_ATTRS)
def test_conv_integer(attrs):
    # An exact integer convolution (in doubles, then int32) with the zero points taken off,
    # against onnxruntime (uint8 operands, per-tensor zero points: its ConvInteger's forms).
    x = RNG.integers(0, 255, size=(1, 4, 9, 8), dtype=np.uint8, endpoint=True)
    w = RNG.integers(0, 255, size=(6, 4 // attrs.get("group", 1), 3, 3), dtype=np.uint8, endpoint=True)
    inits = [helper.make_tensor("xz", TensorProto.UINT8, [], [17]),
             helper.make_tensor("wz", TensorProto.UINT8, [], [131])]
    run_both(helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs),
             {"x": (TensorProto.UINT8, x), "w": (TensorProto.UINT8, w)}, [("y", TensorProto.INT32)],
             inits=inits, opset=10)


@pytest.mark.parametrize("attrs", CONV_ATTRS)
def test_conv_integer_per_channel_weights(attrs):
    # Per-output-channel weight zero points, which onnxruntime's ConvInteger refuses: the
    # oracle is onnxruntime's float Conv of the shifted operands (exact: every sum is below
    # 2^24), cast to int32.
    import onnxruntime
    x = RNG.integers(0, 255, size=(1, 4, 9, 8), dtype=np.uint8, endpoint=True)
    w = RNG.integers(0, 255, size=(6, 4 // attrs.get("group", 1), 3, 3), dtype=np.uint8, endpoint=True)
    wz = RNG.integers(100, 150, size=(6,), dtype=np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    graph = helper.make_graph([node], "conv_integer",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [helper.make_tensor("w", TensorProto.UINT8, list(w.shape), w.flatten()),
                               helper.make_tensor("xz", TensorProto.UINT8, [], [17]),
                               helper.make_tensor("wz", TensorProto.UINT8, [6], wz)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    model.ir_version = 8
    (got,) = bort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    xs = x.astype(np.float32) - 17
    ws = w.astype(np.float32) - wz.astype(np.float32)[:, None, None, None]
    fnode = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    fgraph = helper.make_graph([fnode], "conv", [helper.make_tensor_value_info("x", F, list(xs.shape))],
                               [helper.make_tensor_value_info("y", F, None)],
                               [helper.make_tensor("w", F, list(ws.shape), ws.flatten())])
    fmodel = helper.make_model(fgraph, opset_imports=[helper.make_opsetid("", 10)])
    fmodel.ir_version = 8
    (want,) = onnxruntime.InferenceSession(fmodel.SerializeToString(),
                                           providers=["CPUExecutionProvider"]).run(None, {"x": xs})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize("code", [F, D])
def test_det(code):
    dtype = helper.tensor_dtype_to_np_dtype(code)
    x = RNG.normal(size=(2, 3, 5, 5)).astype(dtype)
    x[0, 0, 3] = x[0, 0, 1]  # a singular matrix: determinant 0
    if code == F:
        run_both(helper.make_node("Det", ["x"], ["y"]), {"x": (code, x)}, [("y", code)], rtol=1e-5, atol=1e-5)
        return
    # onnxruntime's Det is float only: numpy's LAPACK determinant is the oracle in double.
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det",
                              [helper.make_tensor_value_info("x", D, list(x.shape))],
                              [helper.make_tensor_value_info("y", D, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    (got,) = bort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("src,dst", [(F, TensorProto.INT32), (TensorProto.INT32, F), (D, TensorProto.INT64),
                                     (TensorProto.UINT16, TensorProto.INT16), (TensorProto.INT8, TensorProto.UINT8),
                                     (TensorProto.UINT32, F)])
def test_bit_cast(src, dst):
    dtype = helper.tensor_dtype_to_np_dtype(src)
    if np.issubdtype(dtype, np.floating):
        x = RNG.normal(scale=1e3, size=(3, 4)).astype(dtype)
        x[0, :3] = [np.inf, -0.0, np.nan]
    else:
        info = np.iinfo(dtype)
        # Bit patterns of finite floats where the target is a float (NaN payloads aside).
        hi = 0x7F000000 if dst == F else info.max
        x = RNG.integers(0 if dst == F else info.min, hi, size=(3, 4), dtype=dtype, endpoint=True)
    node = helper.make_node("BitCast", ["x"], ["y"], to=dst)
    graph = helper.make_graph([node], "bitcast", [helper.make_tensor_value_info("x", src, [3, 4])],
                              [helper.make_tensor_value_info("y", dst, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    model.ir_version = 10
    (got,) = bort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    # The oracle is numpy's own reinterpretation of the bytes (onnxruntime's BitCast is checked
    # by the node tests' stored outputs).
    want = x.view(helper.tensor_dtype_to_np_dtype(dst))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


UPSAMPLE_SCALES = [[1, 1, 2, 3], [1, 1, 1.5, 2.25]]


@pytest.mark.parametrize("op,opset,scales", [("Upsample", 9, s) for s in UPSAMPLE_SCALES]
                         + [("Resize", 10, s) for s in UPSAMPLE_SCALES + [[1, 1, 0.5, 0.75]]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_and_resize_10(op, opset, scales, mode):
    # Opset 10's Resize may shrink; Upsample's scales are at least 1 (below).
    x = RNG.normal(size=(1, 2, 4, 6)).astype(np.float32)
    inits = [helper.make_tensor("scales", F, [4], scales)]
    run_both(helper.make_node(op, ["x", "scales"], ["y"], mode=mode), {"x": (F, x)}, [("y", F)],
             inits=inits, opset=opset)


def test_upsample_refuses_shrinking():
    graph = helper.make_graph([helper.make_node("Upsample", ["x", "scales"], ["y"])], "up",
                              [helper.make_tensor_value_info("x", F, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", F, None)],
                              [helper.make_tensor("scales", F, [4], [1, 1, 0.5, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 8
    with pytest.raises(Exception, match=r"Upsample scales \[1.0, 1.0, 0.5, 1.0\]: each must be at least 1"):
        bort.InferenceSession(model.SerializeToString())


def test_upsample_7():
    x = RNG.normal(size=(1, 1, 3, 2)).astype(np.float32)
    run_both(helper.make_node("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0]),
             {"x": (F, x)}, [("y", F)], opset=7)


@pytest.mark.parametrize("mels,dft,rate,low,high", [(8, 16, 8192, 0.0, 4096.0), (40, 512, 16000, 20.0, 7600.0),
                                                    (80, 400, 16000, 0.0, 8000.0), (13, 256, 22050, 300.0, 5000.0)])
def test_mel_weight_matrix(mels, dft, rate, low, high):
    # A constant computed at import from its (constant) inputs, against onnxruntime's.
    i64 = TensorProto.INT64
    inits = [helper.make_tensor("m", i64, [], [mels]), helper.make_tensor("d", i64, [], [dft]),
             helper.make_tensor("r", i64, [], [rate]), helper.make_tensor("lo", F, [], [low]),
             helper.make_tensor("hi", F, [], [high])]
    # The graph needs one input: the matrix times it.
    x = RNG.normal(size=(3, dft // 2 + 1)).astype(np.float32)
    nodes = [helper.make_node("MelWeightMatrix", ["m", "d", "r", "lo", "hi"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "mel", [helper.make_tensor_value_info("x", F, list(x.shape))],
                              [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("w", F, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    import onnxruntime
    data = model.SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = bort.InferenceSession(data).run(None, {"x": x})
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("code", [F, TensorProto.INT64, TensorProto.INT8])  # onnxruntime's types
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("is_sorted", [0, 1])
def test_unique(code, axis, is_sorted):
    # Small values so that items repeat; all four outputs against onnxruntime's.
    dtype = helper.tensor_dtype_to_np_dtype(code)
    x = RNG.integers(0, 3, size=(4, 3, 2)).astype(dtype)
    if code == F:
        x[0, 0, 0] = -0.0
    attrs = {"sorted": is_sorted} if axis is None else {"sorted": is_sorted, "axis": axis}
    i64 = TensorProto.INT64
    run_both(helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], **attrs), {"x": (code, x)},
             [("y", code), ("first", i64), ("inverse", i64), ("counts", i64)], opset=11)


@pytest.mark.parametrize("attrs,mask,bias", [
    ({}, False, False),
    ({"pads": [1, 1, 1, 1], "strides": [2, 1]}, True, True),
    ({"group": 2, "offset_group": 2, "dilations": [1, 2], "pads": [0, 1, 1, 0]}, True, False),
])
def test_deform_conv(attrs, mask, bias):
    x = RNG.normal(size=(2, 4, 7, 6)).astype(np.float32)
    w = RNG.normal(size=(6, 4 // attrs.get("group", 1), 3, 3)).astype(np.float32)
    sy, sx = attrs.get("strides", [1, 1])
    dy, dx = attrs.get("dilations", [1, 1])
    t, l, b, r = attrs.get("pads", [0, 0, 0, 0])
    oh, ow = (7 + t + b - dy * 2 - 1) // sy + 1, (6 + l + r - dx * 2 - 1) // sx + 1
    og = attrs.get("offset_group", 1)
    offset = RNG.normal(scale=1.5, size=(2, og * 2 * 9, oh, ow)).astype(np.float32)
    names, feeds = ["x", "w", "offset"], {"x": (F, x), "w": (F, w), "offset": (F, offset)}
    names.append("b" if bias else "")
    if bias:
        feeds["b"] = (F, RNG.normal(size=(6,)).astype(np.float32))
    if mask:
        names.append("mask")
        feeds["mask"] = (F, RNG.uniform(0, 1, size=(2, og * 9, oh, ow)).astype(np.float32))
    run_both(helper.make_node("DeformConv", names, ["y"], **attrs), feeds, [("y", F)], opset=19,
             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["GlobalMaxPool", "GlobalAveragePool"])
@pytest.mark.parametrize("shape", [(1, 8, 13), (2, 3, 4, 5, 6)])
def test_global_pool_of_other_ranks(op, shape):
    # 1-D and 3-D global pooling (magika's model has a GlobalMaxPool of [1, 512, 508]).
    x = RNG.normal(size=shape).astype(np.float32)
    run_both(helper.make_node(op, ["x"], ["y"]), {"x": (F, x)}, [("y", F)])


ACTIVATIONS_F64 = {"Relu": lambda x: np.maximum(x, 0), "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
                   # alpha is a float attribute: 0.01 rounded to f32, then widened.
                   "Tanh": np.tanh, "LeakyRelu": lambda x: np.where(x > 0, x, float(np.float32(0.01)) * x),
                   "Elu": lambda x: np.where(x > 0, x, np.expm1(x)),
                   "HardSwish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1)}


@pytest.mark.parametrize("op", sorted(ACTIVATIONS_F64))
def test_activations_in_double(op):
    # CpuRef computes them in f64 (numpy is the oracle: onnxruntime has some in float only).
    x = RNG.normal(scale=3.0, size=(4, 9))
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], "act",
                              [helper.make_tensor_value_info("x", D, [4, 9])],
                              [helper.make_tensor_value_info("y", D, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    (got,) = bort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, ACTIVATIONS_F64[op](x), rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("code", [TensorProto.INT32, TensorProto.INT64])
def test_tfidf_vectorizer(mode, weighted, code):
    # Unigrams and bigrams with skips over integer tokens, against onnxruntime.
    x = RNG.integers(2, 9, size=(3, 14)).astype(helper.tensor_dtype_to_np_dtype(code))
    attrs = dict(mode=mode, min_gram_length=1, max_gram_length=2, max_skip_count=2,
                 ngram_counts=[0, 4], ngram_indexes=[6, 0, 1, 2, 3, 4, 5],
                 pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])
    if weighted:
        attrs["weights"] = [0.5, 1.5, 2.0, 0.25, 1.0, 3.0, 0.75]
    run_both(helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs), {"x": (code, x)}, [("y", F)], opset=9)


def _double_values(shape, offset=1.0):
    # Values an f32 cannot hold (offset + k·1e-10): a layer computed in f32 loses them.
    return offset + RNG.uniform(-1.0, 1.0, size=shape) + np.arange(np.prod(shape)).reshape(shape) * 1e-10


@pytest.mark.parametrize("case", ["Gemm", "Gemm_transB", "MatMul", "MaxPool", "ReduceMean",
                                  "BatchNormalization"])
def test_layers_in_double(case):
    # Float64 models with double initializers (kept exact, not rounded through f32), against
    # onnxruntime within a few ulps of f64.
    x = _double_values((2, 3, 5, 4))
    inits = []
    if case.startswith("Gemm"):
        x = _double_values((4, 6))
        trans = case.endswith("transB")
        w = _double_values((5, 6) if trans else (6, 5), 0.0)
        inits = [helper.make_tensor("w", D, w.shape, w.flatten()),
                 helper.make_tensor("b", D, [5], _double_values((5,), 0.0))]
        node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=int(trans), alpha=1.0)
    elif case == "MatMul":
        w = _double_values((4, 3), 0.0)
        inits = [helper.make_tensor("w", D, w.shape, w.flatten())]
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
    elif case == "MaxPool":
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 1],
                                pads=[1, 0, 1, 1], ceil_mode=1)
    elif case == "ReduceMean":
        axes = np.array([1, 3], dtype=np.int64)
        inits = [helper.make_tensor("axes", TensorProto.INT64, [2], axes)]
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)
    else:
        stats = [_double_values((3,), 0.0) for _ in range(3)] + [_double_values((3,), 2.0)]
        inits = [helper.make_tensor(n, D, [3], v) for n, v in zip("sbmv", stats)]
        node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"],
                                epsilon=1e-5)
    run_both(node, {"x": (D, x)}, [("y", D)], inits=inits, rtol=1e-13, atol=0)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pools_in_double(count_include_pad):
    # onnxruntime's CPU provider pools averages in float only: numpy's sums over the windows are
    # the oracle, within a few ulps of f64.
    x = _double_values((1, 2, 5, 6))
    graph = helper.make_graph(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1], count_include_pad=count_include_pad),
         helper.make_node("GlobalAveragePool", ["x"], ["g"])], "double",
        [helper.make_tensor_value_info("x", D, [1, 2, 5, 6])],
        [helper.make_tensor_value_info("y", D, None), helper.make_tensor_value_info("g", D, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    y, g = bort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    inside = np.pad(np.ones_like(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 2, 3, 3))
    for i in range(3):
        for j in range(3):
            window = padded[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            count = 9 if count_include_pad else inside[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].sum(axis=(2, 3))
            want[:, :, i, j] = window.sum(axis=(2, 3)) / count
    assert y.dtype == np.float64 and g.dtype == np.float64
    np.testing.assert_allclose(y, want, rtol=1e-14, atol=0)
    np.testing.assert_allclose(g, x.mean(axis=(2, 3), keepdims=True), rtol=1e-14, atol=0)


def _run_double(node, x, inits=()):
    graph = helper.make_graph([node], "double", [helper.make_tensor_value_info("x", D, list(x.shape))],
                              [helper.make_tensor_value_info("y", D, None)], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    (y,) = bort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    assert y.dtype == np.float64
    return y


def test_layer_normalization_in_double():
    x = _double_values((2, 3, 5))
    s, b = _double_values((3, 5), 0.5), _double_values((3, 5), 0.0)
    inits = [helper.make_tensor("s", D, [3, 5], s.flatten()), helper.make_tensor("b", D, [3, 5], b.flatten())]
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=1, epsilon=1e-5)
    run_both(node, {"x": (D, x)}, [("y", D)], inits=inits, rtol=1e-12, atol=0)


def test_instance_and_local_response_normalization_in_double():
    # onnxruntime's CPU provider has these in float only: numpy is the oracle.
    x = _double_values((2, 5, 3, 4))
    s, b = _double_values((5,), 0.5), _double_values((5,), 0.0)
    inits = [helper.make_tensor("s", D, [5], s), helper.make_tensor("b", D, [5], b)]
    y = _run_double(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5), x, inits)
    m, v = x.mean(axis=(2, 3), keepdims=True), x.var(axis=(2, 3), keepdims=True)
    eps = np.float64(np.float32(1e-5))  # the attribute is a float
    want = (x - m) / np.sqrt(v + eps) * s.reshape(1, 5, 1, 1) + b.reshape(1, 5, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-15)
    size, alpha, beta, k = 3, 1e-2, 0.75, 2.0
    y = _run_double(helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=k), x)
    sq = np.zeros_like(x)
    for c in range(5):
        lo, hi = max(0, c - (size - 1) // 2), min(4, c + size // 2)
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    # The attributes are floats: alpha / size (divided in f32), k and beta as f32 values widened.
    scale = np.float64(np.float32(alpha) / np.float32(size))
    k32, b32 = np.float64(np.float32(k)), np.float64(np.float32(beta))
    want = x / (k32 + scale * sq) ** b32
    np.testing.assert_allclose(y, want, rtol=1e-13, atol=0)


def test_conv_transpose_in_double():
    # onnxruntime's CPU provider has ConvTranspose in float only: the definition (each input
    # element times each tap, added where it lands) is the oracle.
    x = _double_values((1, 2, 3, 4))
    w = _double_values((2, 3, 2, 3), 0.0)
    b = _double_values((3,), 0.0)
    inits = [helper.make_tensor("w", D, list(w.shape), w.flatten()), helper.make_tensor("b", D, [3], b)]
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 0, 0, 1])
    y = _run_double(node, x, inits)
    full = np.zeros((1, 3, (3 - 1) * 2 + 2, (4 - 1) * 2 + 3))
    for c in range(2):
        for i in range(3):
            for j in range(4):
                full[0, :, 2 * i:2 * i + 2, 2 * j:2 * j + 3] += x[0, c, i, j] * w[c]
    want = full[:, :, 1:, :-1] + b.reshape(1, 3, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_in_double(mode):
    # onnxruntime's CPU provider resizes no doubles: ONNX's definition (its reference computes
    # the source coordinates in f64) is the oracle: half_pixel, clamped to the input, the
    # interpolation in f64.
    x = _double_values((1, 2, 3, 4))
    scales = np.array([1, 1, 2, 3], dtype=np.float32)
    inits = [helper.make_tensor("scales", TensorProto.FLOAT, [4], scales)]
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode)
    y = _run_double(node, x, inits)

    def taps(out_len, in_len, scale):
        src = np.clip((np.arange(out_len) + 0.5) / scale - 0.5, 0, in_len - 1)
        if mode == "nearest":
            # round_prefer_floor: halves go down.
            i = np.clip(np.ceil(src - 0.5), 0, in_len - 1).astype(int)
            return i, i, np.zeros(out_len)
        lo = np.floor(src).astype(int)
        return lo, np.minimum(lo + 1, in_len - 1), src - lo

    y0, y1, fy = taps(6, 3, 2.0)
    x0, x1, fx = taps(12, 4, 3.0)
    top = x[:, :, y0][..., x0] + (x[:, :, y0][..., x1] - x[:, :, y0][..., x0]) * fx
    bottom = x[:, :, y1][..., x0] + (x[:, :, y1][..., x1] - x[:, :, y1][..., x0]) * fx
    want = top + (bottom - top) * fy[:, None]
    np.testing.assert_allclose(y, want, rtol=1e-14, atol=0)


def dynamic_conv_model(old_bias, w_type, strides):
    """A float Conv as onnxruntime's quantize_dynamic writes it: DynamicQuantizeLinear,
    ConvInteger, Cast, Mul by the scales; the bias either added after in floats (its current
    form) or, as its older releases wrote it (ddddocr's model), in the accumulator:
    Cast(Floor(bias / scales), int32) reshaped per channel and added before the Cast."""
    w_code, w_np = (TensorProto.UINT8, np.uint8) if w_type == "u8" else (TensorProto.INT8, np.int8)
    info = np.iinfo(w_np)
    w = RNG.integers(info.min, info.max, size=(7, 3, 3, 3), dtype=w_np, endpoint=True)
    bias = RNG.uniform(-1, 1, size=(7,)).astype(np.float32)
    inits = [helper.make_tensor("w", w_code, list(w.shape), w.flatten()),
             helper.make_tensor("w_scale", F, [], [0.0123]),
             helper.make_tensor("w_zp", w_code, [], [131 if w_type == "u8" else -5]),
             helper.make_tensor("bias", F, [7], bias),
             helper.make_tensor("per_channel", TensorProto.INT64, [4], [1, -1, 1, 1])]
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("Mul", ["xs", "w_scale"], ["scales"]),
             helper.make_node("ConvInteger", ["xq", "w", "xz", "w_zp"], ["acc"],
                              pads=[1, 1, 1, 1], strides=strides)]
    if old_bias:
        nodes += [helper.make_node("Mul", ["xs", "w_scale"], ["bias_scales"]),
                  helper.make_node("Div", ["bias", "bias_scales"], ["q"]),
                  helper.make_node("Floor", ["q"], ["qf"]),
                  helper.make_node("Cast", ["qf"], ["qi"], to=TensorProto.INT32),
                  helper.make_node("Reshape", ["qi", "per_channel"], ["qr"]),
                  helper.make_node("Add", ["acc", "qr"], ["acc_b"]),
                  helper.make_node("Cast", ["acc_b"], ["accf"], to=F),
                  helper.make_node("Mul", ["accf", "scales"], ["y"], name="product")]
    else:
        nodes += [helper.make_node("Cast", ["acc"], ["accf"], to=F),
                  helper.make_node("Mul", ["accf", "scales"], ["scaled"], name="product"),
                  helper.make_node("Reshape", ["bias", "per_channel"], ["br"]),
                  helper.make_node("Add", ["scaled", "br"], ["y"])]
    graph = helper.make_graph(nodes, "dynamic_conv",
                              [helper.make_tensor_value_info("x", F, [2, 3, 11, 9])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("provider", ["CpuFast", "CpuRef"])
@pytest.mark.parametrize("old_bias,w_type,strides", [
    (True, "u8", [1, 1]), (True, "i8", [2, 2]), (False, "u8", [2, 1]), (False, "i8", [1, 1])])
def test_dynamically_quantized_conv(provider, old_bias, w_type, strides, tmp_path, monkeypatch):
    # One Convolution2d layer with a Float32 input and quantized weights (Backend API 1.5),
    # on CpuFast (installed here) or CpuRef, first preferred; onnxruntime runs the nodes one by
    # one: bit for bit, on mixed, all-positive and all-zero inputs.
    import onnxruntime
    from support import plugin_dir_named
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    monkeypatch.setenv("DYNAMIC_BACKEND_PATHS", str(d))
    bort.set_runtime(None)
    try:
        data = dynamic_conv_model(old_bias, w_type, strides)
        want_session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
        got_session = bort.InferenceSession(data, providers=[f"{provider}ExecutionProvider"])
        for x in (RNG.uniform(-2, 3, size=(2, 3, 11, 9)), RNG.uniform(0, 1, size=(2, 3, 11, 9)),
                  np.zeros((2, 3, 11, 9))):
            feeds = {"x": x.astype(np.float32)}
            (want,) = want_session.run(None, feeds)
            (got,) = got_session.run(None, feeds)
            np.testing.assert_array_equal(got, want)
        # The pattern is one layer (named after the Mul that completes it), run there.
        assert got_session.backplane_network.backend_of("product") == provider
    finally:
        bort.set_runtime(None)
