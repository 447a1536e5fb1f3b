"""RapidOCR 1.4.4 end to end: its own pipeline (PP-OCRv4 detector, the PaddleOCR direction
classifier, PP-OCRv4 recogniser, with its pre- and post-processing) on rendered text, once
on real onnxruntime and once with ``sys.modules["onnxruntime"] = backplane.onnxruntime`` set
before rapidocr is imported (CpuFast and CpuRef). Each runs in a process of its own
(ocr_pipeline.py), since rapidocr binds the module it imported as onnxruntime.

Needs scripts/py-venv.sh's pins (rapidocr-onnxruntime and what it imports: opencv, pyclipper,
shapely, pyyaml, pillow) and the workspace's CpuFast built."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from ocr_pipeline import render

from support import plugin_dir_named

HERE = Path(__file__).resolve().parent

LINES = [("Backplane runs ONNX models", 40), ("Hello World 2026", 32), ("quick brown fox jumps", 24)]
SMALL = [("Invoice number 4711", 28), ("Total due: 93.50 EUR", 28)]


def squeeze(text):
    """The text without spaces: RapidOCR reads the spaces between words unevenly."""
    return "".join(text.split())


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("ocr")
    paths = {
        "lines": d / "lines.png",
        "upside_down": d / "upside_down.png",
        "small": d / "small.png",
    }
    render(LINES, (640, 220)).save(paths["lines"])
    render(LINES, (640, 220), rotate_180=True).save(paths["upside_down"])
    render(SMALL, (420, 140)).save(paths["small"])
    return paths


def run_pipeline(kind, images, tmp_path):
    plugins = plugin_dir_named(tmp_path / kind, "Acme_CpuFast_backend.so", "libacme_cpufast.so")
    env = dict(os.environ, DYNAMIC_BACKEND_PATHS=str(plugins))
    done = subprocess.run(
        [sys.executable, str(HERE / "ocr_pipeline.py"), kind, *map(str, images.values())],
        capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    out["results"] = dict(zip(images, out["results"]))
    return out


def test_rapidocr_uses_the_direction_classifier_by_default():
    """The upside-down image is read only because RapidOCR's default config runs the
    classifier (Global.use_cls), which turns crops it finds at 180 degrees."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    config = yaml.safe_load((Path(spec.origin).parent / "config.yaml").read_text())
    assert config["Global"]["use_cls"] is True
    assert config["Cls"]["label_list"] == ["0", "180"]


def test_rapidocr_on_backplane_matches_onnxruntime(images, tmp_path):
    ort = run_pipeline("onnxruntime", images, tmp_path)
    bp = run_pipeline("backplane", images, tmp_path)
    assert ort["onnxruntime"] == "onnxruntime"
    assert bp["onnxruntime"] == "backplane.onnxruntime"
    assert ort["use_cls"] is True and bp["use_cls"] is True
    # RapidOCR asks for CPUExecutionProvider (with its own options): CpuFast, then CpuRef.
    assert bp["providers"] == {m: ["CPUExecutionProvider"] for m in ("det", "cls", "rec")}
    assert bp["backends"] == {m: ["CpuFast", "CpuRef"] for m in ("det", "cls", "rec")}

    # The images are sane: onnxruntime reads every line, and the upside-down copy too.
    want = [squeeze(t) for t, _ in LINES]
    lines = [squeeze(t) for t in ort["results"]["lines"]["texts"]]
    assert "".join(lines) == "".join(want)
    upside_down = [squeeze(t) for t in ort["results"]["upside_down"]["texts"]]
    assert sorted(upside_down) == sorted(lines)
    assert "".join(squeeze(t) for t in ort["results"]["small"]["texts"]) == "".join(squeeze(t) for t, _ in SMALL)

    for name in images:
        o, b = ort["results"][name], bp["results"][name]
        assert b["texts"] == o["texts"], name
        assert len(b["boxes"]) == len(o["boxes"]) and len(b["scores"]) == len(o["scores"])
        np.testing.assert_allclose(b["boxes"], o["boxes"], atol=2, rtol=0, err_msg=name)
        np.testing.assert_allclose(b["scores"], o["scores"], atol=1e-3, rtol=0, err_msg=name)
