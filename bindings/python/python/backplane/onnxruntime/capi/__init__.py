"""``onnxruntime.capi`` of the shim: its exception classes and types, in
:mod:`backplane.onnxruntime.capi.onnxruntime_pybind11_state` (and ``_pybind_state``), where
onnxruntime keeps them."""

from . import _pybind_state, onnxruntime_pybind11_state  # noqa: F401
