#!/usr/bin/env python3
"""Runs every model of target/models (scripts/fetch-models.sh, scripts/fetch-paddleocr.sh) on
backplane in three configurations and compares each output with onnxruntime's; a model with
several inputs (info.json's `inputs` list) gets one --input NAME=FILE per input:

  builtin   CpuRef built in                       backplane run MODEL --input ...
  plugin    CpuRef as a plugin, built-ins off     --no-builtin --path DIR(Backplane_CpuRef)
  cpufast   CpuFast + CpuRef                      --path DIR(Acme_CpuFast) --backends CpuFast,CpuRef
  gpucl     GpuCl + CpuFast + CpuRef              --path DIR(Acme_GpuCl, Acme_CpuFast)
            (GPUCL_MODELS only: the OpenCL backend, device memory; pocl on a machine without GPU)
  gpucl-oop the same with GpuCl in a child process  ... --out-of-process GpuCl
  compiled  CpuFast + CpuRef from a compiled network: backplane compile MODEL --input ...
            -o M.bpn, then backplane run M.bpn; its outputs must also be the cpufast row's,
            bit for bit (issue 30)

Run by scripts/check-models.sh (which builds the release binaries) in the project's venv.
A result passes when |got - want| <= atol + rtol * |want| everywhere (rtol 1e-3, atol 1e-4,
the tolerance the real-models issue states; an output's own `atol` and `rtol` in info.json
when it has them: the quantized models of scripts/quantize_models.py, one quantization step
for an output made by a DequantizeLinear). An output with `"argmax": true` must also pick a
class with onnxruntime's top score along its `argmax_axis`; a model with `ranking` in
info.json (minilm_l6_dynamic) is run on each of its sentences too, and must rank the
paraphrase above the unrelated sentence by the margin. Prints one row per model and
configuration (milliseconds of one run, layers per backend, max |diff|, and why a failing row
failed), then `N passed, N failed, N declared in Ts` (DECLARED: models the host cannot run
yet, each with its reason).
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


def compare(model_dir, out, outputs, files=None):
    """Compares backplane's outputs in `out` with onnxruntime's: (message or "", max |diff|,
    {output name: backplane's array}). `files` maps an output name to its reference file (a
    MiniLM sentence's), else each output's `file`. An output passes when |got - want| <= atol +
    rtol * |want| everywhere, its own `atol`/`rtol` from info.json (the quantized models,
    scripts/quantize_models.py) or ATOL/RTOL; with `argmax` (class outputs), backplane's class
    along `argmax_axis` must also be one with onnxruntime's top score."""
    worst, why, got_all = 0.0, "", {}
    for o in outputs:
        ref = (files or {}).get(o["name"], o["file"])
        want = np.load(os.path.join(model_dir, ref))
        got_path = os.path.join(out, o["file"])
        if not os.path.isfile(got_path):
            return f"output {o['name']} was not written", float("nan"), {}
        got = np.load(got_path)
        if got.shape != want.shape:
            return f"output {o['name']}: shape {got.shape}, want {want.shape}", float("nan"), {}
        got_all[o["name"]] = got
        atol, rtol = o.get("atol", ATOL), o.get("rtol", RTOL)
        want64, got64 = want.astype(np.float64), got.astype(np.float64)
        diff = np.abs(got64 - want64)
        worst = max(worst, float(diff.max(initial=0.0)))
        beyond = diff > atol + rtol * np.abs(want64)
        if beyond.any():
            why = why or (f"{o['name']} ({ref}) beyond atol {atol:.3g} rtol {rtol:.3g} "
                          f"on {int(beyond.sum())} of {beyond.size}")
        if o.get("argmax"):
            axis = o.get("argmax_axis", 1)
            picked = np.take_along_axis(want64, np.expand_dims(got64.argmax(axis), axis), axis)
            if not np.array_equal(picked, want64.max(axis, keepdims=True)):
                why = why or (f"{o['name']}: argmax {got64.argmax(axis).reshape(-1).tolist()}, "
                              f"onnxruntime's top class {want64.argmax(axis).reshape(-1).tolist()}")
    return why, worst, got_all


def cosine(a, b):
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def run(cli, model_dir, info, extra, env, compiled=None, same_as=None):
    """One `backplane run` per input set: (ok, message, per-backend layers, ms, max |diff|,
    the first set's outputs). With `compiled` (a folder), each set's model is first compiled
    with `backplane compile` at that set's inputs, and the compiled file is run; with
    `same_as` (outputs by name), the first set's outputs must equal them bit for bit.
    The layers and ms are the first run's (the model's `input`/`inputs`); a model whose info.json
    has `ranking` (minilm_l6_dynamic) is run on each of its `sentences` as well, every output
    compared, and cos(anchor, positive) - cos(anchor, negative) of backplane's `output` must be
    at least `margin`."""
    # info.json has an `inputs` list (scripts/make_encoder.py) or one `input`
    # (scripts/model_reference.py): one --input NAME=FILE each.
    inputs = info.get("inputs") or [info["input"]]
    sets = [(None, {i["name"]: i["file"] for i in inputs}, None)]
    ranking = info.get("ranking")
    if ranking:
        for s in info["sentences"]:
            files = s["files"]
            if all(files[i["name"]] == i["file"] for i in inputs):
                sets[0] = (s["role"], sets[0][1], files)
            else:
                sets.append((s["role"], {i["name"]: files[i["name"]] for i in inputs}, files))
    results = []
    for role, feeds, files in sets:
        with tempfile.TemporaryDirectory() as out:
            model = os.path.join(model_dir, "model.onnx")
            feed_args = []
            for name, file in feeds.items():
                feed_args += ["--input", f"{name}={os.path.join(model_dir, file)}"]
            label = f"{role}: " if role and len(sets) > 1 else ""
            steps = []
            if compiled:
                bpn = os.path.join(compiled, f"{role or 'model'}.bpn")
                steps.append([cli, "compile", model, *feed_args, *extra, "-o", bpn])
                model = bpn
            steps.append([cli, "run", model, *feed_args, "--output-dir", out, "--json", *extra])
            for cmd in steps:
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
                except subprocess.TimeoutExpired:
                    return False, f"{label}timed out after 600 s", {}, 0.0, float("nan"), {}
                if p.returncode != 0:
                    last = [l for l in p.stderr.splitlines() if l.startswith("Error")] or p.stderr.splitlines()[-1:]
                    return False, label + cmd[1] + ": " + " ".join(last)[:200], {}, 0.0, float("nan"), {}
            summary = json.loads(p.stdout)
            why, worst, got = compare(model_dir, out, info["outputs"], files)
            if not got:
                return False, label + why, {}, 0.0, float("nan"), {}
            results.append((role, summary, why and label + why, worst, got))
    _, summary, _, _, first = results[0]
    if same_as is not None:
        if not same_as:
            return (False, "no cpufast row to compare with bit for bit",
                    summary["layers_per_backend"], summary["latency_ms"],
                    max(r[3] for r in results), first)
        for name, want in same_as.items():
            have = first.get(name)
            if have is None or have.dtype != want.dtype or have.tobytes() != want.tobytes():
                return (False, f"{name}: not bit-identical to the ONNX model's run (cpufast)",
                        summary["layers_per_backend"], summary["latency_ms"],
                        max(r[3] for r in results), first)
    layers, ms = summary["layers_per_backend"], summary["latency_ms"]
    worst = max(r[3] for r in results)
    why = next((r[2] for r in results if r[2]), "")
    if ranking and not why:
        emb = {role: got[ranking["output"]] for role, _, _, _, got in results}
        pos = cosine(emb[ranking["anchor"]], emb[ranking["positive"]])
        neg = cosine(emb[ranking["anchor"]], emb[ranking["negative"]])
        if pos - neg < ranking["margin"]:
            why = (f"ranking: cos({ranking['anchor']}, {ranking['positive']}) {pos:.3f} - "
                   f"cos({ranking['anchor']}, {ranking['negative']}) {neg:.3f} < {ranking['margin']}")
    return not why, why, layers, ms, worst, first


# Every model the fetch scripts make: scripts/fetch-models.sh (the zoo's nine `light/` models,
# PP-OCRv4's detector and recogniser, MiniLM at opsets 13 and 17, and the int8 models
# scripts/quantize_models.py makes from them) and scripts/fetch-paddleocr.sh (the PaddleOCR
# classifier). Each is checked in every configuration.
EXPECTED = [
    "alexnet", "densenet121", "inception_v1", "inception_v2", "minilm_l6_opset13",
    "minilm_l6_opset17", "paddleocr_cls", "ppocrv4_det", "ppocrv4_rec", "resnet50",
    "shufflenet", "squeezenet", "vgg19", "zfnet512",
    # int8: QDQ, QOperator and dynamic (scripts/quantize_models.py).
    "minilm_l6_dynamic", "paddleocr_cls_qdq", "ppocrv4_det_qdq", "ppocrv4_rec_qdq",
    "resnet50_qdq", "resnet50_qop", "squeezenet_qdq", "squeezenet_qop",
    # int8 with QUInt8 weights per tensor (quantize_static's weight_type=QUInt8).
    "paddleocr_cls_qdq_u8w", "ppocrv4_det_qdq_u8w",
]

# The models also checked with the OpenCL backend first (GpuCl,CpuFast,CpuRef): the PaddleOCR
# classifier, MiniLM and a zoo CNN (issue 29). On pocl the OpenCL kernels run on the CPU, so
# the rest of the zoo would only add minutes.
GPUCL_MODELS = ["paddleocr_cls", "minilm_l6_opset17", "squeezenet"]

# Models whose layers must land on the backends as their twin's do, in the configurations
# where both ran: u8 weights must not send a layer to another backend than s8 weights do.
SAME_PLACEMENT = {"paddleocr_cls_qdq_u8w": "paddleocr_cls_qdq",
                  "ppocrv4_det_qdq_u8w": "ppocrv4_det_qdq"}

# Models of EXPECTED the host cannot run yet, each with the reason: listed in every report,
# never counted as passed; a declared model that starts to pass is reported, so that the
# declaration is removed.
DECLARED: dict[str, str] = {}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True, help="the backplane binary")
    parser.add_argument("--cpuref-plugin", required=True)
    parser.add_argument("--cpufast-plugin", required=True)
    parser.add_argument("--gpucl-plugin", required=True)
    parser.add_argument("--models", default="target/models")
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    args = parser.parse_args()

    start = time.time()
    work = tempfile.mkdtemp()
    dirs = {}
    for config, plugins in [
            ("plugin", [(args.cpuref_plugin, "Backplane_CpuRef_backend.so")]),
            ("cpufast", [(args.cpufast_plugin, "Acme_CpuFast_backend.so")]),
            ("gpucl", [(args.gpucl_plugin, "Acme_GpuCl_backend.so"),
                       (args.cpufast_plugin, "Acme_CpuFast_backend.so")])]:
        d = os.path.join(work, config)
        os.makedirs(d, mode=0o755)
        for src, name in plugins:
            shutil.copy(src, os.path.join(d, name))
        dirs[config] = d
    configs = {
        "builtin": [],
        "plugin": ["--no-builtin", "--path", dirs["plugin"]],
        "cpufast": ["--path", dirs["cpufast"], "--backends", "CpuFast,CpuRef"],
        "gpucl": ["--path", dirs["gpucl"], "--backends", "GpuCl,CpuFast,CpuRef"],
        "gpucl-oop": ["--path", dirs["gpucl"], "--backends", "GpuCl,CpuFast,CpuRef",
                      "--out-of-process", "GpuCl"],
        "compiled": ["--path", dirs["cpufast"], "--backends", "CpuFast,CpuRef"],
    }
    configs_of = {n: [c for c in configs if not c.startswith("gpucl") or n in GPUCL_MODELS]
                  for n in EXPECTED}
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
    passed = failed = declared = 0
    placements = {}
    print(f"{'model':<17} {'config':<9} {'result':<6} {'ms':>9} {'max |diff|':>11}  layers per backend")
    for name in names:
        model_dir = os.path.join(args.models, name)
        with open(os.path.join(model_dir, "info.json")) as f:
            info = json.load(f)
        fast = None
        for config in configs_of[name]:
            extra = configs[config]
            if config == "compiled":
                with tempfile.TemporaryDirectory() as bpn:
                    ok, why, layers, ms, worst, _ = run(args.cli, model_dir, info, extra, env,
                                                        compiled=bpn, same_as=fast)
            else:
                ok, why, layers, ms, worst, got = run(args.cli, model_dir, info, extra, env)
                if config == "cpufast":
                    fast = got
            if name in DECLARED:
                # Declared as not running yet: reported, not counted; passing fails the check,
                # so that the declaration goes.
                state = "now passes: remove it from DECLARED" if ok else DECLARED[name]
                declared += not ok
                failed += ok
                print(f"{name:<17} {config:<9} {'decl':<6} {ms:>9.1f} {worst:>11.2e}  {state}",
                      flush=True)
                continue
            placements[(name, config)] = layers
            twin = placements.get((SAME_PLACEMENT.get(name), config))
            if ok and twin is not None and layers != twin:
                ok, why = False, (f"placement differs from {SAME_PLACEMENT[name]}'s"
                                  f" ({', '.join(f'{b} {n}' for b, n in sorted(twin.items()))})")
            passed += ok
            failed += not ok
            per = ", ".join(f"{b} {n}" for b, n in sorted(layers.items()))
            if per and why:
                per += f"; {why}"
            print(f"{name:<17} {config:<9} {'ok' if ok else 'FAIL':<6} {ms:>9.1f} {worst:>11.2e}  {per or why}",
                  flush=True)
    shutil.rmtree(work)
    print(f"{passed} passed, {failed} failed, {declared} declared in {time.time() - start:.1f}s")
    checked = passed + failed + declared
    expected_checks = sum(len(configs_of[n]) for n in names)
    if checked != expected_checks:
        sys.exit(f"error: {checked} checks made, {expected_checks} expected")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
