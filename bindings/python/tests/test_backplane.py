"""Tests of the Python package `backplane` (run by scripts/test-python.sh, inside the
project's venv, after `cargo build --workspace` has built the test plugins)."""

import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane

from support import MODELS, PADDLE, ROOT, TARGET, plugin_dir_named  # noqa: F401



def relu_add_model(path):
    """x -> Relu -> Add(bias) -> y, float32 [2, 3] (opset 13)."""
    bias = helper.make_tensor("bias", TensorProto.FLOAT, [3], [0.5, -1.0, 2.0])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "bias"], ["y"], name="add")],
        "relu_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_runtime_and_report(tmp_path):
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    (d / "README.txt").write_text("not a plugin")
    rt = backplane.Runtime(paths=[d])
    assert rt.api_version == "1.5"
    report = rt.report()
    assert report["api_version"] == "1.5"
    assert report["paths"] == [{"path": str(d), "status": "ok", "reason": None}]
    by_file = {Path(c["file"]).name: c for c in report["candidates"]}
    assert by_file["Acme_CpuFast_backend.so"]["status"] == "registered"
    assert by_file["README.txt"]["status"] == "ignored"
    assert by_file["README.txt"]["reason"] == "name_mismatch"
    backends = {b["id"]: b for b in rt.backends()}
    assert backends["CpuRef"]["source"] == "builtin"
    assert backends["CpuFast"]["source"] == "dynamic"
    assert backends["CpuFast"]["version"] == "1.5"
    assert backends["CpuFast"]["file"] == str(d / "Acme_CpuFast_backend.so")
    # A string is a ':'-separated list, as DYNAMIC_BACKEND_PATHS.
    assert [b["id"] for b in backplane.Runtime(paths=str(d)).backends()] == ["CpuRef", "CpuFast"]
    assert [b["id"] for b in backplane.Runtime(paths=[d], builtin=False).backends()] == ["CpuFast"]


def test_environment_variable(tmp_path, monkeypatch):
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    monkeypatch.setenv("DYNAMIC_BACKEND_PATHS", str(d))
    assert [b["id"] for b in backplane.Runtime().backends()] == ["CpuRef", "CpuFast"]


def test_paddleocr_matches_onnxruntime(tmp_path):
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    x = np.load(PADDLE / "input.npy")
    session = onnxruntime.InferenceSession(str(PADDLE / "model.onnx"), providers=["CPUExecutionProvider"])
    (name,) = [o.name for o in session.get_outputs()]
    expected = session.run(None, {"x": x})[0]
    rt = backplane.Runtime(paths=[d])
    # The layer counts are change detectors (they move when a rewrite or a fusion changes);
    # the oracle is onnxruntime's output, compared below.
    for backends, per_backend in [
        (["CpuFast", "CpuRef"], {"CpuFast": 84, "CpuRef": 233}),
        (["CpuRef"], {"CpuRef": 430}),
    ]:
        net = rt.load(PADDLE / "model.onnx", backends=backends,
                      options={"CpuFast": {"Threads": 2}}, shapes={"x": list(x.shape)})
        assert net.inputs == [("x", [1, 3, 48, 192], np.dtype("float32"))]
        # Outputs as the model declares them (onnxruntime's get_outputs): the batch is
        # dynamic there (-1).
        assert net.outputs == [(name, [None, 2], np.dtype("float32"))]
        out = net.run({"x": x})
        assert list(out) == [name]
        assert out[name].dtype == np.float32 and out[name].shape == (1, 2)
        np.testing.assert_allclose(out[name], expected, rtol=1e-3, atol=1e-4)
        assert net.layers_per_backend() == per_backend
        assert backends[0] in net.explain()
        summary = net.explain("summary")
        assert "compute layers" in summary and " Constant " not in summary
    with pytest.raises(ValueError, match='^detail: "every" is not summary, layers or all$'):
        net.explain("every")


def test_a_compiled_network_loads_like_its_model(tmp_path):
    """rt.load takes a compiled network (`backplane compile`, issue 30): the model's bytes,
    its inputs at the compiled shapes; made for an absent backend it is UnsupportedError
    unless reoptimize=True."""
    import subprocess
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    bpn = tmp_path / "cls.bpn"
    subprocess.run([str(TARGET / "backplane"), "compile", str(PADDLE / "model.onnx"),
                    "--path", str(d), "--backends", "CpuFast,CpuRef",
                    "--shape", "x=1,3,48,192", "-o", str(bpn)], check=True, capture_output=True)
    x = np.load(PADDLE / "input.npy")
    rt = backplane.Runtime(paths=[d])
    from_model = rt.load(PADDLE / "model.onnx", backends=["CpuFast", "CpuRef"],
                         shapes={"x": [1, 3, 48, 192]}).run({"x": x})
    for source in [bpn, bpn.read_bytes()]:
        net = rt.load(source)
        assert net.inputs == [("x", [1, 3, 48, 192], np.dtype("float32"))]
        assert net.layers_per_backend() == {"CpuFast": 84, "CpuRef": 233}
        out = net.run({"x": x})
        assert {k: v.tobytes() for k, v in out.items()} == \
            {k: v.tobytes() for k, v in from_model.items()}
    bare = backplane.Runtime(paths=[])
    with pytest.raises(backplane.UnsupportedError,
                       match=r"compiled for backend CpuFast \(release 0\.1\.0, Backend API 1\.5\), "
                             r"which is not registered here; give --reoptimize"):
        bare.load(bpn)
    again = bare.load(bpn, reoptimize=True)
    assert again.layers_per_backend() == {"CpuRef": 430}
    np.testing.assert_allclose(again.run({"x": x})[next(iter(from_model))],
                               next(iter(from_model.values())), rtol=1e-3, atol=1e-4)
    (tmp_path / "cut.bpn").write_bytes(bpn.read_bytes()[:1000])
    with pytest.raises(backplane.ModelError, match="past the end of the file"):
        rt.load(tmp_path / "cut.bpn")


def test_out_of_process_backends(tmp_path, monkeypatch):
    """CpuFast in its own process gives PaddleOCR's output bit for bit; a plugin that
    segfaults in its third execute raises BackendError naming the signal, is faulted, and a
    new load runs on CpuRef."""
    monkeypatch.setenv("BACKPLANE_PROBE", str(TARGET / "backplane"))
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    x = np.load(PADDLE / "input.npy")
    outputs = []
    for oop in (None, ["CpuFast"]):
        rt = backplane.Runtime(paths=[d], out_of_process=oop)
        pid = {b["id"]: b["out_of_process_pid"] for b in rt.backends()}["CpuFast"]
        assert (pid is None) == (oop is None)
        net = rt.load(PADDLE / "model.onnx", backends=["CpuFast", "CpuRef"], shapes={"x": list(x.shape)})
        outputs.append(net.run({"x": x}))
    (name,) = outputs[0]
    assert outputs[0][name].tobytes() == outputs[1][name].tobytes()

    d = plugin_dir_named(tmp_path, "Test_ExecSegv_backend.so", "libbp_test_exec_segfaults.so")
    rt = backplane.Runtime(paths=[d], out_of_process=["ExecSegv"])
    model = relu_add_model(tmp_path / "relu_add.onnx")
    net = rt.load(model, backends=["ExecSegv", "CpuRef"])
    assert net.backend_of("relu") == "ExecSegv"
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], dtype=np.float32)
    expected = np.maximum(x, 0) + np.array([0.5, -1.0, 2.0], dtype=np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(net.run({"x": x})["y"], expected)
    with pytest.raises(backplane.BackendError, match=r"killed by signal 11 \(SIGSEGV\) during execute"):
        net.run({"x": x})
    assert {b["id"]: b["faulted"] for b in rt.backends()}["ExecSegv"]
    again = rt.load(model, backends=["ExecSegv", "CpuRef"])
    assert again.backend_of("relu") == "CpuRef"
    np.testing.assert_array_equal(again.run({"x": x})["y"], expected)


def test_sentence_encoder_takes_int64_like_onnxruntime():
    """all-MiniLM-L6-v2 (scripts/fetch-models.sh): int64 token ids and mask, as onnxruntime
    takes them and as the network declares them (Backend API 1.5's Signed64); the embedding
    matches onnxruntime's. An int32 array is refused, as onnxruntime refuses it, and a token id
    beyond the vocabulary fails the run naming the index (never wrapped)."""
    d = MODELS / "minilm_l6_opset17"
    feeds = {"input_ids": np.load(d / "input_ids.npy"), "attention_mask": np.load(d / "attention_mask.npy")}
    assert feeds["input_ids"].dtype == np.int64
    net = backplane.Runtime(paths="").load(d / "model.onnx")
    assert net.inputs == [("input_ids", [1, 16], np.dtype("int64")),
                          ("attention_mask", [1, 16], np.dtype("int64"))]
    out = net.run(feeds)
    np.testing.assert_allclose(out["sentence_embedding"], np.load(d / "sentence_embedding.npy"),
                               rtol=1e-3, atol=1e-4)
    too_big = feeds | {"input_ids": np.full((1, 16), 1 << 40, np.int64)}
    with pytest.raises(backplane.BackendError,
                       match=r"index 1099511627776 is out of range for a dimension of 30522$"):
        net.run(too_big)
    with pytest.raises(backplane.InputError, match=r"^input input_ids: dtype int32, the network needs int64$"):
        net.run(feeds | {"input_ids": feeds["input_ids"].astype(np.int32)})


def test_a_non_contiguous_input_is_read_correctly(tmp_path):
    model = relu_add_model(tmp_path / "m.onnx")
    rt = backplane.Runtime(paths="")
    net = rt.load(model)
    x = np.arange(-3, 3, dtype=np.float32).reshape(3, 2).T  # a transposed view
    assert not x.flags["C_CONTIGUOUS"]
    out = net.run({"x": x})["y"]
    np.testing.assert_array_equal(out, np.maximum(x, 0) + np.array([0.5, -1.0, 2.0], np.float32))


def test_wrong_inputs_are_input_errors(tmp_path):
    model = relu_add_model(tmp_path / "m.onnx")
    net = backplane.Runtime(paths="").load(model)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(backplane.InputError, match=r'^no network input named "z" \(the network has \["x"\]\)$'):
        net.run({"z": x})
    with pytest.raises(backplane.InputError, match=r'^no network input named "z" '):
        net.run({"x": x, "z": np.zeros(3, np.int64)})
    with pytest.raises(backplane.InputError, match=r"^input x: dimension 0 is 3, the model requires 2 \(declared \[2, 3\]\)$"):
        net.run({"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(backplane.InputError, match=r"^input x: dtype int64, the network needs float32$"):
        net.run({"x": np.zeros((2, 3), np.int64)})
    with pytest.raises(backplane.InputError, match=r"^network input x is not bound$"):
        net.run({})
    with pytest.raises(backplane.InputError, match=r"^input x: a numpy array is needed, got list$"):
        net.run({"x": [[0.0] * 3] * 2})
    assert issubclass(backplane.InputError, backplane.Error)


def test_model_and_preference_errors(tmp_path):
    rt = backplane.Runtime(paths="")
    with pytest.raises(backplane.ModelError, match="^cannot read /nonexistent.onnx: "):
        rt.load("/nonexistent.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(backplane.ModelError, match="^malformed ONNX model"):
        rt.load(bad)
    with pytest.raises(backplane.UnsupportedError, match="NoSuchBackend"):
        rt.load(relu_add_model(tmp_path / "m.onnx"), backends=["NoSuchBackend"])
    with pytest.raises(backplane.Error,
                       match=r'^backend option "CpuFast":"": the backend id and the key must not be empty$'):
        rt.load(tmp_path / "m.onnx", options={"CpuFast": {"": 2}})
    with pytest.raises(TypeError, match="^backend option values are bool, int, float or str, not list$"):
        rt.load(tmp_path / "m.onnx", options={"CpuFast": {"Threads": [2]}})
    with pytest.raises(OverflowError, match="an integer must fit in 64 bits"):
        rt.load(tmp_path / "m.onnx", options={"CpuFast": {"Threads": 2**64}})
    with pytest.raises(backplane.Error, match=r"^input x: shape \[65536, 65536, 2\] has more than 2147483647 elements$"):
        rt.load(tmp_path / "m.onnx", shapes={"x": [65536, 65536, 2]})


def test_a_backend_option_reaches_cpufast(tmp_path):
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    x = np.load(PADDLE / "input.npy")
    rt = backplane.Runtime(paths=[d])
    with pytest.raises(backplane.BackendError, match="CpuFast: option Threads=0 is not a whole number in 1..=64"):
        rt.load(PADDLE / "model.onnx", backends=["CpuFast", "CpuRef"],
                options={"CpuFast": {"Threads": 0}}, shapes={"x": list(x.shape)})
    # A string is read as the CLI's --backend-option text (onnxruntime's provider options are
    # always strings): "2" is the number 2, and "0" the number 0, refused as above.
    net = rt.load(PADDLE / "model.onnx", backends=["CpuFast", "CpuRef"],
                  options={"CpuFast": {"Threads": "2"}}, shapes={"x": list(x.shape)})
    one = rt.load(PADDLE / "model.onnx", backends=["CpuFast", "CpuRef"],
                  options={"CpuFast": {"Threads": 1}}, shapes={"x": list(x.shape)})
    for got, want in zip(net.run({"x": x}).values(), one.run({"x": x}).values()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(backplane.BackendError, match="CpuFast: option Threads=0 is not a whole number in 1..=64"):
        rt.load(PADDLE / "model.onnx", backends=["CpuFast", "CpuRef"],
                options={"CpuFast": {"Threads": "0"}}, shapes={"x": list(x.shape)})
    with pytest.raises(backplane.BackendError, match='CpuFast: option Threads="two" is not a whole number in 1..=64'):
        rt.load(PADDLE / "model.onnx", backends=["CpuFast", "CpuRef"],
                options={"CpuFast": {"Threads": "two"}}, shapes={"x": list(x.shape)})


def test_a_backend_that_faults(tmp_path):
    d = plugin_dir_named(tmp_path, "Test_PanicExecute_backend.so", "examples/libfault_panic_execute.so")
    model = relu_add_model(tmp_path / "m.onnx")
    rt = backplane.Runtime(paths=[d])
    net = rt.load(model, backends=["PanicExecute", "CpuRef"])
    assert net.backend_of("relu") == "PanicExecute"
    x = np.ones((2, 3), np.float32)
    with pytest.raises(backplane.BackendFaultError, match="PanicExecute") as caught:
        net.run({"x": x})
    assert "panicked" in str(caught.value)
    assert isinstance(caught.value, backplane.BackendError)
    (faulty,) = [b for b in rt.backends() if b["id"] == "PanicExecute"]
    assert faulty["faulted"] is True
    # A new network of this runtime does without it, and runs.
    again = rt.load(model, backends=["PanicExecute", "CpuRef"])
    assert again.layers_per_backend() == {"CpuRef": 5}
    np.testing.assert_array_equal(again.run({"x": x})["y"], np.array([[1.5, 0.0, 3.0]] * 2, np.float32))


def test_threads_run_concurrently_and_agree(tmp_path):
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    x = np.load(PADDLE / "input.npy")
    rt = backplane.Runtime(paths=[d])
    net = rt.load(PADDLE / "model.onnx", shapes={"x": list(x.shape)})
    (name,) = [n for n, _, _ in net.outputs]
    first = net.run({"x": x})[name]
    other = backplane.Runtime(paths="").load(relu_add_model(tmp_path / "m.onnx"))
    failures = []

    def work(k):
        try:
            for _ in range(10):
                if k % 2:
                    assert np.array_equal(net.run({"x": x})[name], first)
                else:
                    y = other.run({"x": np.full((2, 3), -1.0, np.float32)})["y"]
                    assert np.array_equal(y, np.array([[0.5, -1.0, 2.0]] * 2, np.float32))
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_model_metadata_matches_onnx():
    """The metadata of the PP-OCRv4 recogniser (its 13,245-character list is a named string)
    and the PaddleOCR classifier, against what the onnx package reads from the same files."""
    models = MODELS
    rt = backplane.Runtime()
    for name, shape in [("ppocrv4_rec", [1, 3, 48, 320]), ("paddleocr_cls", [1, 3, 48, 192])]:
        path = models / name / "model.onnx"
        want = onnx.load(str(path), load_external_data=False)
        got = rt.load(path, backends=["CpuRef"], shapes={"x": shape}).metadata()
        assert got == {
            "producer_name": want.producer_name,
            "graph_name": want.graph.name,
            "graph_description": want.graph.doc_string,
            "domain": want.domain,
            "description": want.doc_string,
            "version": want.model_version,
            "custom_metadata_map": {p.key: p.value for p in want.metadata_props},
        }
    assert len(got["custom_metadata_map"]) == 0
    rec = rt.load(models / "ppocrv4_rec" / "model.onnx", backends=["CpuRef"],
                  shapes={"x": [1, 3, 48, 320]}).metadata()
    assert len(rec["custom_metadata_map"]["character"]) == 13245



def constant_bomb(elements, outputs):
    """A model of a few hundred bytes that declares ``elements * 4 * (outputs + 1)`` bytes:
    ConstantOfShape, then ``outputs`` graph outputs each an Identity of it (issue 40)."""
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [1.5])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"], value=value)]
    nodes += [helper.make_node("Identity", ["big"], [f"y{k}"]) for k in range(outputs)]
    graph = helper.make_graph(
        nodes, "bomb", [],
        [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, [elements]) for k in range(outputs)],
        [helper.make_tensor("shape", TensorProto.INT64, [1], [elements])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def test_the_memory_budget(tmp_path):
    """``max_memory`` (bytes or text) bounds each load: the bomb is refused naming the sizes;
    a model within it runs; a malformed budget is a ValueError. The onnxruntime shim takes it
    as the session config entry ``backplane.max_memory``."""
    rt = backplane.Runtime(paths=[])
    bomb = constant_bomb(1 << 24, 8)
    assert len(bomb) < 1000
    with pytest.raises(backplane.Error, match=r"outputs 536870912 bytes.* over the memory budget of 268435456 bytes"):
        rt.load(bomb, max_memory="256M")
    with pytest.raises(backplane.Error, match="over the memory budget of 104857600 bytes"):
        rt.load(bomb, max_memory=100 << 20)
    net = rt.load(constant_bomb(10, 2), max_memory="1M")
    out = net.run({})
    assert [out[f"y{k}"].tolist() for k in range(2)] == [[1.5] * 10] * 2
    with pytest.raises(ValueError, match="max_memory"):
        rt.load(bomb, max_memory="lots")
    import backplane.onnxruntime as bort

    so = bort.SessionOptions()
    so.add_session_config_entry("backplane.max_memory", "256M")
    with pytest.raises(Exception, match="over the memory budget of 268435456 bytes"):
        bort.InferenceSession(bomb, so)
