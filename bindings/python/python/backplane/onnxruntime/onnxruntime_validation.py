"""onnxruntime's start-up checks of its platform and its CUDA/TensorRT builds: on backplane
there is nothing to check, and each function says so by returning what onnxruntime's returns
on a supported CPU-only platform."""

from typing import Any, Tuple


def check_distro_info() -> None:
    """onnxruntime warns on Linux distributions it was not tested on; nothing here."""


def validate_build_package_info() -> Tuple[bool, bool, str, str, str, Any]:
    """``(has_ortmodule, package_name, version, cuda_version, ...)``'s CPU-only answer."""
    return False, False, "", "", "", None


def get_package_name_and_version_info() -> Tuple[str, str, str, str]:
    """The package's name and version (backplane stands for onnxruntime's CPU package)."""
    from backplane.onnxruntime import __version__

    return "onnxruntime", __version__, "", ""
