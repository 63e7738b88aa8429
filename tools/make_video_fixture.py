#!/usr/bin/env python3
"""A video for `yolort predict`'s video tests and what Ultralytics predicts on it.

Writes tests/parity/predict_video/clip.avi: 7 frames of 80x56 (letterboxed
on the short axis), made like the predict fixture's images, written by
OpenCV's VideoWriter as Motion JPEG at 10 fps (what Ultralytics writes on
Linux); and tests/parity/predict_video/v8tiny/conf0.25/clip_N.txt: what
Ultralytics' DetectionPredictor writes with save_txt and save_conf for each
frame N, with the v8tiny predict fixture's weights, on the CPU (an empty
file where it found nothing).

Run: /opt/ultra/bin/python tools/make_video_fixture.py   (ultralytics 8.3.x, torch, opencv)
"""
import shutil
import sys
import tempfile
from pathlib import Path

import cv2
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_predict_fixture import OUT, fixture_model, make_image, predictor_overrides  # noqa: E402

VIDEO = OUT.parent / "predict_video"
FRAMES, W, H, FPS = 7, 80, 56, 10


def main():
    VIDEO.mkdir(parents=True, exist_ok=True)
    clip = VIDEO / "clip.avi"
    vw = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"MJPG"), FPS, (W, H))
    for k in range(FRAMES):
        vw.write(make_image(W, H, 100 + k)[..., ::-1])  # RGB -> BGR for OpenCV
    vw.release()

    from ultralytics.models.yolo.detect import DetectionPredictor

    model = fixture_model("v8tiny")
    model.load_state_dict(load_file(str(OUT / "v8tiny.safetensors")))
    sub = VIDEO / "v8tiny" / "conf0.25"
    shutil.rmtree(sub, ignore_errors=True)
    sub.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        p = DetectionPredictor(overrides=predictor_overrides(tmp, dict(conf=0.25)))
        results = list(p(source=str(clip), model=model, stream=True))
        assert len(results) == FRAMES, f"{len(results)} results for {FRAMES} frames"
        for n in range(1, FRAMES + 1):
            src = Path(tmp) / "run" / "labels" / f"clip_{n}.txt"
            (sub / f"clip_{n}.txt").write_text(src.read_text() if src.exists() else "")
            print(f"frame {n}: {len(results[n - 1].boxes)} detections")


if __name__ == "__main__":
    main()
