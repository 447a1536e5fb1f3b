"""RapidOCR's pipeline on backplane (through backplane.onnxruntime) against onnxruntime, in
one run: scripts/bench-ocr.sh builds the release wheel and CpuFast and runs this.

  python scripts/bench_ocr.py --plugins DIR [--rounds N] [--cache-size N] [--json FILE]

1. Six rendered images (bindings/python/tests/ocr_pipeline.py's ``render``: one to five
   lines, 320x120 to 1200x800, one upside down).
2. For each engine (onnxruntime; backplane, i.e. CPUExecutionProvider = CpuFast then CpuRef
   with the plugins of ``--plugins``) at 1 and at 2 threads (``RapidOCR(intra_op_num_threads=N)``:
   onnxruntime's SessionOptions, CpuFast's Threads through the shim), a process of its own:
   one warm-up pass over the images (backplane loads each new input shape then), then
   ``--rounds`` timed passes. Reported: the median pass (whole pipeline), and per model the
   median of the time spent in its ``InferenceSession.run`` (det, cls, rec), the distinct
   input shapes each model saw, the peak RSS. The texts of every engine are compared with
   onnxruntime's.
3. The detector alone on backplane (a process of its own): per new input shape the first
   run (the network imports, optimises and loads the shape), a cached run, and a run of a
   network loaded for that shape only (``Runtime.load(shapes=...)``); then the peak RSS with
   the shape cache full (its 8 default entries), next to onnxruntime's after the same shapes.

The shim's shape cache holds ``--cache-size`` shapes per model (default 32, so that the timed
passes run cached shapes; the shapes each model saw are printed, and the passes would reload
shapes if a model saw more than the cache holds).
"""

import argparse
import importlib.util
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bindings" / "python" / "tests"))

WORDS = ("backplane runs onnx models on pluggable backends across every layer with "
         "vendor plugins and a reference backend invoice total due date amount paid").split()


def image_specs():
    """(file name, size, lines, upside down): six images, fixed text."""
    rng = random.Random(11)

    def lines(n, size):
        return [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))).capitalize(), size)
                for _ in range(n)]

    return [
        ("a_320x120.png", (320, 120), lines(1, 32), False),
        ("b_480x200.png", (480, 200), lines(2, 36), False),
        ("c_640x320.png", (640, 320), lines(4, 28), False),
        ("d_800x400.png", (800, 400), lines(4, 40), True),
        ("e_1024x300.png", (1024, 300), lines(3, 44), False),
        ("f_1200x800.png", (1200, 800), lines(5, 64), False),
    ]


def render_images(directory):
    from ocr_pipeline import render

    paths = []
    for name, size, lines, upside_down in image_specs():
        path = Path(directory) / name
        render(lines, size, rotate_180=upside_down).save(path)
        paths.append(str(path))
    return paths


def maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------------------
# Children.


def child_pipeline(kind, threads, images, rounds, cache_size):
    """One engine at one thread count: prints its measurements as JSON."""
    if kind == "backplane":
        import backplane.onnxruntime as bort

        # RapidOCR makes its own SessionOptions: give every one the cache size.
        make = bort.SessionOptions.__init__

        def with_cache(self):
            make(self)
            self.add_session_config_entry("backplane.cache_size", str(cache_size))

        bort.SessionOptions.__init__ = with_cache
    from ocr_pipeline import engine, recognise, sessions

    ocr = engine(kind, intra_op_num_threads=threads)
    spent = {"det": 0.0, "cls": 0.0, "rec": 0.0}
    shapes = {"det": [], "cls": [], "rec": []}
    for model, session in sessions(ocr).items():
        def timed(output_names, feed, run_options=None, _run=session.run, _model=model):
            (array,) = feed.values()
            shape = list(array.shape)
            if shape not in shapes[_model]:
                shapes[_model].append(shape)
            start = time.perf_counter()
            try:
                return _run(output_names, feed, run_options)
            finally:
                spent[_model] += time.perf_counter() - start

        session.run = timed
    texts = [recognise(ocr, path)["texts"] for path in images]  # warm-up: every shape loaded
    passes, per_model, per_image = [], {m: [] for m in spent}, [[] for _ in images]
    for _ in range(rounds):
        for m in spent:
            spent[m] = 0.0
        start = time.perf_counter()
        for i, path in enumerate(images):
            t = time.perf_counter()
            ocr(path)
            per_image[i].append(time.perf_counter() - t)
        passes.append(time.perf_counter() - start)
        for m in spent:
            per_model[m].append(spent[m])
    out = {
        "pipeline_ms": statistics.median(passes) * 1e3,
        "per_model_ms": {m: statistics.median(v) * 1e3 for m, v in per_model.items()},
        "per_image_ms": [statistics.median(v) * 1e3 for v in per_image],
        "shapes": shapes,
        "maxrss_mb": maxrss_mb(),
        "texts": texts,
    }
    if kind == "backplane":
        out["cache"] = {m: s.backplane_network.cache_info()["entries"] for m, s in sessions(ocr).items()}
        out["backends"] = {m: s.backplane_backends for m, s in sessions(ocr).items()}
    json.dump(out, sys.stdout)


def det_model():
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    return str(Path(spec.origin).parent / "models" / "ch_PP-OCRv4_det_infer.onnx")


def child_detector(shapes, iterations):
    """The detector on backplane: first run at a new shape, cached runs, fixed-shape
    networks."""
    import numpy as np

    import backplane

    rt = backplane.Runtime()
    model = det_model()
    net = rt.load(model)
    rng = np.random.default_rng(5)
    rows = []
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        start = time.perf_counter()
        first = net.run({"x": x})
        first_ms = (time.perf_counter() - start) * 1e3
        cached = []
        for _ in range(iterations):
            start = time.perf_counter()
            net.run({"x": x})
            cached.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        fixed_net = rt.load(model, shapes={"x": shape})
        load_ms = (time.perf_counter() - start) * 1e3
        fixed_net.run({"x": x})
        fixed = []
        for _ in range(iterations):
            start = time.perf_counter()
            out = fixed_net.run({"x": x})
            fixed.append((time.perf_counter() - start) * 1e3)
        (name,) = out
        same = bool(np.array_equal(out[name], first[name]))
        rows.append({"shape": shape, "first_ms": first_ms, "cached_ms": statistics.median(cached),
                     "fixed_ms": statistics.median(fixed), "fixed_load_ms": load_ms, "same_output": same})
        del fixed_net
    json.dump({"rows": rows}, sys.stdout)


def child_rss(kind, shapes):
    """Peak RSS of the detector after loading, and after running every shape (backplane:
    its shape cache then full)."""
    import numpy as np

    rng = np.random.default_rng(6)
    model = det_model()
    if kind == "backplane":
        import backplane

        net = backplane.Runtime().load(model)
        run = lambda x: net.run({"x": x})  # noqa: E731
    else:
        import onnxruntime

        so = onnxruntime.SessionOptions()
        so.intra_op_num_threads = 1
        sess = onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        run = lambda x: sess.run(None, {"x": x})  # noqa: E731
    loaded = maxrss_mb()
    for shape in shapes:
        run(rng.standard_normal(shape).astype(np.float32))
    out = {"loaded_mb": loaded, "full_mb": maxrss_mb(), "shapes": len(shapes)}
    if kind == "backplane":
        info = net.cache_info()
        out.update(entries=info["entries"], capacity=info["capacity"], cache_bytes=info["bytes"])
    json.dump(out, sys.stdout)


# ---------------------------------------------------------------------------------------
# The parent.


def run_child(args, plugins):
    env = dict(os.environ, DYNAMIC_BACKEND_PATHS=str(plugins))
    done = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"bench_ocr.py: the child {args[:3]} failed")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugins", required=True, help="directory of backend plugins (CpuFast)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache-size", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=10, help="timed runs per detector shape")
    parser.add_argument("--json", help="write every measurement there")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        images = render_images(tmp)
        results = {}
        for threads in (1, 2):
            for kind in ("onnxruntime", "backplane"):
                print(f"== {kind}, {threads} thread(s)", file=sys.stderr)
                results[f"{kind}_{threads}"] = run_child(
                    ["--child", "pipeline", kind, threads, args.rounds, args.cache_size, *images], args.plugins)
    det_shapes = results["backplane_1"]["shapes"]["det"]
    print("== detector: first run, cached run, fixed-shape network", file=sys.stderr)
    detector = run_child(["--child", "detector", args.iterations, json.dumps(det_shapes[:3])], args.plugins)
    # The shape cache's 8 default entries filled: the pipeline's detector shapes, then more.
    fill = [list(s) for s in det_shapes]
    k = 0
    while len(fill) < 8:
        k += 1
        extra = [1, 3, 736, 736 + 32 * k]
        if extra not in fill:
            fill.append(extra)
    fill = fill[:8]
    print("== detector: peak RSS", file=sys.stderr)
    rss = {kind: run_child(["--child", "rss", kind, json.dumps(fill)], args.plugins)
           for kind in ("onnxruntime", "backplane")}

    print()
    print(f"RapidOCR 1.4.4 over {len(images)} images, median of {args.rounds} passes "
          f"(backplane: CPUExecutionProvider = {results['backplane_1']['backends']['det']})")
    print(f"{'engine':<16} {'pipeline ms':>12} {'det ms':>9} {'cls ms':>9} {'rec ms':>9} {'peak RSS MB':>12}")
    for key, r in results.items():
        m = r["per_model_ms"]
        print(f"{key:<16} {r['pipeline_ms']:>12.1f} {m['det']:>9.1f} {m['cls']:>9.1f} {m['rec']:>9.1f} "
              f"{r['maxrss_mb']:>12.0f}")
    print()
    print("backplane / onnxruntime (same threads; below 1 is faster)")
    for threads in (1, 2):
        b, o = results[f"backplane_{threads}"], results[f"onnxruntime_{threads}"]
        ratios = [b["pipeline_ms"] / o["pipeline_ms"]] + [
            b["per_model_ms"][m] / o["per_model_ms"][m] for m in ("det", "cls", "rec")]
        print(f"  {threads} thread(s): pipeline {ratios[0]:.3f}x, det {ratios[1]:.3f}x, cls {ratios[2]:.3f}x, "
              f"rec {ratios[3]:.3f}x")
        if b["texts"] != o["texts"]:
            print(f"  WARNING: the texts differ at {threads} thread(s): {b['texts']} vs {o['texts']}")
    shapes = results["backplane_1"]["shapes"]
    print("  distinct input shapes: " + ", ".join(f"{m} {len(s)}" for m, s in shapes.items())
          + f" (cache {args.cache_size} per model; entries at the end: {results['backplane_1']['cache']})")
    print()
    print(f"Detector on backplane, 1 thread default (CpuFast+CpuRef), median of {args.iterations} runs")
    print(f"{'shape':<20} {'first ms':>10} {'cached ms':>10} {'fixed ms':>10} {'first/cached':>13} "
          f"{'cached/fixed':>13} {'fixed load ms':>14}")
    for row in detector["rows"]:
        print(f"{str(row['shape']):<20} {row['first_ms']:>10.1f} {row['cached_ms']:>10.1f} {row['fixed_ms']:>10.1f} "
              f"{row['first_ms'] / row['cached_ms']:>12.1f}x {row['cached_ms'] / row['fixed_ms']:>12.3f}x "
              f"{row['fixed_load_ms']:>14.1f}" + ("" if row["same_output"] else "  (outputs differ!)"))
    b, o = rss["backplane"], rss["onnxruntime"]
    print()
    print(f"Detector peak RSS after {b['shapes']} shapes: backplane {b['full_mb']:.0f} MB (after load "
          f"{b['loaded_mb']:.0f} MB; cache {b['entries']}/{b['capacity']} entries, {b['cache_bytes'] / 2**20:.0f} MB "
          f"by its count), onnxruntime {o['full_mb']:.0f} MB (after load {o['loaded_mb']:.0f} MB)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"pipeline": results, "detector": detector, "rss": rss, "images": [s[0] for s in image_specs()]},
            indent=1))
        print(f"JSON: {args.json}")


def child_main(argv):
    what = argv[0]
    if what == "pipeline":
        kind, threads, rounds, cache_size, *images = argv[1:]
        child_pipeline(kind, int(threads), images, int(rounds), int(cache_size))
    elif what == "detector":
        child_detector(json.loads(argv[2]), int(argv[1]))
    elif what == "rss":
        child_rss(argv[1], json.loads(argv[2]))
    else:
        raise SystemExit(f"unknown child {what}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
    else:
        main()
