"""Models whose shapes or branches depend on values computed at run time (issue 38), run
through backplane.onnxruntime and compared with onnxruntime itself (the oracle): an `If` on an
input, branches of different output shapes, a `Reshape` and an `Expand` by int64 shape
arithmetic on run-time values, and a `Range` to a computed bound feeding a `Gather`.
Each model is called several times with changing values, as an application would; the four
that issue 38's "done when" names (an `If` on an input, a `Loop` with a run-time trip count,
`NonZero` into `Gather`, int64 shape arithmetic on run-time values) also through `backplane
run` and the C API (`everywhere`)."""

import ctypes
import subprocess

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane.onnxruntime as bort

from support import TARGET


def sessions(model):
    data = model.SerializeToString()
    ort = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    ours = bort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return ort, ours


def make(nodes, inputs, outputs, inits=(), opset=13):
    graph = helper.make_graph(nodes, "dynamic", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def same(ort, ours, feeds):
    want = ort.run(None, feeds)
    got = ours.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(g, w)
    return got


def t(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_if_on_a_scalar_input_with_branches_of_different_shapes(tmp_path):
    rng = np.random.default_rng(38)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    then_branch = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["then_out"])],
        "then", [], [t("then_out", TensorProto.FLOAT, [1, "C", 5, 5])])
    else_branch = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["else_out"])],
        "else", [], [t("else_out", TensorProto.FLOAT, [1, "C", 5, 5])],
        [helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0])])
    model = make(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        [t("cond", TensorProto.BOOL, []), t("x", TensorProto.FLOAT, [1, 2, 5, 5])],
        [t("y", TensorProto.FLOAT, [1, "C", 5, 5])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())])
    ort, ours = sessions(model)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    shapes = []
    for cond in [True, False, True, False]:
        (y,) = same(ort, ours, {"cond": np.array(cond), "x": x})
        shapes.append(y.shape)
    assert shapes == [(1, 4, 5, 5), (1, 2, 5, 5)] * 2
    everywhere(model, [{"cond": np.array(c), "x": x} for c in (True, False)], tmp_path)


def test_reshape_and_expand_by_int64_arithmetic_on_run_time_values(tmp_path):
    # target = s * k; y = Reshape(x, target); z = Expand(b, Concat(n, [3]))
    model = make(
        [helper.make_node("Mul", ["s", "k"], ["target"]),
         helper.make_node("Reshape", ["x", "target"], ["y"]),
         helper.make_node("Concat", ["n", "three"], ["shape"], axis=0),
         helper.make_node("Expand", ["b", "shape"], ["z"])],
        [t("x", TensorProto.FLOAT, [4, 6]), t("s", TensorProto.INT64, [2]),
         t("k", TensorProto.INT64, [2]), t("b", TensorProto.FLOAT, [1, 3]),
         t("n", TensorProto.INT64, [1])],
        [t("y", TensorProto.FLOAT, ["A", "B"]), t("z", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor("three", TensorProto.INT64, [1], [3])])
    ort, ours = sessions(model)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    b = np.array([[1.0, -2.0, 0.5]], dtype=np.float32)
    for s, k, n in [([2, 6], [1, 2], 2), ([12, 1], [2, 1], 5), ([2, 6], [1, 2], 2), ([3, 4], [2, 1], 1)]:
        y, z = same(ort, ours, {"x": x, "s": np.array(s, np.int64), "k": np.array(k, np.int64),
                                "b": b, "n": np.array([n], np.int64)})
        assert y.shape == (s[0] * k[0], s[1] * k[1])
        assert z.shape == (n, 3)
    everywhere(model, [{"x": x, "s": np.array([3, 4], np.int64), "k": np.array([1, 2], np.int64),
                        "b": b, "n": np.array([4], np.int64)}], tmp_path)


def test_range_to_a_computed_bound_feeds_a_gather():
    # n = int64(ReduceMax(x)); idx = Range(0, n, 1); y = Gather(table, idx)
    table = np.arange(40, dtype=np.float32).reshape(10, 4) / 7
    model = make(
        [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
         helper.make_node("Cast", ["m"], ["n"], to=TensorProto.INT64),
         helper.make_node("Range", ["zero", "n", "one"], ["idx"]),
         helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)],
        [t("x", TensorProto.FLOAT, [3])],
        [t("y", TensorProto.FLOAT, ["N", 4]), t("idx", TensorProto.INT64, ["N"])],
        [helper.make_tensor("table", TensorProto.FLOAT, table.shape, table.ravel()),
         helper.make_tensor("zero", TensorProto.INT64, [], [0]),
         helper.make_tensor("one", TensorProto.INT64, [], [1])])
    ort, ours = sessions(model)
    for x in [[1.0, 3.5, 2.0], [7.0, 0.0, 0.0], [1.0, 3.5, 2.0], [0.5, 0.2, 0.1]]:
        y, idx = same(ort, ours, {"x": np.array(x, np.float32)})
        assert idx.shape == (int(max(x)),)


def test_a_run_time_shape_that_does_not_fit_is_an_error_and_the_session_goes_on():
    model = make(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        [t("x", TensorProto.FLOAT, [2, 3]), t("s", TensorProto.INT64, [2])],
        [t("y", TensorProto.FLOAT, ["A", "B"])])
    ort, ours = sessions(model)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(Exception, match="cannot reshape"):
        ours.run(None, {"x": x, "s": np.array([4, 4], np.int64)})
    same(ort, ours, {"x": x, "s": np.array([3, 2], np.int64)})


def test_loop_with_a_run_time_trip_count_carries_and_stacks(tmp_path):
    # for i in range(M): acc = acc + x * i; scan out acc
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body",
        [t("i", TensorProto.INT64, []), t("cond_in", TensorProto.BOOL, []),
         t("acc_in", TensorProto.FLOAT, [3])],
        [t("cond_out", TensorProto.BOOL, []), t("acc_out", TensorProto.FLOAT, [3]),
         t("scan", TensorProto.FLOAT, [3])])
    model = make(
        [helper.make_node("Loop", ["M", "", "acc0"], ["acc", "steps"], body=body)],
        [t("M", TensorProto.INT64, []), t("x", TensorProto.FLOAT, [3]),
         t("acc0", TensorProto.FLOAT, [3])],
        [t("acc", TensorProto.FLOAT, [3]), t("steps", TensorProto.FLOAT, ["S", 3])])
    ort, ours = sessions(model)
    x = np.array([1.0, -0.5, 2.0], np.float32)
    acc0 = np.array([0.25, 0.0, -1.0], np.float32)
    for m in [3, 1, 5, 3]:
        acc, steps = same(ort, ours, {"M": np.array(m, np.int64), "x": x, "acc0": acc0})
        assert steps.shape == (m, 3)
    everywhere(model, [{"M": np.array(m, np.int64), "x": x, "acc0": acc0} for m in (2, 4)],
               tmp_path)


def test_loop_while_a_condition_computed_by_the_body_holds():
    # while sum(y) < limit (at most 20 times): y = y * 2
    body = helper.make_graph(
        [helper.make_node("Mul", ["y_in", "two"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["cond_out"])],
        "body",
        [t("i", TensorProto.INT64, []), t("cond_in", TensorProto.BOOL, []),
         t("y_in", TensorProto.FLOAT, [2])],
        [t("cond_out", TensorProto.BOOL, []), t("y_out", TensorProto.FLOAT, [2])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = make(
        [helper.make_node("Loop", ["max", "go", "y0"], ["y"], body=body)],
        [t("y0", TensorProto.FLOAT, [2]), t("limit", TensorProto.FLOAT, []),
         t("go", TensorProto.BOOL, [])],
        [t("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("max", TensorProto.INT64, [], [20])])
    ort, ours = sessions(model)
    y0 = np.array([0.5, 0.25], np.float32)
    for limit, go in [(10.0, True), (100.0, True), (10.0, False), (1.0, True), (10.0, True)]:
        same(ort, ours, {"y0": y0, "limit": np.array(limit, np.float32), "go": np.array(go)})


def test_non_zero_feeds_a_gather(tmp_path):
    # idx = NonZero(x) [1, k]; y = Gather(x, Reshape(idx, [-1])); and NonZero of a matrix.
    model = make(
        [helper.make_node("NonZero", ["x"], ["idx"]),
         helper.make_node("Reshape", ["idx", "flat"], ["i"]),
         helper.make_node("Gather", ["x", "i"], ["y"], axis=0),
         helper.make_node("NonZero", ["m"], ["where"])],
        [t("x", TensorProto.FLOAT, [6]), t("m", TensorProto.INT32, [2, 3])],
        [t("y", TensorProto.FLOAT, ["K"]), t("where", TensorProto.INT64, [2, "J"])],
        [helper.make_tensor("flat", TensorProto.INT64, [1], [-1])])
    ort, ours = sessions(model)
    m = np.array([[0, 4, 0], [-1, 0, 7]], np.int32)
    for x in [[0.0, 1.5, 0.0, -2.0, 3.0, 0.0], [1.0] * 6, [0.0, 0.0, 0.0, 0.0, 0.0, 9.0],
              [0.0, 1.5, 0.0, -2.0, 3.0, 0.0]]:
        y, where = same(ort, ours, {"x": np.array(x, np.float32), "m": m})
        assert y.shape == (sum(v != 0 for v in x),)
    everywhere(model, [{"x": np.array([0.0, 1.5, 0.0, -2.0, 3.0, 0.0], np.float32), "m": m}],
               tmp_path)


# ---------------------------------------------------------------------------------------
# The same models through `backplane run` and the C API (libbackplane_c.so, by ctypes),
# against onnxruntime.

ONNX_CODES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
              np.dtype(np.uint16): 4, np.dtype(np.int16): 5, np.dtype(np.int32): 6,
              np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.float16): 10,
              np.dtype(np.float64): 11, np.dtype(np.uint32): 12, np.dtype(np.uint64): 13}
DTYPES = {code: dtype for dtype, code in ONNX_CODES.items()}


class BpTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("rank", ctypes.c_size_t),
                ("data", ctypes.c_void_p), ("bytes", ctypes.c_size_t)]


def c_library():
    lib = ctypes.CDLL(str(TARGET / "libbackplane_c.so"))
    lib.bp_runtime_new.restype = ctypes.c_void_p
    lib.bp_runtime_new.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
    lib.bp_runtime_free.argtypes = [ctypes.c_void_p]
    lib.bp_network_load.restype = ctypes.c_void_p
    lib.bp_network_load.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    lib.bp_network_free.argtypes = [ctypes.c_void_p]
    lib.bp_network_run_alloc.restype = ctypes.c_int32
    lib.bp_network_run_alloc.argtypes = [
        ctypes.c_void_p, ctypes.POINTER(BpTensor), ctypes.c_size_t,
        ctypes.POINTER(ctypes.POINTER(BpTensor)), ctypes.POINTER(ctypes.c_size_t)]
    lib.bp_tensors_free.argtypes = [ctypes.POINTER(BpTensor), ctypes.c_size_t]
    lib.bp_last_error.restype = ctypes.c_char_p
    return lib


def run_c(lib, net, feeds):
    """One bp_network_run_alloc call: the outputs as numpy arrays, in the model's order."""
    keep = []
    inputs = (BpTensor * len(feeds))()
    for k, (name, value) in enumerate(feeds.items()):
        # (np.ascontiguousarray would make a 0-d array 1-d.)
        value = np.array(value, order="C", copy=True)
        shape = (ctypes.c_int64 * max(value.ndim, 1))(*value.shape)
        keep += [value, shape]
        inputs[k] = BpTensor(name.encode(), ONNX_CODES[value.dtype], shape, value.ndim,
                             value.ctypes.data, value.nbytes)
    out = ctypes.POINTER(BpTensor)()
    m = ctypes.c_size_t()
    status = lib.bp_network_run_alloc(net, inputs, len(feeds), ctypes.byref(out),
                                      ctypes.byref(m))
    assert status == 0, lib.bp_last_error().decode()
    try:
        result = []
        for k in range(m.value):
            t = out[k]
            shape = [t.shape[d] for d in range(t.rank)]
            data = ctypes.string_at(t.data, t.bytes) if t.bytes else b""
            result.append(np.frombuffer(data, DTYPES[t.dtype]).reshape(shape).copy())
        return result
    finally:
        lib.bp_tensors_free(out, m.value)


def everywhere(model, calls, tmp_path):
    """Each of `calls` (feeds) through onnxruntime, backplane.onnxruntime, `backplane run`
    and the C API: every output equal to onnxruntime's (floats within 1e-5)."""
    ort, ours = sessions(model)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    names = [o.name for o in model.graph.output]
    lib = c_library()
    rt = lib.bp_runtime_new(None, 0)
    assert rt, lib.bp_last_error().decode()
    net = lib.bp_network_load(rt, str(path).encode(), b"CpuRef")
    assert net, lib.bp_last_error().decode()
    try:
        for k, feeds in enumerate(calls):
            want = same(ort, ours, feeds)
            args = [str(TARGET / "backplane"), "run", str(path), "--output-dir",
                    str(tmp_path / f"out{k}")]
            for name, value in feeds.items():
                np.save(tmp_path / f"{name}{k}.npy", value)
                args += ["--input", f"{name}={tmp_path / f'{name}{k}.npy'}"]
            done = subprocess.run(args, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            from_cli = [np.load(tmp_path / f"out{k}" / f"{n}.npy") for n in names]
            from_c = run_c(lib, net, feeds)
            for got in (from_cli, from_c):
                for g, w in zip(got, want):
                    assert g.shape == w.shape and g.dtype == w.dtype
                    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    finally:
        lib.bp_network_free(net)
        lib.bp_runtime_free(rt)


def test_scan_with_directions_and_axes():
    # state = state + x_t (x scanned backwards along axis 1); y_t = state * 2 stacked along
    # axis 1 (in reverse order).
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "two"], ["y_t"])],
        "body",
        [t("s_in", TensorProto.FLOAT, [2]), t("x_t", TensorProto.FLOAT, [2])],
        [t("s_out", TensorProto.FLOAT, [2]), t("y_t", TensorProto.FLOAT, [2])],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = make(
        [helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                          scan_input_axes=[1], scan_input_directions=[1],
                          scan_output_axes=[1], scan_output_directions=[1])],
        [t("s0", TensorProto.FLOAT, [2]), t("x", TensorProto.FLOAT, [2, 5])],
        [t("s", TensorProto.FLOAT, [2]), t("y", TensorProto.FLOAT, [2, 5])], opset=16)
    ort, ours = sessions(model)
    rng = np.random.default_rng(9)
    for _ in range(2):
        same(ort, ours, {"s0": rng.standard_normal(2).astype(np.float32),
                         "x": rng.standard_normal((2, 5)).astype(np.float32)})
