#!/usr/bin/env python3
"""Ultralytics' own predictor on ONNX files that `yolort export` wrote, against
the predict fixtures (tests/parity/predict, made by tools/make_predict_fixture.py
from the same weights in PyTorch).

For each MODEL.onnx given and each fixture case, runs DetectionPredictor with
model=MODEL.onnx (AutoBackend: ONNX Runtime, the file's metadata for names,
stride and image size) on the fixture images, and compares its label lines
with the fixture's: same count and classes in order, every value within --tol.
Prints one line per (model, case) and exits 1 if any differs.
Needs ultralytics and onnxruntime (bench/export_parity.sh sets them up)."""
import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_predict_fixture import CASES, predictor_overrides  # noqa: E402  (the cases and arguments the fixtures were made with)
from make_predict_fixture import OUT as FIXTURE  # noqa: E402


def lines(path):
    return [list(map(float, l.split())) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def compare(got, want, tol):
    if len(got) != len(want):
        return f"{len(got)} lines, fixture {len(want)}", 0.0
    worst = 0.0
    for i, (g, w) in enumerate(zip(got, want)):
        if len(g) != len(w) or g[0] != w[0]:
            return f"line {i + 1}: {g[:1]} vs fixture {w[:1]}", worst
        worst = max([worst] + [abs(a - b) for a, b in zip(g[1:], w[1:])])
    return ("" if worst <= tol else f"a value differs by {worst:.2e}"), worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("onnx", nargs="+", help="MODEL.onnx files named after the fixture models (v8tiny.onnx, v10tiny.onnx)")
    ap.add_argument("--tol", type=float, default=1e-5, help="largest difference of a label value (normalised xywh, score)")
    a = ap.parse_args()
    from ultralytics.models.yolo.detect import DetectionPredictor

    images = sorted(str(p) for p in FIXTURE.glob("*.png"))
    bad = 0
    for onnx in a.onnx:
        name = Path(onnx).stem
        for case, args in CASES.items():
            with tempfile.TemporaryDirectory() as tmp:
                p = DetectionPredictor(overrides=predictor_overrides(tmp, args))
                results = list(p(source=images, model=onnx, stream=True))
                n = sum(len(r.boxes) for r in results)
                msgs, worst = [], 0.0
                for img in images:
                    stem = Path(img).stem
                    msg, w = compare(lines(Path(tmp) / "run" / "labels" / f"{stem}.txt"), lines(FIXTURE / name / case / f"{stem}.txt"), a.tol)
                    worst = max(worst, w)
                    if msg:
                        msgs.append(f"{stem}: {msg}")
                shutil.rmtree(tmp, ignore_errors=True)
            bad += bool(msgs)
            print(f"{name} {case}: {n} detections, worst difference {worst:.1e}: {'; '.join(msgs) if msgs else 'equal to the fixture'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
