#!/usr/bin/env python3
"""Ultralytics' val mode on a model file, for comparing with `yolort val`:
MODEL (e.g. the best.onnx `yolort export` wrote) on DATA.yaml's val split at
IMGSZ, CPU, batch 1; prints Ultralytics' table. With SAVE_DIR it also runs
with plots, save_json, save_txt and save_conf into SAVE_DIR (for
bench/val_parity.sh) and writes SAVE_DIR/confusion_matrix.json (the counts).
The dataset's labels/val.cache that Ultralytics writes is removed afterwards.

    /opt/ultra/bin/python tools/ultralytics_val_run.py build/demo/runs/train/weights/best.onnx \\
        build/demo/data/data.yaml 128 [SAVE_DIR]
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("YOLO_OFFLINE", "true")


def main():
    model, data, imgsz = sys.argv[1], sys.argv[2], int(sys.argv[3])
    save_dir = Path(sys.argv[4]).resolve() if len(sys.argv) > 4 else None
    from ultralytics import YOLO

    extra = {"plots": False}
    if save_dir:
        extra = dict(plots=True, save_json=True, save_txt=True, save_conf=True, project=str(save_dir.parent),
                     name=save_dir.name, exist_ok=True)
    r = YOLO(model, task="detect").val(data=data, imgsz=imgsz, batch=1, device="cpu", verbose=True, **extra)
    for cache in Path(data).resolve().parent.glob("labels/*.cache"):
        cache.unlink()
    if save_dir:
        (save_dir / "confusion_matrix.json").write_text(json.dumps(r.confusion_matrix.matrix.astype(int).tolist()))
    print(f"mAP50 {r.box.map50:.6f} mAP50-95 {r.box.map:.6f}")


if __name__ == "__main__":
    main()
