"""backplane.onnxruntime: the parts of onnxruntime's Python API that applications use, run on
backplane.

Install it in place of onnxruntime before the application imports it, and the application
runs its models on backplane's backends without a change::

    import sys
    import backplane.onnxruntime
    sys.modules["onnxruntime"] = backplane.onnxruntime

    from rapidocr_onnxruntime import RapidOCR      # imports "onnxruntime": gets this module

What there is:

- :class:`InferenceSession` (``run``, ``get_inputs``, ``get_outputs``, ``get_modelmeta``,
  ``get_providers``, ``get_provider_options``, ``set_providers``, ``get_session_options``),
  :class:`SessionOptions`, :class:`RunOptions`, :class:`NodeArg`, :class:`ModelMetadata`,
  the enums :class:`GraphOptimizationLevel`, :class:`ExecutionMode` and
  :class:`ExecutionOrder`, and :func:`get_available_providers`, :func:`get_all_providers`,
  :func:`get_device`, :func:`set_default_logger_severity`,
  :func:`set_default_logger_verbosity`, :func:`set_seed`, :func:`get_build_info`,
  ``__version__``.
- onnxruntime's exception classes (:class:`Fail`, :class:`InvalidArgument`,
  :class:`NoSuchFile`, :class:`InvalidProtobuf`, :class:`InvalidGraph`,
  :class:`RuntimeException`, :class:`EPFail`, :class:`NotImplemented`, ...), also as
  ``capi.onnxruntime_pybind11_state.<Name>`` (so ``from
  onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument`` works after the
  switch). backplane's errors are raised as these, the original chained as ``__cause__``.

Providers: ``"<Id>ExecutionProvider"`` names each registered backend (``"CpuFastExecutionProvider"``
for the plugin CpuFast, ``"CpuRefExecutionProvider"`` for the built-in reference backend),
and ``"CPUExecutionProvider"`` stands for the runtime's default preferences (every plugin,
then CpuRef). As in onnxruntime, ``"CPUExecutionProvider"`` is always the last provider of a
session (the fallback for layers the others do not run). A provider may come with options
(a ``(name, dict)`` tuple, or ``provider_options``): a backend's are its backend options
(``("CpuFastExecutionProvider", {"Threads": 2})``; a string value is read as the CLI's
``--backend-option`` text: ``"2"`` is the number 2, ``"true"`` a bool, as onnxruntime's
provider options are always strings);
``"CPUExecutionProvider"``'s are onnxruntime's and are ignored.

The runtime: one :class:`backplane.Runtime` per process, made at first use with the plugins
of ``DYNAMIC_BACKEND_PATHS``; :func:`get_runtime` returns it and :func:`set_runtime`
replaces it (for sessions made afterwards).

- :class:`OrtValue` (host tensors), :class:`IOBinding` (``io_binding()``,
  ``run_with_iobinding``), ``run_with_ort_values`` and ``run_async``; the enums
  :class:`OrtMemType`, :class:`OrtAllocatorType` and :class:`OrtDevice`; and
  :func:`disable_telemetry_events`, :func:`enable_telemetry_events`, :func:`get_version_string`,
  :func:`set_global_thread_pool_sizes`, :func:`preload_dlls`, :func:`has_collective_ops`,
  :func:`get_ep_devices` and :func:`print_debug_info` (accepted no-ops where they cannot mean
  anything here, as their docstrings say).

- The rest of onnxruntime's public module (``_surface.py``): :class:`SparseTensor` (COO and
  CSR, read by a session as its dense array), ``SessionOptions.add_initializer`` and
  ``add_external_initializers`` (the model's initializers replaced before the import),
  ``run_with_ortvaluevector``, ``get_provider_graph_assignment_info`` (which backend runs which
  layer), :func:`copy_tensors`, memory and device descriptions (the host's), and the names
  that cannot mean anything here, accepted as documented no-ops or refused with a message
  saying why. ``tests/test_surface.py`` walks ``dir()`` of the real module and of its classes
  against this one.

Not there: device memory other than the host's (a ``"cuda"`` binding is an
:class:`InvalidArgument` error), training, LoRA adapters and onnxruntime's EP-context model
compilation (both refused with :class:`NotImplemented`), custom operator libraries and plugin
EP libraries (:class:`Fail`), string tensors.
"""

import contextlib  # noqa: F401 - onnxruntime's module exposes it
import enum
import logging
import os
import threading
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

import backplane
from backplane.onnxruntime import _onnx_header

logger = logging.getLogger(__name__)

#: The onnxruntime release whose Python API this module follows (its tests compare the two).
__version__ = "1.31.1"

_CPU = "CPUExecutionProvider"
_SUFFIX = "ExecutionProvider"


# ---------------------------------------------------------------------------------------
# Exceptions, named as onnxruntime's (onnxruntime.capi.onnxruntime_pybind11_state).


def _status_class(name: str, code: int, status: str, doc: str) -> type:
    """One of onnxruntime's exception classes: ``code`` and ``status`` are its status code
    and name, as its messages show them."""
    return type(name, (Exception,), {"code": code, "status": status, "__doc__": doc,
                                     "__module__": __name__})


Fail = _status_class("Fail", 1, "FAIL",
                     "onnxruntime's FAIL: an error with no more specific class (backplane.Error).")
InvalidArgument = _status_class(
    "InvalidArgument", 2, "INVALID_ARGUMENT",
    "onnxruntime's INVALID_ARGUMENT: a feed or an output name that does not fit the model "
    "(the message names the input), or an invalid option.")
NoSuchFile = _status_class("NoSuchFile", 3, "NO_SUCHFILE",
                           "onnxruntime's NO_SUCHFILE: the model file does not exist.")
NoModel = _status_class("NoModel", 4, "NO_MODEL", "onnxruntime's NO_MODEL.")
EngineError = _status_class("EngineError", 5, "ENGINE_ERROR", "onnxruntime's ENGINE_ERROR.")
RuntimeException = _status_class(
    "RuntimeException", 6, "RUNTIME_EXCEPTION",
    "onnxruntime's RUNTIME_EXCEPTION: a run failed in a backend (backplane.BackendError).")
InvalidProtobuf = _status_class(
    "InvalidProtobuf", 7, "INVALID_PROTOBUF",
    "onnxruntime's INVALID_PROTOBUF: the model is not a well-formed ONNX protobuf.")
ModelLoaded = _status_class("ModelLoaded", 8, "MODEL_LOADED", "onnxruntime's MODEL_LOADED.")
NotImplemented = _status_class(  # noqa: A001 - onnxruntime's name
    "NotImplemented", 9, "NOT_IMPLEMENTED",
    "onnxruntime's NOT_IMPLEMENTED: no backend of the session runs a layer of the model "
    "(backplane.UnsupportedError).")
InvalidGraph = _status_class(
    "InvalidGraph", 10, "INVALID_GRAPH",
    "onnxruntime's INVALID_GRAPH: the model could not be imported (backplane.ModelError).")
EPFail = _status_class(
    "EPFail", 11, "EP_FAIL",
    "onnxruntime's EP_FAIL: a backend failed while loading the network (for example it "
    "refused an option).")
ModelLoadCanceled = _status_class("ModelLoadCanceled", 12, "MODEL_LOAD_CANCELED",
                                  "onnxruntime's MODEL_LOAD_CANCELED.")
ModelRequiresCompilation = _status_class("ModelRequiresCompilation", 13,
                                         "MODEL_REQUIRES_COMPILATION",
                                         "onnxruntime's MODEL_REQUIRES_COMPILATION.")
NotFound = _status_class("NotFound", 14, "NOT_FOUND", "onnxruntime's NOT_FOUND.")
DeviceReset = _status_class("DeviceReset", 15, "DEVICE_RESET", "onnxruntime's DeviceReset.")


def _error(cls, message: str) -> Exception:
    """An exception of class ``cls`` whose message has onnxruntime's layout, with backplane
    where onnxruntime says ONNXRuntimeError: ``[backplane] : 2 : INVALID_ARGUMENT : ...``."""
    return cls(f"[backplane] : {cls.code} : {cls.status} : {message}")


def _translate(e: "backplane.Error", at_load: bool) -> Exception:
    """The onnxruntime exception for a backplane error raised by a load or a run."""
    if isinstance(e, backplane.InputError):
        cls = InvalidArgument
    elif isinstance(e, backplane.ModelError):
        cls = InvalidGraph
    elif isinstance(e, backplane.UnsupportedError):
        cls = NotImplemented
    elif isinstance(e, backplane.BackendError):
        cls = EPFail if at_load else RuntimeException
    else:
        cls = Fail
    return _error(cls, str(e))


# ---------------------------------------------------------------------------------------
# Enums and options.


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's graph optimisation levels. backplane has one switch: ``ORT_DISABLE_ALL``
    turns off its graph rewrites and backend fusion (``Runtime.load(fusion=False)``); every
    other level leaves them on."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes; accepted, without effect (backplane runs a network's
    layers in order)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    """onnxruntime's node execution orders; accepted, without effect."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


def _physical_cores() -> int:
    """The machine's physical cores (onnxruntime's default thread count): the distinct
    (package, core) pairs of ``/proc/cpuinfo``, else the logical CPUs this process may use."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    cores = set()
    for block in text.split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "core id" in fields:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    if cores:
        return len(cores)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class SessionOptions:
    """onnxruntime's session options, with its defaults. Every attribute is accepted; these
    mean something on backplane:

    - ``intra_op_num_threads``: the backend option ``Threads`` of every backend of the
      session that has the capability ``Threads`` (CpuFast), unless the provider's own
      options give ``Threads``; 0 (the default) means one thread per physical core, as in
      onnxruntime.
    - ``graph_optimization_level == ORT_DISABLE_ALL``: ``fusion=False``.
    - ``add_free_dimension_override_by_name(name, value)``: the named symbolic dimension is
      fixed; an input whose every dimension is then fixed is loaded at that shape, and feeds
      are checked against it.
    - session config entries ``"backplane.cache_size"`` and ``"backplane.cache_bytes"``: the
      network's shape cache (``Runtime.load(cache_size=, cache_bytes=)``);
      ``"backplane.max_memory"`` (``"4G"``, ``"512M"``, bytes): the memory budget of each
      load (``Runtime.load(max_memory=)``; default physical memory).

    The others (``inter_op_num_threads``, ``execution_mode``, ``log_severity_level``,
    ``enable_cpu_mem_arena``, ...) are ignored, each with a ``logging.debug`` message when it
    differs from onnxruntime's default.
    """

    __slots__ = (
        "intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level",
        "execution_mode", "execution_order", "log_severity_level", "log_verbosity_level",
        "logid", "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse",
        "enable_profiling", "profile_file_prefix", "optimized_model_filepath",
        "use_deterministic_compute", "use_per_session_threads", "_config", "_free_dims",
        "_initializers", "_providers", "_policy",
    )

    #: onnxruntime's default of each attribute.
    _DEFAULTS: Dict[str, Any] = {
        "intra_op_num_threads": 0,
        "inter_op_num_threads": 0,
        "graph_optimization_level": GraphOptimizationLevel.ORT_ENABLE_ALL,
        "execution_mode": ExecutionMode.ORT_SEQUENTIAL,
        "execution_order": ExecutionOrder.DEFAULT,
        "log_severity_level": -1,
        "log_verbosity_level": 0,
        "logid": "",
        "enable_cpu_mem_arena": True,
        "enable_mem_pattern": True,
        "enable_mem_reuse": True,
        "enable_profiling": False,
        "profile_file_prefix": "onnxruntime_profile_",
        "optimized_model_filepath": "",
        "use_deterministic_compute": False,
        "use_per_session_threads": True,
    }

    def __init__(self) -> None:
        for name, value in self._DEFAULTS.items():
            setattr(self, name, value)
        self._config: Dict[str, str] = {}
        self._free_dims: Dict[str, int] = {}
        self._initializers: Dict[str, Any] = {}
        self._providers: List[Tuple[str, Dict[str, str]]] = []
        self._policy: Any = None

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Sets a session configuration entry (onnxruntime's are kept and ignored; see the
        class for backplane's)."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        """The value of a configuration entry; ``RuntimeError`` when it was not set."""
        return _config_entry(self._config, "SessionOptions", key)

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fixes the symbolic dimension ``dim_name`` of the model's inputs to ``dim_value``."""
        self._free_dims[str(dim_name)] = int(dim_value)

    def add_free_dimension_override_by_denotation(self, dim_denotation: str, dim_value: int) -> None:
        """Accepted and ignored (backplane does not read dimension denotations)."""
        logger.debug("add_free_dimension_override_by_denotation(%r, %r) is ignored on backplane",
                     dim_denotation, dim_value)

    def add_initializer(self, name: str, ortvalue: Any) -> None:
        """Replaces the model's initializer ``name`` with this value (an :class:`OrtValue`
        or a numpy array) in every session made with these options."""
        self._initializers[str(name)] = ortvalue

    def add_external_initializers(self, names: Sequence[str], ortvalues: Sequence[Any]) -> None:
        """:meth:`add_initializer` for each name and value."""
        if len(names) != len(ortvalues):
            raise _error(InvalidArgument, f"{len(names)} names for {len(ortvalues)} values")
        for name, value in zip(names, ortvalues):
            self.add_initializer(name, value)

    def add_external_initializers_from_files_in_memory(self, names: Sequence[str],
                                                       buffers: Sequence[Any],
                                                       lengths: Sequence[int]) -> None:
        """External-data files given in memory: not supported on backplane (the importer
        reads a model's external data from its files); raises :class:`NotImplemented`."""
        raise _error(NotImplemented, "external initializer files in memory are not supported on backplane")

    def add_provider(self, provider_name: str, provider_options: Dict[str, str]) -> None:
        """Records a provider for :meth:`has_providers`; a session's providers are its
        ``providers`` argument (as in onnxruntime, that argument wins)."""
        self._providers.append((str(provider_name), dict(provider_options)))

    def add_provider_for_devices(self, ep_devices: Sequence[Any], provider_options: Dict[str, str]) -> None:
        """Records the devices' providers (see :meth:`add_provider`)."""
        for d in ep_devices:
            self.add_provider(getattr(d, "ep_name", str(d)), provider_options)

    def has_providers(self) -> bool:
        """Whether :meth:`add_provider` was called."""
        return bool(self._providers)

    def set_provider_selection_policy(self, policy: Any) -> None:
        """Recorded and ignored: backplane's order is the session's ``providers``."""
        self._policy = policy

    def set_provider_selection_policy_delegate(self, delegate: Any) -> None:
        """Recorded and ignored: backplane's order is the session's ``providers``."""
        self._policy = delegate

    def set_load_cancellation_flag(self, value: bool) -> None:
        """Accepted and ignored: a load on backplane is not cancelled from another thread."""

    def set_ep_context_data_read_func(self, func: Any) -> None:
        """Accepted and ignored: EP-context models are onnxruntime's."""

    def clear_ep_context_data_read_func(self) -> None:
        """Accepted and ignored: EP-context models are onnxruntime's."""

    def register_custom_ops_library(self, library_path: str) -> None:
        """Custom operator libraries are onnxruntime's: raises :class:`Fail`."""
        raise _error(Fail, f"custom operator libraries cannot run on backplane ({library_path})")

    def __repr__(self) -> str:
        changed = {k: getattr(self, k) for k, v in self._DEFAULTS.items() if getattr(self, k) != v}
        return f"SessionOptions({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


def _config_entry(config: Dict[str, str], owner: str, key: str) -> str:
    """Entry ``key`` of a configuration, or onnxruntime's ``RuntimeError`` naming ``owner``."""
    try:
        return config[key]
    except KeyError:
        raise RuntimeError(f"{owner} does not have configuration with key: {key}") from None


class RunOptions:
    """onnxruntime's run options: accepted by :meth:`InferenceSession.run`, without effect."""

    __slots__ = ("log_severity_level", "log_verbosity_level", "logid",
                 "only_execute_path_to_fetches", "terminate", "_config")

    def __init__(self) -> None:
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.only_execute_path_to_fetches = False
        self.terminate = False
        self._config: Dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Sets a run configuration entry (kept, ignored)."""
        self._config[str(key)] = str(value)

    def add_active_adapter(self, adapter: Any) -> None:
        """LoRA adapters are onnxruntime's format: raises :class:`NotImplemented`."""
        raise _error(NotImplemented, "LoRA adapters cannot be applied on backplane")

    def get_run_config_entry(self, key: str) -> str:
        """The value of a run configuration entry; ``RuntimeError`` when it was not set."""
        return _config_entry(self._config, "RunOptions", key)


# ---------------------------------------------------------------------------------------
# Descriptions.


class NodeArg:
    """A graph input or output as onnxruntime describes it: ``name``, ``shape`` (``int`` for
    a fixed dimension, the name of a symbolic one, ``None`` for an unnamed dynamic one) and
    ``type`` (``"tensor(float)"``, ``"tensor(int64)"``, ...), as the model declares them."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name: str, shape: List[Union[int, str, None]], type: str) -> None:  # noqa: A002
        self.name = name
        self.shape = shape
        self.type = type

    def __str__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"

    __repr__ = __str__


class ModelMetadata:
    """The model's metadata with onnxruntime's names: ``producer_name``, ``graph_name``,
    ``graph_description``, ``domain``, ``description``, ``version`` (2**63 - 1 when the model
    sets none, as in onnxruntime) and ``custom_metadata_map`` (the model's named strings)."""

    __slots__ = ("producer_name", "graph_name", "graph_description", "domain", "description",
                 "version", "custom_metadata_map")

    def __init__(self, **fields: Any) -> None:
        for name in self.__slots__:
            setattr(self, name, fields[name])

    def __repr__(self) -> str:
        return "ModelMetadata(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__) + ")"


# ---------------------------------------------------------------------------------------
# The runtime and the providers.

_runtime: Optional["backplane.Runtime"] = None
_runtime_lock = threading.Lock()


def get_runtime() -> "backplane.Runtime":
    """The runtime sessions are loaded on: made at first use with ``backplane.Runtime()``
    (plugins from ``DYNAMIC_BACKEND_PATHS``, then the built-in CpuRef)."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = backplane.Runtime()
        return _runtime


def set_runtime(runtime: Optional["backplane.Runtime"]) -> None:
    """Makes ``runtime`` the one sessions made from now on are loaded on; ``None`` makes a
    new one from ``DYNAMIC_BACKEND_PATHS`` at the next use. Existing sessions keep theirs."""
    global _runtime
    with _runtime_lock:
        _runtime = runtime


def _default_preferences(rt: "backplane.Runtime") -> List[str]:
    """The runtime's default backend order: every plugin, then CpuRef."""
    preferences = getattr(rt, "default_preferences", None)
    if preferences is not None:
        return list(preferences())
    # A native module older than Runtime.default_preferences(): the same order, from the
    # registry.
    backends = rt.backends()
    return ([b["id"] for b in backends if b["source"] != "builtin"]
            + [b["id"] for b in backends if b["source"] == "builtin"])


def _provider_ids(rt: "backplane.Runtime") -> Dict[str, List[str]]:
    """Every available provider name and the backend ids it stands for, in the order of
    :func:`get_available_providers`."""
    defaults = _default_preferences(rt)
    providers = {f"{i}{_SUFFIX}": [i] for i in defaults}
    providers[_CPU] = defaults
    return providers


def get_available_providers() -> List[str]:
    """``"<Id>ExecutionProvider"`` for each backend of the runtime in its default order
    (every plugin, then CpuRef), and ``"CPUExecutionProvider"`` (that order) last."""
    return list(_provider_ids(get_runtime()))


def get_all_providers() -> List[str]:
    """The providers this module knows: the same as :func:`get_available_providers`."""
    return get_available_providers()


def get_device() -> str:
    """``"CPU"``: backplane's backends run on the host's memory."""
    return "CPU"


def get_build_info() -> str:
    """backplane's version, and the onnxruntime API this module follows."""
    return f"backplane {backplane.__version__} (onnxruntime {__version__} Python API)"


def set_default_logger_severity(severity: int) -> None:
    """Accepted and ignored."""
    logger.debug("set_default_logger_severity(%r) is ignored on backplane", severity)


def set_default_logger_verbosity(verbosity: int) -> None:
    """Accepted and ignored."""
    logger.debug("set_default_logger_verbosity(%r) is ignored on backplane", verbosity)


def disable_telemetry_events() -> None:
    """Accepted: backplane sends no telemetry."""


def enable_telemetry_events() -> None:
    """Accepted: backplane sends no telemetry."""


def get_version_string() -> str:
    """The onnxruntime version this module's API follows (``__version__``)."""
    return __version__


def set_global_thread_pool_sizes(intra_op_num_threads: int = 0, inter_op_num_threads: int = 0) -> None:
    """Accepted: each backend has its own threads (CpuFast's ``Threads`` option)."""


def preload_dlls(cuda: bool = True, cudnn: bool = True, msvc: bool = True, directory: Optional[str] = None) -> None:
    """Accepted: backplane loads its backends from ``DYNAMIC_BACKEND_PATHS``."""


def has_collective_ops() -> bool:
    """False: no collective operators."""
    return False


def get_ep_devices() -> List[Any]:
    """No onnxruntime execution-provider devices (backplane's backends are its providers)."""
    return []


def print_debug_info() -> None:
    """Prints the API this module follows and the runtime's backends."""
    rt = get_runtime()
    print(f"backplane.onnxruntime (onnxruntime {__version__}'s API), Backend API {rt.api_version}")
    for b in rt.backends():
        print(b)


def set_seed(seed: int) -> None:
    """Accepted and ignored."""
    logger.debug("set_seed(%r) is ignored on backplane", seed)


def _normalize_providers(
    providers: Optional[Sequence[Union[str, Tuple[str, Dict[str, Any]]]]],
    provider_options: Optional[Sequence[Dict[str, Any]]],
    available: Mapping[str, List[str]],
) -> List[Tuple[str, Dict[str, Any]]]:
    """``[(provider name, options)]`` as onnxruntime reads its arguments: names or
    ``(name, options)`` tuples, or names with a parallel ``provider_options`` list; unknown
    names warned about and skipped; ``"CPUExecutionProvider"`` appended when missing. A
    list whose every name is unknown raises ``ValueError``."""
    if not providers:
        if provider_options:
            raise ValueError("'provider_options' was given without 'providers'")
        return [(_CPU, {})]
    if isinstance(providers, str):
        raise ValueError("'providers' must be a list of provider names or (name, options) tuples")
    if provider_options is not None:
        if len(provider_options) != len(providers):
            raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
        if any(not isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if 'provider_options' is given.")
        pairs = list(zip(providers, provider_options))
    else:
        pairs = []
        for p in providers:
            if isinstance(p, str):
                pairs.append((p, {}))
            elif isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], dict):
                pairs.append((p[0], p[1]))
            else:
                raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
    chosen: List[Tuple[str, Dict[str, Any]]] = []
    for name, options in pairs:
        if name not in available:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(available)}'",
                stacklevel=4,
            )
            continue
        if any(name == n for n, _ in chosen):
            continue
        chosen.append((name, dict(options or {})))
    if not chosen:
        raise ValueError(
            f"none of the providers {[n for n, _ in pairs]} is available; available providers: "
            f"{list(available)}"
        )
    if all(n != _CPU for n, _ in chosen):
        chosen.append((_CPU, {}))
    return chosen


# ---------------------------------------------------------------------------------------
# The session.

_DTYPES = {k: np.dtype(v) for k, v in _onnx_header.ELEM_TYPE_NUMPY.items()}


def _type_name(elem_type: int) -> str:
    name = _onnx_header.ELEM_TYPE_NAMES.get(elem_type)
    return f"tensor({name})" if name else "unknown"


def _from_network(desc) -> _onnx_header.Tensor:
    """A header entry from a ``Network.inputs``/``outputs`` entry ``(name, shape, dtype)``."""
    name, shape, dtype = desc
    elem = next((e for e, d in _DTYPES.items() if d == dtype), 0)
    return _onnx_header.Tensor(name, elem, list(shape))


def _numpy_type_name(dtype: np.dtype) -> str:
    for elem, d in _DTYPES.items():
        if d == dtype:
            return _type_name(elem)
    return f"numpy({dtype})"


class InferenceSession:
    """A model loaded on backplane, with onnxruntime's ``InferenceSession`` interface.

    ``path_or_bytes``: the model's path (``str`` or path-like) or its bytes.
    ``sess_options``: a :class:`SessionOptions` (see there what it changes).
    ``providers``: names or ``(name, options)`` tuples, first preferred first (``None``:
    ``["CPUExecutionProvider"]``, the runtime's default order); ``provider_options``: a list
    of option dicts parallel to ``providers``. See the module's documentation.
    Other keyword arguments of onnxruntime's (``disabled_optimizers``, ...) are accepted and
    ignored.

    The network takes any input shape the model allows: a new shape is loaded at its first
    run and kept in the network's cache (8 shapes by default).

    Errors: :class:`NoSuchFile` (no such file), :class:`InvalidProtobuf` (not an ONNX
    model), :class:`InvalidGraph` (the model cannot be imported), :class:`NotImplemented`
    (no backend of the session runs a layer), :class:`EPFail` (a backend failed at load),
    ``ValueError`` for providers none of which is available, ``TypeError`` for a model that
    is neither a path nor bytes.
    """

    def __init__(
        self,
        path_or_bytes: Union[str, bytes, "os.PathLike[str]"],
        sess_options: Optional[SessionOptions] = None,
        providers: Optional[Sequence[Union[str, Tuple[str, Dict[str, Any]]]]] = None,
        provider_options: Optional[Sequence[Dict[str, Any]]] = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            self._model: Union[str, bytes] = bytes(path_or_bytes)
            self._model_path: Optional[str] = None
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            self._model = self._model_path = os.fspath(path_or_bytes)
            if not os.path.exists(self._model_path):
                raise _error(NoSuchFile, f"Load model from {self._model_path} failed: no such file")
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        for key, value in kwargs.items():
            logger.debug("InferenceSession(%s=%r) is ignored on backplane", key, value)
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        if self._sess_options._initializers:
            self._model = self._with_initializers()
        self._runtime = get_runtime()
        try:
            self._header: Optional[_onnx_header.Header] = _onnx_header.read(self._model)
            self._header_error: Optional[str] = None
        except (_onnx_header.ProtoError, IndexError, ValueError) as e:
            self._header, self._header_error = None, str(e)
        except OSError as e:
            raise _error(NoSuchFile, f"Load model from {self._model_path} failed: {e}") from e
        self._load(providers, provider_options)

    # -- loading ---------------------------------------------------------------------------

    def _with_initializers(self) -> bytes:
        """The model's bytes with ``SessionOptions.add_initializer``'s values in place of
        its initializers of those names."""
        model = self._model
        if isinstance(model, str):
            with open(model, "rb") as f:
                model = f.read()
        values = {}
        for name, value in self._sess_options._initializers.items():
            values[name] = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        try:
            return _onnx_header.with_initializers(model, values)
        except _onnx_header.ProtoError as e:
            raise _error(InvalidProtobuf, f"cannot set initializers: {e}") from e

    def _load(self, providers, provider_options) -> None:
        available = _provider_ids(self._runtime)
        chosen = _normalize_providers(providers, provider_options, available)
        backends: List[str] = []
        for name, _ in chosen:
            for backend in available[name]:
                if backend not in backends:
                    backends.append(backend)
        options: Dict[str, Dict[str, Any]] = {}
        for name, opts in chosen:
            if name == _CPU:
                for key, value in opts.items():
                    logger.debug("CPUExecutionProvider option %s=%r is onnxruntime's; ignored", key, value)
                continue
            if opts:
                options.setdefault(available[name][0], {}).update(opts)
        so = self._sess_options
        for name, value in SessionOptions._DEFAULTS.items():
            if name not in ("intra_op_num_threads", "graph_optimization_level") and getattr(so, name) != value:
                logger.debug("SessionOptions.%s=%r has no backplane equivalent; ignored", name, getattr(so, name))
        threads = int(so.intra_op_num_threads or 0) or _physical_cores()
        if threads > 0:
            with_threads = {b["id"] for b in self._runtime.backends() if "Threads" in (b.get("capabilities") or {})}
            for backend in backends:
                if backend in with_threads and "Threads" not in options.get(backend, {}):
                    options.setdefault(backend, {})["Threads"] = threads
        level = so.graph_optimization_level
        fusion = int(level) != int(GraphOptimizationLevel.ORT_DISABLE_ALL)
        kwargs: Dict[str, Any] = {}
        for key, arg in (("backplane.cache_size", "cache_size"), ("backplane.cache_bytes", "cache_bytes")):
            if key in so._config:
                try:
                    kwargs[arg] = int(so._config[key])
                except ValueError:
                    raise _error(InvalidArgument, f"session config entry {key}={so._config[key]!r} is not a whole number") from None
        if "backplane.max_memory" in so._config:
            kwargs["max_memory"] = so._config["backplane.max_memory"]
        shapes = self._overridden_shapes()
        try:
            network = self._runtime.load(
                self._model, backends=backends, options=options or None,
                shapes=shapes or None, fusion=fusion, **kwargs)
        except backplane.ModelError as e:
            if self._header is None:
                raise _error(InvalidProtobuf, f"{e} ({self._header_error})") from e
            raise _translate(e, at_load=True) from e
        except backplane.Error as e:
            raise _translate(e, at_load=True) from e
        if self._header is None:
            # backplane's importer read what this module's reader could not: describe the
            # inputs and outputs as the network does.
            logger.debug("the model's header could not be read (%s); using the network's description",
                         self._header_error)
            self._header = _onnx_header.Header(
                [_from_network(t) for t in network.inputs],
                [_from_network(t) for t in network.outputs], True)
        self._network = network
        self._providers = chosen
        self._backends = backends
        self._options = options
        self._fusion = fusion
        self._inputs = [self._node_arg(t) for t in self._header.inputs]
        self._outputs = [self._node_arg(t) for t in self._header.outputs]
        self._declared = {t.name: t for t in self._header.inputs}
        self._output_dtypes = {t.name: _DTYPES.get(t.elem_type) for t in self._header.outputs}

    def _dims(self, tensor: _onnx_header.Tensor) -> List[Union[int, str, None]]:
        """The declared dimensions with the session's free-dimension overrides applied."""
        free = self._sess_options._free_dims
        return [free.get(d, d) if isinstance(d, str) else d for d in (tensor.dims or [])]

    def _overridden_shapes(self) -> Dict[str, List[int]]:
        """``shapes=`` for the inputs that free-dimension overrides make wholly fixed."""
        if self._header is None or not self._sess_options._free_dims:
            return {}
        shapes = {}
        for t in self._header.inputs:
            dims = self._dims(t)
            if t.dims is not None and any(isinstance(d, str) for d in t.dims) and all(isinstance(d, int) for d in dims):
                shapes[t.name] = dims
        return shapes

    @staticmethod
    def _node_arg(t: _onnx_header.Tensor) -> NodeArg:
        return NodeArg(t.name, list(t.dims) if t.dims is not None else [], _type_name(t.elem_type))

    # -- running ---------------------------------------------------------------------------

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Optional[RunOptions] = None,
    ) -> List[np.ndarray]:
        """Runs the model once: ``input_feed`` maps every input name to an array (lists and
        other array-likes are converted with ``np.asarray`` to the input's type); returns
        the outputs named by ``output_names`` in that order (``None`` or empty: every output,
        in the model's order), as numpy arrays of the types the model declares.

        Raises ``ValueError`` for missing inputs (as onnxruntime does), and
        :class:`InvalidArgument` naming the input for an unknown input name, a dtype other
        than the declared one, a wrong rank or a dimension that differs from a fixed one (or
        the network's own check of the shape), and for an unknown output name;
        :class:`RuntimeException` when a backend fails."""
        declared = self._declared
        missing = [n for n in declared if n not in input_feed]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({list(input_feed)}).")
        feeds: Dict[str, np.ndarray] = {}
        for name, value in input_feed.items():
            tensor = declared.get(name)
            if tensor is None:
                raise _error(InvalidArgument,
                             f"Invalid input name: {name} (the model's inputs are {list(declared)})")
            feeds[name] = self._check(name, tensor, value)
        if not output_names:
            # None or empty: every output, as in onnxruntime.
            names = [o.name for o in self._outputs]
        else:
            names = list(output_names)
            for name in names:
                if name not in self._output_dtypes:
                    raise _error(InvalidArgument,
                                 f"Invalid output name: {name} (the model's outputs are {list(self._output_dtypes)})")
        try:
            outputs = self._network.run(feeds)
        except backplane.Error as e:
            raise _translate(e, at_load=False) from e
        result = []
        for name in names:
            array = outputs[name]
            wanted = self._output_dtypes.get(name)
            if wanted is not None and array.dtype != wanted:
                # An output whose type differs from the declared one (a model that declares
                # one type and computes another): converted as the model declares.
                array = array.astype(wanted)
            result.append(array)
        return result

    def run_with_ort_values(
        self,
        output_names: Optional[Sequence[str]],
        input_dict_ort_values: Mapping[str, "OrtValue"],
        run_options: Optional[RunOptions] = None,
    ) -> List["OrtValue"]:
        """:meth:`run` on :class:`OrtValue` inputs, giving :class:`OrtValue` outputs."""
        feeds = {name: v.numpy() for name, v in input_dict_ort_values.items()}
        outputs = self.run(output_names, feeds, run_options)
        return [OrtValue(np.ascontiguousarray(a)) for a in outputs]

    def io_binding(self) -> "IOBinding":
        """An :class:`IOBinding` for this session."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: "IOBinding", run_options: Optional[RunOptions] = None) -> None:
        """Runs with the inputs and outputs bound in ``iobinding`` (read its outputs with
        ``get_outputs()`` or ``copy_outputs_to_cpu()``)."""
        iobinding._run(run_options)

    def run_async(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        callback: Any,
        user_data: Any,
        run_options: Optional[RunOptions] = None,
    ) -> None:
        """:meth:`run` on a thread of its own; then ``callback(outputs, user_data, error)``
        with the outputs (a list of arrays) and ``""``, or ``None`` and the error's text."""
        def work() -> None:
            try:
                outputs = self.run(output_names, input_feed, run_options)
            except Exception as e:  # noqa: BLE001 - handed to the callback, as onnxruntime does
                callback(None, user_data, str(e))
                return
            callback(outputs, user_data, "")

        threading.Thread(target=work, daemon=True).start()

    def _check(self, name: str, tensor: _onnx_header.Tensor, value: Any) -> np.ndarray:
        """The feed as a numpy array, checked against the declaration as onnxruntime checks
        it: the dtype, the rank and every fixed dimension."""
        wanted = _DTYPES.get(tensor.elem_type)
        if not isinstance(value, np.ndarray):
            try:
                value = np.asarray(value, dtype=wanted)
            except (TypeError, ValueError) as e:
                raise _error(InvalidArgument, f"input {name}: cannot be made an array of {wanted}: {e}") from e
        if wanted is not None and value.dtype != wanted:
            raise _error(InvalidArgument,
                         f"input {name}: Unexpected input data type. Actual: ({_numpy_type_name(value.dtype)}), "
                         f"expected: ({_type_name(tensor.elem_type)})")
        if tensor.dims is not None:
            dims = self._dims(tensor)
            if value.ndim != len(dims):
                raise _error(InvalidArgument,
                             f"input {name}: Invalid rank. Got: {value.ndim} Expected: {len(dims)} "
                             f"(shape {list(value.shape)}, the model declares {dims})")
            bad = [(i, got, want) for i, (got, want) in enumerate(zip(value.shape, dims))
                   if isinstance(want, int) and got != want]
            if bad:
                detail = "; ".join(f"index: {i} Got: {g} Expected: {w}" for i, g, w in bad)
                raise _error(InvalidArgument,
                             f"input {name}: invalid dimensions: {detail} "
                             f"(shape {list(value.shape)}, the model declares {dims})")
        return value

    # -- descriptions ----------------------------------------------------------------------

    def run_with_ortvaluevector(self, run_options: Optional[RunOptions], feed_names: Sequence[str],
                                feeds: Sequence[Any], fetch_names: Sequence[str],
                                fetches: List[Any], fetch_devices: Sequence[Any]) -> None:
        """Runs with :class:`OrtValue` feeds, appending an :class:`OrtValue` per fetch to
        ``fetches`` (onnxruntime's low-level form)."""
        outs = self.run_with_ort_values(list(fetch_names), dict(zip(feed_names, feeds)), run_options)
        fetches.extend(outs)

    @staticmethod
    def create_ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str,
                                            device_id: int = 0, vendor_id: int = -1) -> "OrtValue":
        """A zeroed host :class:`OrtValue` (see ``OrtValue.ortvalue_from_shape_and_type``)."""
        return OrtValue.ortvalue_from_shape_and_type(shape, element_type, device_type, device_id)

    def get_input_memory_infos(self) -> List[Any]:
        """Every input is in host memory."""
        return [OrtMemoryInfo() for _ in self._inputs]

    def get_output_memory_infos(self) -> List[Any]:
        """Every output is in host memory."""
        return [OrtMemoryInfo() for _ in self._outputs]

    def get_input_epdevices(self) -> List[Any]:
        """The provider device of each input: none (host memory)."""
        return [None for _ in self._inputs]

    def get_provider_graph_assignment_info(self) -> List[Any]:
        """Which backend runs which layers, from the network's explanation: one
        :class:`OrtEpAssignedSubgraph` per backend, named ``<Id>ExecutionProvider``."""
        by_backend: Dict[str, List[Any]] = {}
        # The explanation's per-layer lines: "<layer> <kind> -> <backend> <why>" (the plan of
        # the latest run, or of the first shape before any run).
        for line in self._network.explain("layers").splitlines():
            head, arrow, tail = line.partition(" -> ")
            words = head.split()
            if not arrow or len(words) != 2 or not tail.split():
                continue
            by_backend.setdefault(tail.split()[0], []).append(OrtEpAssignedNode(words[0], words[1]))
        return [OrtEpAssignedSubgraph(f"{b}{_SUFFIX}", nodes) for b, nodes in by_backend.items()]

    def get_tuning_results(self) -> List[Any]:
        """No kernel tuning on backplane: empty."""
        return []

    def set_tuning_results(self, results: Any, error_on_invalid: bool = False) -> None:
        """Accepted and ignored: no kernel tuning on backplane."""

    def release_captured_graph(self, graph_annotation_id: int = -1) -> None:
        """Accepted and ignored: no captured device graphs on backplane."""

    def set_ep_dynamic_options(self, options: Dict[str, str]) -> None:
        """Accepted and ignored: backend options are fixed at load on backplane."""

    def get_inputs(self) -> List[NodeArg]:
        """The graph's inputs as the model declares them (initializers left out)."""
        return list(self._inputs)

    def get_outputs(self) -> List[NodeArg]:
        """The graph's outputs as the model declares them."""
        return list(self._outputs)

    def get_overridable_initializers(self) -> List[NodeArg]:
        """Always empty: backplane does not take initializers as feeds."""
        return []

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata (:class:`ModelMetadata`)."""
        meta = dict(self._network.metadata())
        if self._header is not None and not self._header.has_model_version:
            meta["version"] = (1 << 63) - 1
        meta["custom_metadata_map"] = dict(meta.get("custom_metadata_map") or {})
        return ModelMetadata(**meta)

    def get_providers(self) -> List[str]:
        """The session's providers, first preferred first; ``"CPUExecutionProvider"`` last."""
        return [name for name, _ in self._providers]

    def get_provider_options(self) -> Dict[str, Dict[str, Any]]:
        """``{provider name: the options it was given}`` for each provider of the session."""
        return {name: dict(options) for name, options in self._providers}

    def set_providers(
        self,
        providers: Optional[Sequence[Union[str, Tuple[str, Dict[str, Any]]]]] = None,
        provider_options: Optional[Sequence[Dict[str, Any]]] = None,
    ) -> None:
        """Loads the model again for other providers (arguments as the constructor's)."""
        self._load(providers, provider_options)

    def get_session_options(self) -> SessionOptions:
        """The session's :class:`SessionOptions`."""
        return self._sess_options

    def disable_fallback(self) -> None:
        """Accepted, without effect (there is no provider fallback to disable)."""

    def enable_fallback(self) -> None:
        """Accepted, without effect."""

    def end_profiling(self) -> str:
        """backplane does not profile: returns ``""`` (no profile file)."""
        return ""

    def get_profiling_start_time_ns(self) -> int:
        """``0``: backplane does not profile."""
        return 0

    # -- backplane ---------------------------------------------------------------------------

    @property
    def backplane_network(self) -> "backplane.Network":
        """The :class:`backplane.Network` the session runs (``explain()``,
        ``layers_per_backend()``, ``cache_info()``)."""
        return self._network

    @property
    def backplane_backends(self) -> List[str]:
        """The backend preferences the providers became, first preferred first."""
        return list(self._backends)

    def __repr__(self) -> str:
        source = self._model_path if self._model_path is not None else f"<{len(self._model)} bytes>"
        providers = [name for name, _ in getattr(self, "_providers", [])]
        return f"backplane.onnxruntime.InferenceSession({source!r}, providers={providers!r})"


from backplane.onnxruntime import capi  # noqa: E402 - needs the classes above
from backplane.onnxruntime._values import (  # noqa: E402 - they raise this module's errors
    IOBinding,
    OrtAllocatorType,
    OrtDevice,
    OrtMemType,
    OrtValue,
    SessionIOBinding,
)

from backplane.onnxruntime._surface import (  # noqa: E402,F811 - after the classes it uses
    AdapterFormat,
    LoraAdapter,
    ModelCompiler,
    OrtArenaCfg,
    OrtCompileApiFlags,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
    OrtEpAssignedNode,
    OrtEpAssignedSubgraph,
    OrtEpContextData,
    OrtEpContextDataBuffer,
    OrtEpDevice,
    OrtExecutionProviderDevicePolicy,
    OrtExternalInitializerInfo,
    OrtHardwareDevice,
    OrtHardwareDeviceType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtSparseFormat,
    OrtSyncStream,
    SparseTensor,
    copy_tensors,
    create_and_register_allocator,
    create_and_register_allocator_v2,
    register_execution_provider_library,
    unregister_execution_provider_library,
)
from backplane.onnxruntime import onnxruntime_validation  # noqa: E402

#: onnxruntime's version strings and package name (this module stands for that release).
version = __version__
package_name = "onnxruntime"
#: No CUDA here.
cuda_version = ""


def import_capi_exception(*args: Any, **kwargs: Any) -> None:
    """onnxruntime's hook for a failed import of its native module; backplane's imported."""


__all__ = [
    "DeviceReset", "EPFail", "EngineError", "ExecutionMode", "ExecutionOrder", "Fail",
    "GraphOptimizationLevel", "InferenceSession", "InvalidArgument", "InvalidGraph",
    "InvalidProtobuf", "ModelLoadCanceled", "ModelLoaded", "ModelMetadata",
    "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NodeArg", "NotFound",
    "NotImplemented", "RunOptions", "RuntimeException", "SessionOptions", "capi",
    "get_all_providers", "get_available_providers", "get_build_info", "get_device",
    "get_runtime", "set_default_logger_severity", "set_default_logger_verbosity",
    "set_runtime", "set_seed", "__version__",
    "IOBinding", "OrtAllocatorType", "OrtDevice", "OrtMemType", "OrtValue", "SessionIOBinding",
    "disable_telemetry_events", "enable_telemetry_events", "get_ep_devices", "get_version_string",
    "has_collective_ops", "preload_dlls", "print_debug_info", "set_global_thread_pool_sizes",
    "AdapterFormat", "LoraAdapter", "ModelCompiler", "OrtArenaCfg", "OrtCompileApiFlags",
    "OrtDeviceMemoryType", "OrtDeviceVendorId", "OrtEpAssignedNode", "OrtEpAssignedSubgraph",
    "OrtEpContextData", "OrtEpContextDataBuffer", "OrtEpDevice", "OrtExecutionProviderDevicePolicy",
    "OrtExternalInitializerInfo", "OrtHardwareDevice", "OrtHardwareDeviceType", "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType", "OrtSparseFormat", "OrtSyncStream", "SparseTensor", "copy_tensors",
    "create_and_register_allocator", "create_and_register_allocator_v2", "cuda_version",
    "import_capi_exception", "onnxruntime_validation", "package_name",
    "register_execution_provider_library", "unregister_execution_provider_library", "version",
]
