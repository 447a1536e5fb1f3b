#!/usr/bin/env python3
"""Start-up benchmark of compiled networks (issue 30): for each model, the time from process
start to the first output, `backplane run MODEL.onnx` against `backplane run MODEL.bpn` (the
same model compiled once by `backplane compile` with the same inputs), both on CpuFast + CpuRef;
the files' sizes; the peak resident memory of each run; the constant bytes each load copied;
and whether the outputs are bit-identical.

Each run is one process, timed from its start to its exit (it exits right after writing its
first and only output, so the exit adds only the unload). The runs of a model alternate
.onnx and .bpn, RUNS times each, after one untimed run of each (page cache warm for both); the
medians are compared. Run by scripts/bench-startup.sh, which builds what it needs.
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

MODELS = ["paddleocr_cls", "ppocrv4_det", "resnet50", "minilm_l6_opset17"]

# Issue 42's target: start to first output of the .bpn at most this fraction of the .onnx
# path's, on these models.
TARGET_RATIO = 0.25
TARGET_MODELS = ["ppocrv4_det", "resnet50"]


def inputs_of(model_dir):
    with open(os.path.join(model_dir, "info.json")) as f:
        info = json.load(f)
    args = []
    for i in info.get("inputs") or [info["input"]]:
        args += ["--input", f"{i['name']}={os.path.join(model_dir, i['file'])}"]
    return args


def timed(cmd):
    """(seconds from spawn to exit, stdout) of one run; fails loudly."""
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-2000:]}")
    return seconds, p.stdout


def outputs(folder):
    return {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cli", required=True)
    parser.add_argument("--plugins", required=True, help="a folder with Acme_CpuFast_backend.so")
    parser.add_argument("--models", default="target/models")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    env_args = ["--path", args.plugins, "--backends", "CpuFast,CpuRef"]
    rows = []
    for name in args.only or MODELS:
        model_dir = os.path.join(args.models, name)
        onnx = os.path.join(model_dir, "model.onnx")
        feeds = inputs_of(model_dir)
        with tempfile.TemporaryDirectory() as work:
            bpn = os.path.join(work, "model.bpn")
            compile_s, _ = timed([args.cli, "compile", onnx, *feeds, *env_args, "-o", bpn])
            runs = {}
            for kind, model in [("onnx", onnx), ("bpn", bpn)]:
                out = os.path.join(work, kind)
                os.mkdir(out)
                _, text = timed([args.cli, "run", model, *feeds, *env_args, "--json",
                                 "--output-dir", out])
                runs[kind] = {"summary": json.loads(text), "outputs": outputs(out), "times": []}
            for _ in range(args.runs):
                for kind, model in [("onnx", onnx), ("bpn", bpn)]:
                    s, _ = timed([args.cli, "run", model, *feeds, *env_args])
                    runs[kind]["times"].append(s)
            med = {k: statistics.median(r["times"]) * 1e3 for k, r in runs.items()}
            rows.append({
                "model": name,
                "onnx_ms": med["onnx"],
                "bpn_ms": med["bpn"],
                "ratio": med["bpn"] / med["onnx"],
                "first_run_ms": {k: r["summary"]["latency_ms"] for k, r in runs.items()},
                "onnx_bytes": os.path.getsize(onnx),
                "bpn_bytes": os.path.getsize(bpn),
                "size_ratio": os.path.getsize(bpn) / os.path.getsize(onnx),
                "peak_rss_mib": {k: (r["summary"].get("peak_rss_bytes") or 0) / 2**20
                                 for k, r in runs.items()},
                "constant_bytes_copied": {k: r["summary"].get("constant_bytes_copied")
                                          for k, r in runs.items()},
                "bit_identical": runs["onnx"]["outputs"] == runs["bpn"]["outputs"],
                "compile_s": compile_s,
            })
    print(f"{'model':<18} {'.onnx ms':>9} {'.bpn ms':>8} {'ratio':>6} {'run ms onnx/bpn':>16} "
          f"{'.onnx bytes':>12} {'.bpn bytes':>11} {'size':>6} {'RSS MiB onnx/bpn':>17} "
          f"{'copied onnx/bpn':>16} same")
    for r in rows:
        fr, rss, cp = r["first_run_ms"], r["peak_rss_mib"], r["constant_bytes_copied"]
        print(f"{r['model']:<18} {r['onnx_ms']:>9.1f} {r['bpn_ms']:>8.1f} {r['ratio']:>5.2f}x "
              f"{fr['onnx']:>7.1f}/{fr['bpn']:<8.1f} {r['onnx_bytes']:>12} {r['bpn_bytes']:>11} "
              f"{r['size_ratio']:>5.2f}x {rss['onnx']:>8.1f}/{rss['bpn']:<8.1f} "
              f"{str(cp['onnx']):>7}/{str(cp['bpn']):<8} {'yes' if r['bit_identical'] else 'NO'}")
    for r in rows:
        if r["model"] in TARGET_MODELS:
            verdict = "met" if r["ratio"] <= TARGET_RATIO else "NOT met"
            print(f"{r['model']}: .bpn / .onnx {r['ratio']:.2f}x "
                  f"(target <= {TARGET_RATIO}x: {verdict})")
    print(json.dumps(rows))
    if not all(r["bit_identical"] for r in rows):
        raise SystemExit("error: a compiled network's outputs differ from its model's")


if __name__ == "__main__":
    main()
