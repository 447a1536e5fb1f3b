#!/usr/bin/env python3
"""Runs every setting of onnxruntime's static quantizer on backplane against onnxruntime.

Run by scripts/check-models.sh (after scripts/fetch-models.sh made the float models) in the
project's venv:

    check_quant_settings.py --cli BACKPLANE --cpufast-plugin LIB [--models NAME ...]

For each float model (default: the PaddleOCR classifier and the PP-OCRv4 recogniser, with
their calibration data and check input from scripts/quantize_models.py) and each setting
quantize_static offers on CPU: format QDQ or QOperator, activations QUInt8 or QInt8, weights
QUInt8 or QInt8 (QInt8 activations with QUInt8 weights are refused by the quantizer itself and
listed as such), per tensor or per channel, reduce_range off or on: the quantized model runs
on backplane (CpuFast+CpuRef) and on onnxruntime (default session, one thread), and the
largest difference of the output, in steps of its last DequantizeLinear's scale, must be at
most one (scripts/quantize_models.py explains why one step). The difference from onnxruntime's
unoptimised session (every QDQ group as DequantizeLinear, float operator, QuantizeLinear) is
printed too: the two onnxruntime sessions differ from each other by more than a step on these
models, and backplane follows the default one (docs/CONFORMANCE.md, "int8 arithmetic").

The last line counts the settings as `N passed, N failed in Xs`, then those the quantizer
refuses. Exit status 1 if any setting fails.
"""

import argparse
import itertools
import logging
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quantize_models as qm  # noqa: E402  (the calibration data and helpers)

# float model -> the quantized model of scripts/quantize_models.py whose data it takes.
MODELS = {"paddleocr_cls": "paddleocr_cls_qdq", "ppocrv4_rec": "ppocrv4_rec_qdq"}
SETTINGS = list(itertools.product(["QDQ", "QOperator"], ["QUInt8", "QInt8"], ["QUInt8", "QInt8"],
                                  [False, True], [False, True]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the backplane binary")
    parser.add_argument("--cpufast-plugin", required=True)
    parser.add_argument("--models-dir", default="target/models")
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    ort.set_default_logger_severity(3)
    # The quantizer's advice and the tensors it leaves alone, on the root logger: noise here.
    logging.getLogger().setLevel(logging.ERROR)
    start = time.time()
    work = tempfile.mkdtemp()
    plugins = os.path.join(work, "plugins")
    os.makedirs(plugins, mode=0o755)
    os.chmod(work, 0o755)
    os.symlink(os.path.abspath(args.cpufast_plugin), os.path.join(plugins, "Acme_CpuFast_backend.so"))
    passed = failed = refused = 0
    print(f"{'model':<14} {'format':<9} {'act':<6} {'weights':<7} {'axis':<10} {'rr':<3} result"
          "  steps from onnxruntime (unoptimised)")
    for source in args.models:
        spec = qm.SPECS[MODELS[source]]
        calibration = spec["calibration"](np.random.default_rng(qm.SEED))
        x = np.ascontiguousarray(spec["check"]()[0].astype("<f4"))
        prepared, _ = qm.prepare(os.path.join(args.models_dir, source, "model.onnx"), work)
        input_name = onnx.load(prepared).graph.input[0].name
        x_path = os.path.join(work, "x.npy")
        np.save(x_path, x)
        for fmt, act, weights, per_channel, reduce_range in SETTINGS:
            row = (f"{source:<14} {fmt:<9} {act:<6} {weights:<7} "
                   f"{'per-channel' if per_channel else 'per-tensor':<10} {int(reduce_range):<3}")
            quantized = os.path.join(work, "q.onnx")
            try:
                quantize_static(prepared, quantized, qm.Reader(input_name, calibration),
                                quant_format=getattr(QuantFormat, fmt), per_channel=per_channel,
                                reduce_range=reduce_range, activation_type=QuantType[act],
                                weight_type=QuantType[weights])
            except Exception as e:  # noqa: BLE001  (the quantizer raises a bare Exception)
                if "doesn't support" not in str(e):
                    raise
                refused += 1
                print(f"{row} -       onnxruntime's quantizer refuses it: {str(e)[:70]}")
                continue
            options = ort.SessionOptions()
            options.intra_op_num_threads = 1
            names = [o.name for o in ort.InferenceSession(quantized, options).get_outputs()]
            want = ort.InferenceSession(quantized, options).run(names, {input_name: x})[0]
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            plain = ort.InferenceSession(quantized, options).run(names, {input_name: x})[0]
            found = qm.dequantize_scale(onnx.load(quantized), names[0])
            if found is None:
                sys.exit(f"error: {source}: output {names[0]} is not made by a DequantizeLinear")
            step = found[0]
            out = os.path.join(work, "out")
            subprocess.run(["rm", "-rf", out], check=True)
            r = subprocess.run([args.cli, "run", quantized, "--path", plugins, "--backends",
                                "CpuFast,CpuRef", "--input", f"{input_name}={x_path}",
                                "--output-dir", out], capture_output=True, text=True)
            if r.returncode != 0:
                failed += 1
                print(f"{row} FAIL    backplane: {r.stderr.strip().splitlines()[-1][:100]}")
                continue
            got = np.load(os.path.join(out, names[0].replace("/", "_") + ".npy")).astype(np.float64)
            steps = float(np.max(np.abs(got - want))) / step
            plain_steps = float(np.max(np.abs(got - plain))) / step
            ok = got.shape == want.shape and steps <= 1.0001
            passed += ok
            failed += not ok
            print(f"{row} {'ok' if ok else 'FAIL':<7} {steps:.2f} ({plain_steps:.2f})", flush=True)
    print(f"{passed} passed, {failed} failed in {time.time() - start:.1f}s"
          f" ({refused} settings refused by onnxruntime's quantizer)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
