#!/usr/bin/env python3
"""Generates the peer-benchmark models with a fixed seed, and their reference outputs.

Run by scripts/bench-peers.sh in the project venv (needs onnx, onnxruntime and numpy):

    bench_models.py --out-dir target/bench-models [--paddleocr target/models/paddleocr_cls/model.onnx]

For each model, writes <out-dir>/<name>/model.onnx, input.npy (seeded uniform [-1, 1)),
output.npy (onnxruntime, CPU, one thread, all graph optimisations) and meta.json (the
multiply-accumulate count, input name and shapes), and prints one line per model with its
shape and multiply-accumulate count. The models (opset 13, float32, NCHW):

- small_cnn: 1x1x28x28 -> Conv 3x3 1->8 (+bias) -> Relu -> MaxPool 2 -> Conv 3x3 8->16
  (+bias) -> Relu -> MaxPool 2 -> Flatten -> Gemm 784->10 -> Softmax.
- mobilenet_v1_block: 1x32x112x112 -> depthwise Conv 3x3 (+bias) -> Clip 0..6 -> Conv 1x1
  32->64 (+bias) -> Clip 0..6.
- mobilenet_v2_block: 1x24x56x56 -> Conv 1x1 24->144 (+bias) -> Clip 0..6 -> depthwise
  Conv 3x3 (+bias) -> Clip 0..6 -> Conv 1x1 144->24 (+bias) -> Add (residual).
- conv3x3_64: 1x64x56x56 -> Conv 3x3 64->64 pad 1 (+bias) -> Relu.
- paddleocr_cls: the PaddleOCR text-direction classifier (copied, when --paddleocr is given).

The same versions give byte-identical files on every run.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SEED = 20261122
OPSET = 13


class Graph:
    """A small builder: nodes, float32 initializers from one seeded generator, MAC count."""

    def __init__(self, name, input_shape, rng):
        self.name = name
        self.rng = rng
        self.nodes = []
        self.inits = []
        self.macs = 0
        self.input_shape = list(input_shape)
        self.shapes = {"x": list(input_shape)}
        self.count = 0

    def fresh(self, op):
        self.count += 1
        return f"{op.lower()}{self.count}"

    def weight(self, name, shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        w = self.rng.uniform(-bound, bound, size=shape).astype(np.float32)
        self.inits.append(numpy_helper.from_array(w, name))
        return name

    def conv(self, x, out_c, k, stride=1, pad=0, group=1):
        n, c, h, w = self.shapes[x]
        name = self.fresh("conv")
        wn = self.weight(f"{name}.w", [out_c, c // group, k, k], c // group * k * k)
        bn = self.weight(f"{name}.b", [out_c], c // group * k * k)
        self.nodes.append(helper.make_node(
            "Conv", [x, wn, bn], [name], name=name, kernel_shape=[k, k],
            strides=[stride, stride], pads=[pad] * 4, group=group))
        oh = (h + 2 * pad - k) // stride + 1
        ow = (w + 2 * pad - k) // stride + 1
        self.shapes[name] = [n, out_c, oh, ow]
        self.macs += n * out_c * oh * ow * (c // group) * k * k
        return name

    def unary(self, op, x, **attrs):
        name = self.fresh(op)
        self.nodes.append(helper.make_node(op, [x], [name], name=name, **attrs))
        self.shapes[name] = list(self.shapes[x])
        return name

    def relu6(self, x):
        name = self.fresh("clip")
        lo, hi = f"{name}.min", f"{name}.max"
        self.inits.append(numpy_helper.from_array(np.array(0.0, np.float32), lo))
        self.inits.append(numpy_helper.from_array(np.array(6.0, np.float32), hi))
        self.nodes.append(helper.make_node("Clip", [x, lo, hi], [name], name=name))
        self.shapes[name] = list(self.shapes[x])
        return name

    def maxpool(self, x, k):
        n, c, h, w = self.shapes[x]
        name = self.fresh("maxpool")
        self.nodes.append(helper.make_node(
            "MaxPool", [x], [name], name=name, kernel_shape=[k, k], strides=[k, k]))
        self.shapes[name] = [n, c, h // k, w // k]
        return name

    def add(self, a, b):
        name = self.fresh("add")
        self.nodes.append(helper.make_node("Add", [a, b], [name], name=name))
        self.shapes[name] = list(self.shapes[a])
        return name

    def flatten_gemm(self, x, out_f):
        n = self.shapes[x][0]
        feats = int(np.prod(self.shapes[x][1:]))
        flat = self.fresh("flatten")
        self.nodes.append(helper.make_node("Flatten", [x], [flat], name=flat, axis=1))
        name = self.fresh("gemm")
        wn = self.weight(f"{name}.w", [out_f, feats], feats)
        bn = self.weight(f"{name}.b", [out_f], feats)
        self.nodes.append(helper.make_node("Gemm", [flat, wn, bn], [name], name=name, transB=1))
        self.shapes[name] = [n, out_f]
        self.macs += n * out_f * feats
        return name

    def model(self, y):
        graph = helper.make_graph(
            self.nodes, self.name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.input_shape)],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, self.shapes[y])],
            self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="backplane scripts/bench_models.py")
        m.ir_version = 7
        onnx.checker.check_model(m, full_check=True)
        return m


def small_cnn(rng):
    g = Graph("small_cnn", [1, 1, 28, 28], rng)
    y = g.maxpool(g.unary("Relu", g.conv("x", 8, 3, pad=1)), 2)
    y = g.maxpool(g.unary("Relu", g.conv(y, 16, 3, pad=1)), 2)
    y = g.unary("Softmax", g.flatten_gemm(y, 10), axis=1)
    return g, y


def mobilenet_v1_block(rng):
    g = Graph("mobilenet_v1_block", [1, 32, 112, 112], rng)
    y = g.relu6(g.conv("x", 32, 3, pad=1, group=32))
    y = g.relu6(g.conv(y, 64, 1))
    return g, y


def mobilenet_v2_block(rng):
    g = Graph("mobilenet_v2_block", [1, 24, 56, 56], rng)
    y = g.relu6(g.conv("x", 144, 1))
    y = g.relu6(g.conv(y, 144, 3, pad=1, group=144))
    y = g.add(g.conv(y, 24, 1), "x")
    return g, y


def conv3x3_64(rng):
    g = Graph("conv3x3_64", [1, 64, 56, 56], rng)
    return g, g.unary("Relu", g.conv("x", 64, 3, pad=1))


def write(out_dir, name, model_bytes, input_shape, macs, rng):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model_bytes)
    x = rng.uniform(-1.0, 1.0, size=input_shape).astype("<f4")
    np.save(os.path.join(d, "input.npy"), x)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    (inp,) = sess.get_inputs()
    (y,) = sess.run(None, {inp.name: x})
    np.save(os.path.join(d, "output.npy"), np.ascontiguousarray(y.astype("<f4")))
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"macs": int(macs), "input": inp.name, "input_shape": list(input_shape),
                   "output_shape": list(y.shape)}, f)
        f.write("\n")
    print(f"{name}: input {inp.name} {list(input_shape)} -> output {list(y.shape)}, "
          f"{macs / 1e6:.1f} M multiply-adds")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--paddleocr")
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    for build in (small_cnn, mobilenet_v1_block, mobilenet_v2_block, conv3x3_64):
        g, y = build(rng)
        m = g.model(y)
        write(args.out_dir, g.name, m.SerializeToString(), g.input_shape, g.macs, rng)
    if args.paddleocr:
        with open(args.paddleocr, "rb") as f:
            data = f.read()
        m = onnx.load_from_string(data)
        shape = [1, 3, 48, 192]
        write(args.out_dir, "paddleocr_cls", data, shape, paddleocr_macs(m, shape), rng)
    return 0


def paddleocr_macs(model, shape):
    """Multiply-adds of the Conv and Gemm/MatMul nodes with constant weights (initializers
    or Constant nodes), from onnx shape inference."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for d, v in zip(fixed.graph.input[0].type.tensor_type.shape.dim, shape):
        d.Clear()
        d.dim_value = v
    m = onnx.shape_inference.infer_shapes(fixed)
    dims = {}
    for v in list(m.graph.value_info) + list(m.graph.output) + list(m.graph.input):
        t = v.type.tensor_type
        dims[v.name] = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
    dims[m.graph.input[0].name] = shape
    inits = {t.name: list(t.dims) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    inits[n.output[0]] = list(a.t.dims)
    macs = 0
    for n in m.graph.node:
        if n.op_type == "Conv" and n.output[0] in dims and n.input[1] in inits:
            out = dims[n.output[0]]
            w = inits[n.input[1]]
            macs += int(np.prod(out)) * int(np.prod(w[1:]))
        elif n.op_type in ("Gemm", "MatMul") and n.input[1] in inits:
            w = inits[n.input[1]]
            macs += int(np.prod(w))
    return macs


if __name__ == "__main__":
    sys.exit(main())
