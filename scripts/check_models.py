#!/usr/bin/env python3
"""Runs every model of target/models (scripts/fetch-models.sh, scripts/fetch-paddleocr.sh) on
backplane in three configurations and compares each output with onnxruntime's; a model with
several inputs (info.json's `inputs` list) gets one --input NAME=FILE per input:

  builtin   CpuRef built in                       backplane run MODEL --input ...
  plugin    CpuRef as a plugin, built-ins off     --no-builtin --path DIR(Backplane_CpuRef)
  cpufast   CpuFast + CpuRef                      --path DIR(Acme_CpuFast) --backends CpuFast,CpuRef

Run by scripts/check-models.sh (which builds the release binaries) in the project's venv.
A result passes when |got - want| <= atol + rtol * |want| everywhere (rtol 1e-3, atol 1e-4,
the tolerance the real-models issue states). Prints one row per model and configuration
(milliseconds of one run, layers per backend, max |diff|), then `N passed, N failed in Ts`.
Exit status 1 when any failed, or when a model of EXPECTED is missing from the models folder
(a model dropped from the fetch scripts must not disappear from the check unnoticed).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

RTOL, ATOL = 1e-3, 1e-4


def run(cli, model_dir, info, extra, env):
    """One `backplane run`: (ok, message, per-backend layers, ms, max |diff|)."""
    with tempfile.TemporaryDirectory() as out:
        # info.json has an `inputs` list (scripts/make_encoder.py) or one `input`
        # (scripts/model_reference.py): one --input NAME=FILE each.
        cmd = [cli, "run", os.path.join(model_dir, "model.onnx")]
        for inp in info.get("inputs") or [info["input"]]:
            cmd += ["--input", f"{inp['name']}={os.path.join(model_dir, inp['file'])}"]
        cmd += ["--output-dir", out, "--json", *extra]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        except subprocess.TimeoutExpired:
            return False, "timed out after 600 s", {}, 0.0, float("nan")
        if p.returncode != 0:
            last = [l for l in p.stderr.splitlines() if l.startswith("Error")] or p.stderr.splitlines()[-1:]
            return False, " ".join(last)[:200], {}, 0.0, float("nan")
        summary = json.loads(p.stdout)
        worst, ok = 0.0, True
        for o in info["outputs"]:
            want = np.load(os.path.join(model_dir, o["file"]))
            got_path = os.path.join(out, o["file"])
            if not os.path.isfile(got_path):
                return False, f"output {o['name']} was not written", {}, 0.0, float("nan")
            got = np.load(got_path)
            if got.shape != want.shape:
                return False, f"output {o['name']}: shape {got.shape}, want {want.shape}", {}, 0.0, float("nan")
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            worst = max(worst, float(diff.max(initial=0.0)))
            ok &= bool(np.all(diff <= ATOL + RTOL * np.abs(want.astype(np.float64))))
        return ok, "", summary["layers_per_backend"], summary["latency_ms"], worst


# Every model the fetch scripts make: scripts/fetch-models.sh (the zoo's nine `light/` models,
# PP-OCRv4's detector and recogniser, MiniLM at opsets 13 and 17) and scripts/fetch-paddleocr.sh
# (the PaddleOCR classifier). Each is checked in every configuration.
EXPECTED = [
    "alexnet", "densenet121", "inception_v1", "inception_v2", "minilm_l6_opset13",
    "minilm_l6_opset17", "paddleocr_cls", "ppocrv4_det", "ppocrv4_rec", "resnet50",
    "shufflenet", "squeezenet", "vgg19", "zfnet512",
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the backplane binary")
    parser.add_argument("--cpuref-plugin", required=True)
    parser.add_argument("--cpufast-plugin", required=True)
    parser.add_argument("--models", default="target/models")
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    args = parser.parse_args()

    start = time.time()
    work = tempfile.mkdtemp()
    dirs = {}
    for config, src, name in [("plugin", args.cpuref_plugin, "Backplane_CpuRef_backend.so"),
                              ("cpufast", args.cpufast_plugin, "Acme_CpuFast_backend.so")]:
        d = os.path.join(work, config)
        os.makedirs(d, mode=0o755)
        shutil.copy(src, os.path.join(d, name))
        dirs[config] = d
    configs = {
        "builtin": [],
        "plugin": ["--no-builtin", "--path", dirs["plugin"]],
        "cpufast": ["--path", dirs["cpufast"], "--backends", "CpuFast,CpuRef"],
    }
    env = {k: v for k, v in os.environ.items() if k != "DYNAMIC_BACKEND_PATHS"}
    found = sorted(n for n in os.listdir(args.models)
                   if os.path.isfile(os.path.join(args.models, n, "info.json"))) \
        if os.path.isdir(args.models) else []
    wanted = args.only or EXPECTED
    unknown = sorted(set(wanted) - set(EXPECTED))
    if unknown:
        sys.exit(f"error: {unknown} not in the expected models {EXPECTED}")
    missing = sorted(set(wanted) - set(found))
    if missing:
        sys.exit(f"error: {len(missing)} expected model(s) missing from {args.models}: "
                 f"{', '.join(missing)} (scripts/fetch-models.sh, scripts/fetch-paddleocr.sh)")
    extra = sorted(set(found) - set(EXPECTED))
    if extra:
        print(f"note: not in EXPECTED, not checked: {', '.join(extra)}")
    names = [n for n in EXPECTED if n in wanted]
    passed = failed = 0
    print(f"{'model':<17} {'config':<8} {'result':<6} {'ms':>9} {'max |diff|':>11}  layers per backend")
    for name in names:
        model_dir = os.path.join(args.models, name)
        with open(os.path.join(model_dir, "info.json")) as f:
            info = json.load(f)
        for config, extra in configs.items():
            ok, why, layers, ms, worst = run(args.cli, model_dir, info, extra, env)
            passed += ok
            failed += not ok
            per = ", ".join(f"{b} {n}" for b, n in sorted(layers.items()))
            print(f"{name:<17} {config:<8} {'ok' if ok else 'FAIL':<6} {ms:>9.1f} {worst:>11.2e}  {per or why}",
                  flush=True)
    shutil.rmtree(work)
    print(f"{passed} passed, {failed} failed in {time.time() - start:.1f}s")
    checked = passed + failed
    if checked != len(names) * len(configs):
        sys.exit(f"error: {checked} checks made, {len(names) * len(configs)} expected")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
