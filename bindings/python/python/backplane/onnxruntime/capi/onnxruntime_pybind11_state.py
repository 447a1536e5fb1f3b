"""The classes onnxruntime keeps in ``onnxruntime.capi.onnxruntime_pybind11_state``: the
exceptions (``InvalidArgument``, ``Fail``, ``NoSuchFile``, ...) and the types. The same
objects as :mod:`backplane.onnxruntime`'s, also when this module is imported again under
the name ``onnxruntime.capi.onnxruntime_pybind11_state`` after the switch."""

from backplane.onnxruntime import (  # noqa: F401
    DeviceReset,
    EngineError,
    EPFail,
    ExecutionMode,
    ExecutionOrder,
    Fail,
    GraphOptimizationLevel,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelMetadata,
    ModelRequiresCompilation,
    NodeArg,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,
    RunOptions,
    RuntimeException,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_seed,
)
