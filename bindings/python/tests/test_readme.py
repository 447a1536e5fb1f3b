"""Runs every ```python block of the documentation (bindings/python/README.md and any other
Markdown file of the repository's docs that has one), so that the examples stay true.

The examples use three documented placeholders, replaced here before each block runs:
"/opt/backends" (a directory holding backend plugins) becomes a private directory with
CpuFast installed as Acme_CpuFast_backend.so, "model.onnx" becomes the PaddleOCR
classifier of scripts/fetch-paddleocr.sh, and "page.png" an image of a few lines of text.
Each block runs with DYNAMIC_BACKEND_PATHS naming that plugin directory (as the examples
say to run them), and what a block changes in sys.modules (the onnxruntime switch, and the
modules imported after it) is undone afterwards."""

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

import backplane.onnxruntime
from ocr_pipeline import render

ROOT = Path(__file__).resolve().parents[3]
TARGET = Path(os.environ.get("BACKPLANE_TARGET_DIR", ROOT / "target" / "debug"))
MODEL = ROOT / "target" / "models" / "paddleocr_cls" / "model.onnx"

DOCS = sorted(
    {ROOT / "README.md", ROOT / "bindings" / "python" / "README.md", ROOT / "bindings" / "c" / "README.md"}
    | set((ROOT / "docs").glob("*.md"))
)

FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks():
    """(test id, code) for every ```python block, in file order."""
    blocks = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            blocks.append(pytest.param(m.group(1), id=f"{doc.relative_to(ROOT)}:{line}"))
    return blocks


BLOCKS = python_blocks()


def test_the_python_readme_has_examples():
    assert any(p.id.startswith("bindings/python/README.md:") for p in BLOCKS)


def bound_to_onnxruntime(name):
    """onnxruntime's modules, and those of an application that imports it (RapidOCR)."""
    return name.split(".")[0] in ("onnxruntime", "rapidocr_onnxruntime")


@pytest.fixture
def restored_modules():
    """onnxruntime's entries in sys.modules (and RapidOCR's, bound to whichever module it
    found there) as they were, once the block has run; the onnxruntime shim's runtime made
    afresh for the block and forgotten after it. Other modules stay imported (cv2, for one,
    cannot be imported twice in a process)."""
    before = {n: m for n, m in sys.modules.items() if bound_to_onnxruntime(n)}
    backplane.onnxruntime.set_runtime(None)
    yield
    for name in [n for n in sys.modules if bound_to_onnxruntime(n)]:
        del sys.modules[name]
    sys.modules.update(before)
    backplane.onnxruntime.set_runtime(None)


@pytest.mark.parametrize("code", BLOCKS)
def test_snippet_runs(code, tmp_path, capsys, monkeypatch, restored_modules):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    os.chmod(plugins, 0o755)
    shutil.copy(TARGET / "libacme_cpufast.so", plugins / "Acme_CpuFast_backend.so")
    os.chmod(plugins / "Acme_CpuFast_backend.so", 0o755)
    monkeypatch.setenv("DYNAMIC_BACKEND_PATHS", str(plugins))
    page = tmp_path / "page.png"
    if '"page.png"' in code:
        render([("Switch by one line", 36), ("onnxruntime to backplane", 28)], (520, 150)).save(page)
    code = (code.replace('"/opt/backends"', repr(str(plugins))).replace('"model.onnx"', repr(str(MODEL)))
            .replace('"page.png"', repr(str(page))))
    exec(compile(code, "<snippet>", "exec"), {"__name__": "__snippet__"})
    # Every example prints what it shows.
    assert capsys.readouterr().out
