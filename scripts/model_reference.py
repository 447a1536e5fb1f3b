#!/usr/bin/env python3
"""Describes an ONNX model and makes reference data for it with onnxruntime.

Run by scripts/fetch-paddleocr.sh and scripts/fetch-models.sh in the project's venv (needs
onnx, onnxruntime and numpy):

    model_reference.py --model target/models/paddleocr_cls/model.onnx \
        --out-dir target/models/paddleocr_cls --description "..."

Prints the model's opset, graph inputs and outputs with their shapes and the op types it
uses with their counts; then feeds a seeded float32 input (written to input.npy) through
onnxruntime's CPU provider on one thread and writes each output to <name>.npy, the name
sanitised as by backplane::npy::file_name_for_output. Writes everything to info.json too.
The same versions give byte-identical files on every run.
"""

import argparse
import collections
import hashlib
import json
import os
import re
import sys

import numpy as np
import onnx
import onnxruntime as ort

SEED = 20261121
# The PaddleOCR classifier's standard input (N, C, H, W), used for any dimension that is not
# fixed.
DEFAULT_INPUT_SHAPE = (1, 3, 48, 192)
# The classifier's preprocessing maps pixels to (x / 255 - 0.5) / 0.5, that is [-1, 1]; the
# same range serves the other models.
INPUT_LOW, INPUT_HIGH = -1.0, 1.0


def file_name_for_output(name):
    """Same rule as backplane::npy::file_name_for_output."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"


def dims_of(value_info):
    """Dimensions of a graph input or output: ints, symbolic names, or None if unknown."""
    tensor_type = value_info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims = []
    for d in tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append("?")
    return dims


def elem_type_name(value_info):
    return onnx.TensorProto.DataType.Name(value_info.type.tensor_type.elem_type).lower()


def count_ops(graph, counts):
    """Counts op types in a graph and its subgraphs; ops outside the default domain are
    counted as domain::OpType."""
    for node in graph.node:
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        counts[f"{domain}::{node.op_type}" if domain else node.op_type] += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                count_ops(attr.g, counts)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    count_ops(g, counts)


def concrete_shape(dims, given=None):
    if given is not None:
        return list(given)
    if dims is None:
        return list(DEFAULT_INPUT_SHAPE)
    if len(dims) != len(DEFAULT_INPUT_SHAPE):
        if all(isinstance(d, int) and d > 0 for d in dims):
            return list(dims)
        sys.exit(f"error: input has symbolic dims {dims} and is not 4-d: no default shape")
    return [
        d if isinstance(d, int) and d > 0 else default
        for d, default in zip(dims, DEFAULT_INPUT_SHAPE)
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--description", required=True, help="what the model is, for info.json")
    parser.add_argument("--input-shape", help="the input's shape, D1,D2,... (default: its declared"
                        " shape, symbolic dimensions from (1, 3, 48, 192))")
    args = parser.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    with open(args.model, "rb") as f:
        model_bytes = f.read()
    model = onnx.load_from_string(model_bytes)
    onnx.checker.check_model(model)
    graph = model.graph

    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    opset = opsets.get("ai.onnx")
    print(f"model: {args.model} ({len(model_bytes)} bytes)")
    print(f"ir_version: {model.ir_version}, producer: {model.producer_name} {model.producer_version}")
    print("opset imports: " + ", ".join(f"{d} {v}" for d, v in sorted(opsets.items())))

    initializers = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    print("inputs:")
    for i in inputs:
        print(f"  {i.name}: {elem_type_name(i)} {dims_of(i)}")
    print("outputs:")
    for o in graph.output:
        print(f"  {o.name}: {elem_type_name(o)} {dims_of(o)}")

    counts = collections.Counter()
    count_ops(graph, counts)
    op_counts = dict(sorted(counts.items()))
    print(f"op types ({len(op_counts)} kinds, {sum(op_counts.values())} nodes, "
          f"{len(graph.initializer)} initializers):")
    for op, n in op_counts.items():
        print(f"  {op:<24} {n}")

    if len(inputs) != 1:
        sys.exit(f"error: expected one graph input, found {len(inputs)}")
    (inp,) = inputs
    if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        sys.exit(f"error: input {inp.name} is {elem_type_name(inp)}, not float")
    given = [int(d) for d in args.input_shape.split(",")] if args.input_shape else None
    shape = concrete_shape(dims_of(inp), given)
    rng = np.random.default_rng(SEED)
    x = rng.uniform(INPUT_LOW, INPUT_HIGH, size=shape).astype("<f4")
    x = np.ascontiguousarray(x)
    input_path = os.path.join(args.out_dir, "input.npy")
    np.save(input_path, x)
    print(f"input {inp.name} {shape}: uniform [{INPUT_LOW}, {INPUT_HIGH}) seed {SEED}"
          f" -> {input_path}")

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    session = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, {inp.name: x})

    outputs = []
    for name, value in zip(names, results):
        value = np.asarray(value)
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype("<f4")
        value = np.ascontiguousarray(value)
        file_name = file_name_for_output(name)
        path = os.path.join(args.out_dir, file_name)
        np.save(path, value)
        flat = value.reshape(-1)
        preview = ", ".join(f"{v:.6g}" for v in flat[:8]) + (", ..." if flat.size > 8 else "")
        print(f"output {name} {list(value.shape)} {value.dtype.str}: [{preview}] -> {path}")
        outputs.append({
            "name": name,
            "shape": list(value.shape),
            "dtype": value.dtype.str,
            "file": file_name,
        })

    info = {
        "model": args.description,
        "model_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opset": opset,
        "opset_imports": opsets,
        "input": {
            "name": inp.name,
            "declared_shape": dims_of(inp),
            "shape": shape,
            "dtype": "<f4",
            "file": "input.npy",
            "generator": f"numpy.random.default_rng({SEED}).uniform({INPUT_LOW}, {INPUT_HIGH})"
                         " cast to float32",
        },
        "outputs": outputs,
        "declared_outputs": [{"name": o.name, "shape": dims_of(o)} for o in graph.output],
        "op_counts": op_counts,
        "node_count": sum(op_counts.values()),
        "initializer_count": len(graph.initializer),
        "onnxruntime": {
            "version": ort.__version__,
            "providers": session.get_providers(),
            "intra_op_num_threads": 1,
            "graph_optimization_level": str(so.graph_optimization_level),
        },
        "onnx_version": onnx.__version__,
        "numpy_version": np.__version__,
    }
    info_path = os.path.join(args.out_dir, "info.json")
    with open(info_path, "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(f"info -> {info_path}")


if __name__ == "__main__":
    main()
