#!/usr/bin/env python3
"""Extracts ONNX's backend test data from an onnx wheel and upgrades pytorch-converted.

Run by scripts/fetch-onnx-tests.sh in the project venv (needs onnx for the converter):

    onnx_tests_prepare.py --wheel onnx-1.22.0-....whl --wheel-sha256 HEX \
        --out-dir target/onnx-tests --opset 13

- node/<test>/ is copied unchanged from onnx/backend/test/data/node/.
- pytorch-converted/<test>/ and pytorch-operator/<test>/ get the test data unchanged and
  model.onnx converted to the given opset with onnx.version_converter (then checked with
  onnx.checker). A model that
  does not convert keeps its original model.onnx, and the reason is written to
  CONVERSION_FAILED in its directory (the kit reports such a test as skipped with it).
- SOURCE.json records the wheel, the counts and every conversion result. When it already
  matches the wheel's digest and the opset, nothing is redone.
"""

import argparse
import json
import os
import shutil
import sys
import zipfile

import onnx
from onnx import version_converter

PREFIX = "onnx/backend/test/data/"
SUITES = ("node", "pytorch-converted", "pytorch-operator")
# The suites whose models (old opsets) are upgraded to --opset.
UPGRADED = ("pytorch-converted", "pytorch-operator")


def extract(wheel, out_dir):
    counts = {}
    with zipfile.ZipFile(wheel) as z:
        for suite in SUITES:
            root = os.path.join(out_dir, suite)
            shutil.rmtree(root, ignore_errors=True)
            tests = set()
            for name in z.namelist():
                if not name.startswith(PREFIX + suite + "/") or name.endswith("/"):
                    continue
                rel = name[len(PREFIX + suite + "/"):]
                parts = rel.split("/")
                if len(parts) < 2 or any(p in ("", ".", "..") for p in parts):
                    continue
                tests.add(parts[0])
                dest = os.path.join(root, *parts)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                with z.open(name) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            counts[suite] = len(tests)
    return counts


def ir_version_for(opset):
    """The IR version of the ONNX release that introduced ai.onnx opset `opset`."""
    for _release, ir, ai_onnx, *_rest in onnx.helper.VERSION_TABLE:
        if ai_onnx == opset:
            return ir
    raise ValueError(f"opset {opset} is not in onnx.helper.VERSION_TABLE")


def upgrade(suite_dir, opset):
    results = {}
    for test in sorted(os.listdir(suite_dir)):
        path = os.path.join(suite_dir, test, "model.onnx")
        if not os.path.isfile(path):
            continue
        model = onnx.load(path)
        before = max(
            (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
            default=None,
        )
        try:
            converted = version_converter.convert_version(model, opset)
            # The converter keeps the old IR version; IR 3 models (pytorch-converted's)
            # must list initializers as graph inputs, which a Pad-2 -> Pad-11 upgrade
            # breaks. Use the IR version that goes with the target opset.
            converted.ir_version = max(converted.ir_version, ir_version_for(opset))
            onnx.checker.check_model(converted)
        except Exception as e:  # the converter raises several types
            reason = f"onnx.version_converter {before} -> {opset}: {type(e).__name__}: {e}"
            reason = " ".join(reason.split())[:400]
            with open(os.path.join(suite_dir, test, "CONVERSION_FAILED"), "w") as f:
                f.write(reason + "\n")
            results[test] = {"from": before, "ok": False, "reason": reason}
            continue
        onnx.save(converted, path)
        results[test] = {"from": before, "ok": True}
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wheel", required=True)
    ap.add_argument("--wheel-sha256", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--opset", type=int, required=True)
    args = ap.parse_args()

    source_path = os.path.join(args.out_dir, "SOURCE.json")
    if os.path.isfile(source_path):
        with open(source_path) as f:
            old = json.load(f)
        if old.get("wheel_sha256") == args.wheel_sha256 and old.get("opset") == args.opset \
                and old.get("onnx_converter") == onnx.__version__ \
                and old.get("suites") == list(SUITES) \
                and all(os.path.isdir(os.path.join(args.out_dir, s)) for s in SUITES):
            print(f"up to date: {old['counts']}")
            return 0

    counts = extract(args.wheel, args.out_dir)
    conversions = {}
    for suite in UPGRADED:
        for test, r in upgrade(os.path.join(args.out_dir, suite), args.opset).items():
            conversions[f"{suite}/{test}"] = r
    failed = {t: r["reason"] for t, r in conversions.items() if not r["ok"]}
    info = {
        "wheel": os.path.basename(args.wheel),
        "wheel_sha256": args.wheel_sha256,
        "opset": args.opset,
        "onnx_converter": onnx.__version__,
        "counts": counts,
        "suites": list(SUITES),
        "converted": sum(1 for r in conversions.values() if r["ok"]),
        "conversion_failed": failed,
    }
    with open(source_path + ".tmp", "w") as f:
        json.dump(info, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(source_path + ".tmp", source_path)
    print(f"extracted {counts}; {' and '.join(UPGRADED)} upgraded to opset {args.opset}: "
          f"{info['converted']} converted, {len(failed)} not")
    for t, r in sorted(failed.items()):
        print(f"  {t}: {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
