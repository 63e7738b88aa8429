#!/usr/bin/env python3
"""Ultralytics' val mode with rect batches on a small dataset of images of
different shapes, for tests/test_predict.c's `yolort val` rect cases.

Writes tests/parity/val_rect/: data.yaml, images/val/*.png (6 images of
6 aspect ratios, drawn like tools/make_predict_fixture.py's) with
labels/val/*.txt (the images' drawn rectangles, class k % 3), and, per
model (v8tiny, v10tiny: the predict fixture's detecting weights),
MODEL/predictions.json and MODEL/metrics.json: what Ultralytics'
DetectionValidator gives at imgsz 128, batch 2 with rect=True (as
`yolo val model=MODEL.pt` runs, Model.val's default), CPU, float32,
save_json on, plots off. The label cache Ultralytics writes is removed.
The metrics match predictions to labels in the original images' pixels,
both mapped by scale_boxes (which clips the predictions), as Ultralytics
8.3.63 did (the reference yolocc follows, ../shared/reference); the
installed 8.3.253 matches them in the letterboxed input instead, so its
DetectionValidator is given 8.3.63's two steps back (NativeSpaceValidator).

Run: /opt/ultra/bin/python tools/make_val_rect_fixture.py   (ultralytics 8.3.x, torch, opencv)
"""
import json
import shutil
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from make_predict_fixture import NAMES, fixture_model  # noqa: E402

OUT = ROOT / "tests" / "parity" / "val_rect"
PREDICT = ROOT / "tests" / "parity" / "predict"
# (w, h): ratios h/w 0.5, 0.625, 0.75, 1, 1.33, 2; with batch 2 the rect batches are
# (0.5, 0.625), (0.75, 1), (1.33, 2): three shapes
IMAGES = {"a_wide2.png": (96, 48), "b_wide16.png": (80, 50), "c_wide43.png": (64, 48), "d_square.png": (56, 56), "e_tall34.png": (48, 64),
          "f_tall2.png": (40, 80)}


def make_image(w, h, seed):
    """An image like the predict fixture's with its 3 rectangles as YOLO labels."""
    rng = np.random.default_rng(seed)
    im = rng.integers(0, 256, (h, w, 3), dtype=np.uint8) // 4 + 96
    labels = []
    for k in range(3):
        x0, y0 = int(rng.integers(0, w - 8)), int(rng.integers(0, h - 8))
        x1, y1 = int(rng.integers(x0 + 6, w)), int(rng.integers(y0 + 6, h))
        im[y0:y1, x0:x1] = rng.integers(0, 256, 3, dtype=np.uint8)
        labels.append(f"{k % 3} {(x0 + x1) / 2 / w:.6f} {(y0 + y1) / 2 / h:.6f} {(x1 - x0) / w:.6f} {(y1 - y0) / h:.6f}")
    return im, labels


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    (OUT / "images" / "val").mkdir(parents=True)
    (OUT / "labels" / "val").mkdir(parents=True)
    for k, (name, (w, h)) in enumerate(IMAGES.items()):
        im, labels = make_image(w, h, 100 + k)
        cv2.imwrite(str(OUT / "images" / "val" / name), im[..., ::-1])
        (OUT / "labels" / "val" / f"{Path(name).stem}.txt").write_text("\n".join(labels) + "\n")
    (OUT / "data.yaml").write_text("train: images/val\nval: images/val\nnames:\n" + "".join(f"  {i}: {n}\n" for i, n in enumerate(NAMES)))

    import torch
    from ultralytics.models.yolo.detect import DetectionValidator
    from ultralytics.utils import ops

    class NativeSpaceValidator(DetectionValidator):
        """8.3.63's matching: labels and predictions scaled to the original image (native-space labels / pred)."""

        def _prepare_batch(self, si, batch):
            pb = super()._prepare_batch(si, batch)
            if pb["cls"].shape[0]:
                pb["bboxes"] = ops.scale_boxes(pb["imgsz"], pb["bboxes"].clone(), pb["ori_shape"], ratio_pad=pb["ratio_pad"])
            return pb

        def _process_batch(self, preds, batch):
            native = {**preds, "bboxes": ops.scale_boxes(batch["imgsz"], preds["bboxes"].clone(), batch["ori_shape"], ratio_pad=batch["ratio_pad"])}
            return super()._process_batch(native, batch)

    torch.set_num_threads(1)
    for name in ("v8tiny", "v10tiny"):
        model = fixture_model(name)
        model.load_state_dict(load_file(str(PREDICT / f"{name}.safetensors")), strict=True)
        with tempfile.TemporaryDirectory() as tmp:
            args = dict(data=str(OUT / "data.yaml"), imgsz=128, batch=2, rect=True, device="cpu", save_json=True, plots=False, half=False,
                        project=tmp, name="val", conf=0.001, iou=0.7, verbose=False)
            v = NativeSpaceValidator(args=args)
            stats = v(model=model)
            (OUT / name).mkdir()
            shutil.copy(Path(tmp) / "val" / "predictions.json", OUT / name / "predictions.json")
        m = v.metrics.box
        (OUT / name / "metrics.json").write_text(json.dumps({"mp": m.mp, "mr": m.mr, "map50": m.map50, "map50_95": m.map,
                                                             "batch_shapes": v.dataloader.dataset.batch_shapes.tolist(),
                                                             "im_files": [Path(f).name for f in v.dataloader.dataset.im_files]}, indent=1) + "\n")
        print(name, "mAP50", m.map50, "mAP50-95", m.map, "shapes", v.dataloader.dataset.batch_shapes.tolist())
    for cache in (OUT / "labels").glob("*.cache"):
        cache.unlink()


if __name__ == "__main__":
    main()
