"""RapidOCR on rendered text, for test_rapidocr.py and scripts/bench_ocr.py.

``render(lines, size)`` draws lines of text (each ``(text, font size)``) black on white with
Pillow's built-in scalable font (``ImageFont.load_default(size=...)``, Pillow >= 10.1: no
system font needed). ``engine(kind)`` makes RapidOCR on real onnxruntime (``"onnxruntime"``)
or on backplane (``"backplane"``: ``sys.modules["onnxruntime"] = backplane.onnxruntime``
before rapidocr is imported). As a script it runs RapidOCR on image files in a process of
its own and prints the results as JSON::

    python ocr_pipeline.py onnxruntime|backplane IMAGE.png...

The output: ``{"onnxruntime": the name of the module rapidocr got as onnxruntime, "use_cls":
RapidOCR's default, "providers"/"backends": each model's session's providers and backplane
backends, "results": [{"image": path, "texts": [...], "boxes": [[[x, y] * 4] ...], "scores":
[...]}]}`` (``texts`` empty when nothing was found).
"""

import json
import sys
from typing import List, Sequence, Tuple

import numpy as np


def render(lines: Sequence[Tuple[str, int]], size: Tuple[int, int], rotate_180: bool = False):
    """An RGB PIL image of ``size`` (width, height), white, with each ``(text, font size)``
    drawn in black on a line of its own from the top left; turned upside down when
    ``rotate_180``."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    y = 20
    for text, font_size in lines:
        font = ImageFont.load_default(size=font_size)
        draw.text((24, y), text, fill="black", font=font)
        y += int(font_size * 1.8)
    if y > size[1]:
        raise ValueError(f"the lines need {y} pixels of height, the image has {size[1]}")
    return image.rotate(180) if rotate_180 else image


def engine(kind: str, **kwargs):
    """RapidOCR's engine on ``kind`` ("onnxruntime" or "backplane"); ``kwargs`` go to
    ``RapidOCR(...)`` (``intra_op_num_threads=1``, ...). Call it once per process: rapidocr
    binds the module it imported as onnxruntime."""
    if kind == "backplane":
        import backplane.onnxruntime

        sys.modules["onnxruntime"] = backplane.onnxruntime
    elif kind != "onnxruntime":
        raise ValueError(f"engine {kind!r}: onnxruntime or backplane")
    from rapidocr_onnxruntime import RapidOCR
    from rapidocr_onnxruntime.utils import infer_engine

    if kind == "backplane":
        # rapidocr really bound the shim (it was not imported before the switch).
        assert infer_engine.InferenceSession is backplane.onnxruntime.InferenceSession
    return RapidOCR(**kwargs)


def recognise(ocr, image) -> dict:
    """RapidOCR's result for one image (a path or an array) as plain lists."""
    result, _elapse = ocr(image)
    result = result or []
    return {
        "texts": [r[1] for r in result],
        "boxes": [np.asarray(r[0], dtype=np.float64).tolist() for r in result],
        "scores": [float(r[2]) for r in result],
    }


def sessions(ocr) -> dict:
    """The inference session of each of RapidOCR's models (rapidocr 1.4.4's attributes):
    ``{"det", "cls", "rec"}``."""
    return {"det": ocr.text_det.infer.session, "cls": ocr.text_cls.infer.session,
            "rec": ocr.text_rec.session.session}


def main(argv: List[str]) -> int:
    kind, images = argv[0], argv[1:]
    ocr = engine(kind)
    out = {
        "onnxruntime": sys.modules["onnxruntime"].__name__,
        "use_cls": ocr.use_cls,
        "providers": {k: s.get_providers() for k, s in sessions(ocr).items()},
        "backends": {k: getattr(s, "backplane_backends", None) for k, s in sessions(ocr).items()},
        "results": [dict(image=path, **recognise(ocr, path)) for path in images],
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
