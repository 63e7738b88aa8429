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
detections it found. --detecting first makes the initial model detect as the
predict fixtures' models do (tools/make_predict_fixture.py); --labels-out
DIR keeps the label files (DIR/labels/STEM.txt, with scores). --model FILE
predicts with that file instead (an ONNX file `yolort export` wrote, loaded
by AutoBackend with ONNX Runtime); nothing is built or written then.

    /opt/ultra/bin/python tools/ultralytics_predict_run.py --cfg models/yolov8.yaml --scale n \\
        --imgsz 640 --batch 2 --source DIR --weights-out /tmp/w.safetensors
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "parity"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_fixtures as mf  # noqa: E402  (sets the Ultralytics environment, imports torch)
from make_predict_fixture import make_detecting  # noqa: E402

torch = mf.torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", help="model YAML to build (unless --model)")
    ap.add_argument("--model", help="predict with this model file (e.g. MODEL.onnx) instead of building --cfg")
    ap.add_argument("--scale", default="")
    ap.add_argument("--nc", type=int, default=3)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--conf", type=float, default=0.25)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--source", required=True)
    ap.add_argument("--weights-out", help="write the built model's state_dict here (with --cfg)")
    ap.add_argument("--detecting", action="store_true", help="make the initial model detect (make_predict_fixture.make_detecting)")
    ap.add_argument("--cls-gain", type=float, default=4.0, help="with --detecting: the class convolutions' factor")
    ap.add_argument("--no-fuse", action="store_true", help="keep BN apart from the convolutions (the predictor fuses them)")
    ap.add_argument("--labels-out", help="also write the label files (save_txt, save_conf) into LABELS_OUT/labels")
    a = ap.parse_args()
    if not a.model and not (a.cfg and a.weights_out):
        ap.error("give --model, or --cfg and --weights-out")
    from safetensors.torch import save_file
    from ultralytics.models.yolo.detect import DetectionPredictor
    from ultralytics.utils import torch_utils

    if a.threads:
        # select_device sets torch's threads to Ultralytics' NUM_THREADS (cores - 1) for a CPU run
        torch_utils.NUM_THREADS = a.threads
        torch.set_num_threads(a.threads)

    if a.model:
        model = a.model
    else:
        model = mf.build_detection_model(a.cfg, a.scale or None, a.nc)
        if a.detecting:
            make_detecting(model, {k: v.clone() for k, v in model.state_dict().items()}, a.imgsz, a.cls_gain)
        model.eval()
        if a.no_fuse:
            model.is_fused = lambda *args, **kw: True  # AutoBackend then leaves the model as it is
        save_file({k: v.contiguous() for k, v in sorted(model.state_dict().items())}, a.weights_out, metadata={"format": "pt"})
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(a.labels_out) if a.labels_out else Path(tmp) / "run"
        p = DetectionPredictor(overrides=dict(conf=a.conf, iou=0.7, imgsz=a.imgsz, batch=a.batch, device="cpu", save=False,
                                              save_txt=bool(a.labels_out), save_conf=True, project=str(out.parent), name=out.name,
                                              exist_ok=True, verbose=False, half=False))
        results = list(p(source=a.source, model=model, stream=True))
    n = len(results)
    speed = {k: sum(r.speed[k] for r in results) / n for k in ("preprocess", "inference", "postprocess")}
    print(json.dumps({"images": n, "detections": sum(len(r.boxes) for r in results), "threads": torch.get_num_threads(), **speed}))


if __name__ == "__main__":
    main()
