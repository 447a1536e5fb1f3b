"""What an ONNX model declares about its graph's inputs and outputs, read from the protobuf
wire format without the onnx package: the element type and the dimensions of each, which
initializers the graph lists among its inputs, and whether the model has a version.

onnxruntime reports these as the model declares them (``NodeArg.shape``: ``int`` for a fixed
dimension, the ``dim_param`` string for a named one, ``None`` for one with neither;
``NodeArg.type``: ``"tensor(int64)"``...), and checks feeds against them; backplane's network
narrows some types (int64 to int32), so the shim keeps the declaration to answer and check
as onnxruntime does.

Only the fields needed are decoded; everything else is skipped by its length, so the weights
of a large model are not read (a path is memory-mapped).
"""

import mmap
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

Dim = Union[int, str, None]


class ProtoError(ValueError):
    """The bytes are not a well-formed ONNX ModelProto."""


class Tensor(NamedTuple):
    """One graph input or output as declared: its name, ONNX element type (``elem_type``,
    0 when the type is not a tensor or is missing) and dimensions (``None`` when the type
    declares no shape at all)."""

    name: str
    elem_type: int
    dims: Optional[List[Dim]]


class Header(NamedTuple):
    """The graph's inputs (initializers listed as inputs left out, as onnxruntime's
    ``get_inputs`` does), its outputs, and whether the model sets ``model_version``."""

    inputs: List[Tensor]
    outputs: List[Tensor]
    has_model_version: bool


# Field numbers of onnx.proto3.
_MODEL_VERSION, _MODEL_GRAPH = 5, 7
_GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT, _GRAPH_SPARSE_INITIALIZER = 5, 11, 12, 15
_VALUE_NAME, _VALUE_TYPE = 1, 2
_TYPE_TENSOR = 1
_TENSOR_ELEM_TYPE, _TENSOR_SHAPE = 1, 2
_SHAPE_DIM = 1
_DIM_VALUE, _DIM_PARAM = 1, 2
_TENSOR_PROTO_NAME = 8
_SPARSE_VALUES = 1

# onnxruntime's name of each ONNX element type, as in NodeArg.type "tensor(<name>)".
ELEM_TYPE_NAMES: Dict[int, str] = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64",
    14: "complex64", 15: "complex128", 16: "bfloat16",
}

# The numpy dtype name of each element type numpy has.
ELEM_TYPE_NUMPY: Dict[int, str] = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128",
}


def _varint(buf: Sequence[int], pos: int, end: int) -> Tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ProtoError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint longer than 10 bytes")


def _fields(buf: Sequence[int], start: int, end: int):
    """Yields ``(field number, value)`` for each field of the message in ``buf[start:end]``:
    an ``int`` for a varint, a ``(start, end)`` span for a length-delimited field, ``None``
    for fixed-width ones (skipped)."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ProtoError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, value
        elif wire == 2:
            length, pos = _varint(buf, pos, end)
            if pos + length > end:
                raise ProtoError("a length-delimited field runs past its message")
            yield field, (pos, pos + length)
            pos += length
        elif wire == 1:
            pos += 8
            yield field, None
        elif wire == 5:
            pos += 4
            yield field, None
        else:
            raise ProtoError(f"wire type {wire} (field {field})")
    if pos != end:
        raise ProtoError("a fixed-width field runs past its message")


def _span(value, what: str) -> Tuple[int, int]:
    if not isinstance(value, tuple):
        raise ProtoError(f"{what} is not length-delimited")
    return value


def _text(buf, span: Tuple[int, int]) -> str:
    try:
        return bytes(buf[span[0]:span[1]]).decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtoError(f"a name is not UTF-8: {e}") from None


def _name_of(buf, span: Tuple[int, int], name_field: int) -> Optional[str]:
    for field, value in _fields(buf, *span):
        if field == name_field:
            return _text(buf, _span(value, "a name"))
    return None


def _value_info(buf, span: Tuple[int, int]) -> Tensor:
    name, elem_type, dims = "", 0, None
    for field, value in _fields(buf, *span):
        if field == _VALUE_NAME:
            name = _text(buf, _span(value, "ValueInfoProto.name"))
        elif field == _VALUE_TYPE:
            for tfield, tvalue in _fields(buf, *_span(value, "ValueInfoProto.type")):
                if tfield != _TYPE_TENSOR:
                    continue
                for f, v in _fields(buf, *_span(tvalue, "TypeProto.tensor_type")):
                    if f == _TENSOR_ELEM_TYPE and isinstance(v, int):
                        elem_type = v
                    elif f == _TENSOR_SHAPE:
                        dims = []
                        for sf, sv in _fields(buf, *_span(v, "TypeProto.Tensor.shape")):
                            if sf == _SHAPE_DIM:
                                dims.append(_dim(buf, _span(sv, "TensorShapeProto.dim")))
    return Tensor(name, elem_type, dims)


def _dim(buf, span: Tuple[int, int]) -> Dim:
    dim: Dim = None
    for field, value in _fields(buf, *span):
        if field == _DIM_VALUE and isinstance(value, int):
            # A negative dim_value (a varint of 2**63 or more) is unknown, as in onnxruntime.
            dim = value if value < 1 << 63 else None
        elif field == _DIM_PARAM:
            # An empty dim_param is an unnamed dimension, as in onnxruntime.
            dim = _text(buf, _span(value, "Dimension.dim_param")) or None
    return dim


def parse(buf: Sequence[int]) -> Header:
    """The header of the ModelProto in ``buf`` (bytes, a memoryview or an mmap).
    Raises :class:`ProtoError` when it is not well-formed or has no graph."""
    end = len(buf)
    graph = None
    has_version = False
    for field, value in _fields(buf, 0, end):
        if field == _MODEL_GRAPH:
            graph = _span(value, "ModelProto.graph")
        elif field == _MODEL_VERSION:
            has_version = True
    if graph is None:
        raise ProtoError("the model has no graph")
    inputs: List[Tensor] = []
    outputs: List[Tensor] = []
    initializers = set()
    for field, value in _fields(buf, *graph):
        if field == _GRAPH_INPUT:
            inputs.append(_value_info(buf, _span(value, "GraphProto.input")))
        elif field == _GRAPH_OUTPUT:
            outputs.append(_value_info(buf, _span(value, "GraphProto.output")))
        elif field == _GRAPH_INITIALIZER:
            initializers.add(_name_of(buf, _span(value, "GraphProto.initializer"), _TENSOR_PROTO_NAME))
        elif field == _GRAPH_SPARSE_INITIALIZER:
            for f, v in _fields(buf, *_span(value, "GraphProto.sparse_initializer")):
                if f == _SPARSE_VALUES:
                    initializers.add(_name_of(buf, _span(v, "SparseTensorProto.values"), _TENSOR_PROTO_NAME))
    inputs = [t for t in inputs if t.name not in initializers]
    return Header(inputs, outputs, has_version)


def read(model: Union[bytes, str, "os.PathLike[str]"]) -> Header:
    """The header of a model given as bytes or as a path (memory-mapped, read only where
    the header is)."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return parse(memoryview(model).cast("B"))
    with open(model, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ProtoError("the file is empty")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return parse(m)


def _key(field: int, wire: int) -> bytes:
    return _encode_varint(field << 3 | wire)


def _encode_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _delimited(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _encode_varint(len(payload)) + payload


def _raw_fields(buf: Sequence[int], start: int, end: int):
    """Yields ``(field number, value, the field's whole span)`` (see :func:`_fields`)."""
    pos = start
    for field, value in _fields(buf, start, end):
        # _fields has moved past this field: find where it ended from its value.
        if isinstance(value, tuple):
            field_end = value[1]
        else:
            # Re-read the key and the varint or fixed-width value.
            _, p = _varint(buf, pos, end)
            if value is None:
                wire = buf[pos] & 7
                field_end = p + (8 if wire == 1 else 4)
            else:
                _, field_end = _varint(buf, p, end)
        yield field, value, (pos, field_end)
        pos = field_end


def tensor_proto(name: str, array) -> bytes:
    """A ``TensorProto`` of a numpy array (``raw_data``, little-endian)."""
    import numpy as np

    codes = {np.dtype(v): k for k, v in ELEM_TYPE_NUMPY.items()}
    a = np.ascontiguousarray(array)
    if a.dtype not in codes:
        raise ProtoError(f"{a.dtype} has no ONNX element type")
    out = bytearray()
    for d in a.shape:
        out += _key(1, 0) + _encode_varint(int(d))
    out += _key(2, 0) + _encode_varint(codes[a.dtype])
    out += _delimited(_TENSOR_PROTO_NAME, name.encode("utf-8"))
    out += _delimited(9, a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    return bytes(out)


def with_initializers(model: bytes, values: Dict[str, "object"]) -> bytes:
    """The model with each initializer named in ``values`` replaced by that array (or added,
    for a name the graph does not hold), everything else copied byte for byte."""
    buf = memoryview(model).cast("B")
    end = len(buf)
    out = bytearray()
    seen_graph = False
    for field, value, (s, e) in _raw_fields(buf, 0, end):
        if field != _MODEL_GRAPH:
            out += buf[s:e]
            continue
        seen_graph = True
        gs, ge = _span(value, "ModelProto.graph")
        graph = bytearray()
        for gfield, gvalue, (fs, fe) in _raw_fields(buf, gs, ge):
            if gfield == _GRAPH_INITIALIZER:
                name = _name_of(buf, _span(gvalue, "GraphProto.initializer"), _TENSOR_PROTO_NAME)
                if name in values:
                    continue
            graph += buf[fs:fe]
        for name, array in values.items():
            graph += _delimited(_GRAPH_INITIALIZER, tensor_proto(name, array))
        out += _delimited(_MODEL_GRAPH, bytes(graph))
    if not seen_graph:
        raise ProtoError("the model has no graph")
    return bytes(out)
