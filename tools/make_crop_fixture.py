#!/usr/bin/env python3
"""Ultralytics' save_crop on the predict fixture, for tests/test_predict.c.

Runs DetectionPredictor with save_crop=True on the v8tiny fixture model
(weights from tests/parity/predict/v8tiny.safetensors) and the three fixture
images at conf 0.6, and writes tests/parity/predict/v8tiny/conf0.6/crops.json:
for every file it wrote under crops/, its path relative to crops/ (CLASS/
STEM.jpg, STEM2.jpg, ...), its width and height, and the SHA-256 of its
decoded RGB pixels (PIL). It first checks that the run's labels equal the
stored conf0.6 label files, so the crops belong to the same detections.

Run: /opt/ultra/bin/python tools/make_crop_fixture.py   (ultralytics 8.3.x, torch, pillow)
"""
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_predict_fixture import IMAGES, OUT, fixture_model, predictor_overrides  # noqa: E402


def main():
    from ultralytics.models.yolo.detect import DetectionPredictor

    model = fixture_model("v8tiny")
    model.load_state_dict(load_file(str(OUT / "v8tiny.safetensors")))
    case = OUT / "v8tiny" / "conf0.6"
    with tempfile.TemporaryDirectory() as tmp:
        p = DetectionPredictor(overrides={**predictor_overrides(tmp, dict(conf=0.6)), "save_crop": True})
        results = list(p(source=[str(OUT / n) for n in IMAGES], model=model, stream=True))
        run = Path(tmp) / "run"
        for r in results:
            stem = Path(r.path).stem
            got = (run / "labels" / f"{stem}.txt").read_text()
            assert got == (case / f"{stem}.txt").read_text(), f"{stem}: labels differ from the stored conf0.6 case"
        crops = {}
        for f in sorted((run / "crops").rglob("*.jpg")):
            px = np.asarray(Image.open(f).convert("RGB"))
            crops[str(f.relative_to(run / "crops"))] = dict(w=px.shape[1], h=px.shape[0], sha256=hashlib.sha256(px.tobytes()).hexdigest())
    (case / "crops.json").write_text(json.dumps(crops, indent=1, sort_keys=True) + "\n")
    print(f"{len(crops)} crops -> {case / 'crops.json'}")


if __name__ == "__main__":
    main()
