#!/usr/bin/env python3
"""Makes int8 (quantized) models from the float models in target/models, with onnxruntime's
outputs of the quantized models as reference data.

Run at the end of scripts/fetch-models.sh in the project's venv (onnx, onnxruntime's
`onnxruntime.quantization` module, numpy, Pillow):

    quantize_models.py --models-dir target/models [--only NAME ...] [--force]

Each quantized model is made from the float model of the same folder family:

  1. the float model.onnx converted to opset 13 when older (onnx.version_converter), its
     initializers dropped from the graph inputs (the zoo's IR 3 graphs list them there, which
     keeps onnxruntime from folding them);
  2. onnxruntime.quantization.shape_inference.quant_pre_process(skip_symbolic_shape=True)
     (sympy is not in the venv): onnxruntime's basic graph optimisations (the zoo's
     ConstantOfShape weights and PaddleOCR's Constant nodes become initializers, a
     BatchNormalization after a Conv is folded into it) and ONNX shape inference;
  3. quantize_static (QDQ or QOperator format, per channel, activations QUInt8, weights QInt8,
     MinMax calibration) on a few seeded or rendered inputs, or quantize_dynamic (MatMul
     weights QInt8, the word-embedding table of its Gather QUInt8) for MiniLM; unused opset
     imports are dropped from the result.

  name               from                format     calibration
  ppocrv4_det_qdq    ppocrv4_det         QDQ        6 rendered text pages, 320x320, PP-OCR det
                                                    normalisation (BGR, ImageNet mean/std)
  ppocrv4_rec_qdq    ppocrv4_rec         QDQ        8 rendered text lines, 48x320, (x/255-0.5)/0.5
  paddleocr_cls_qdq  paddleocr_cls       QDQ        8 rendered text crops, 48x192, half upside down
  paddleocr_cls_qdq_u8w, ppocrv4_det_qdq_u8w   the same two OCR models and calibration, QDQ, with
                     what quantize_static writes for weight_type=QUInt8 per tensor: QUInt8
                     weights of any zero point (per_channel=False: the API has one zero point
                     per tensor)
  resnet50_qdq       resnet50            QDQ        4 seeded uniform [-1, 1) inputs
  resnet50_qop       resnet50            QOperator  the same
  squeezenet_qdq     squeezenet          QDQ        the same
  squeezenet_qop     squeezenet          QOperator  the same
  minilm_l6_dynamic  minilm_l6_opset13   dynamic    none (weights QInt8, activations quantized
                                                    at run time by DynamicQuantizeLinear)

Each folder gets the float folders' layout: model.onnx, the input .npy file(s), onnxruntime's
outputs of the QUANTIZED model as <output>.npy (CPU, one thread, default optimisations) and
info.json (as scripts/model_reference.py writes it, plus `quantization`: the quantizer's
settings, the calibration data and the float model it came from; per output `atol`/`rtol`,
the tolerance scripts/check_models.py applies, and `argmax` for class outputs). The zoo models
take the float folder's seeded input.npy; the OCR models take a rendered image that is not in
the calibration set (a seeded noise input says little about a model calibrated on text).

Tolerances. An output made by a DequantizeLinear (the QDQ models, and the QOperator models'
final DequantizeLinear) can only take the values (q - zero_point) * scale of that
DequantizeLinear; it gets atol = scale * 1.0001, rtol 0: one quantization step (1/255 for the
QDQ softmax and sigmoid outputs, 1/256 for com.microsoft QLinearSoftmax's). That holds an
int8 host to onnxruntime's own integer kernels: an intermediate value rounded the other way
can move the output by more than a step in a deep graph. onnxruntime's unoptimised run of the
same QDQ graph (DequantizeLinear, float operator, QuantizeLinear, instead of its fused
QLinearConv and the like) does that on the detector (0.34% of the pixels beyond one step, up
to 158 steps) and the recogniser (0.01%, up to 64 steps); info.json records it per output as
`onnxruntime_unoptimised`. MiniLM's outputs are
float (LayerNorm, mean pooling and L2 normalisation after the last integer MatMul); its
tolerance is measured (see ULP_FACTORS), and its ranking of the three sentences is recorded
for the check (`ranking`).

The zoo's `light` models have constant-filled weights: every channel of every layer holds the
same values, so their class outputs are constant across classes (the float softmax is 0.001
everywhere), and the quantized softmax, whose output scale onnxruntime fixes at 1/255, is 0
everywhere whatever the input. Their final outputs check little; they are here for the
operators (QLinearConv, QGemm, QLinearConcat, ... and the QDQ forms) that they exercise.

Prints one line per model (made or skipped), then, for the record, onnxruntime's milliseconds
per inference of each quantized model and of its float model on the same input (one thread,
median of TIMED_RUNS runs after a warm-up), one line each.

Safe to run again: a folder whose info.json was made by the same recipe (this script, its
settings, the float model's sha256, the onnx/onnxruntime/numpy versions) and holds every file
it lists is skipped (--force redoes it). The same versions give the same files.
"""

import argparse
import collections
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper, version_converter
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_reference import count_ops, dims_of, elem_type_name, file_name_for_output  # noqa: E402

SEED = 20261121
TARGET_OPSET = 13
TIMED_RUNS = 7

# PP-OCR's detector normalisation (NormalizeImage on the BGR image), and the recogniser's and
# classifier's ((x / 255 - 0.5) / 0.5).
DET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
DET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)

# Text for the rendered calibration and check images (ASCII: Pillow's built-in font).
CALIBRATION_TEXT = [
    "Backplane runs ONNX models", "Hello World 2026", "quick brown fox jumps",
    "Invoice number 4711", "Total due: 93.50 EUR", "The lazy dog sleeps",
    "int8 inference on CPU", "Page 12 of 40", "Shipping address", "ORDER #A-5521",
    "Meeting at 10:30 am", "temperature 21.5 C", "Quantized weights", "per-channel scales",
]
CHECK_TEXT = ["Receipt 2026-11-21", "Coffee 3.20 Tea 2.80", "thank you for visiting"]

# MiniLM (dynamic quantization): its outputs are float, after LayerNorm, mean pooling and L2
# normalisation, so there is no quantization step to take as the tolerance; and the model is
# sensitive to float rounding. Each DynamicQuantizeLinear takes its scale and zero point from
# its input's min and max: one ulp there can move the zero point or the scale, and with them
# every element of the tensor, by a step. make_minilm measures that sensitivity: onnxruntime
# runs of the quantized model with every DynamicQuantizeLinear input multiplied by each of
# ULP_FACTORS (a host whose float arithmetic before the quantization differs by an ulp or a
# few), and the unoptimised run (the graph's own operators instead of onnxruntime's fused
# DynamicQuantizeMatMul/MatMulIntegerToFloat kernels), over the three sentences. Most such
# runs give the reference bit for bit or within 1e-7; a few move the hidden state by up to
# ~0.4 and the embedding by up to ~0.02. atol is DYNAMIC_TOLERANCE_FACTOR times the largest
# of those differences (rtol 0), and the script fails unless the float model's outputs (the
# quantization error) are off by more than DYNAMIC_FLOAT_MARGIN times atol, so that a host
# running the float model, or quantizing badly, fails the check; the ranking of the three
# sentences (`ranking`) is checked as well.
ULP_FACTORS = [1 + 2.0 ** -23, 1 - 2.0 ** -24, 1 + 2.0 ** -21, 1 - 2.0 ** -22]
DYNAMIC_TOLERANCE_FACTOR = 2.0
DYNAMIC_FLOAT_MARGIN = 1.25
# cos(anchor, paraphrase) - cos(anchor, unrelated) must be at least this (make_encoder.py's).
RANKING_MARGIN = 0.2


# ---------------------------------------------------------------------------------------------
# Inputs


def render_line(text, font_size, size, rotate_180=False, x=None, y=None):
    """A white RGB uint8 array (H, W, 3) of `size` (width, height) with `text` in black, as
    bindings/python/tests/ocr_pipeline.py's render draws it (Pillow's built-in font)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=font_size)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    if x is None:
        x = max(2, (size[0] - (right - left)) // 2 - left)
    if y is None:
        y = max(0, (size[1] - (bottom - top)) // 2 - top)
    draw.text((x, y), text, fill="black", font=font)
    if rotate_180:
        image = image.rotate(180)
    return np.asarray(image)


def render_page(lines, size, rotate_180=False):
    """ocr_pipeline.render's page: each (text, font size) on a line of its own."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    y = 16
    for text, font_size in lines:
        font = ImageFont.load_default(size=font_size)
        draw.text((12, y), text, fill="black", font=font)
        y += int(font_size * 1.8)
    if rotate_180:
        image = image.rotate(180)
    return np.asarray(image)


def det_tensor(rgb):
    """PP-OCR det preprocessing: BGR, /255, minus mean, over std, CHW, batch of one."""
    bgr = rgb[:, :, ::-1].astype(np.float32) / 255.0
    x = (bgr - DET_MEAN) / DET_STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype("<f4")


def line_tensor(rgb, height, width):
    """PP-OCR rec/cls preprocessing (resize_norm_img): resized to `height` keeping the aspect
    ratio (at most `width` wide), BGR, (x / 255 - 0.5) / 0.5, zero-padded on the right."""
    import cv2

    h, w = rgb.shape[:2]
    new_w = min(width, max(1, int(np.ceil(height * w / h))))
    resized = cv2.resize(rgb[:, :, ::-1], (new_w, height)).astype(np.float32)
    x = (resized / 255.0 - 0.5) / 0.5
    out = np.zeros((3, height, width), dtype=np.float32)
    out[:, :, :new_w] = x.transpose(2, 0, 1)
    return np.ascontiguousarray(out[None]).astype("<f4")


def det_images(rng, count):
    out = []
    for i in range(count):
        n = int(rng.integers(2, 5))
        picks = rng.choice(len(CALIBRATION_TEXT), size=n, replace=False)
        lines = [(CALIBRATION_TEXT[p], int(rng.integers(18, 36))) for p in picks]
        out.append(det_tensor(render_page(lines, (320, 320), rotate_180=(i % 3 == 2))))
    return out


def line_images(rng, count, height, width, rotate_every=0):
    out = []
    for i in range(count):
        text = CALIBRATION_TEXT[int(rng.integers(len(CALIBRATION_TEXT)))]
        font_size = int(rng.integers(24, 40))
        crop_w = int(font_size * 0.62 * len(text)) + 16
        rgb = render_line(text, font_size, (crop_w, int(font_size * 1.5)),
                          rotate_180=bool(rotate_every and i % rotate_every == 1))
        out.append(line_tensor(rgb, height, width))
    return out


def seeded_inputs(shape, count, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, size=shape).astype("<f4") for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# The models

# kind: "static" (quantize_static, `format`) or "dynamic" (quantize_dynamic).
# calibration(rng) -> list of input arrays; check() -> (input array, description).
SPECS = {
    "ppocrv4_det_qdq": dict(
        source="ppocrv4_det", kind="static", format="QDQ",
        calibration=lambda rng: det_images(rng, 6),
        calibration_text="6 rendered pages of 2-4 text lines (Pillow's built-in font, 18-35 px,"
                         " every third upside down), 320x320, PP-OCR det normalisation",
        check=lambda: (det_tensor(render_page([(CHECK_TEXT[0], 30), (CHECK_TEXT[1], 24),
                                               (CHECK_TEXT[2], 20)], (320, 320))),
                       "a rendered page of three lines not in the calibration set, 320x320,"
                       " BGR, (x/255 - mean) / std with mean 0.485,0.456,0.406,"
                       " std 0.229,0.224,0.225"),
        argmax=False),
    "ppocrv4_rec_qdq": dict(
        source="ppocrv4_rec", kind="static", format="QDQ",
        calibration=lambda rng: line_images(rng, 8, 48, 320),
        calibration_text="8 rendered text lines (24-39 px), resized to 48 high, (x/255-0.5)/0.5,"
                         " zero-padded to 48x320",
        check=lambda: (line_tensor(render_line(CHECK_TEXT[1], 32, (380, 48)), 48, 320),
                       f"the rendered line {CHECK_TEXT[1]!r} (not in the calibration set), 48x320,"
                       " (x/255-0.5)/0.5, zero-padded"),
        argmax=False),
    "paddleocr_cls_qdq": dict(
        source="paddleocr_cls", kind="static", format="QDQ",
        calibration=lambda rng: line_images(rng, 8, 48, 192, rotate_every=2),
        calibration_text="8 rendered text crops (24-39 px, every second upside down), resized to"
                         " 48 high, (x/255-0.5)/0.5, zero-padded to 48x192",
        check=lambda: (line_tensor(render_line(CHECK_TEXT[0], 30, (320, 46), rotate_180=True),
                                   48, 192),
                       f"the rendered crop {CHECK_TEXT[0]!r} upside down (not in the calibration"
                       " set), 48x192, (x/255-0.5)/0.5, zero-padded"),
        argmax=True),
    "resnet50_qdq": dict(source="resnet50", kind="static", format="QDQ", argmax=True),
    "resnet50_qop": dict(source="resnet50", kind="static", format="QOperator", argmax=True),
    "squeezenet_qdq": dict(source="squeezenet", kind="static", format="QDQ", argmax=True),
    "squeezenet_qop": dict(source="squeezenet", kind="static", format="QOperator", argmax=True),
    "minilm_l6_dynamic": dict(source="minilm_l6_opset13", kind="dynamic"),
}
# The two OCR models again with u8 weights per tensor (their own settings, see STATIC_SETTINGS).
for _name in ("paddleocr_cls_qdq", "ppocrv4_det_qdq"):
    SPECS[_name + "_u8w"] = dict(SPECS[_name], settings=dict(per_channel=False,
                                                              weight_type="QUInt8"))
ZOO_CALIBRATION_COUNT = 4
STATIC_SETTINGS = dict(per_channel=True, activation_type="QUInt8", weight_type="QInt8",
                       calibrate_method="MinMax", reduce_range=False)
DYNAMIC_SETTINGS = dict(per_channel=False, weight_type="QInt8", reduce_range=False)


def session(model, optimize=True):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def prepare(float_path, work):
    """Steps 1 and 2: the float model at opset >= 13, pre-processed for the quantizer."""
    model = onnx.load(float_path)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < TARGET_OPSET:
        model = version_converter.convert_version(model, TARGET_OPSET)
    initializers = {t.name for t in model.graph.initializer}
    kept = [i for i in model.graph.input if i.name not in initializers]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    # Opset 13 needs IR version 7.
    model.ir_version = max(model.ir_version, 7)
    upgraded = os.path.join(work, "upgraded.onnx")
    onnx.save(model, upgraded)
    prepared = os.path.join(work, "prepared.onnx")
    quant_pre_process(upgraded, prepared, skip_symbolic_shape=True)
    return prepared, opset


def drop_unused_opsets(model):
    """onnxruntime's optimiser saves every domain it knows; keep those the nodes use."""
    used = {n.domain or "" for n in model.graph.node} | {""}
    kept = [o for o in model.opset_import if (o.domain or "") in used]
    del model.opset_import[:]
    model.opset_import.extend(kept)


class Reader(CalibrationDataReader):
    def __init__(self, name, arrays):
        self.feeds = iter([{name: a} for a in arrays])

    def get_next(self):
        return next(self.feeds, None)


def dequantize_scale(model, output_name):
    """The scale (a float) of the DequantizeLinear that makes `output_name`, or None."""
    init = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if output_name in node.output and node.op_type == "DequantizeLinear":
            scale = numpy_helper.to_array(init[node.input[1]])
            if scale.size != 1:
                sys.exit(f"error: {output_name}'s DequantizeLinear is per axis")
            zp = numpy_helper.to_array(init[node.input[2]]) if len(node.input) > 2 else None
            return float(scale.reshape(())), (None if zp is None else int(zp.reshape(())))
    return None


def quantization_facts(model):
    """What an importer must handle, counted: each QuantizeLinear/DequantizeLinear by scale
    form (a scalar; per axis, with its `axis` attribute or its default 1; or a 1-element 1-D
    scale, which the quantizer writes for some biases and weights), by what it reads (an
    initializer of which type, or a computed value) and by zero point type; and the
    DequantizeLinears of int32 initializers (biases)."""
    init = {t.name: t for t in model.graph.initializer}
    forms = collections.Counter()
    zp_types = collections.Counter()
    int32_dq = 0
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = init.get(node.input[1])
        axis = next((a.i for a in node.attribute if a.name == "axis"), None)
        if scale is None or len(scale.dims) == 0:
            form = "scalar scale"
        elif int(np.prod(scale.dims)) == 1:
            form = "1-element 1-D scale" + (f" axis={axis}" if axis is not None else "")
        else:
            form = f"per-axis axis={axis if axis is not None else '1 (default)'}"
        x = node.input[0]
        source = (onnx.TensorProto.DataType.Name(init[x].data_type).lower() + " initializer"
                  if x in init else "computed value")
        forms[f"{node.op_type}, {form}, of a {source}"] += 1
        if len(node.input) > 2 and node.input[2] in init:
            zp_types[f"{node.op_type} zero point "
                     + onnx.TensorProto.DataType.Name(init[node.input[2]].data_type).lower()] += 1
        elif len(node.input) < 3 or not node.input[2]:
            zp_types[f"{node.op_type} without zero point"] += 1
        if (node.op_type == "DequantizeLinear" and x in init
                and init[x].data_type == onnx.TensorProto.INT32):
            int32_dq += 1
    return {"qdq_forms": dict(sorted(forms.items())), "zero_point_types": dict(sorted(zp_types.items())),
            "int32_dequantize_initializers": int32_dq}


def write_outputs(out_dir, names, results, prefix=""):
    outputs = []
    for name, value in zip(names, results):
        value = np.asarray(value)
        if np.issubdtype(value.dtype, np.floating):
            value = value.astype("<f4")
        value = np.ascontiguousarray(value)
        file_name = prefix + file_name_for_output(name)
        np.save(os.path.join(out_dir, file_name), value)
        outputs.append({"name": name, "shape": list(value.shape), "dtype": value.dtype.str,
                        "file": file_name})
    return outputs


def median_ms(sess, feed, runs=TIMED_RUNS):
    sess.run(None, feed)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feed)
        times.append((time.perf_counter() - t) * 1000.0)
    return statistics.median(times)


def base_info(model, model_bytes, description, inputs_info, outputs, sess):
    graph = model.graph
    counts = collections.Counter()
    count_ops(graph, counts)
    op_counts = dict(sorted(counts.items()))
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    return {
        "model": description,
        "model_sha256": hashlib.sha256(model_bytes).hexdigest(),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opset": opsets.get("ai.onnx"),
        "opset_imports": opsets,
        **inputs_info,
        "outputs": outputs,
        "declared_outputs": [{"name": o.name, "shape": dims_of(o)} for o in graph.output],
        "op_counts": op_counts,
        "node_count": sum(op_counts.values()),
        "initializer_count": len(graph.initializer),
        **quantization_facts(model),
        "onnxruntime": {
            "version": ort.__version__,
            "providers": sess.get_providers(),
            "intra_op_num_threads": 1,
            "graph_optimization_level": "GraphOptimizationLevel.ORT_ENABLE_ALL",
        },
        "onnx_version": onnx.__version__,
        "numpy_version": np.__version__,
    }


def make_static(name, spec, models_dir, work, recipe):
    src_dir = os.path.join(models_dir, spec["source"])
    float_path = os.path.join(src_dir, "model.onnx")
    with open(os.path.join(src_dir, "info.json")) as f:
        float_info = json.load(f)
    out_dir = os.path.join(models_dir, name)
    prepared, float_opset = prepare(float_path, work)
    input_name = float_info["input"]["name"]
    shape = float_info["input"]["shape"]

    rng = np.random.default_rng(SEED)
    if "calibration" in spec:
        calibration = spec["calibration"](rng)
        calibration_text = spec["calibration_text"]
        x, input_text = spec["check"]()
        generator = input_text
    else:
        calibration = seeded_inputs(shape, ZOO_CALIBRATION_COUNT, SEED + 1)
        calibration_text = (f"{ZOO_CALIBRATION_COUNT} inputs numpy.random.default_rng({SEED + 1})"
                            f".uniform(-1.0, 1.0, {shape}) cast to float32")
        x = np.load(os.path.join(src_dir, float_info["input"]["file"]))
        generator = float_info["input"]["generator"] + f" (the float model {spec['source']}'s input.npy)"
    for c in calibration:
        if list(c.shape) != list(shape):
            sys.exit(f"error: {name}: calibration input {c.shape}, want {shape}")

    quantized = os.path.join(work, "quantized.onnx")
    fmt = QuantFormat.QDQ if spec["format"] == "QDQ" else QuantFormat.QOperator
    settings = {**STATIC_SETTINGS, **spec.get("settings", {})}
    quantize_static(prepared, quantized, Reader(input_name, calibration), quant_format=fmt,
                    per_channel=settings["per_channel"], reduce_range=settings["reduce_range"],
                    activation_type=QuantType[settings["activation_type"]],
                    weight_type=QuantType[settings["weight_type"]])
    model = onnx.load(quantized)
    drop_unused_opsets(model)
    onnx.checker.check_model(model)
    model_bytes = model.SerializeToString()

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.onnx"), "wb") as f:
        f.write(model_bytes)
    x = np.ascontiguousarray(x.astype("<f4"))
    np.save(os.path.join(out_dir, "input.npy"), x)
    sess = session(model_bytes)
    names = [o.name for o in sess.get_outputs()]
    results = sess.run(names, {input_name: x})
    outputs = write_outputs(out_dir, names, results)
    float_sess = session(open(float_path, "rb").read())
    float_results = float_sess.run(names, {input_name: x})
    # onnxruntime's other implementation of the same graph: unoptimised, each operator as the
    # graph has it (QDQ: DequantizeLinear, the float operator, QuantizeLinear) instead of its
    # fused integer kernels (QLinearConv, ...). Recorded, not used for the tolerance: it shows
    # how far two implementations that round intermediate values differently drift apart.
    plain_results = session(model_bytes, optimize=False).run(names, {input_name: x})
    for o, got, want, plain in zip(outputs, results, float_results, plain_results):
        found = dequantize_scale(model, o["name"])
        if found is None:
            sys.exit(f"error: {name}: output {o['name']} is not made by a DequantizeLinear")
        scale, zero_point = found
        o["atol"] = scale * 1.0001
        o["rtol"] = 0
        o["tolerance"] = (f"one quantization step: the scale of the DequantizeLinear that makes"
                          f" it ({scale!r}, zero point {zero_point}) times 1.0001")
        o["max_abs_diff_from_float_model"] = float(np.max(np.abs(
            np.asarray(got, np.float64) - np.asarray(want, np.float64))))
        d = np.abs(np.asarray(got, np.float64) - np.asarray(plain, np.float64))
        o["onnxruntime_unoptimised"] = {
            "max_abs_diff": float(d.max()),
            "max_steps": round(float(d.max()) / scale, 3),
            "fraction_beyond_atol": float(np.mean(d > o["atol"])),
        }
        if spec["argmax"]:
            o["argmax"] = True
            o["argmax_axis"] = 1
            o["argmax_value"] = np.asarray(got).argmax(axis=1).reshape(-1).tolist()
            o["float_model_argmax_value"] = np.asarray(want).argmax(axis=1).reshape(-1).tolist()

    info = base_info(model, model_bytes,
                     f"{spec['source']} quantized by scripts/quantize_models.py"
                     f" (onnxruntime.quantization.quantize_static, {spec['format']} format,"
                     f" {'per channel' if settings['per_channel'] else 'per tensor'},"
                     f" activations {settings['activation_type']},"
                     f" weights {settings['weight_type']})",
                     {"input": {"name": input_name, "declared_shape": dims_of(
                         next(i for i in model.graph.input if i.name == input_name)),
                         "shape": list(x.shape), "dtype": "<f4", "file": "input.npy",
                         "generator": generator}},
                     outputs, sess)
    info["quantization"] = {
        "function": "onnxruntime.quantization.quantize_static",
        "quant_format": spec["format"],
        **settings,
        "calibration": calibration_text,
        "calibration_seed": SEED,
        "float_model": spec["source"],
        "float_model_sha256": float_info["model_sha256"],
        "float_model_opset": float_opset,
        "preparation": f"initializers dropped from the graph inputs, opset {float_opset} ->"
                       f" {max(float_opset, TARGET_OPSET)} (onnx.version_converter),"
                       " quant_pre_process(skip_symbolic_shape=True), unused opset imports dropped",
        "onnxruntime_version": ort.__version__,
    }
    info["recipe_sha256"] = recipe
    ms = (median_ms(sess, {input_name: x}), median_ms(float_sess, {input_name: x}))
    write_info(out_dir, info)
    return info, ms


def make_minilm(name, spec, models_dir, work, recipe):
    src_dir = os.path.join(models_dir, spec["source"])
    float_path = os.path.join(src_dir, "model.onnx")
    with open(os.path.join(src_dir, "info.json")) as f:
        float_info = json.load(f)
    out_dir = os.path.join(models_dir, name)
    prepared, float_opset = prepare(float_path, work)
    quantized = os.path.join(work, "quantized.onnx")
    quantize_dynamic(prepared, quantized, per_channel=False, reduce_range=False,
                     weight_type=QuantType.QInt8)
    model = onnx.load(quantized)
    drop_unused_opsets(model)
    onnx.checker.check_model(model)
    model_bytes = model.SerializeToString()
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "model.onnx"), "wb") as f:
        f.write(model_bytes)

    sess = session(model_bytes)
    others = [("unoptimised", session(model_bytes, optimize=False))]
    others += [(f"x{f!r}", session(perturbed(model, f))) for f in ULP_FACTORS]
    float_sess = session(open(float_path, "rb").read())
    names = [o.name for o in sess.get_outputs()]
    sensitivity = collections.defaultdict(float)
    quantization = collections.defaultdict(float)
    by_run = collections.defaultdict(dict)
    sentences = []
    embeddings = {}
    anchor_outputs = None
    for s in float_info["sentences"]:
        role = s["role"]
        prefix = "" if role == "anchor" else f"{role}_"
        feed = {}
        for inp in float_info["inputs"]:
            src = s["files"][inp["name"]]
            shutil.copyfile(os.path.join(src_dir, src), os.path.join(out_dir, src))
            feed[inp["name"]] = np.load(os.path.join(src_dir, src))
        results = sess.run(names, feed)
        outs = write_outputs(out_dir, names, results, prefix)
        for label, other in others:
            for n, got, alt in zip(names, results, other.run(names, feed)):
                d = float(np.max(np.abs(got.astype(np.float64) - alt.astype(np.float64))))
                sensitivity[n] = max(sensitivity[n], d)
                by_run[n][f"{role} {label}"] = d
        for n, got, want in zip(names, results, float_sess.run(names, feed)):
            quantization[n] = max(quantization[n], float(np.max(np.abs(
                got.astype(np.float64) - want.astype(np.float64)))))
        embeddings[role] = results[names.index("sentence_embedding")].reshape(-1).astype(np.float64)
        files = dict(s["files"])
        files.update({o["name"]: o["file"] for o in outs})
        sentences.append({**s, "files": files})
        if role == "anchor":
            anchor_outputs = outs
            anchor_feed = feed

    for o in anchor_outputs:
        n = o["name"]
        tol = DYNAMIC_TOLERANCE_FACTOR * sensitivity[n]
        print(f"  {n}: largest difference from float-rounding changes {sensitivity[n]:.4g},"
              f" atol {tol:.4g}; quantized vs float model {quantization[n]:.4g}")
        if not quantization[n] > DYNAMIC_FLOAT_MARGIN * tol:
            sys.exit(f"error: {name}: output {n}: atol {tol:.3g} is not below the quantization"
                     f" error {quantization[n]:.3g} / {DYNAMIC_FLOAT_MARGIN}: the check would not"
                     " tell the float model apart")
        o["atol"] = tol
        o["rtol"] = 0
        o["tolerance"] = (f"{DYNAMIC_TOLERANCE_FACTOR:g} x {sensitivity[n]:.4g}, the largest"
                          " difference from onnxruntime's output over the three sentences when"
                          " every DynamicQuantizeLinear input is scaled by 1+-2^-23..2^-21 or"
                          " when onnxruntime runs the graph unoptimised; the float model differs"
                          f" by up to {quantization[n]:.4g}")
        o["max_abs_diff_float_rounding"] = by_run[n]
        o["max_abs_diff_from_float_model"] = quantization[n]

    def cos(a, b):
        return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    cosine = {"anchor_paraphrase": cos(embeddings["anchor"], embeddings["paraphrase"]),
              "anchor_unrelated": cos(embeddings["anchor"], embeddings["unrelated"]),
              "paraphrase_unrelated": cos(embeddings["paraphrase"], embeddings["unrelated"])}
    if cosine["anchor_paraphrase"] - cosine["anchor_unrelated"] < RANKING_MARGIN:
        sys.exit(f"error: {name}: the quantized model's ranking fails: {cosine}")

    info = base_info(model, model_bytes,
                     f"{spec['source']} quantized by scripts/quantize_models.py"
                     " (onnxruntime.quantization.quantize_dynamic, weights QInt8)",
                     {"inputs": float_info["inputs"]}, anchor_outputs, sess)
    info["sentences"] = sentences
    info["cosine_similarity"] = cosine
    info["float_model_cosine_similarity"] = float_info["cosine_similarity"]
    # For scripts/check_models.py: run every sentence, compare its outputs, and require
    # cos(anchor, positive) - cos(anchor, negative) >= margin of `output`.
    info["ranking"] = {"output": "sentence_embedding", "anchor": "anchor",
                       "positive": "paraphrase", "negative": "unrelated",
                       "margin": RANKING_MARGIN}
    info["source"] = float_info.get("source")
    info["quantization"] = {
        "function": "onnxruntime.quantization.quantize_dynamic",
        **DYNAMIC_SETTINGS,
        "float_model": spec["source"],
        "float_model_sha256": float_info["model_sha256"],
        "float_model_opset": float_opset,
        "preparation": "quant_pre_process(skip_symbolic_shape=True), unused opset imports dropped",
        "tolerance_rule": f"atol = {DYNAMIC_TOLERANCE_FACTOR:g} x the largest difference float"
                          " rounding changes make (ULP_FACTORS, unoptimised run), required below"
                          f" (quantized vs float) / {DYNAMIC_FLOAT_MARGIN:g}",
        "onnxruntime_version": ort.__version__,
    }
    info["recipe_sha256"] = recipe
    ms = (median_ms(sess, anchor_feed), median_ms(float_sess, anchor_feed))
    write_info(out_dir, info)
    return info, ms


def perturbed(model, factor):
    """`model` with every DynamicQuantizeLinear input multiplied by `factor`."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    constant = "quantize_models_ulp_factor"
    graph.initializer.append(numpy_helper.from_array(np.array(factor, np.float32), constant))
    nodes = []
    for node in graph.node:
        if node.op_type == "DynamicQuantizeLinear":
            scaled = node.input[0] + "_ulp"
            nodes.append(onnx.helper.make_node("Mul", [node.input[0], constant], [scaled]))
            node.input[0] = scaled
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def write_info(out_dir, info):
    path = os.path.join(out_dir, "info.json")
    with open(path + ".tmp", "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def recipe_of(name, models_dir):
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for script in ("quantize_models.py", "model_reference.py"):
        with open(os.path.join(here, script), "rb") as f:
            h.update(f.read())
    with open(os.path.join(models_dir, SPECS[name]["source"], "model.onnx"), "rb") as f:
        h.update(hashlib.sha256(f.read()).digest())
    h.update(json.dumps([name, onnx.__version__, ort.__version__, np.__version__]).encode())
    return h.hexdigest()


def up_to_date(out_dir, recipe):
    try:
        with open(os.path.join(out_dir, "info.json")) as f:
            info = json.load(f)
    except (FileNotFoundError, ValueError):
        return False
    if info.get("recipe_sha256") != recipe:
        return False
    files = ["model.onnx"] + [e["file"] for e in (info.get("inputs") or [info["input"]])]
    files += [o["file"] for o in info["outputs"]]
    for s in info.get("sentences", []):
        files += s["files"].values()
    return all(os.path.isfile(os.path.join(out_dir, f)) for f in files)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", default="target/models")
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    parser.add_argument("--force", action="store_true", help="remake up-to-date models")
    args = parser.parse_args()
    # onnxruntime's warnings (initializers it drops from the zoo graphs) are noise here.
    ort.set_default_logger_severity(3)
    names = args.only or list(SPECS)
    unknown = sorted(set(names) - set(SPECS))
    if unknown:
        sys.exit(f"error: unknown {unknown}; known: {list(SPECS)}")
    start = time.time()
    timings = []
    for name in names:
        spec = SPECS[name]
        out_dir = os.path.join(args.models_dir, name)
        if not os.path.isfile(os.path.join(args.models_dir, spec["source"], "model.onnx")):
            sys.exit(f"error: {name}: the float model {spec['source']} is missing")
        recipe = recipe_of(name, args.models_dir)
        if not args.force and up_to_date(out_dir, recipe):
            print(f"{name}: up to date, skipped")
            continue
        t = time.time()
        with tempfile.TemporaryDirectory() as work:
            make = make_minilm if spec["kind"] == "dynamic" else make_static
            info, ms = make(name, spec, args.models_dir, work, recipe)
        size = os.path.getsize(os.path.join(out_dir, "model.onnx"))
        tol = ", ".join(f"{o['name']} atol {o['atol']:.4g}" + (" argmax" if o.get("argmax") else "")
                        + (f" (onnxruntime unoptimised: {o['onnxruntime_unoptimised']['max_steps']:g}"
                           f" steps off at most, {o['onnxruntime_unoptimised']['fraction_beyond_atol']:.2%}"
                           " of elements beyond atol)" if "onnxruntime_unoptimised" in o else "")
                        for o in info["outputs"])
        print(f"{name}: {size} bytes, {info['node_count']} nodes, {tol}"
              f" ({time.time() - t:.1f}s)", flush=True)
        timings.append((name, spec["source"], ms))
    for name, source, (q, f) in timings:
        print(f"onnxruntime 1 thread: {name} {q:.2f} ms, float {source} {f:.2f} ms"
              f" ({f / q:.2f}x)")
    print(f"done: {len(names)} quantized models in {args.models_dir} ({time.time() - start:.1f}s)")


if __name__ == "__main__":
    main()
