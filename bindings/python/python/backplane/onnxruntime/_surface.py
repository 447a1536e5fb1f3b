"""The rest of onnxruntime's public module on backplane, so that no application stops on an
``AttributeError``: sparse tensors (real: :class:`SparseTensor` in COO and CSR form, made into
dense arrays where a session reads them), memory descriptions (the host's), devices and EP
policies (backplane's backends are chosen by ``providers``, so these are accepted and
described), and the parts that cannot mean anything here, each documented where it is:

- accepted and ignored: allocator registration, EP-context read/write callbacks, tuning
  results, captured graphs, dynamic EP options, load cancellation;
- refused with onnxruntime's :class:`Fail` or :class:`NotImplemented` and a message saying
  why: LoRA adapters (their weights are onnxruntime's flatbuffer format), model compilation
  (EP-context models are onnxruntime's), plugin EP libraries (onnxruntime's ABI; backplane
  loads its own plugins from ``DYNAMIC_BACKEND_PATHS``), ``AdapterFormat``.
"""

import enum
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np


def _fail(message: str) -> Exception:
    from backplane.onnxruntime import Fail, _error

    return _error(Fail, message)


def _not_implemented(message: str) -> Exception:
    from backplane.onnxruntime import NotImplemented as NotImpl, _error

    return _error(NotImpl, message)


# -- enums -------------------------------------------------------------------------------------


class OrtSparseFormat(enum.IntEnum):
    """The layouts of a sparse tensor."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4


class OrtHardwareDeviceType(enum.IntEnum):
    """Kinds of hardware device."""

    CPU = 0
    GPU = 1
    NPU = 2


class OrtMemoryInfoDeviceType(enum.IntEnum):
    """Kinds of memory device."""

    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceMemoryType(enum.IntEnum):
    """Kinds of device memory."""

    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtDeviceVendorId(enum.IntEnum):
    """PCI vendor ids of the device makers onnxruntime names."""

    NONE = 0
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


class OrtCompileApiFlags(enum.IntEnum):
    """Flags of model compilation (which backplane does not do: see :class:`ModelCompiler`)."""

    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1
    ERROR_IF_OUTPUT_FILE_EXISTS = 2


class OrtExecutionProviderDevicePolicy(enum.IntEnum):
    """Automatic provider selection policies: accepted by
    ``SessionOptions.set_provider_selection_policy`` and recorded; backplane's order is the
    session's ``providers`` (else the runtime's default preferences)."""

    DEFAULT = 0
    PREFER_CPU = 1
    PREFER_NPU = 2
    PREFER_GPU = 3
    MAX_PERFORMANCE = 4
    MAX_EFFICIENCY = 5
    MIN_OVERALL_POWER = 6


# -- memory and devices ------------------------------------------------------------------------


class OrtArenaCfg:
    """Arena settings (accepted: backplane's backends manage their own memory)."""

    max_mem = 0
    arena_extend_strategy = -1
    initial_chunk_size_bytes = -1
    max_dead_bytes_per_chunk = -1
    initial_growth_chunk_size_bytes = -1
    max_power_of_two_extend_bytes = -1

    def __init__(self, max_mem: int = 0, arena_extend_strategy: int = -1,
                 initial_chunk_size_bytes: int = -1, max_dead_bytes_per_chunk: int = -1,
                 initial_growth_chunk_size_bytes: int = -1,
                 max_power_of_two_extend_bytes: int = -1) -> None:
        self.max_mem = max_mem
        self.arena_extend_strategy = arena_extend_strategy
        self.initial_chunk_size_bytes = initial_chunk_size_bytes
        self.max_dead_bytes_per_chunk = max_dead_bytes_per_chunk
        self.initial_growth_chunk_size_bytes = initial_growth_chunk_size_bytes
        self.max_power_of_two_extend_bytes = max_power_of_two_extend_bytes


class OrtMemoryInfo:
    """Where a tensor lives: every session input and output here is in host memory."""

    name = "Cpu"
    allocator_type = 0
    device_id = 0
    mem_type = 0
    device_mem_type = OrtDeviceMemoryType.DEFAULT
    device_vendor_id = int(OrtDeviceVendorId.NONE)

    def __init__(self, name: str = "Cpu", alloc_type: int = 0, device_id: int = 0,
                 mem_type: int = 0) -> None:
        self.name = name
        self.allocator_type = alloc_type
        self.device_id = device_id
        self.mem_type = mem_type
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = int(OrtDeviceVendorId.NONE)

    @staticmethod
    def create_v2(name: str, device_type: int, vendor_id: int, device_id: int,
                  mem_type: int, alignment: int = 0, allocator_type: int = 0) -> "OrtMemoryInfo":
        """A memory description; backplane keeps its fields."""
        info = OrtMemoryInfo(name, allocator_type, device_id, mem_type)
        info.device_vendor_id = vendor_id
        return info

    def __repr__(self) -> str:
        return f"OrtMemoryInfo(name={self.name!r}, device_id={self.device_id})"


class OrtHardwareDevice:
    """A hardware device: backplane describes the host CPU."""

    type = OrtHardwareDeviceType.CPU
    vendor = ""
    vendor_id = 0
    device_id = 0
    metadata: Dict[str, str] = {}

    def __init__(self) -> None:
        self.type = OrtHardwareDeviceType.CPU
        self.vendor = ""
        self.vendor_id = 0
        self.device_id = 0
        self.metadata: Dict[str, str] = {}


class OrtSyncStream:
    """A device stream (host memory needs none: its handle is 0)."""

    def get_handle(self) -> int:
        return 0


class OrtEpDevice:
    """A provider on a device, as ``get_ep_devices`` lists them (backplane: none)."""

    ep_name = "CPUExecutionProvider"
    ep_vendor = "backplane"
    ep_metadata: Dict[str, str] = {}
    ep_options: Dict[str, str] = {}
    device = OrtHardwareDevice()

    def __init__(self, ep_name: str = "CPUExecutionProvider") -> None:
        self.ep_name = ep_name
        self.ep_vendor = "backplane"
        self.ep_metadata: Dict[str, str] = {}
        self.ep_options: Dict[str, str] = {}
        self.device = OrtHardwareDevice()

    def memory_info(self, memory_type: int = 0) -> OrtMemoryInfo:
        return OrtMemoryInfo()

    def create_sync_stream(self) -> OrtSyncStream:
        return OrtSyncStream()


class OrtEpAssignedNode:
    """One node of a provider's part of the graph."""

    def __init__(self, name: str, op_type: str, domain: str = "") -> None:
        self.name, self.op_type, self.domain = name, op_type, domain


class OrtEpAssignedSubgraph:
    """The nodes one provider runs (from ``get_provider_graph_assignment_info``)."""

    def __init__(self, ep_name: str, nodes: List[OrtEpAssignedNode]) -> None:
        self.ep_name = ep_name
        self._nodes = nodes

    def get_nodes(self) -> List[OrtEpAssignedNode]:
        return list(self._nodes)


class OrtExternalInitializerInfo:
    """Where an external initializer's bytes are."""

    def __init__(self, filepath: str, file_offset: int, byte_size: int) -> None:
        self.filepath, self.file_offset, self.byte_size = filepath, file_offset, byte_size


class OrtEpContextData:
    """EP-context data (onnxruntime's compiled models; never produced here)."""

    def __init__(self, data: bytes = b"") -> None:
        self._data = data

    def size(self) -> int:
        return len(self._data)

    def read(self) -> bytes:
        return self._data


class OrtEpContextDataBuffer:
    """A buffer for EP-context data (kept in memory)."""

    def __init__(self, max_size: int = 0) -> None:
        self.max_size = max_size
        self._data: Optional[bytearray] = None

    def allocate(self, size: int) -> None:
        self._data = bytearray(size)

    def is_allocated(self) -> bool:
        return self._data is not None

    def size(self) -> int:
        return len(self._data or b"")

    def write(self, data: bytes) -> None:
        self._data = bytearray(data)


# -- sparse tensors ----------------------------------------------------------------------------


class SparseTensor:
    """A sparse tensor in host memory, COO or CSR (row-compressed), as onnxruntime's."""

    def __init__(self, fmt: OrtSparseFormat, dense_shape: Sequence[int], values: np.ndarray,
                 indices: Sequence[np.ndarray]) -> None:
        self._format = fmt
        self._shape = np.asarray(dense_shape, dtype=np.int64)
        self._values = np.ascontiguousarray(values)
        self._indices = [np.ascontiguousarray(i, dtype=np.int64) for i in indices]

    @staticmethod
    def sparse_coo_from_numpy(dense_shape: Sequence[int], values: np.ndarray,
                              coo_indices: np.ndarray, ort_device: Any = None) -> "SparseTensor":
        """COO: ``values[k]`` at flat position ``coo_indices[k]`` (1-D), or at the
        coordinates of row ``k`` of ``coo_indices`` (2-D, one column per dimension)."""
        return SparseTensor(OrtSparseFormat.ORT_SPARSE_COO, dense_shape, values, [coo_indices])

    @staticmethod
    def sparse_csr_from_numpy(dense_shape: Sequence[int], values: np.ndarray,
                              inner_indices: np.ndarray, outer_indices: np.ndarray,
                              ort_device: Any = None) -> "SparseTensor":
        """CSR of a 2-D tensor: row ``r``'s values are ``values[outer[r]:outer[r + 1]]``, in
        the columns ``inner_indices`` gives."""
        if len(dense_shape) != 2:
            raise _fail("a CSR sparse tensor is 2-D")
        return SparseTensor(OrtSparseFormat.ORT_SPARSE_CSRC, dense_shape, values,
                            [inner_indices, outer_indices])

    def values(self) -> np.ndarray:
        return self._values

    def dense_shape(self) -> np.ndarray:
        return self._shape.copy()

    def format(self) -> OrtSparseFormat:
        return self._format

    def data_type(self) -> str:
        from backplane.onnxruntime import _type_name
        from backplane.onnxruntime._values import _CODES

        return "sparse_" + _type_name(_CODES[self._values.dtype])

    def device_name(self) -> str:
        return "cpu"

    def as_coo_view(self) -> "SparseTensor._View":
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise _fail("not a COO sparse tensor")
        return SparseTensor._View(self._indices[0], None)

    def as_csrc_view(self) -> "SparseTensor._View":
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise _fail("not a CSR sparse tensor")
        return SparseTensor._View(self._indices[0], self._indices[1])

    def as_blocksparse_view(self) -> "SparseTensor._View":
        raise _fail("block-sparse tensors are not supported on backplane")

    def to_cuda(self, ort_device: Any = None) -> "SparseTensor":
        raise _fail("backplane's sessions bind host (cpu) memory only")

    def to_dense(self) -> np.ndarray:
        """The dense array (backplane's; what a session reads)."""
        shape = tuple(int(d) for d in self._shape)
        out = np.zeros(shape, dtype=self._values.dtype)
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            idx = self._indices[0]
            if idx.ndim == 1:
                out.reshape(-1)[idx] = self._values
            else:
                out[tuple(idx.T)] = self._values
        else:
            inner, outer = self._indices
            for r in range(shape[0]):
                cols = inner[outer[r]:outer[r + 1]]
                out[r, cols] = self._values[outer[r]:outer[r + 1]]
        return out

    class _View:
        """The index arrays of a sparse tensor."""

        def __init__(self, first: np.ndarray, second: Optional[np.ndarray]) -> None:
            self._first, self._second = first, second

        def indices(self) -> np.ndarray:
            return self._first

        def inner(self) -> np.ndarray:
            return self._first

        def outer(self) -> np.ndarray:
            return self._second if self._second is not None else np.zeros(0, np.int64)


# -- what cannot mean anything here ------------------------------------------------------------


class LoraAdapter:
    """onnxruntime's LoRA adapters: their files are onnxruntime's flatbuffer format, which
    backplane does not read. ``Load`` raises :class:`NotImplemented`."""

    def Load(self, adapter_file_path: str) -> None:  # noqa: N802 - onnxruntime's name
        raise _not_implemented(f"LoRA adapters cannot be loaded on backplane ({adapter_file_path})")


class AdapterFormat:
    """onnxruntime's LoRA adapter file format: not read or written on backplane (every method
    raises :class:`NotImplemented`)."""


def _refuse_adapter(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise _not_implemented(f"AdapterFormat.{name}: LoRA adapters are onnxruntime's format")
    refuse.__name__ = name
    refuse.__doc__ = "Raises :class:`NotImplemented` (LoRA adapters are onnxruntime's)."
    return refuse


for _name in ("export_adapter", "get_adapter_version", "get_format_version", "get_model_version",
              "get_parameters", "set_adapter_version", "set_model_version", "set_parameters"):
    setattr(AdapterFormat, _name, _refuse_adapter(_name))
AdapterFormat.read_adapter = staticmethod(_refuse_adapter("read_adapter"))


class ModelCompiler:
    """onnxruntime's model compiler (EP-context models). backplane compiles with
    ``backplane compile`` into its own format; every ``compile_*`` here raises
    :class:`NotImplemented` saying so."""

    def __init__(self, sess_options: Any, input_model_path_or_bytes: Any, *args: Any,
                 **kwargs: Any) -> None:
        self._source = input_model_path_or_bytes

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise _not_implemented("onnxruntime's EP-context compilation does not exist on backplane "
                               "(use `backplane compile` for a compiled network)")

    compile_to_file = _refuse
    compile_to_bytes = _refuse
    compile_to_stream = _refuse

    def set_ep_context_data_write_func(self, func: Callable[..., Any]) -> None:
        """Accepted (nothing is compiled)."""

    def clear_ep_context_data_write_func(self) -> None:
        """Accepted (nothing is compiled)."""


def copy_tensors(src: Sequence[Any], dst: Sequence[Any], stream: Any = None) -> None:
    """Copies each source :class:`OrtValue` into the destination of the same shape and type
    (host memory to host memory)."""
    if len(src) != len(dst):
        raise _fail(f"{len(src)} sources for {len(dst)} destinations")
    for s, d in zip(src, dst):
        d.update_inplace(s.numpy())


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: OrtArenaCfg) -> None:
    """Accepted and ignored: backplane's backends manage their own memory."""


def create_and_register_allocator_v2(provider_type: str, mem_info: OrtMemoryInfo,
                                     provider_options: Dict[str, str], arena_cfg: OrtArenaCfg) -> None:
    """Accepted and ignored: backplane's backends manage their own memory."""


def register_execution_provider_library(registration_name: str, library_path: str) -> None:
    """onnxruntime's plugin EP libraries have onnxruntime's ABI: raises :class:`Fail`.
    backplane's own plugins come from ``DYNAMIC_BACKEND_PATHS``."""
    raise _fail(f"{library_path} is an onnxruntime EP library; backplane loads its own plugins "
                "from DYNAMIC_BACKEND_PATHS")


def unregister_execution_provider_library(registration_name: str) -> None:
    """Raises :class:`Fail`: nothing can have been registered."""
    raise _fail(f"no EP library {registration_name!r} is registered")
