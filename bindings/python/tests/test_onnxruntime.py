"""Tests of backplane.onnxruntime, the onnxruntime API on backplane, against real onnxruntime
(run by scripts/test-python.sh, like test_backplane.py: the workspace built, the PaddleOCR
classifier fetched by scripts/fetch-paddleocr.sh and the models of scripts/fetch-models.sh).

The oracle is onnxruntime itself: the same model, the same feeds, and the shim's answers
(outputs, input and output descriptions, metadata, exceptions) compared with onnxruntime's."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane
import backplane.onnxruntime as bort

from support import MODELS, PADDLE, ROOT, TARGET, plugin_dir_named  # noqa: F401
ORT_STATE = onnxruntime.capi.onnxruntime_pybind11_state



@pytest.fixture
def cpufast(tmp_path, monkeypatch):
    """The shim's runtime made afresh from DYNAMIC_BACKEND_PATHS naming a directory with
    CpuFast; forgotten afterwards."""
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    monkeypatch.setenv("DYNAMIC_BACKEND_PATHS", str(d))
    bort.set_runtime(None)
    yield d
    bort.set_runtime(None)


def ort_session(model):
    return onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])


def described(args):
    return [(a.name, a.shape, a.type) for a in args]


def symbolic_model(path=None, dims=("N", 3, "H", "W")):
    """x [N, 3, H, W] -> Conv 3x3 (8 channels, pad 1) -> Relu -> GlobalAveragePool -> y
    [N, 8, 1, 1], seeded weights; opset 13. Returns the path, or the bytes when path is None.
    `dims` declares x otherwise ([1, 3, 8, 8]: a fixed-shape model)."""
    rng = np.random.default_rng(7)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], rng.standard_normal(8 * 27).astype(np.float32))
    b = helper.make_tensor("b", TensorProto.FLOAT, [8], rng.standard_normal(8).astype(np.float32))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")],
        "symbolic_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 8, 1, 1])],
        [w, b],
        doc_string="a test graph",
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="test_onnxruntime", doc_string="symbolic dims")
    model.ir_version = 8
    model.model_version = 3
    helper.set_model_props(model, {"purpose": "test", "author": "backplane"})
    if path is None:
        return model.SerializeToString()
    onnx.save(model, path)
    return path


def test_paddleocr_cls_matches_onnxruntime(cpufast):
    """The classifier ([?, 3, ?, ?]) at its reference input, a batch of 3 and another width."""
    model = str(PADDLE / "model.onnx")
    x = np.load(PADDLE / "input.npy")
    ort = ort_session(model)
    sess = bort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert described(sess.get_inputs()) == described(ort.get_inputs())
    assert described(sess.get_outputs()) == described(ort.get_outputs())
    assert sess.get_inputs()[0].shape == [None, 3, "?", "?"]
    assert sess.backplane_backends == ["CpuFast", "CpuRef"]
    rng = np.random.default_rng(1)
    feeds = [x, rng.standard_normal((3, 3, 48, 192)).astype(np.float32),
             rng.standard_normal((1, 3, 48, 320)).astype(np.float32), x]
    for feed in feeds:
        (want,) = ort.run(None, {"x": feed})
        (got,) = sess.run(None, {"x": feed})
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    assert sess.backplane_network.layers_per_backend()["CpuFast"] > 0


def test_symbolic_dims_at_several_shapes(cpufast, tmp_path):
    model = str(symbolic_model(tmp_path / "sym.onnx"))
    ort = ort_session(model)
    sess = bort.InferenceSession(model)
    assert described(sess.get_inputs()) == described(ort.get_inputs()) == [("x", ["N", 3, "H", "W"], "tensor(float)")]
    assert described(sess.get_outputs()) == described(ort.get_outputs()) == [("y", ["N", 8, 1, 1], "tensor(float)")]
    assert str(sess.get_inputs()[0]) == str(ort.get_inputs()[0])
    rng = np.random.default_rng(2)
    for shape in [(1, 3, 8, 8), (2, 3, 16, 12), (3, 3, 5, 7), (1, 3, 1, 1), (1, 3, 8, 8), (4, 3, 32, 3)]:
        x = rng.standard_normal(shape).astype(np.float32)
        want = ort.run(["y"], {"x": x})
        got = sess.run(["y"], {"x": x})
        assert len(got) == 1 and got[0].shape == want[0].shape == (shape[0], 8, 1, 1)
        np.testing.assert_allclose(got[0], want[0], atol=1e-4)
    # A list is converted to the input's type, as onnxruntime does.
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x.tolist()})[0], ort.run(None, {"x": x.tolist()})[0], atol=1e-4)
    # So is a non-contiguous view.
    view = rng.standard_normal((2, 3, 6, 10)).astype(np.float32)[:, :, :, ::2]
    np.testing.assert_allclose(sess.run(None, {"x": view})[0], ort.run(None, {"x": view})[0], atol=1e-4)


def test_the_shape_cache_is_bounded(cpufast, tmp_path):
    """Ten shapes through a network with the default cache of 8: 8 kept, the most recent
    first."""
    sess = bort.InferenceSession(str(symbolic_model(tmp_path / "sym.onnx")))
    shapes = [(1, 3, 4 + k, 4) for k in range(10)]
    for shape in shapes:
        sess.run(None, {"x": np.ones(shape, np.float32)})
    info = sess.backplane_network.cache_info()
    assert info["entries"] == 8 and info["capacity"] == 8
    assert info["shapes"] == [{"x": list(s)} for s in reversed(shapes[2:])]
    # The session config entry sets the capacity.
    so = bort.SessionOptions()
    so.add_session_config_entry("backplane.cache_size", "3")
    small = bort.InferenceSession(str(tmp_path / "sym.onnx"), so)
    for shape in shapes[:5]:
        small.run(None, {"x": np.ones(shape, np.float32)})
    info = small.backplane_network.cache_info()
    assert info["entries"] == 3 and info["capacity"] == 3


def test_bytes_load_like_a_path(cpufast, tmp_path):
    data = symbolic_model()
    ort = ort_session(data)
    sess = bort.InferenceSession(data)
    assert described(sess.get_inputs()) == described(ort.get_inputs())
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 11)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort.run(None, {"x": x})[0], atol=1e-4)
    cls = (PADDLE / "model.onnx").read_bytes()
    sess = bort.InferenceSession(cls)
    x = np.load(PADDLE / "input.npy")
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort_session(cls).run(None, {"x": x})[0],
                               rtol=1e-3, atol=1e-4)


def test_int64_inputs_are_typed_and_checked_like_onnxruntime(cpufast):
    """all-MiniLM-L6-v2 takes int64 token ids: the shim says tensor(int64) as onnxruntime
    does (the network takes them as Signed64), and refuses int32 feeds as onnxruntime does."""
    d = MODELS / "minilm_l6_opset17"
    model = str(d / "model.onnx")
    ort = ort_session(model)
    sess = bort.InferenceSession(model)
    assert described(sess.get_inputs()) == described(ort.get_inputs())
    assert [a.type for a in sess.get_inputs()] == ["tensor(int64)", "tensor(int64)"]
    assert described(sess.get_outputs()) == described(ort.get_outputs())
    feeds = {"input_ids": np.load(d / "input_ids.npy"), "attention_mask": np.load(d / "attention_mask.npy")}
    for got, want in zip(sess.run(None, feeds), ort.run(None, feeds)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    narrow = dict(feeds, input_ids=feeds["input_ids"].astype(np.int32))
    with pytest.raises(ORT_STATE.InvalidArgument):
        ort.run(None, narrow)
    with pytest.raises(bort.InvalidArgument, match=r"input input_ids: .*Actual: \(tensor\(int32\)\).*expected: \(tensor\(int64\)\)"):
        sess.run(None, narrow)


FIXED = (1, 3, 8, 8)


@pytest.mark.parametrize("dims", [("N", 3, "H", "W"), FIXED], ids=["symbolic", "fixed"])
def test_input_errors_are_invalid_argument_naming_the_input(cpufast, tmp_path, dims):
    """Each bad feed fails on onnxruntime and on the shim, as InvalidArgument; the shim's
    message names the input (and the dimension)."""
    model = str(symbolic_model(tmp_path / "m.onnx", dims))
    ort = ort_session(model)
    sess = bort.InferenceSession(model)
    x = np.zeros((1, 3, 8, 8), np.float32)
    cases = [
        ({"x": x, "z": x}, r"Invalid input name: z"),
        ({"x": x[0]}, r"input x: Invalid rank\. Got: 3 Expected: 4"),
        ({"x": np.zeros((1, 4, 8, 8), np.float32)}, r"input x: invalid dimensions: index: 1 Got: 4 Expected: 3"),
        ({"x": x.astype(np.float64)}, r"input x: Unexpected input data type\. Actual: \(tensor\(double\)\)"),
    ]
    for feed, message in cases:
        with pytest.raises(ORT_STATE.InvalidArgument):
            ort.run(None, feed)
        with pytest.raises(bort.InvalidArgument, match=r"^\[backplane\] : 2 : INVALID_ARGUMENT : " + message):
            sess.run(None, feed)
    # A missing input is onnxruntime's ValueError, with its message.
    with pytest.raises(ValueError, match=r"^Required inputs \(\['x'\]\) are missing from input feed \(\[\]\)\.$"):
        ort.run(None, {})
    with pytest.raises(ValueError, match=r"^Required inputs \(\['x'\]\) are missing from input feed \(\[\]\)\.$"):
        sess.run(None, {})
    with pytest.raises(ORT_STATE.InvalidArgument):
        ort.run(["nope"], {"x": x})
    with pytest.raises(bort.InvalidArgument, match="Invalid output name: nope"):
        sess.run(["nope"], {"x": x})
    # The exception classes are where onnxruntime keeps them, and are Exceptions as there.
    from backplane.onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
    assert InvalidArgument is bort.InvalidArgument
    assert bort.InvalidArgument.__mro__[1:] == ORT_STATE.InvalidArgument.__mro__[1:]


def test_model_errors(cpufast, tmp_path):
    with pytest.raises(ORT_STATE.NoSuchFile):
        ort_session("/nonexistent.onnx")
    with pytest.raises(bort.NoSuchFile, match="/nonexistent.onnx"):
        bort.InferenceSession("/nonexistent.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    for source in (str(bad), bad.read_bytes()):
        with pytest.raises(ORT_STATE.InvalidProtobuf):
            ort_session(source)
        with pytest.raises(bort.InvalidProtobuf):
            bort.InferenceSession(source)
    with pytest.raises(TypeError):
        bort.InferenceSession(42)


@pytest.mark.parametrize("dims", [("N", 3, "H", "W"), FIXED], ids=["symbolic", "fixed"])
def test_providers(cpufast, tmp_path, dims):
    model = str(symbolic_model(tmp_path / "m.onnx", dims))
    assert bort.get_available_providers() == ["CpuFastExecutionProvider", "CpuRefExecutionProvider", "CPUExecutionProvider"]
    assert bort.get_device() == "CPU"
    rt = bort.get_runtime()
    assert [b["id"] for b in rt.backends()] == ["CpuRef", "CpuFast"]
    assert {b["id"]: b["file"] for b in rt.backends()}["CpuFast"] == str(cpufast / "Acme_CpuFast_backend.so")

    default = bort.InferenceSession(model)
    assert default.get_providers() == ["CPUExecutionProvider"]
    assert default.get_provider_options() == {"CPUExecutionProvider": {}}
    assert default.backplane_backends == ["CpuFast", "CpuRef"]

    ref = bort.InferenceSession(model, providers=["CpuRefExecutionProvider"])
    assert ref.get_providers() == ["CpuRefExecutionProvider", "CPUExecutionProvider"]
    assert ref.backplane_backends == ["CpuRef", "CpuFast"]
    x = np.ones(FIXED, np.float32)
    ref.run(None, {"x": x})
    assert set(ref.backplane_network.layers_per_backend()) == {"CpuRef"}

    # RapidOCR's form: (name, options) tuples; CPUExecutionProvider's options are onnxruntime's.
    tuples = bort.InferenceSession(model, providers=[
        ("CpuFastExecutionProvider", {"Threads": 2}),
        ("CPUExecutionProvider", {"arena_extend_strategy": "kSameAsRequested"})])
    assert tuples.get_providers() == ["CpuFastExecutionProvider", "CPUExecutionProvider"]
    assert tuples.get_provider_options() == {"CpuFastExecutionProvider": {"Threads": 2},
                                             "CPUExecutionProvider": {"arena_extend_strategy": "kSameAsRequested"}}
    parallel = bort.InferenceSession(model, providers=["CpuFastExecutionProvider"], provider_options=[{"Threads": 1}])
    assert parallel.get_provider_options()["CpuFastExecutionProvider"] == {"Threads": 1}
    with pytest.raises(ValueError, match="same length"):
        bort.InferenceSession(model, providers=["CPUExecutionProvider"], provider_options=[{}, {}])

    # An unknown provider is warned about and skipped, as onnxruntime does; none left is an error.
    with pytest.warns(UserWarning, match="Specified provider 'CUDAExecutionProvider' is not in available provider names"):
        skipped = bort.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert skipped.get_providers() == ["CPUExecutionProvider"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="none of the providers"):
            bort.InferenceSession(model, providers=["CUDAExecutionProvider"])

    # A provider's option reaches its backend: CpuFast refuses Threads=0 (at load, or at the
    # first run when the network loads the shape then).
    with pytest.raises((bort.EPFail, bort.RuntimeException), match="Threads=0") as caught:
        bort.InferenceSession(model, providers=[("CpuFastExecutionProvider", {"Threads": 0})]).run(None, {"x": x})
    assert isinstance(caught.value.__cause__, backplane.BackendError)

    # set_providers loads again.
    default.set_providers(["CpuRefExecutionProvider"])
    assert default.get_providers() == ["CpuRefExecutionProvider", "CPUExecutionProvider"]
    np.testing.assert_allclose(default.run(None, {"x": x})[0], ort_session(model).run(None, {"x": x})[0], atol=1e-4)


def test_session_options(cpufast):
    model = str(PADDLE / "model.onnx")
    x = np.load(PADDLE / "input.npy")
    ours, theirs = bort.SessionOptions(), onnxruntime.SessionOptions()
    for name in ["intra_op_num_threads", "inter_op_num_threads", "log_severity_level", "log_verbosity_level",
                 "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse", "enable_profiling",
                 "use_deterministic_compute", "logid", "optimized_model_filepath", "profile_file_prefix"]:
        assert getattr(ours, name) == getattr(theirs, name), name
    assert int(ours.graph_optimization_level) == int(theirs.graph_optimization_level)
    assert int(ours.execution_mode) == int(theirs.execution_mode)
    for ours_enum, theirs_enum in [(bort.GraphOptimizationLevel, onnxruntime.GraphOptimizationLevel),
                                   (bort.ExecutionMode, onnxruntime.ExecutionMode)]:
        assert {k: int(v) for k, v in ours_enum.__members__.items()} == \
               {k: int(v) for k, v in theirs_enum.__members__.items()}
    with pytest.raises(AttributeError):
        ours.no_such_option = 1

    # intra_op_num_threads reaches CpuFast as Threads: 200 is out of its range (refused at
    # load, or at the first run when the network loads the shape then).
    so = bort.SessionOptions()
    so.intra_op_num_threads = 200
    with pytest.raises((bort.EPFail, bort.RuntimeException), match="Threads=200"):
        bort.InferenceSession(model, so).run(None, {"x": x})
    # 0 (the default) is one thread per physical core, as in onnxruntime: with the count
    # made 200, the default session passes Threads=200 (and is refused for it).
    import backplane.onnxruntime as shim
    real = shim._physical_cores
    shim._physical_cores = lambda: 200
    try:
        with pytest.raises((bort.EPFail, bort.RuntimeException), match="Threads=200"):
            bort.InferenceSession(model, bort.SessionOptions()).run(None, {"x": x})
    finally:
        shim._physical_cores = real
    so.intra_op_num_threads = 2
    # RapidOCR's settings are accepted.
    so.log_severity_level = 4
    so.enable_cpu_mem_arena = False
    so.graph_optimization_level = bort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = bort.ExecutionMode.ORT_PARALLEL
    so.add_session_config_entry("session.use_env_allocators", "1")
    assert so.get_session_config_entry("session.use_env_allocators") == "1"
    sess = bort.InferenceSession(model, so)
    assert sess.get_session_options() is so
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], ort_session(model).run(None, {"x": x})[0],
                               rtol=1e-3, atol=1e-4)
    fused = sess.backplane_network.layers_per_backend()

    # ORT_DISABLE_ALL turns fusion off: the network has the layers of a load with fusion=False.
    so = bort.SessionOptions()
    so.graph_optimization_level = bort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = bort.InferenceSession(model, so)
    plain.run(None, {"x": x})
    unfused = bort.get_runtime().load(model, shapes={"x": list(x.shape)}, fusion=False).layers_per_backend()
    assert plain.backplane_network.layers_per_backend() == unfused != fused



def test_free_dimension_overrides(cpufast, tmp_path):
    """add_free_dimension_override_by_name fixes a symbolic dimension: feeds are checked
    against it, and an input it makes wholly fixed is loaded at that shape."""
    model = str(symbolic_model(tmp_path / "sym.onnx"))
    x = np.ones((1, 3, 8, 8), np.float32)
    want = ort_session(model).run(None, {"x": x})[0]
    so = bort.SessionOptions()
    for name, value in [("N", 1), ("H", 8), ("W", 8)]:
        so.add_free_dimension_override_by_name(name, value)
    fixed = bort.InferenceSession(model, so)
    assert fixed.backplane_network.inputs == [("x", [1, 3, 8, 8], np.dtype("float32"))]
    np.testing.assert_allclose(fixed.run(None, {"x": x})[0], want, atol=1e-4)
    with pytest.raises(bort.InvalidArgument, match=r"input x: invalid dimensions: index: 0 Got: 2 Expected: 1"):
        fixed.run(None, {"x": np.concatenate([x, x])})
    so = bort.SessionOptions()
    so.add_free_dimension_override_by_name("N", 1)
    partly = bort.InferenceSession(model, so)
    assert partly.get_inputs()[0].shape == ["N", 3, "H", "W"]
    np.testing.assert_allclose(partly.run(None, {"x": x})[0], want, atol=1e-4)
    with pytest.raises(bort.InvalidArgument, match=r"input x: invalid dimensions: index: 0 Got: 2 Expected: 1"):
        partly.run(None, {"x": np.ones((2, 3, 8, 8), np.float32)})


def test_metadata_matches_onnxruntime(cpufast, tmp_path):
    models = [str(PADDLE / "model.onnx"), str(MODELS / "ppocrv4_rec" / "model.onnx"),
              str(symbolic_model(tmp_path / "fixed.onnx", FIXED)), str(symbolic_model(tmp_path / "sym.onnx"))]
    for model in models:
        want, got = ort_session(model).get_modelmeta(), bort.InferenceSession(model).get_modelmeta()
        for name in ["producer_name", "graph_name", "graph_description", "domain", "description", "version",
                     "custom_metadata_map"]:
            assert getattr(got, name) == getattr(want, name), (model, name)
    assert got.version == 3 and got.custom_metadata_map == {"purpose": "test", "author": "backplane"}
    rec = bort.InferenceSession(models[1]).get_modelmeta()
    assert rec.version == 2**63 - 1  # not set by the model: onnxruntime's "no version"
    assert len(rec.custom_metadata_map["character"].splitlines()) > 6000


def test_the_module_switch(cpufast, tmp_path):
    """In a process of its own: sys.modules["onnxruntime"] = backplane.onnxruntime, then an
    application's imports, including onnxruntime.capi's exception module, get the shim."""
    code = f"""
import sys
import numpy as np
import backplane.onnxruntime
sys.modules["onnxruntime"] = backplane.onnxruntime
import onnxruntime
from onnxruntime import InferenceSession, SessionOptions, GraphOptimizationLevel, get_available_providers
from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument, Fail
assert onnxruntime is backplane.onnxruntime
assert InvalidArgument is backplane.onnxruntime.InvalidArgument
assert onnxruntime.capi.onnxruntime_pybind11_state.NoSuchFile is backplane.onnxruntime.NoSuchFile
sess = InferenceSession({str(PADDLE / "model.onnx")!r}, providers=get_available_providers())
try:
    sess.run(None, {{"x": np.zeros((1, 3, 48), np.float32)}})
except InvalidArgument as e:
    print("caught", type(e).__name__, sess.get_providers())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ("caught InvalidArgument ['CpuFastExecutionProvider', "
                                   "'CpuRefExecutionProvider', 'CPUExecutionProvider']")


def test_importing_backplane_does_not_import_the_shim():
    code = "import sys, backplane; print('backplane.onnxruntime' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


# Backend API 1.5: each numeric type onnxruntime's CPU provider runs Add, Mul and Less on, with
# numpy's dtype, in and out through the shim, against onnxruntime itself.
TYPED = [
    (TensorProto.INT8, np.int8), (TensorProto.INT16, np.int16), (TensorProto.INT32, np.int32),
    (TensorProto.INT64, np.int64), (TensorProto.UINT8, np.uint8), (TensorProto.UINT16, np.uint16),
    (TensorProto.UINT32, np.uint32), (TensorProto.UINT64, np.uint64),
    (TensorProto.FLOAT16, np.float16), (TensorProto.DOUBLE, np.float64),
]


def typed_model(path, elem):
    """(a + b) * b, a < b and Cast(a + b) to float, for one element type (opset 17)."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"]),
         helper.make_node("Mul", ["s", "b"], ["y"]),
         helper.make_node("Less", ["a", "b"], ["lt"]),
         helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT)],
        "typed",
        [helper.make_tensor_value_info("a", elem, [2, 3]), helper.make_tensor_value_info("b", elem, [3])],
        [helper.make_tensor_value_info("y", elem, [2, 3]),
         helper.make_tensor_value_info("lt", TensorProto.BOOL, [2, 3]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return str(path)


@pytest.mark.parametrize("elem,dtype", TYPED, ids=[np.dtype(d).name for _, d in TYPED])
def test_every_numeric_type_in_and_out_like_onnxruntime(tmp_path, elem, dtype):
    model = typed_model(tmp_path / "typed.onnx", elem)
    rng = np.random.default_rng(7)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        # Whole range: sums and products wrap in both runtimes.
        a = rng.integers(info.min, info.max, size=(2, 3), dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, size=(3,), dtype=dtype, endpoint=True)
    else:
        a = rng.standard_normal((2, 3)).astype(dtype)
        b = rng.standard_normal(3).astype(dtype)
    feeds = {"a": a, "b": b}
    got = bort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    if dtype == np.float16:
        # onnxruntime runs a chain of float16 nodes that have no float16 kernel in float32
        # between one pair of casts it inserts (even with its optimisations off), rounding
        # once per chain; backplane rounds after each node, as numpy's float16 does: numpy is
        # the oracle here, and the difference is at most one rounding per node.
        s = a + b
        want = [s * b, a < b, s.astype(np.float32)]
    else:
        want = ort_session(model).run(None, feeds)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype
        # Integers, booleans and float16 bit for bit; float64 within its rounding.
        if w.dtype == np.float64:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=0)
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["Softmax", "Conv", "AveragePool"])
def test_float16_layers_computed_in_float32_like_onnxruntime(tmp_path, op):
    """A float16 layer CpuRef computes in float32 (widened inputs, one rounding of the
    output), as onnxruntime runs a float16 node it has no float16 kernel for: the same values,
    within one float16 rounding (a float32 result on either side of a tie)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 2, 4, 4])
    inits = []
    if op == "Conv":
        w = np.random.default_rng(3).standard_normal((3, 2, 3, 3)).astype(np.float16)
        inits = [helper.make_tensor("w", TensorProto.FLOAT16, w.shape, w.view(np.uint16).flatten().tolist())]
        node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
        shape = [1, 3, 4, 4]
    elif op == "AveragePool":
        node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
        shape = [1, 2, 2, 2]
    else:
        node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
        shape = [1, 2, 4, 4]
    graph = helper.make_graph([node], "half", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT16, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "half.onnx")
    onnx.save(model, path)
    feeds = {"x": np.random.default_rng(5).standard_normal((1, 2, 4, 4)).astype(np.float16)}
    want = ort_session(path).run(None, feeds)[0]
    got = bort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2.0 ** -10, atol=2.0 ** -24)


def test_physical_cores_match_the_kernel_topology():
    # The default thread count: distinct (package, core) pairs, as sysfs lists them.
    import glob
    import backplane.onnxruntime as shim
    pairs = set()
    for cpu in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology"):
        with open(f"{cpu}/core_id") as c, open(f"{cpu}/physical_package_id") as p:
            pairs.add((p.read().strip(), c.read().strip()))
    assert shim._physical_cores() == (len(pairs) or os.cpu_count())
