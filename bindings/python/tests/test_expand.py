"""Operators imported as graphs of simpler ones (onnx/import/expand/): Einsum, Attention,
RotaryEmbedding, GroupNormalization, MeanVarianceNormalization, DepthToSpace, SpaceToDepth,
Compress, OneHot, GatherND, CenterCropPad, LpPool, ReverseSequence, AffineGrid, Col2Im, DFT,
the windows, MaxUnpool, and CumProd (composite.rs), each on seeded data against onnxruntime
(the oracle), through backplane.onnxruntime."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane.onnxruntime as bort
from support import run_both

RNG = np.random.default_rng(3_9)
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def floats(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("bii->b", [(3, 4, 4)]),
    ("ij->", [(3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
    ("ijk->kji", [(2, 3, 4)]),
])
def test_einsum(eq, shapes):
    names = [f"x{i}" for i in range(len(shapes))]
    run_both(helper.make_node("Einsum", names, ["y"], equation=eq),
             {n: (F, floats(*s)) for n, s in zip(names, shapes)}, [("y", F)], opset=12)


@pytest.mark.parametrize("attrs,heads", [
    ({}, None), ({"is_causal": 1}, None), ({"softcap": 2.0}, None), ({"scale": 0.3}, None),
    ({"q_num_heads": 4, "kv_num_heads": 2}, "3d"),
    ({"q_num_heads": 4, "kv_num_heads": 1, "is_causal": 1}, "3d"),
])
def test_attention(attrs, heads):
    if heads == "3d":
        q, k, v = floats(2, 5, 4 * 8), floats(2, 6, attrs["kv_num_heads"] * 8), floats(2, 6, attrs["kv_num_heads"] * 8)
    else:
        q, k, v = floats(2, 3, 5, 8), floats(2, 3, 6, 8), floats(2, 3, 6, 8)
    run_both(helper.make_node("Attention", ["q", "k", "v"], ["y"], **attrs),
             {"q": (F, q), "k": (F, k), "v": (F, v)}, [("y", F)], opset=23)


def test_attention_with_mask_and_past():
    q, k, v = floats(1, 2, 3, 4), floats(1, 2, 3, 4), floats(1, 2, 3, 4)
    pk, pv = floats(1, 2, 5, 4), floats(1, 2, 5, 4)
    mask = RNG.random((3, 8)) < 0.7
    mask[:, 0] = True
    run_both(helper.make_node("Attention", ["q", "k", "v", "m", "pk", "pv"], ["y", "k2", "v2"]),
             {"q": (F, q), "k": (F, k), "v": (F, v), "m": (TensorProto.BOOL, mask),
              "pk": (F, pk), "pv": (F, pv)}, [("y", F), ("k2", F), ("v2", F)], opset=23)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding(interleaved, rotary_dim):
    x = floats(2, 3, 5, 8)
    half = (rotary_dim or 8) // 2
    cos, sin = floats(10, half), floats(10, half)
    pos = RNG.integers(0, 10, size=(2, 5)).astype(np.int64)
    run_both(helper.make_node("RotaryEmbedding", ["x", "c", "s", "p"], ["y"],
                              interleaved=interleaved, rotary_embedding_dim=rotary_dim),
             {"x": (F, x), "c": (F, cos), "s": (F, sin), "p": (I64, pos)}, [("y", F)], opset=23)


@pytest.mark.parametrize("opset,params", [(18, 2), (21, 6)])
def test_group_normalization(opset, params):
    x = floats(2, 6, 3, 4)
    run_both(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2,
                              epsilon=1e-3),
             {"x": (F, x), "s": (F, floats(params)), "b": (F, floats(params))}, [("y", F)],
             opset=opset)


def test_mean_variance_normalization():
    run_both(helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2]),
             {"x": (F, floats(2, 3, 4))}, [("y", F)], opset=13)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    run_both(helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode),
             {"x": (F, floats(2, 8, 3, 4))}, [("y", F)], opset=13)


def test_space_to_depth():
    run_both(helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=2),
             {"x": (F, floats(2, 3, 4, 6))}, [("y", F)], opset=13)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis):
    x = floats(4, 5)
    n = x.size if axis is None else x.shape[axis]
    cond = RNG.random(n) < 0.5
    cond[0] = True
    attrs = {} if axis is None else {"axis": axis}
    run_both(helper.make_node("Compress", ["x", "c"], ["y"], **attrs),
             {"x": (F, x), "c": (TensorProto.BOOL, cond)}, [("y", F)], opset=11)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    idx = RNG.integers(-5, 5, size=(3, 4)).astype(np.int64)
    depth = np.array(5, dtype=np.int64)
    values = np.array([-1.5, 2.5], dtype=np.float32)
    run_both(helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis),
             {"i": (I64, idx), "d": (I64, depth), "v": (F, values)}, [("y", F)], opset=11)


@pytest.mark.parametrize("batch_dims,data,indices", [
    (0, (3, 4, 5), (2, 2)),
    (0, (3, 4, 5), (2, 3, 1)),
    (1, (2, 4, 5), (2, 3, 1)),
    (0, (3, 4), (5, 2)),
])
def test_gather_nd(batch_dims, data, indices):
    x = floats(*data)
    k = indices[-1]
    bounds = data[batch_dims:batch_dims + k]
    idx = np.stack([RNG.integers(-b, b, size=indices[:-1]) for b in bounds], axis=-1).astype(np.int64)
    run_both(helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims),
             {"x": (F, x), "i": (I64, idx)}, [("y", F)], opset=13)


@pytest.mark.parametrize("shape,axes", [([2, 7, 3], None), ([5, 2], [1, 2]), ([6], [-1])])
def test_center_crop_pad(shape, axes):
    attrs = {} if axes is None else {"axes": axes}
    s = helper.make_tensor("s", I64, [len(shape)], shape)
    run_both(helper.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs),
             {"x": (F, floats(3, 4, 5))}, [("y", F)], inits=[s], opset=18)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype,code", [(np.float32, F), (np.int64, I64)])
def test_cumprod(exclusive, reverse, dtype, code):
    x = (RNG.integers(-3, 4, size=(3, 5))).astype(dtype)
    ax = helper.make_tensor("a", I64, [], [1])
    run_both(helper.make_node("CumProd", ["x", "a"], ["y"], exclusive=exclusive, reverse=reverse),
             {"x": (code, x)}, [("y", code)], inits=[ax], opset=26)


@pytest.mark.parametrize("p,attrs", [(1, {"kernel_shape": [3]}), (2, {"kernel_shape": [2, 2]}),
                                     (3, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                          "strides": [2, 2]})])
def test_lp_pool(p, attrs):
    shape = (1, 2, 7) if len(attrs["kernel_shape"]) == 1 else (1, 2, 6, 7)
    run_both(helper.make_node("LpPool", ["x"], ["y"], p=p, **attrs), {"x": (F, floats(*shape))},
             [("y", F)], opset=18)


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis, batch_axis):
    x = floats(4, 5, 3) if time_axis == 0 else floats(5, 4, 3)
    lens = np.array([4, 1, 3, 2, 4], np.int64)
    run_both(helper.make_node("ReverseSequence", ["x", "l"], ["y"], time_axis=time_axis,
                              batch_axis=batch_axis),
             {"x": (F, x), "l": (I64, lens)}, [("y", F)], opset=13)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("dims", [2, 3])
def test_affine_grid(align, dims):
    theta = floats(2, dims, dims + 1)
    size = [2, 3, 4, 5] if dims == 2 else [2, 3, 3, 4, 5]
    s = helper.make_tensor("s", I64, [len(size)], size)
    run_both(helper.make_node("AffineGrid", ["t", "s"], ["y"], align_corners=align),
             {"t": (F, theta)}, [("y", F)], inits=[s], opset=20)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 2]}, {"pads": [1, 0, 1, 2]},
                                   {"dilations": [2, 1]}])
def test_col2im(attrs):
    image, block = [5, 6], [2, 3]
    strides = attrs.get("strides", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    dil = attrs.get("dilations", [1, 1])
    grid = [(image[d] + pads[d] + pads[d + 2] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1
            for d in range(2)]
    x = floats(2, 3 * 6, grid[0] * grid[1])
    inits = [helper.make_tensor("i", I64, [2], image), helper.make_tensor("b", I64, [2], block)]
    run_both(helper.make_node("Col2Im", ["x", "i", "b"], ["y"], **attrs), {"x": (F, x)},
             [("y", F)], inits=inits, opset=18)


@pytest.mark.parametrize("inverse,onesided,last", [(0, 0, 1), (0, 1, 1), (0, 0, 2), (1, 0, 2),
                                                   (1, 1, 2)])
def test_dft(inverse, onesided, last):
    n = 8
    x = floats(2, 5 if (inverse and onesided) else n, 3, last)
    ax = helper.make_tensor("a", I64, [], [1])
    run_both(helper.make_node("DFT", ["x", "", "a"], ["y"], inverse=inverse, onesided=onesided),
             {"x": (F, x)}, [("y", F)], inits=[ax], opset=20, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    size = helper.make_tensor("n", I64, [], [10])
    node = helper.make_node(op, ["n"], ["y"], periodic=periodic)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["x2"]), node], "w",
                              [helper.make_tensor_value_info("x", F, [1])],
                              [helper.make_tensor_value_info("y", F, None)], [size])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    feeds = {"x": floats(1)}
    want = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = bort.InferenceSession(m.SerializeToString()).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_max_unpool():
    x = floats(1, 2, 2, 2)
    idx = np.array([[[[5, 7], [13, 15]], [[16 + 0, 16 + 3], [16 + 9, 16 + 14]]]], np.int64)
    run_both(helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
             {"x": (F, x), "i": (I64, idx)}, [("y", F)], opset=11)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3, 3]},
    {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 1, 1]},
    {"kernel_shape": [3, 2, 2], "dilations": [2, 1, 1], "group": 2},
    {"kernel_shape": [3, 3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2, 2]},
])
def test_conv_3d(attrs):
    group = attrs.get("group", 1)
    x = floats(2, 4, 7, 6, 5)
    w = floats(6, 4 // group, *attrs["kernel_shape"])
    run_both(helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs),
             {"x": (F, x), "w": (F, w), "b": (F, floats(6))}, [("y", F)], opset=13,
             rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2, 2]},
    {"kernel_shape": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 0, 1, 1, 1, 0]},
    {"kernel_shape": [3, 3, 2], "strides": [2, 2, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 3, 3], "pads": [1, 1, 1, 1, 1, 1], "count_include_pad": 1},
])
def test_pool_3d(op, attrs):
    if op == "MaxPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    run_both(helper.make_node(op, ["x"], ["y"], **attrs), {"x": (F, floats(2, 3, 7, 6, 5))},
             [("y", F)], opset=13)


@pytest.mark.parametrize("attrs,scales,sizes,shape", [
    ({"mode": "cubic"}, [1, 1, 1.7, 0.6], None, (1, 2, 5, 8)),
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, [1, 1, 0.8, 1.5], None, (1, 2, 5, 8)),
    ({"mode": "linear", "antialias": 1}, [1, 1, 0.5, 0.6], None, (1, 2, 8, 10)),
    ({"mode": "cubic", "antialias": 1, "coordinate_transformation_mode": "align_corners"}, None,
     [1, 2, 3, 4], (1, 2, 8, 10)),
    ({"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, [1, 1, 1.4, 2.3], None,
     (1, 2, 5, 4)),
    ({"mode": "nearest", "axes": [3, 2], "nearest_mode": "ceil"}, [2.0, 1.5], None, (1, 2, 4, 5)),
    ({"mode": "linear", "axes": [1], "keep_aspect_ratio_policy": "not_larger"}, None, [7], (2, 5, 3)),
    ({"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"}, None, [6, 5],
     (1, 2, 4, 5)),
    ({"mode": "linear"}, [1, 2, 1.5], None, (2, 3, 4)),
    # The Resize layer's path: 5 x 1.4f is 7 in f32 (onnxruntime's product), 6.99... in f64.
    ({"mode": "linear"}, [1, 1, 1.4, 2.3], None, (1, 2, 5, 4)),
])
def test_resize_general(attrs, scales, sizes, shape):
    inits = [helper.make_tensor("roi", F, [0], [])]
    names = ["x", "roi"]
    if scales is not None:
        inits.append(helper.make_tensor("s", F, [len(scales)], scales))
        names.append("s")
    else:
        inits.append(helper.make_tensor("z", I64, [len(sizes)], sizes))
        names += ["", "z"]
    run_both(helper.make_node("Resize", names, ["y"], **attrs), {"x": (F, floats(*shape))}, [("y", F)],
             inits=inits, opset=19, rtol=1e-4, atol=1e-5)


def test_resize_tf_crop_and_resize():
    roi = helper.make_tensor("roi", F, [8], [0, 0, 0.4, 0.6, 1, 1, 1.2, 0.7])
    s = helper.make_tensor("z", I64, [4], [1, 2, 3, 3])
    run_both(helper.make_node("Resize", ["x", "roi", "", "z"], ["y"], mode="linear",
                              coordinate_transformation_mode="tf_crop_and_resize",
                              extrapolation_value=10.0),
             {"x": (F, floats(1, 2, 4, 4))}, [("y", F)], inits=[roi, s], opset=19, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(mode, padding, align):
    x = floats(2, 3, 5, 6)
    # Coordinates reaching past the borders, so that every padding mode matters.
    grid = (RNG.random((2, 4, 7, 2)) * 3.0 - 1.5).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=align)
    if (mode, padding) != ("cubic", "border"):
        run_both(node, {"x": (F, x), "g": (F, grid)}, [("y", F)], opset=20, rtol=1e-4, atol=1e-5)
        return
    # onnxruntime's bicubic border padding differs from ONNX's definition (its reference
    # implementation, which the node tests store): that is the oracle here.
    from onnx.reference import ReferenceEvaluator
    graph = helper.make_graph([node], "gs", [helper.make_tensor_value_info("x", F, list(x.shape)),
                                             helper.make_tensor_value_info("g", F, list(grid.shape))],
                              [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 8
    feeds = {"x": x, "g": grid}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = bort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("with_window", [False, True])
def test_stft(onesided, with_window):
    signal = floats(2, 64, 1)
    inits = [helper.make_tensor("step", I64, [], [6])]
    names = ["x", "step"]
    if with_window:
        inits.append(helper.make_tensor("w", F, [16], np.hanning(16).astype(np.float32)))
        names += ["w"]
    else:
        inits.append(helper.make_tensor("len", I64, [], [16]))
        names += ["", "len"]
    run_both(helper.make_node("STFT", names, ["y"], onesided=onesided), {"x": (F, signal)},
             [("y", F)], inits=inits, opset=17, rtol=1e-4, atol=1e-4)
