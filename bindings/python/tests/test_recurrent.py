"""RNN, GRU and LSTM against onnxruntime on seeded data: several steps, every direction, both
layouts, initial states, biases, sequence lengths, clip, peepholes, linear_before_reset and
other activations (imported unrolled, onnx/import/expand/recurrent.rs), and LSTM's common form
as Backend API 1.5's Lstm layer (onnx/import/recurrent.rs), on CpuFast and CpuRef."""

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

import backplane.onnxruntime as bort

RNG = np.random.default_rng(2026)
F = TensorProto.FLOAT
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def run(op, hidden, seq, batch, inp, direction="forward", layout=0, bias=True, initial=False,
        lens=None, peepholes=False, constant_weights=False, read_y_c=True, providers=None,
        **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    state_shape = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    values = {
        "X": RNG.standard_normal(x_shape).astype(np.float32),
        "W": (RNG.standard_normal([dirs, g * hidden, inp]) * 0.5).astype(np.float32),
        "R": (RNG.standard_normal([dirs, g * hidden, hidden]) * 0.5).astype(np.float32),
    }
    names = ["X", "W", "R"]
    if bias:
        values["B"] = (RNG.standard_normal([dirs, 2 * g * hidden]) * 0.3).astype(np.float32)
    names.append("B" if bias else "")
    if lens is not None:
        values["L"] = np.array(lens, dtype=np.int32)
    names.append("L" if lens is not None else "")
    if initial:
        values["H0"] = RNG.standard_normal(state_shape).astype(np.float32)
        if op == "LSTM":
            values["C0"] = RNG.standard_normal(state_shape).astype(np.float32)
    names.append("H0" if initial else "")
    if op == "LSTM":
        names.append("C0" if initial else "")
        if peepholes:
            values["P"] = (RNG.standard_normal([dirs, 3 * hidden]) * 0.3).astype(np.float32)
        names.append("P" if peepholes else "")
    while names and names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" and read_y_c else [])
    weights = {"W", "R", "B", "P"} if constant_weights else set()

    def model(layout_, values_):
        node = helper.make_node(op, names, outputs, hidden_size=hidden, direction=direction,
                                layout=layout_, **attrs)
        inits = [helper.make_tensor(k, F if v.dtype == np.float32 else TensorProto.INT32, v.shape,
                                    v.flatten().tolist()) for k, v in values_.items() if k in weights]
        feeds = {k: v for k, v in values_.items() if k not in weights}
        graph = helper.make_graph(
            [node], "recurrent",
            [helper.make_tensor_value_info(k, F if v.dtype == np.float32 else TensorProto.INT32,
                                           list(v.shape)) for k, v in feeds.items()],
            [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
        m.ir_version = 8
        return m.SerializeToString(), feeds

    data, feeds = model(layout, values)
    session = bort.InferenceSession(data, providers=providers)
    got = session.run(None, feeds)
    # onnxruntime's CPU provider runs layout 0 only: with layout 1 it is given the same data
    # in layout 0, and its outputs are transposed to layout 1.
    seq_first = dict(values)
    if layout:
        seq_first["X"] = values["X"].transpose(1, 0, 2)
        for k in ("H0", "C0"):
            if k in values:
                seq_first[k] = values[k].transpose(1, 0, 2)
    data0, feeds0 = model(0, seq_first)
    want = onnxruntime.InferenceSession(data0, providers=["CPUExecutionProvider"]).run(None, feeds0)
    if layout:
        want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    for name, g_, w in zip(outputs, got, want):
        assert g_.shape == w.shape, name
        np.testing.assert_allclose(g_, w, rtol=1e-4, atol=1e-5, err_msg=name)
    return session


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_directions_and_layouts(op, direction, layout):
    run(op, hidden=5, seq=6, batch=3, inp=4, direction=direction, layout=layout, initial=True)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_sequence_lengths(op):
    run(op, hidden=4, seq=5, batch=3, inp=3, lens=[5, 2, 4], initial=True)


def test_gru_linear_before_reset_and_clip():
    run("GRU", hidden=6, seq=4, batch=2, inp=3, linear_before_reset=1, clip=0.7,
        direction="bidirectional")


def test_lstm_peepholes_clip_and_constant_weights():
    run("LSTM", hidden=5, seq=7, batch=2, inp=4, peepholes=True, clip=1.5, initial=True,
        constant_weights=True)


def test_lstm_input_forget():
    run("LSTM", hidden=3, seq=4, batch=2, inp=3, input_forget=1)


def test_other_activations():
    run("RNN", hidden=4, seq=3, batch=2, inp=3, activations=["Relu"])
    run("GRU", hidden=4, seq=3, batch=2, inp=3, activations=["HardSigmoid", "Softsign"],
        activation_alpha=[0.3], activation_beta=[0.4])
    run("LSTM", hidden=4, seq=3, batch=2, inp=3, activations=["Sigmoid", "Tanh", "Relu"])


@pytest.mark.parametrize("provider", ["CpuFast", "CpuRef"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("bias,initial", [(True, True), (False, False)])
def test_lstm_layer(provider, direction, bias, initial, tmp_path, monkeypatch):
    # Y_c unread: one Lstm layer (Y_h sliced from its Y), run where preferred (CpuFast takes
    # it with constant weights); 37 hidden units: more than one of CpuFast's packed panels.
    from support import plugin_dir_named
    d = plugin_dir_named(tmp_path, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    monkeypatch.setenv("DYNAMIC_BACKEND_PATHS", str(d))
    bort.set_runtime(None)
    try:
        session = run("LSTM", hidden=37, seq=6, batch=3, inp=5, direction=direction, bias=bias,
                      initial=initial, constant_weights=True, read_y_c=False,
                      providers=[f"{provider}ExecutionProvider"])
        explained = session.backplane_network.explain("layers")
        assert any(line.split()[1:3] == ["Lstm", "->"] and line.split()[3] == provider
                   for line in explained.splitlines() if len(line.split()) > 3), explained
    finally:
        bort.set_runtime(None)
