#!/usr/bin/env python3
"""Ultralytics' predict mode on the v8tiny and v10tiny fixture models, for tests/test_predict.c.

Writes tests/parity/predict/: three PNG images of different shapes (wider,
taller and smaller than the 64 px input: letterbox padding on either axis and
upscaling), per model `MODEL.safetensors` (the parity fixture's initial weights, BN
statistics recalibrated on random images, the Detect head's last class and
box convolutions scaled, its class biases zeroed and its box biases
favouring short distances, so that class scores
spread over (0, 1) and boxes vary; class names in its metadata), and
`MODEL/CASE/STEM.txt`: what Ultralytics' DetectionPredictor writes with
save_txt and save_conf for each CASE's arguments (conf 0.25 or 0.6, classes
[1, 2], iou 0.3 with and without agnostic_nms), iou 0.7 otherwise, on the
CPU in float32 (an empty file where it found nothing).
The model is Ultralytics' own DetectionModel built from tests/parity/MODEL.yaml, run by
the predictor exactly as `yolo predict` runs a .pt model (AutoBackend, BN
fused into the convolutions, square letterbox since rect is off).

Run: /opt/ultra/bin/python tools/make_predict_fixture.py   (ultralytics 8.3.x, torch, opencv)
     /opt/ultra/bin/python tools/make_predict_fixture.py rect128   (only these cases, with the committed images and weights)
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "parity"))
from make_fixtures import build_detection_model  # noqa: E402

OUT = ROOT / "tests" / "parity" / "predict"
NAMES = ["red", "green", "blue"]
MODELS = ("v8tiny", "v10tiny")  # a YOLOv8 head (NMS) and an end-to-end v10Detect head (top-k, no NMS)
# label directory -> the predictor's arguments (iou 0.7 unless given; yolort predict's options in tests/test_predict.c)
CASES = {
    "conf0.25": dict(conf=0.25),
    "conf0.6": dict(conf=0.6),
    "conf0.25_classes_1_2": dict(conf=0.25, classes=[1, 2]),
    "conf0.25_iou0.3": dict(conf=0.25, iou=0.3),
    "conf0.25_iou0.3_agnostic": dict(conf=0.25, iou=0.3, agnostic_nms=True),
    # `yolo predict`'s own defaults for a .pt model (Model.predict: rect=True, batch=1): each image letterboxed
    # to the smallest multiples of 32 that hold it (LetterBox auto); at 128 px the three images take 96x128, 128x96, 96x128
    "rect128": dict(conf=0.25, imgsz=128, rect=True, batch=1),
}
IMAGES = {"wide.png": (96, 64), "tall.png": (64, 96), "small.png": (40, 30)}  # (w, h)


def predictor_overrides(project, case_args):
    """DetectionPredictor's arguments for one CASE, labels (with scores) into PROJECT/run/labels."""
    return {**dict(iou=0.7, imgsz=64, device="cpu", save=False, save_txt=True, save_conf=True, project=project, name="run", verbose=False,
                   half=False), **case_args}


def make_image(w, h, seed):
    rng = np.random.default_rng(seed)
    im = rng.integers(0, 256, (h, w, 3), dtype=np.uint8) // 4 + 96
    for _ in range(3):
        x0, y0 = int(rng.integers(0, w - 8)), int(rng.integers(0, h - 8))
        x1, y1 = int(rng.integers(x0 + 6, w)), int(rng.integers(y0 + 6, h))
        im[y0:y1, x0:x1] = rng.integers(0, 256, 3, dtype=np.uint8)
    return im


def make_detecting(model, sd, imgsz=64, cls_gain=4.0):
    """Loads sd (a state_dict, changed in place) into model made to detect: the
    head's last class convolutions x cls_gain with zero biases, its last box
    convolutions x2 with DFL biases favouring short distances, then BN
    statistics recalibrated on random images; leaves model in eval mode."""
    head = model.model[-1]
    h = len(model.model) - 1
    for i in range(head.nl):
        for cls, box in (("cv3", "cv2"), ("one2one_cv3", "one2one_cv2")):
            if f"model.{h}.{cls}.{i}.2.weight" not in sd:
                continue
            sd[f"model.{h}.{cls}.{i}.2.weight"] *= cls_gain
            sd[f"model.{h}.{cls}.{i}.2.bias"].zero_()
            sd[f"model.{h}.{box}.{i}.2.weight"] *= 2.0
            # DFL bins: favour short distances (about 1.5 strides a side) so boxes fit the image
            sd[f"model.{h}.{box}.{i}.2.bias"] = -0.6 * torch.arange(16, dtype=torch.float32).repeat(4)
    model.load_state_dict(sd, strict=True)
    # the initial BN statistics (mean 0, variance 1) shrink eval-mode features
    # layer by layer to ~1e-7 at the head: set them to the batch statistics
    # of random images instead (cumulative averages over 4 batches)
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.reset_running_stats()
            mod.momentum = None
    g = torch.Generator().manual_seed(7)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(torch.rand(8, 3, imgsz, imgsz, generator=g))
    model.eval()


def fixture_model(name):
    """The parity fixture's model at its initial weights, made to detect (see above)."""
    model = build_detection_model(ROOT / "tests" / "parity" / f"{name}.yaml", None, 3)
    fx = load_file(str(ROOT / "tests" / "parity" / f"{name}.safetensors"))
    make_detecting(model, {k[len("init/"):]: v for k, v in fx.items() if k.startswith("init/")})
    model.names = {i: n for i, n in enumerate(NAMES)}
    return model


def main():
    only = sys.argv[1:]  # case names: write only those, from the committed images and weights
    OUT.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    paths = []
    for k, (name, (w, h)) in enumerate(IMAGES.items()):
        if not only:
            cv2.imwrite(str(OUT / name), make_image(w, h, k)[..., ::-1])  # RGB -> BGR for OpenCV
        paths.append(str(OUT / name))

    from ultralytics.models.yolo.detect import DetectionPredictor

    for name in MODELS:
        model = fixture_model(name)
        if only:
            model.load_state_dict(load_file(str(OUT / f"{name}.safetensors")), strict=True)
        else:
            save_file({k: v.contiguous() for k, v in sorted(model.state_dict().items())}, str(OUT / f"{name}.safetensors"),
                      metadata={"format": "pt", "producer": "tools/make_predict_fixture.py", "names": json.dumps(NAMES)})
        for case, args in CASES.items():
            if only and case not in only:
                continue
            sub = OUT / name / case
            with tempfile.TemporaryDirectory() as tmp:
                p = DetectionPredictor(overrides=predictor_overrides(tmp, args))
                # a list of paths is one batch whatever `batch` says; the directory, as yolort is given it, follows batch
                results = list(p(source=str(OUT) if "batch" in args else paths, model=model, stream=True))
                shutil.rmtree(sub, ignore_errors=True)
                sub.mkdir(parents=True)
                for r in results:
                    stem = Path(r.path).stem
                    src = Path(tmp) / "run" / "labels" / f"{stem}.txt"
                    (sub / f"{stem}.txt").write_text(src.read_text() if src.exists() else "")
                    print(f"{name} {case} {stem}: {len(r.boxes)} detections")


if __name__ == "__main__":
    main()
