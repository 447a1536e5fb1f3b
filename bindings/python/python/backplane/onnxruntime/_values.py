"""onnxruntime's values and bindings on backplane: :class:`OrtValue` (a tensor in host
memory, held as a numpy array), :class:`IOBinding` (inputs and outputs bound ahead of a run),
and the enums that name devices and memory. backplane's backends take and give host memory
through the session, so every value here lives on the CPU: a device other than ``"cpu"`` is an
:class:`InvalidArgument` error, never a silent copy elsewhere."""

import ctypes
import enum
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from backplane.onnxruntime import _onnx_header

# ONNX element type codes for numpy dtypes, and back.
_CODES = {np.dtype(v): k for k, v in _onnx_header.ELEM_TYPE_NUMPY.items()}


def _invalid(message: str) -> Exception:
    from backplane.onnxruntime import InvalidArgument, _error

    return _error(InvalidArgument, message)


def _check_device(device_type: str, device_id: int = 0) -> None:
    if str(device_type).lower() != "cpu" or device_id not in (0, None):
        raise _invalid(f"device {device_type}:{device_id}: backplane's sessions bind host (cpu) memory only")


def _dtype_of(element_type: Any) -> np.dtype:
    """A numpy dtype from onnxruntime's ways of naming one: a numpy type or dtype, or an ONNX
    element type code."""
    if isinstance(element_type, (int, np.integer)) and not isinstance(element_type, bool):
        dtype = _onnx_header.ELEM_TYPE_NUMPY.get(int(element_type))
        if dtype is None:
            raise _invalid(f"element type {element_type} has no numpy type")
        return np.dtype(dtype)
    return np.dtype(element_type)


class OrtMemType(enum.IntEnum):
    """onnxruntime's memory kinds (every value here is ``DEFAULT``, host memory)."""

    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtAllocatorType(enum.IntEnum):
    """onnxruntime's allocator kinds (accepted, not used)."""

    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtDevice:
    """A device: backplane binds ``cpu`` only."""

    def __init__(self, device_type: int = 0, memory_type: int = 0, device_id: int = 0) -> None:
        self._type, self._memory, self._id = device_type, memory_type, device_id

    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_id(self) -> int:
        return self._id

    def device_type(self) -> int:
        return self._type

    def mem_type(self) -> int:
        return self._memory

    def device_mem_type(self) -> int:
        return self._memory

    def device_vendor_id(self) -> int:
        return 0

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int = -1) -> "OrtDevice":
        """A device by name: ``"cpu"`` only (another is an :class:`InvalidArgument` error)."""
        _check_device(ort_device_name, device_id)
        return OrtDevice(0, 0, device_id)


class OrtValue:
    """A tensor value in host memory (onnxruntime's ``OrtValue`` for CPU tensors), held as a
    C-contiguous numpy array: ``numpy()`` returns that array itself, as onnxruntime's does for
    CPU memory, so an update through one is seen through the other."""

    def __init__(self, array: np.ndarray, sparse: Any = None) -> None:
        self._array = array
        self._sparse = sparse

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: Any) -> "OrtValue":
        """A value holding a :class:`SparseTensor` (a session reads it as its dense array)."""
        return OrtValue(sparse_tensor.to_dense(), sparse_tensor)

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> "OrtValue":
        """A value sharing a DLPack tensor's host memory (numpy's ``from_dlpack``)."""
        array = np.from_dlpack(data)
        if is_bool_tensor and array.dtype == np.uint8:
            array = array.view(np.bool_)
        return OrtValue.ortvalue_from_numpy(array)

    def as_sparse_tensor(self) -> Any:
        """The :class:`SparseTensor` this value holds (``Fail`` for a dense one)."""
        if self._sparse is None:
            from backplane.onnxruntime import Fail, _error

            raise _error(Fail, "this OrtValue holds a dense tensor")
        return self._sparse

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0,
                            vendor_id: int = -1) -> "OrtValue":
        """The array as a value (copied only when it is not C-contiguous)."""
        _check_device(device_type, device_id)
        array = np.asarray(numpy_obj)
        if not array.flags["C_CONTIGUOUS"]:
            array = np.array(array, order="C", copy=True)
        if array.dtype not in _CODES:
            raise _invalid(f"numpy type {array.dtype} has no ONNX element type here")
        return OrtValue(array)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> "OrtValue":
        """The array, viewed as the ONNX element type ``onnx_element_type``."""
        dtype = _dtype_of(onnx_element_type)
        array = np.ascontiguousarray(data)
        if array.dtype.itemsize != dtype.itemsize:
            raise _invalid(f"{array.dtype} cannot be read as {dtype}")
        return OrtValue(array.view(dtype))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any,
                                     device_type: str = "cpu", device_id: int = 0,
                                     vendor_id: int = -1) -> "OrtValue":
        """A zeroed value of this shape and element type (a numpy type or an ONNX code)."""
        _check_device(device_type, device_id)
        return OrtValue(np.zeros(tuple(int(d) for d in shape), dtype=_dtype_of(element_type)))

    def numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> List[int]:
        return list(self._array.shape)

    def element_type(self) -> int:
        return _CODES[self._array.dtype]

    def data_type(self) -> str:
        from backplane.onnxruntime import _type_name

        return _type_name(self.element_type())

    def device_name(self) -> str:
        return "cpu"

    def is_tensor(self) -> bool:
        return True

    def is_sparse_tensor(self) -> bool:
        return self._sparse is not None

    def is_tensor_sequence(self) -> bool:
        return False

    def has_value(self) -> bool:
        return True

    def data_ptr(self) -> int:
        return int(self._array.ctypes.data)

    def tensor_size_in_bytes(self) -> int:
        return int(self._array.nbytes)

    def update_inplace(self, np_arr: Any) -> None:
        """Copies ``np_arr`` (same shape and type) into this value's memory."""
        src = np.asarray(np_arr)
        if src.shape != self._array.shape or src.dtype != self._array.dtype:
            raise _invalid(f"update_inplace: {src.dtype}{list(src.shape)} into "
                           f"{self._array.dtype}{list(self._array.shape)}")
        self._array[...] = src

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, shape={self.shape()})"


def _array_at(ptr: int, dtype: np.dtype, shape: Sequence[int]) -> np.ndarray:
    """A numpy view of caller memory at ``ptr`` (onnxruntime's ``buffer_ptr`` bindings)."""
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if ptr == 0 and count:
        raise _invalid("buffer_ptr is 0")
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(tuple(shape))


class IOBinding:
    """Inputs and outputs bound ahead of :meth:`InferenceSession.run_with_iobinding`
    (onnxruntime's ``IOBinding``). Inputs are read at the run; an output bound to a value or
    a buffer is written there (its shape and type must be the ones the run gives), and any
    other output is allocated by the run. :meth:`get_outputs` gives every bound output, in
    the order bound."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._inputs: Dict[str, np.ndarray] = {}
        self._outputs: Dict[str, Optional[np.ndarray]] = {}
        self._results: List[OrtValue] = []

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        self._inputs[name] = np.asarray(arr_on_cpu)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any,
                   shape: Sequence[int], buffer_ptr: int) -> None:
        _check_device(device_type, device_id)
        self._inputs[name] = _array_at(buffer_ptr, _dtype_of(element_type), shape)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._inputs[name] = ortvalue.numpy()

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Optional[Sequence[int]] = None,
                    buffer_ptr: Optional[int] = None) -> None:
        _check_device(device_type, device_id)
        if buffer_ptr is None:
            self._outputs[name] = None
        else:
            if element_type is None or shape is None:
                raise _invalid(f"output {name}: a buffer needs its element type and shape")
            self._outputs[name] = _array_at(buffer_ptr, _dtype_of(element_type), shape)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        self._outputs[name] = ortvalue.numpy()

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: host memory."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: host memory."""

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def get_outputs(self) -> List[OrtValue]:
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> List[OrtValue]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> List[np.ndarray]:
        return [v.numpy().copy() for v in self._results]

    def _run(self, run_options: Any) -> None:
        names = list(self._outputs)
        got = self._session.run(names, self._inputs, run_options)
        results = []
        for name, value in zip(names, got):
            target = self._outputs[name]
            if target is None:
                results.append(OrtValue(np.ascontiguousarray(value)))
                continue
            if target.shape != value.shape or target.dtype != value.dtype:
                raise _invalid(f"output {name}: the run gave {value.dtype}{list(value.shape)}, "
                               f"the binding is {target.dtype}{list(target.shape)}")
            target[...] = value
            results.append(OrtValue(target))
        self._results = results


# onnxruntime's name for the binding the session makes.
SessionIOBinding = IOBinding
