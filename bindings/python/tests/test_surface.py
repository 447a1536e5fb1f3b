"""backplane.onnxruntime has every public name of onnxruntime's module and of its session,
options, value and binding classes (a walk of dir() of the real module), and the names added
last do what onnxruntime's do, checked against onnxruntime itself."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane.onnxruntime as bort

CLASSES = ["InferenceSession", "SessionOptions", "RunOptions", "NodeArg", "ModelMetadata",
           "OrtValue", "SparseTensor", "IOBinding", "OrtMemoryInfo", "OrtArenaCfg", "OrtDevice",
           "OrtEpDevice", "OrtHardwareDevice", "ModelCompiler", "LoraAdapter", "AdapterFormat"]


def public(obj):
    return sorted(n for n in dir(obj) if not n.startswith("_"))


def test_every_public_name_of_the_module_exists():
    missing = [n for n in public(onnxruntime) if not hasattr(bort, n)]
    assert missing == []


@pytest.mark.parametrize("cls", CLASSES)
def test_every_public_name_of_the_classes_exists(cls):
    real, ours = getattr(onnxruntime, cls), getattr(bort, cls)
    assert [n for n in public(real) if not hasattr(ours, n)] == []


def model_with_initializer():
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["y"])], "init",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [w])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def test_add_initializer_replaces_the_models():
    data = model_with_initializer()
    x = np.array([1.0, -1.0, 0.5], np.float32)
    new = np.array([10.0, 20.0, 30.0], np.float32)
    outs, keep = [], []
    for rt in (onnxruntime, bort):
        so = rt.SessionOptions()
        # onnxruntime reads the value's memory when the session is made: it must stay alive.
        keep.append(rt.OrtValue.ortvalue_from_numpy(new))
        so.add_initializer("w", keep[-1])
        outs.append(rt.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])
    np.testing.assert_array_equal(outs[1], outs[0])
    np.testing.assert_array_equal(outs[1], x * new)


def test_sparse_tensors_as_onnxruntime_builds_them():
    dense_shape = [3, 4]
    values = np.array([1.0, 2.0, 3.0], np.float32)
    coo = np.array([1, 6, 11], np.int64)
    inner = np.array([1, 2, 3], np.int64)
    outer = np.array([0, 1, 2, 3], np.int64)
    for make in ("coo", "csr"):
        got = []
        for rt in (onnxruntime, bort):
            device = rt.OrtDevice.make("cpu", 0)
            if make == "coo":
                st = rt.SparseTensor.sparse_coo_from_numpy(dense_shape, values, coo, device)
                got.append((st.format(), list(st.dense_shape()), st.values().tolist(),
                            st.as_coo_view().indices().tolist(), st.data_type()))
            else:
                st = rt.SparseTensor.sparse_csr_from_numpy(dense_shape, values, inner, outer, device)
                view = st.as_csrc_view()
                got.append((st.format(), list(st.dense_shape()), st.values().tolist(),
                            view.inner().tolist(), view.outer().tolist(), st.data_type()))
        assert int(got[0][0]) == int(got[1][0])
        assert got[0][1:] == got[1][1:]
    dense = bort.SparseTensor.sparse_coo_from_numpy(dense_shape, values, coo).to_dense()
    want = np.zeros(12, np.float32)
    want[coo] = values
    np.testing.assert_array_equal(dense, want.reshape(3, 4))
    v = bort.OrtValue.ort_value_from_sparse_tensor(bort.SparseTensor.sparse_csr_from_numpy(
        dense_shape, values, inner, outer))
    assert v.is_sparse_tensor()
    np.testing.assert_array_equal(v.numpy(), want.reshape(3, 4))


def test_values_copies_and_low_level_runs():
    data = model_with_initializer()
    sess = bort.InferenceSession(data)
    x = bort.OrtValue.ortvalue_from_numpy(np.array([1.0, 2.0, 3.0], np.float32))
    fetches = []
    sess.run_with_ortvaluevector(None, ["x"], [x], ["y"], fetches, [])
    np.testing.assert_array_equal(fetches[0].numpy(), [1.0, 4.0, 9.0])
    dst = bort.OrtValue.ortvalue_from_shape_and_type([3], np.float32)
    bort.copy_tensors([fetches[0]], [dst])
    np.testing.assert_array_equal(dst.numpy(), [1.0, 4.0, 9.0])
    z = sess.create_ortvalue_from_shape_and_type([2, 2], np.int64, "cpu")
    assert z.numpy().tolist() == [[0, 0], [0, 0]]
    assert [i.name for i in sess.get_input_memory_infos()] == ["Cpu"]
    assigned = sess.get_provider_graph_assignment_info()
    assert [(s.ep_name, [(n.name, n.op_type) for n in s.get_nodes()]) for s in assigned] == [
        ("CpuRefExecutionProvider", [("Mul_0", "ElementwiseBinary")])]
    assert sess.get_tuning_results() == []


def test_what_cannot_mean_anything_here_says_why():
    with pytest.raises(bort.NotImplemented, match="LoRA"):
        bort.LoraAdapter().Load("adapter.onnx_adapter")
    with pytest.raises(bort.NotImplemented, match="LoRA"):
        bort.RunOptions().add_active_adapter(None)
    with pytest.raises(bort.NotImplemented, match="backplane compile"):
        bort.ModelCompiler(bort.SessionOptions(), b"").compile_to_bytes()
    with pytest.raises(bort.Fail, match="DYNAMIC_BACKEND_PATHS"):
        bort.register_execution_provider_library("x", "/tmp/libx.so")
    so = bort.SessionOptions()
    assert not so.has_providers()
    so.add_provider("CPUExecutionProvider", {})
    assert so.has_providers()
    bort.create_and_register_allocator(bort.OrtMemoryInfo(), bort.OrtArenaCfg())
    assert bort.package_name == "onnxruntime" and bort.version == bort.__version__
