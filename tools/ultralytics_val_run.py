#!/usr/bin/env python3
"""Ultralytics' val mode on a model file, for comparing with `yolort val`:
MODEL (e.g. the best.onnx `yolort export` wrote) on DATA.yaml's val split at
IMGSZ, CPU, batch 1, no plots; prints Ultralytics' table. The dataset's
labels/val.cache that Ultralytics writes is removed afterwards.

    /opt/ultra/bin/python tools/ultralytics_val_run.py build/demo/runs/train/weights/best.onnx \\
        build/demo/data/data.yaml 128
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "true")


def main():
    model, data, imgsz = sys.argv[1], sys.argv[2], int(sys.argv[3])
    from ultralytics import YOLO

    r = YOLO(model, task="detect").val(data=data, imgsz=imgsz, batch=1, device="cpu", plots=False, verbose=True)
    for cache in Path(data).resolve().parent.glob("labels/*.cache"):
        cache.unlink()
    print(f"mAP50 {r.box.map50:.6f} mAP50-95 {r.box.map:.6f}")


if __name__ == "__main__":
    main()
