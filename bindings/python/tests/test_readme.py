"""Runs every ```python block of the documentation (bindings/python/README.md and any other
Markdown file of the repository's docs that has one), so that the examples stay true.

The examples use two documented placeholders, replaced here before each block runs:
"/opt/backends" (a directory holding backend plugins) becomes a private directory with
CpuFast installed as Acme_CpuFast_backend.so, and "model.onnx" becomes the PaddleOCR
classifier of scripts/fetch-paddleocr.sh."""

import os
import re
import shutil
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("code", BLOCKS)
def test_snippet_runs(code, tmp_path, capsys):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    os.chmod(plugins, 0o755)
    shutil.copy(TARGET / "libacme_cpufast.so", plugins / "Acme_CpuFast_backend.so")
    os.chmod(plugins / "Acme_CpuFast_backend.so", 0o755)
    code = code.replace('"/opt/backends"', repr(str(plugins))).replace('"model.onnx"', repr(str(MODEL)))
    exec(compile(code, "<snippet>", "exec"), {"__name__": "__snippet__"})
    # Every example prints what it shows.
    assert capsys.readouterr().out
