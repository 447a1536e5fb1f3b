#!/usr/bin/env python3
"""Runs ONNX's backend tests (as extracted by onnx_tests_prepare.py) on onnxruntime's CPU
provider, with the conformance kit's comparison, and writes what passed to
``<dir>/onnxruntime.json`` for ``backplane conformance --onnx-tests <dir>`` to print beside
its own counts. Run by scripts/fetch-onnx-tests.sh in the project venv:

    onnx_tests_onnxruntime.py --dir target/onnx-tests

- Each test's model runs on every ``test_data_set_*``; it passes when every output matches
  within ``|got - want| <= 1e-7 + 1e-3 * |want|`` (NaN matching NaN, integers, booleans and
  strings exactly), as the kit compares (host/conformance/src/onnx_tests.rs: RTOL, ATOL).
- A test is "excluded" (not counted either way) when its graph reads or writes a string,
  sequence, map or optional value (outside the operator catalogue the kit checks), or a
  tensor of an 8-, 4- or 2-bit or complex type (numpy's arrays of those, ml_dtypes', are not
  accepted by onnxruntime's Python API; the kit does not feed them either).
- The result is reused while SOURCE.json, this file and onnxruntime's version are unchanged.
"""

import argparse
import glob
import hashlib
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import numpy_helper

SUITES = ("node", "pytorch-converted", "pytorch-operator")
RTOL = 1e-3
ATOL = 1e-7


# The 8-, 4- and 2-bit float and integer types and the complex ones: numpy's arrays of them
# (ml_dtypes) are not accepted by onnxruntime's Python API, so their tests cannot be fed here
# (the kit's suite does not feed them either).
UNFED = {14, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26}


def excluded(model):
    """Why the test is left out (a non-tensor or string value, a type numpy cannot feed),
    or None."""
    for v in list(model.graph.input) + list(model.graph.output):
        t = v.type
        if not t.HasField("tensor_type"):
            return "sequences, maps or optionals"
        if t.tensor_type.elem_type == onnx.TensorProto.STRING:
            return "strings"
        if t.tensor_type.elem_type in UNFED:
            return "8-, 4- and 2-bit or complex types"
    return None


def read(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def matches(got, want):
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} vs {want.shape}"
    if want.dtype.kind in "fc" or str(want.dtype).startswith(("float8", "bfloat16")):
        g, w = got.astype(np.float64), want.astype(np.float64)
        nan = np.isnan(w)
        if not np.array_equal(np.isnan(g), nan):
            return "NaN positions differ"
        g, w = g[~nan], w[~nan]
        # Infinities must be equal; everything else within the tolerances.
        with np.errstate(invalid="ignore"):
            ok = (g == w) | (np.abs(g - w) <= ATOL + RTOL * np.abs(w))
        return None if ok.all() else f"max |diff| {np.max(np.abs(g - w))}"
    return None if np.array_equal(got, want) else "values differ"


def run_test(test_dir):
    model = onnx.load(os.path.join(test_dir, "model.onnx"))
    why = excluded(model)
    if why:
        return "excluded", why
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    try:
        session = onnxruntime.InferenceSession(
            os.path.join(test_dir, "model.onnx"), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - any load failure is the test's outcome
        return "failed", f"load: {str(e).splitlines()[0][:200]}"
    fed = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    sets = sorted(glob.glob(os.path.join(test_dir, "test_data_set_*")))
    if not sets:
        return "failed", "no data sets"
    for s in sets:
        inputs = [read(p) for p in sorted(glob.glob(os.path.join(s, "input_*.pb")),
                                          key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))]
        wants = [read(p) for p in sorted(glob.glob(os.path.join(s, "output_*.pb")),
                                         key=lambda p: int(p.rsplit("_", 1)[1].split(".")[0]))]
        feeds = {}
        for k, (name, value) in enumerate(inputs):
            key = name if name in fed else (fed[k] if k < len(fed) else name)
            feeds[key] = value
        try:
            got = session.run(outputs, feeds)
        except Exception as e:  # noqa: BLE001 - any run failure is the test's outcome
            return "failed", f"run: {str(e).splitlines()[0][:200]}"
        if len(got) != len(wants):
            return "failed", f"{len(got)} outputs, {len(wants)} expected"
        for g, (_, w) in zip(got, wants):
            why = matches(g, w)
            if why:
                return "failed", why
    return "passed", ""


def fingerprint(root):
    h = hashlib.sha256()
    with open(os.path.join(root, "SOURCE.json"), "rb") as f:
        h.update(f.read())
    with open(__file__, "rb") as f:
        h.update(f.read())
    h.update(onnxruntime.__version__.encode())
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", required=True)
    args = p.parse_args()
    out = os.path.join(args.dir, "onnxruntime.json")
    stamp = fingerprint(args.dir)
    if os.path.exists(out):
        with open(out) as f:
            if json.load(f).get("fingerprint") == stamp:
                print(f"onnxruntime's results already in {out}")
                return 0
    result = {"runtime": f"onnxruntime {onnxruntime.__version__}", "fingerprint": stamp, "suites": {}}
    for suite in SUITES:
        root = os.path.join(args.dir, suite)
        if not os.path.isdir(root):
            continue
        passed, failed, skipped = [], {}, {}
        for test in sorted(os.listdir(root)):
            outcome, why = run_test(os.path.join(root, test))
            if outcome == "passed":
                passed.append(test)
            elif outcome == "excluded":
                skipped[test] = why
            else:
                failed[test] = why
        result["suites"][suite] = {"passed": passed, "failed": failed, "excluded": skipped}
        print(f"onnxruntime {onnxruntime.__version__} on {suite}: {len(passed)} passed, "
              f"{len(failed)} failed, {len(skipped)} left out (strings, sequences, optionals, "
              "and the types numpy cannot feed it)")
    with open(out + ".partial", "w") as f:
        json.dump(result, f, indent=1)
    os.replace(out + ".partial", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
