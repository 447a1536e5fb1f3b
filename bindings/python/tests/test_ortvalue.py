"""backplane.onnxruntime's OrtValue, IOBinding, run_with_ort_values, run_async and the module
functions apps call before loading a model, each against onnxruntime doing the same (the
oracle): the same values, shapes, types and outputs."""

import threading

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane.onnxruntime as bort


def model_bytes():
    """y = Relu(x @ w + b), z = x * 2: x [2, 3] float32."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["a"]),
         helper.make_node("Relu", ["a"], ["y"]),
         helper.make_node("Mul", ["x", "two"], ["z"])],
        "values",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("w", TensorProto.FLOAT, [3, 4], w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, [4], b),
         helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.fixture(params=["onnxruntime", "backplane"])
def rt(request):
    return onnxruntime if request.param == "onnxruntime" else bort


X = np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5


def test_module_functions_an_app_calls_first():
    for module in (onnxruntime, bort):
        module.disable_telemetry_events()
        module.enable_telemetry_events()
        module.set_default_logger_severity(3)
        assert isinstance(module.get_version_string(), str)
        assert module.has_collective_ops() in (False, True)
    assert bort.get_version_string() == bort.__version__
    assert bort.OrtMemType.DEFAULT == onnxruntime.OrtMemType.DEFAULT


def test_ortvalue_matches_onnxruntime():
    for make, same_values in ((lambda m: m.OrtValue.ortvalue_from_numpy(X), True),
                              # onnxruntime leaves these uninitialised: shape and type only.
                              (lambda m: m.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32), False),
                              (lambda m: m.OrtValue.ortvalue_from_shape_and_type([4], np.int64), False)):
        ours, theirs = make(bort), make(onnxruntime)
        assert ours.shape() == theirs.shape()
        assert ours.data_type() == theirs.data_type()
        assert ours.element_type() == theirs.element_type()
        assert ours.device_name() == theirs.device_name()
        assert ours.is_tensor() and theirs.is_tensor()
        assert ours.numpy().dtype == theirs.numpy().dtype
        if same_values:
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    v = bort.OrtValue.ortvalue_from_numpy(X.copy())
    v.update_inplace(X * 3)
    np.testing.assert_array_equal(v.numpy(), X * 3)
    with pytest.raises(bort.InvalidArgument, match="cpu"):
        bort.OrtValue.ortvalue_from_numpy(X, "cuda", 0)


def test_run_with_ort_values_and_async(rt):
    sess = rt.InferenceSession(model_bytes(), providers=["CPUExecutionProvider"])
    want = onnxruntime.InferenceSession(model_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": X})
    got = sess.run_with_ort_values(["y", "z"], {"x": rt.OrtValue.ortvalue_from_numpy(X)})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-6, atol=1e-6)
    done = threading.Event()
    seen = {}

    def callback(outputs, user_data, err):
        seen.update(outputs=outputs, user_data=user_data, err=err)
        done.set()

    sess.run_async(None, {"x": X}, callback, "token")
    assert done.wait(10)
    assert seen["user_data"] == "token" and not seen["err"]
    for g, w in zip(seen["outputs"], want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_io_binding(rt):
    sess = rt.InferenceSession(model_bytes(), providers=["CPUExecutionProvider"])
    want = onnxruntime.InferenceSession(model_bytes(), providers=["CPUExecutionProvider"]).run(None, {"x": X})
    # Inputs three ways, outputs allocated by the run or written into a bound value.
    z_value = rt.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    for bind in ("cpu", "ortvalue", "pointer"):
        binding = sess.io_binding()
        x = np.ascontiguousarray(X)
        if bind == "cpu":
            binding.bind_cpu_input("x", x)
        elif bind == "ortvalue":
            binding.bind_ortvalue_input("x", rt.OrtValue.ortvalue_from_numpy(x))
        else:
            binding.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
        binding.bind_output("y")
        binding.bind_ortvalue_output("z", z_value)
        sess.run_with_iobinding(binding)
        outputs = binding.copy_outputs_to_cpu()
        assert len(outputs) == 2
        np.testing.assert_allclose(outputs[0], want[0], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(outputs[1], want[1], rtol=1e-6, atol=1e-6)
        # The bound value holds the output itself.
        np.testing.assert_allclose(z_value.numpy(), want[1], rtol=1e-6, atol=1e-6)
        assert [v.shape() for v in binding.get_outputs()] == [[2, 4], [2, 3]]
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
