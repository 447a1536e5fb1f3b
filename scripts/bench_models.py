#!/usr/bin/env python3
"""Generates the peer-benchmark models with a fixed seed, and their reference outputs.

Run by scripts/bench-peers.sh in the project venv (needs onnx, onnxruntime and numpy):

    bench_models.py --out-dir target/bench-models \
        [--paddleocr target/models/paddleocr_cls/model.onnx] \
        [--fetched NAME=DIR ...]   e.g. --fetched resnet50=target/models/resnet50

For each model, writes <out-dir>/<name>/model.onnx, its inputs (input.npy, then input_1.npy,
... for a model with several), onnxruntime's outputs (CPU, one thread, all graph
optimisations: output.npy, then output_1.npy, ...) and meta.json (the multiply-accumulate
count, and each input's and output's name, file, shape and dtype, in the model's order), and
prints one line per model with its shapes and multiply-accumulate count. The models:

- small_cnn: 1x1x28x28 -> Conv 3x3 1->8 (+bias) -> Relu -> MaxPool 2 -> Conv 3x3 8->16
  (+bias) -> Relu -> MaxPool 2 -> Flatten -> Gemm 784->10 -> Softmax.
- mobilenet_v1_block: 1x32x112x112 -> depthwise Conv 3x3 (+bias) -> Clip 0..6 -> Conv 1x1
  32->64 (+bias) -> Clip 0..6.
- mobilenet_v2_block: 1x24x56x56 -> Conv 1x1 24->144 (+bias) -> Clip 0..6 -> depthwise
  Conv 3x3 (+bias) -> Clip 0..6 -> Conv 1x1 144->24 (+bias) -> Add (residual).
- conv3x3_64: 1x64x56x56 -> Conv 3x3 64->64 pad 1 (+bias) -> Relu.
  (These four: opset 13, float32, NCHW, seeded weights.)
- vad_if: a voice-activity model called once per 512-sample chunk with a carried state and
  an If on its int64 sample-rate input (see vad_if()): the per-call cost of a model whose
  branch a value decides (backplane runs it in segments, each planned once).
- lstm2: a 2-layer LSTM, hidden size 256 over 100 steps of a [100, 1, 256] input (see
  lstm2()), imported unrolled: the recurrent operators' cost per step.
- paddleocr_cls: the PaddleOCR text-direction classifier at 1x3x48x192 (copied, when
  --paddleocr is given; seeded input, outputs made here).
- each --fetched NAME=DIR: a model of scripts/fetch-models.sh copied from its folder with
  the inputs and onnxruntime outputs made there (info.json lists them). scripts/bench-peers.sh
  passes resnet50 (ONNX model zoo ResNet-50, 1x3x224x224), ppocrv4_det (PP-OCRv4 text
  detector, 1x3x320x320), ppocrv4_rec (PP-OCRv4 text recogniser, 1x3x48x320) and minilm_l6
  (all-MiniLM-L6-v2, int64 input_ids and attention_mask of 16 tokens; two outputs).

The multiply-accumulate count is that of the Conv, ConvTranspose, Gemm and MatMul nodes, from
onnx shape inference (with data propagation) at the inputs' shapes; where that leaves a shape
unknown (a Reshape to a shape computed at run time, as in PP-OCRv4's recogniser), the tensor's
shape is taken from one onnxruntime run with it exposed as an output. The runner prints
GFLOP/s from it.

The same versions give byte-identical files on every run.
"""

import argparse
import filecmp
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


def lstm2(rng):
    """A 2-layer LSTM (issue 39's recurrent target): hidden size 256 over 100 steps of a
    [100, 1, 256] float32 input, constant weights, the second layer reading the first's Y
    (squeezed to [100, 1, 256]); output the second's Y [100, 1, 1, 256]. Opset 14. Returns
    (model, feeds, multiply-adds: 4 gates x (input + recurrent) products per step and
    layer)."""
    hidden, steps, width = 256, 100, 256
    bound = 1.0 / np.sqrt(hidden)
    inits, nodes = [], []
    x = "x"
    for layer in range(2):
        for name, shape in (("W", [1, 4 * hidden, width]), ("R", [1, 4 * hidden, hidden]),
                            ("B", [1, 8 * hidden])):
            a = rng.uniform(-bound, bound, size=shape).astype(np.float32)
            inits.append(numpy_helper.from_array(a, f"{name}{layer}"))
        nodes.append(helper.make_node("LSTM", [x, f"W{layer}", f"R{layer}", f"B{layer}"],
                                      [f"y{layer}"], hidden_size=hidden))
        if layer == 0:
            nodes.append(helper.make_node("Squeeze", ["y0", "axis1"], ["s0"]))
            x = "s0"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    graph = helper.make_graph(
        nodes, "lstm2",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 1, width])],
        [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [steps, 1, 1, hidden])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                          producer_name="backplane scripts/bench_models.py")
    m.ir_version = 7
    onnx.checker.check_model(m, full_check=True)
    feeds = {"x": rng.uniform(-1.0, 1.0, size=[steps, 1, width]).astype("<f4")}
    macs = 2 * steps * 4 * hidden * (width + hidden)
    return m, feeds, macs


def vad_if(rng):
    """A voice-activity model as apps call it, one 512-sample chunk per call with a state
    carried between calls (the shape of Silero VAD's): inputs x [1, 1, 1, 512] float32, state
    [1, 64] float32 and sr, int64 [1]. An If on sr == 16000 picks one of two branches of
    two 1x5 convolutions (stride 2 or 4, as 16 kHz and 8 kHz audio need) with Relu and a
    global average pool to 32 features; then 32 -> 64, and a Loop of 4 steps of
    state = tanh(state @ U + a) (an LSTM-sized product); outputs the probability
    Sigmoid(state @ w) [1, 1] and the new state [1, 64]. Opset 13. Returns (model, feeds,
    multiply-adds)."""
    def w(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape).astype(np.float32)

    inits = []

    def init(name, array):
        inits.append(numpy_helper.from_array(array, name))
        return name

    def branch(tag, stride):
        t = lambda n: f"{tag}_{n}"  # noqa: E731
        init(t("w1"), w([16, 1, 1, 5], 5))
        init(t("b1"), w([16], 5))
        init(t("w2"), w([32, 16, 1, 5], 80))
        init(t("b2"), w([32], 80))
        nodes = [
            helper.make_node("Conv", ["x", t("w1"), t("b1")], [t("c1")], kernel_shape=[1, 5],
                             strides=[1, stride], pads=[0, 2, 0, 2]),
            helper.make_node("Relu", [t("c1")], [t("r1")]),
            helper.make_node("Conv", [t("r1"), t("w2"), t("b2")], [t("c2")],
                             kernel_shape=[1, 5], strides=[1, stride], pads=[0, 2, 0, 2]),
            helper.make_node("Relu", [t("c2")], [t("r2")]),
            helper.make_node("GlobalAveragePool", [t("r2")], [t("g")]),
            helper.make_node("Flatten", [t("g")], [t("feat")], axis=1),
        ]
        out = helper.make_tensor_value_info(t("feat"), TensorProto.FLOAT, [1, 32])
        return helper.make_graph(nodes, tag, [], [out])

    then_branch = branch("k16", 2)
    else_branch = branch("k8", 4)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["s_in", "U"], ["su"]),
         helper.make_node("Add", ["su", "a"], ["pre"]),
         helper.make_node("Tanh", ["pre"], ["s_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "step",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [1, 64])])
    init("sr16k", np.array(16000, np.int64))
    init("W", w([32, 64], 32))
    init("U", w([64, 64], 64))
    init("steps", np.array(4, np.int64))
    init("go", np.array(True))
    init("w_out", w([64, 1], 64))
    nodes = [
        helper.make_node("Equal", ["sr", "sr16k"], ["is16k"]),
        helper.make_node("If", ["is16k"], ["feat"], then_branch=then_branch,
                         else_branch=else_branch),
        helper.make_node("MatMul", ["feat", "W"], ["a"]),
        helper.make_node("Loop", ["steps", "go", "state"], ["new_state"], body=body),
        helper.make_node("MatMul", ["new_state", "w_out"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["prob"]),
    ]
    graph = helper.make_graph(
        nodes, "vad_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 512]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, 64]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1]),
         helper.make_tensor_value_info("new_state", TensorProto.FLOAT, [1, 64])],
        inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="backplane scripts/bench_models.py")
    m.ir_version = 7
    onnx.checker.check_model(m, full_check=True)
    feeds = {
        "x": rng.uniform(-1.0, 1.0, size=[1, 1, 1, 512]).astype("<f4"),
        "state": rng.uniform(-0.5, 0.5, size=[1, 64]).astype("<f4"),
        "sr": np.array([16000], np.int64),
    }
    # The 16 kHz branch: 256 + 128 output positions of its two convolutions.
    macs = 16 * 256 * 5 + 32 * 128 * 80 + 32 * 64 + 4 * 64 * 64 + 64
    return m, feeds, macs


def session(model_bytes):
    """onnxruntime's CPU provider on one thread, every graph optimisation: as the runner."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])


def file_for(kind, k):
    """input.npy / output.npy for the first input or output, then input_1.npy, ..."""
    return f"{kind}.npy" if k == 0 else f"{kind}_{k}.npy"


def save(path, array):
    """Writes `array` as .npy unless the file already holds exactly that (same bytes)."""
    tmp = path + ".tmp.npy"
    np.save(tmp, np.ascontiguousarray(array))
    with open(tmp, "rb") as f:
        data = f.read()
    try:
        with open(path, "rb") as f:
            same = f.read() == data
    except FileNotFoundError:
        same = False
    if same:
        os.remove(tmp)
    else:
        os.replace(tmp, path)


def copy_if_changed(src, dst):
    """Copies `src` to `dst` unless `dst` has the same bytes (MiniLM's model is 90 MB)."""
    if os.path.isfile(dst) and filecmp.cmp(src, dst, shallow=False):
        return
    shutil.copyfile(src, dst + ".tmp")
    os.replace(dst + ".tmp", dst)


def write(out_dir, name, model_bytes, feeds, outputs, macs, source=None, int8=False):
    """Writes one benchmark model: `feeds` maps each input name to its array (in the model's
    order), `outputs` is onnxruntime's list of (name, array)."""
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model_path = os.path.join(d, "model.onnx")
    if source:
        copy_if_changed(source, model_path)
    else:
        with open(model_path, "wb") as f:
            f.write(model_bytes)
    inputs = []
    for k, (n, x) in enumerate(feeds.items()):
        save(os.path.join(d, file_for("input", k)), x)
        inputs.append({"name": n, "file": file_for("input", k), "shape": list(x.shape),
                       "dtype": x.dtype.str})
    outs = []
    for k, (n, y) in enumerate(outputs):
        save(os.path.join(d, file_for("output", k)), y)
        outs.append({"name": n, "file": file_for("output", k), "shape": list(y.shape),
                     "dtype": y.dtype.str})
    meta = {"macs": int(macs),
            # The first input and output as the runner read them before `inputs`/`outputs`.
            "input": inputs[0]["name"], "input_shape": inputs[0]["shape"],
            "output_shape": outs[0]["shape"],
            "inputs": inputs, "outputs": outs}
    if source:
        meta["source"] = os.path.dirname(os.path.normpath(source))
    if int8:
        # A quantized model: bench_peers times CpuFast+CpuRef and onnxruntime on it.
        meta["int8"] = True
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f)
        f.write("\n")
    shapes = ", ".join(f"{i['name']} {i['shape']} {np.dtype(i['dtype']).name}" for i in inputs)
    print(f"{name}: input {shapes} -> output {', '.join(str(o['shape']) for o in outs)}, "
          f"{macs / 1e6:.1f} M multiply-adds")


def generated(out_dir, name, model_bytes, input_shape, macs, rng):
    """A model made here: seeded uniform [-1, 1) input, outputs from onnxruntime."""
    x = rng.uniform(-1.0, 1.0, size=input_shape).astype("<f4")
    sess = session(model_bytes)
    (inp,) = sess.get_inputs()
    (y,) = sess.run(None, {inp.name: x})
    (out,) = sess.get_outputs()
    write(out_dir, name, model_bytes, {inp.name: x}, [(out.name, y.astype("<f4"))], macs)


def fetched(out_dir, name, src_dir):
    """A model of scripts/fetch-models.sh: its info.json names its inputs (one `input` or an
    `inputs` list) and outputs with their files, onnxruntime's outputs on one thread."""
    with open(os.path.join(src_dir, "info.json")) as f:
        info = json.load(f)
    feeds = {}
    for i in info.get("inputs") or [info["input"]]:
        feeds[i["name"]] = np.load(os.path.join(src_dir, i["file"]))
    outputs = [(o["name"], np.load(os.path.join(src_dir, o["file"]))) for o in info["outputs"]]
    source = os.path.join(src_dir, "model.onnx")
    model = onnx.load(source)
    order = [i.name for i in model.graph.input if i.name in feeds]
    if sorted(order) != sorted(feeds):
        sys.exit(f"error: {src_dir}: info.json's inputs {sorted(feeds)} are not the model's")
    feeds = {n: feeds[n] for n in order}
    # Outputs in the model's order too (tract-onnx's outputs are checked by position).
    rank = {o.name: k for k, o in enumerate(model.graph.output)}
    if any(n not in rank for n, _ in outputs):
        sys.exit(f"error: {src_dir}: info.json's outputs are not all the model's")
    outputs.sort(key=lambda o: rank[o[0]])
    quantized = {"QuantizeLinear", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear"}
    int8 = any(n.op_type in quantized for n in model.graph.node)
    write(out_dir, name, None, feeds, outputs, graph_macs(model, feeds), source=source,
          int8=int8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--paddleocr")
    ap.add_argument("--fetched", action="append", default=[], metavar="NAME=DIR",
                    help="a model folder of scripts/fetch-models.sh, staged as NAME")
    args = ap.parse_args()
    rng = np.random.default_rng(SEED)
    for build in (small_cnn, mobilenet_v1_block, mobilenet_v2_block, conv3x3_64):
        g, y = build(rng)
        m = g.model(y)
        generated(args.out_dir, g.name, m.SerializeToString(), g.input_shape, g.macs, rng)
    # Its own generator, so that the other models' data stay as they were.
    m, feeds, macs = vad_if(np.random.default_rng(SEED + 1))
    data = m.SerializeToString()
    outputs = session(data).run(None, feeds)
    names = [o.name for o in m.graph.output]
    write(args.out_dir, "vad_if", data, feeds,
          [(n, y.astype("<f4")) for n, y in zip(names, outputs)], macs)
    m, feeds, macs = lstm2(np.random.default_rng(SEED + 2))
    data = m.SerializeToString()
    outputs = session(data).run(None, feeds)
    write(args.out_dir, "lstm2", data, feeds, [("y1", outputs[0].astype("<f4"))], macs)
    if args.paddleocr:
        with open(args.paddleocr, "rb") as f:
            data = f.read()
        m = onnx.load_from_string(data)
        shape = [1, 3, 48, 192]
        feeds = {m.graph.input[0].name: np.zeros(shape, np.float32)}
        generated(args.out_dir, "paddleocr_cls", data, shape, graph_macs(m, feeds), rng)
    for spec in args.fetched:
        name, sep, src_dir = spec.partition("=")
        if not sep or not name or not os.path.isfile(os.path.join(src_dir, "info.json")):
            sys.exit(f"error: --fetched {spec!r}: want NAME=DIR, DIR holding info.json")
        fetched(args.out_dir, name, src_dir)
    return 0


def graph_macs(model, feeds):
    """Multiply-adds of the Conv, ConvTranspose, Gemm and MatMul nodes (constant weights or
    not: attention's MatMuls count too) with `feeds` (name -> array) as the inputs.

    Shapes come from onnx shape inference with data propagation, the inputs fixed to the
    feeds' shapes; the tensors it leaves unknown are read from one onnxruntime run (no graph
    optimisation, so that every tensor keeps its name) with them exposed as outputs."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for inp in fixed.graph.input:
        if inp.name in feeds:
            dims = inp.type.tensor_type.shape.dim
            for d, v in zip(dims, feeds[inp.name].shape):
                d.Clear()
                d.dim_value = v
    m = onnx.shape_inference.infer_shapes(fixed, data_prop=True)
    shapes = {}
    for v in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[v.name] = [d.dim_value for d in t.shape.dim]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    for n in m.graph.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    shapes[n.output[0]] = list(a.t.dims)
    for name, x in feeds.items():
        shapes[name] = list(x.shape)
    counted = [n for n in m.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul")]
    unknown = sorted({t for n in counted for t in (n.input[0], n.input[1], n.output[0])
                      if t not in shapes})
    if unknown:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        probe.graph.output.extend(onnx.ValueInfoProto(name=t) for t in unknown)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(probe.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        for t, v in zip(unknown, sess.run(unknown, feeds)):
            shapes[t] = list(v.shape)
    macs = 0
    for n in counted:
        a, w, y = shapes[n.input[0]], shapes[n.input[1]], shapes[n.output[0]]
        if n.op_type == "Conv":  # each output value: C_in / group x kernel
            macs += int(np.prod(y)) * int(np.prod(w[1:]))
        elif n.op_type == "ConvTranspose":  # each input value: C_out / group x kernel
            macs += int(np.prod(a)) * int(np.prod(w[1:]))
        elif n.op_type == "Gemm":
            trans_a = next((x.i for x in n.attribute if x.name == "transA"), 0)
            macs += int(np.prod(y)) * (a[0] if trans_a else a[1])
        else:  # MatMul: each output value is a dot product over A's last axis
            macs += int(np.prod(y)) * a[-1]
    return macs


if __name__ == "__main__":
    sys.exit(main())
