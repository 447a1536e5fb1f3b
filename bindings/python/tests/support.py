"""What the Python tests share: where the repository's build and models are, a private
plugin directory made of a built library, and a one-node model run by backplane and by
onnxruntime (the oracle)."""

import os
import shutil
from pathlib import Path

import numpy as np
import onnxruntime
from onnx import helper

import backplane.onnxruntime as bort

ROOT = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("BACKPLANE_TARGET_DIR", ROOT / "target" / "debug"))
MODELS = ROOT / "target" / "models"
PADDLE = MODELS / "paddleocr_cls"


def plugin_dir_named(tmp_path, name, built):
    """A private plugin directory holding the built library `built` installed as `name`."""
    d = tmp_path / "plugins"
    d.mkdir(mode=0o755, parents=True, exist_ok=True)
    shutil.copy(TARGET / built, d / name)
    os.chmod(d / name, 0o755)
    return d


def run_both(node, inputs, outputs, inits=(), opset=18, rtol=1e-5, atol=1e-6):
    """Runs `node` (inputs `{name: (onnx type, array)}`, outputs `[(name, onnx type)]`) on
    backplane's default backends and on onnxruntime's CPU provider: floats agree within
    `rtol` and `atol` (1e-5 and 1e-6 unless given: sums of many products, summed in another
    order, need more), everything else exactly."""
    graph = helper.make_graph([node], "one_node", [helper.make_tensor_value_info(n, t, list(v.shape))
                                                    for n, (t, v) in inputs.items()],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    data = model.SerializeToString()
    feeds = {n: v for n, (_, v) in inputs.items()}
    want = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    got = bort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        if np.issubdtype(w.dtype, np.floating):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
