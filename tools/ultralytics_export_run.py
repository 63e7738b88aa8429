#!/usr/bin/env python3
"""Ultralytics' export mode (format onnx) on a model built from a YAML, for
bench/export.sh: builds the model as tests/parity/make_fixtures.py builds it
(DetectionModel after torch.manual_seed(0)), writes its state_dict to
--weights-out (safetensors, PyTorch names) for `yolort export --weights`,
then runs Ultralytics' Exporter (opset --opset, static batch 1, no
simplifier, CPU, fp32) and copies the file to --onnx-out. Prints one JSON
object: the exporter's seconds (BN fusion, tracing and writing).

    /opt/ultra/bin/python tools/ultralytics_export_run.py --cfg models/yolov8.yaml --scale n \\
        --imgsz 640 --weights-out /tmp/w.safetensors --onnx-out /tmp/u.onnx
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "parity"))
import make_fixtures as mf  # noqa: E402  (sets the Ultralytics environment, imports torch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cfg", required=True)
    ap.add_argument("--scale", default="")
    ap.add_argument("--nc", type=int, default=80)
    ap.add_argument("--imgsz", type=int, default=640)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--weights-out", required=True)
    ap.add_argument("--onnx-out", required=True)
    a = ap.parse_args()
    from safetensors.torch import save_file
    from ultralytics.engine.exporter import Exporter

    model = mf.build_detection_model(a.cfg, a.scale or None, a.nc)
    model.eval()
    save_file({k: v.contiguous() for k, v in sorted(model.state_dict().items())}, a.weights_out, metadata={"format": "pt"})
    # what a trained checkpoint's model carries and the exporter reads
    model.task, model.names, model.args = "detect", {i: f"class{i}" for i in range(a.nc)}, {"data": ""}
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # the exporter writes next to the model's (here unnamed) file
        try:
            t0 = time.perf_counter()
            f = Exporter(overrides=dict(format="onnx", imgsz=a.imgsz, opset=a.opset, simplify=False, dynamic=False, batch=1,
                                        device="cpu", half=False))(model=model)
            dt = time.perf_counter() - t0
            shutil.copy(f, a.onnx_out)
        finally:
            os.chdir(cwd)
    print(json.dumps({"seconds": dt}))


if __name__ == "__main__":
    main()
