#!/usr/bin/env python3
"""Ultralytics' predict mode on a model built from a YAML, for bench/predict.sh.

Builds the model as tests/parity/make_fixtures.py builds it (DetectionModel
after torch.manual_seed(0), nc classes), writes its state_dict to
--weights-out (safetensors, PyTorch names) for `yolort predict --weights`,
then runs DetectionPredictor on --source as `yolo predict` runs a .pt model
(BN fused, square letterbox, batch --batch, CPU, --threads torch threads
instead of Ultralytics' cores - 1)
and prints one JSON object: the predictor's own per-image preprocess,
inference and postprocess milliseconds averaged over the images, and the
detections it found.

    /opt/ultra/bin/python tools/ultralytics_predict_run.py --cfg models/yolov8.yaml --scale n \\
        --imgsz 640 --batch 2 --source DIR --weights-out /tmp/w.safetensors
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "parity"))
import make_fixtures as mf  # noqa: E402  (sets the Ultralytics environment, imports torch)

torch = mf.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", required=True)
    ap.add_argument("--scale", default="")
    ap.add_argument("--nc", type=int, default=3)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--source", required=True)
    ap.add_argument("--weights-out", required=True)
    a = ap.parse_args()
    from safetensors.torch import save_file
    from ultralytics.models.yolo.detect import DetectionPredictor
    from ultralytics.utils import torch_utils

    if a.threads:
        # select_device sets torch's threads to Ultralytics' NUM_THREADS (cores - 1) for a CPU run
        torch_utils.NUM_THREADS = a.threads
        torch.set_num_threads(a.threads)

    model = mf.build_detection_model(a.cfg, a.scale or None, a.nc)
    model.eval()
    save_file({k: v.contiguous() for k, v in sorted(model.state_dict().items())}, a.weights_out, metadata={"format": "pt"})
    with tempfile.TemporaryDirectory() as tmp:
        p = DetectionPredictor(overrides=dict(conf=a.conf, iou=0.7, imgsz=a.imgsz, batch=a.batch, device="cpu", save=False,
                                              project=tmp, name="run", verbose=False, half=False))
        results = list(p(source=a.source, model=model, stream=True))
    n = len(results)
    speed = {k: sum(r.speed[k] for r in results) / n for k in ("preprocess", "inference", "postprocess")}
    print(json.dumps({"images": n, "detections": sum(len(r.boxes) for r in results), "threads": torch.get_num_threads(), **speed}))


if __name__ == "__main__":
    main()
