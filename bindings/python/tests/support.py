"""What the Python tests share: where the repository's build and models are, and a private
plugin directory made of a built library."""

import os
import shutil
from pathlib import Path

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
