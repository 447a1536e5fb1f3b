"""Operators backplane imports as compositions of existing layers (onnx/import/composite.rs,
logic.rs, loss.rs, indexing.rs' GatherElements, reduce.rs), each on seeded random data
against onnxruntime (the oracle), through backplane.onnxruntime on the default backends."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from support import run_both

RNG = np.random.default_rng(39)
F = TensorProto.FLOAT


def floats(*shape, scale=2.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("op,attrs", [
    ("Softplus", {}), ("Softsign", {}), ("Selu", {}), ("Celu", {"alpha": 0.7}),
    ("ThresholdedRelu", {"alpha": 0.5}), ("Mish", {}), ("Shrink", {"lambd": 0.8, "bias": 0.3}),
    ("Sign", {}), ("IsNaN", {}), ("IsInf", {}), ("LogSoftmax", {"axis": 1}),
    ("Hardmax", {"axis": -1}), ("LpNormalization", {"axis": 1, "p": 1}),
    ("LpNormalization", {"axis": 0, "p": 2}),
])
def test_float_unary(op, attrs):
    x = floats(3, 5)
    x[0, 1] = 0.0
    if op in ("IsNaN", "IsInf"):
        x[1, 2], x[2, 3], x[0, 4] = np.nan, np.inf, -np.inf
    out = TensorProto.BOOL if op in ("IsNaN", "IsInf") else F
    run_both(helper.make_node(op, ["x"], ["y"], **attrs), {"x": (F, x)}, [("y", out)])


def test_prelu_rms_and_swish():
    x = floats(2, 3, 4)
    run_both(helper.make_node("PRelu", ["x", "s"], ["y"]), {"x": (F, x), "s": (F, floats(4))}, [("y", F)])
    run_both(helper.make_node("RMSNormalization", ["x", "g"], ["y"], axis=-1, epsilon=1e-5),
             {"x": (F, x), "g": (F, floats(4))}, [("y", F)], opset=23)
    run_both(helper.make_node("Swish", ["x"], ["y"], alpha=1.5), {"x": (F, x)}, [("y", F)], opset=24)


@pytest.mark.parametrize("dtype,code", [(np.int32, TensorProto.INT32), (np.int64, TensorProto.INT64),
                                        (np.int8, TensorProto.INT8), (np.uint16, TensorProto.UINT16)])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_integers(dtype, code, fmod):
    info = np.iinfo(dtype)
    lo = max(info.min, -50)
    a = RNG.integers(lo, 50, size=(4, 6)).astype(dtype)
    b = RNG.integers(1, 9, size=(6,)).astype(dtype)
    if info.min < 0:
        b = (b * np.where(RNG.random(6) < 0.5, -1, 1)).astype(dtype)
    run_both(helper.make_node("Mod", ["a", "b"], ["y"], fmod=fmod), {"a": (code, a), "b": (code, b)},
             [("y", code)])


def test_mod_floats():
    run_both(helper.make_node("Mod", ["a", "b"], ["y"], fmod=1),
             {"a": (F, floats(4, 6, scale=10)), "b": (F, floats(6) + 3)}, [("y", F)])


@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(exclusive, reverse):
    axis = helper.make_tensor("axis", TensorProto.INT64, [], [1])
    run_both(helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse),
             {"x": (F, floats(3, 7))}, [("y", F)], inits=[axis])
    xi = RNG.integers(-20, 20, size=(3, 7)).astype(np.int64)
    run_both(helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse),
             {"x": (TensorProto.INT64, xi)}, [("y", TensorProto.INT64)], inits=[axis])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis):
    x = floats(4, 5)
    shape = [3, 5] if axis == 0 else [4, 3]
    size = 4 if axis == 0 else 5
    idx = RNG.integers(-size, size, size=shape).astype(np.int64)
    run_both(helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis),
             {"x": (F, x), "i": (TensorProto.INT64, idx)}, [("y", F)])


def test_trilu_tile_logic_and_topk():
    x = floats(3, 4, 5)
    for upper in (0, 1):
        k = helper.make_tensor("k", TensorProto.INT64, [], [1])
        run_both(helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper), {"x": (F, x)}, [("y", F)],
                 inits=[k])
    reps = helper.make_tensor("r", TensorProto.INT64, [3], [2, 1, 3])
    run_both(helper.make_node("Tile", ["x", "r"], ["y"]), {"x": (F, x)}, [("y", F)], inits=[reps])
    a = RNG.random((3, 4)) < 0.5
    b = RNG.random((4,)) < 0.5
    for op in ("And", "Or", "Xor"):
        run_both(helper.make_node(op, ["a", "b"], ["y"]),
                 {"a": (TensorProto.BOOL, a), "b": (TensorProto.BOOL, b)}, [("y", TensorProto.BOOL)])
    run_both(helper.make_node("Not", ["a"], ["y"]), {"a": (TensorProto.BOOL, a)}, [("y", TensorProto.BOOL)])
    for largest in (0, 1):
        kk = helper.make_tensor("k", TensorProto.INT64, [1], [3])
        run_both(helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest),
                 {"x": (F, x)}, [("v", F), ("i", TensorProto.INT64)], inits=[kk])


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_losses(reduction):
    scores = floats(4, 3, 2)
    labels = RNG.integers(0, 3, size=(4, 2)).astype(np.int64)
    labels[0, 0] = -1
    weights = np.abs(floats(3)) + 0.1
    run_both(helper.make_node("SoftmaxCrossEntropyLoss", ["s", "l", "w"], ["loss", "log_prob"],
                              reduction=reduction, ignore_index=-1),
             {"s": (F, scores), "l": (TensorProto.INT64, labels), "w": (F, weights)},
             [("loss", F), ("log_prob", F)], opset=13)
    run_both(helper.make_node("NegativeLogLikelihoodLoss", ["s", "l"], ["loss"], reduction=reduction),
             {"s": (F, scores), "l": (TensorProto.INT64, np.abs(labels))}, [("loss", F)], opset=13)


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"])
def test_composite_reductions(op):
    x = np.abs(floats(3, 4, 5)) + 0.1
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [0, 2])
    run_both(helper.make_node(op, ["x", "axes"], ["y"], keepdims=0), {"x": (F, x)}, [("y", F)],
             inits=[axes])
