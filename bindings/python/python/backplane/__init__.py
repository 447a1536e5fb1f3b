"""backplane: run ONNX models across pluggable neural-network backends.

The Python API of the backplane inference host::

    import backplane, numpy as np
    rt = backplane.Runtime()                       # plugins from DYNAMIC_BACKEND_PATHS
    print(rt.api_version, [b["id"] for b in rt.backends()])
    net = rt.load("model.onnx", backends=["CpuFast", "CpuRef"],
                  options={"CpuFast": {"Threads": 2}}, shapes={"x": [1, 3, 48, 192]})
    out = net.run({"x": np.zeros((1, 3, 48, 192), np.float32)})
    print(net.explain())

Errors raise :class:`Error` or one of its subclasses, with the host's message.

:mod:`backplane.onnxruntime` (not imported by ``import backplane``: ``import
backplane.onnxruntime``) is onnxruntime's Python API on backplane: ``sys.modules["onnxruntime"]
= backplane.onnxruntime`` before an application imports onnxruntime runs it on backplane.
"""

from ._backplane import (
    BackendError,
    BackendFaultError,
    Error,
    InputError,
    ModelError,
    Network,
    Runtime,
    UnsupportedError,
    __version__,
)

__all__ = [
    "BackendError",
    "BackendFaultError",
    "Error",
    "InputError",
    "ModelError",
    "Network",
    "Runtime",
    "UnsupportedError",
    "__version__",
]
