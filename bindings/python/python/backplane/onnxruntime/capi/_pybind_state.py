"""``onnxruntime.capi._pybind_state``: the same names as
:mod:`backplane.onnxruntime.capi.onnxruntime_pybind11_state`."""

from backplane.onnxruntime.capi.onnxruntime_pybind11_state import *  # noqa: F401,F403
from backplane.onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented  # noqa: F401
