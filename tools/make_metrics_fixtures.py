#!/usr/bin/env python3
"""Validation-metric fixtures from the real Ultralytics, for tests/test_metrics.c.

Owns tests/fixtures/metrics/ only; touches no other fixture. The target is
ultralytics 8.3.63 (training-semantics.md §8); later releases changed the
validator (metrics in letterboxed space, fitness = mAP50-95), so put the 8.3.63
source first on the path:

    /opt/ultra/bin/python -m pip download ultralytics==8.3.63 --no-deps -d /tmp/u863
    unzip -q /tmp/u863/ultralytics-8.3.63-py3-none-any.whl -d /tmp/u863/src
    ULTRALYTICS_SRC=/tmp/u863/src /opt/ultra/bin/python tools/make_metrics_fixtures.py

Everything is computed by Ultralytics' own code: DetectionValidator's
update_metrics (ground truth from normalised xywh through _prepare_batch,
predictions through _prepare_pred / scale_boxes, box_iou, match_predictions),
get_stats (ap_per_class, DetMetrics), print_results (the table), and
ops.non_max_suppression (torchvision NMS) for the NMS cases.

Validation cases (val_*.json): per image the original size, the letterbox
gain and padding, ground truth as network-pixel xyxy (float32, as
_prepare_batch builds it before scale_boxes), detections in NMS order
(network-pixel xyxy, conf, cls); expected per-image tp rows, per-class AP at
the ten thresholds, P, R, AP50, AP50-95, the means, fitness, table lines.
Random confidences are distinct, so no result depends on how a sort orders ties.
Each validation case also holds the ConfusionMatrix that update_metrics fills
when plots are on (conf 0.25, IoU 0.45; rows predicted, columns true, the last
of each the background) and ap_per_class' curves (px, p_curve, r_curve,
f1_curve, prec_values) at every CURVE_STRIDE-th of their 1000 points.

NMS cases (nms_*.json): the (4 + nc, A) float32 input (or, for the 30000-cap
case, the integer formula that both sides evaluate) and the kept rows.
Floats are written as the exact double of each float32 value.
"""
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

if os.environ.get("ULTRALYTICS_SRC"):
    sys.path.insert(0, os.environ["ULTRALYTICS_SRC"])

import numpy as np
import torch
import torchvision  # noqa: F401  (8.3.63 always uses torchvision's NMS)
import ultralytics
from ultralytics.models.yolo.detect import DetectionValidator
from ultralytics.utils import LOGGER, ops

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics"
NET = 640  # network image is NET x NET
CURVE_STRIDE = 7  # curves are stored at px indices 0, 7, 14, ... and 999


def f32(v):
    """The exact double of a float32 value (JSON round-trips it)."""
    return float(np.float32(v))


def letterbox_geometry(w0, h0):
    """load_image's long-side resize, then a centred LetterBox into NET x NET."""
    r = NET / max(h0, w0)
    w_r, h_r = min(round(w0 * r), NET), min(round(h0 * r), NET)
    dw, dh = (NET - w_r) / 2, (NET - h_r) / 2
    left, top = round(dw - 0.1), round(dh - 0.1)
    return (h_r / h0, w_r / w0), (left, top)


def random_box(rng, w, h, lo=0.05, hi=0.5):
    bw, bh = rng.uniform(lo, hi) * w, rng.uniform(lo, hi) * h
    x1, y1 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
    return [x1, y1, x1 + bw, y1 + bh]


def make_image(rng, gt_classes, det_classes, n_gt, p_det, n_fp, far_only=False):
    """One image: GT in original pixels, detections in network pixels, NMS-ordered."""
    w0, h0 = int(rng.integers(200, 900)), int(rng.integers(200, 900))
    (gain, _), (left, top) = letterbox_geometry(w0, h0)
    gt = []
    for _ in range(n_gt):
        gt.append((int(rng.choice(gt_classes)), random_box(rng, w0, h0)))
    dets = []
    for c, b in gt:
        if far_only:
            break
        for _ in range(int(rng.random() < p_det) + int(rng.random() < 0.25)):
            bw, bh = b[2] - b[0], b[3] - b[1]
            s = rng.choice([0.03, 0.08, 0.15])
            nb = [b[0] + rng.normal(0, s) * bw, b[1] + rng.normal(0, s) * bh,
                  b[2] + rng.normal(0, s) * bw, b[3] + rng.normal(0, s) * bh]
            dc = c if rng.random() < 0.9 and c in det_classes else int(rng.choice(det_classes))
            dets.append((dc, nb))
    for _ in range(n_fp):
        b = random_box(rng, w0, h0, 0.05, 0.3)
        if far_only:  # boxes that reach into the padding and overlap nothing
            b = [-0.2 * w0, -0.2 * h0, -0.05 * w0, -0.05 * h0]
        dets.append((int(rng.choice(det_classes)), b))
    rows = []
    for c, b in dets:
        nb = [b[0] * gain + left, b[1] * gain + top, b[2] * gain + left, b[3] * gain + top]
        rows.append([*(f32(v) for v in nb), f32(rng.uniform(0.001, 1.0)), float(c)])
    rows.sort(key=lambda r: -r[4])
    # Dataset labels: normalised xywh in the network image.
    xywhn = []
    for c, b in gt:
        nb = [b[0] * gain + left, b[1] * gain + top, b[2] * gain + left, b[3] * gain + top]
        xywhn.append([(nb[0] + nb[2]) / 2 / NET, (nb[1] + nb[3]) / 2 / NET,
                      (nb[2] - nb[0]) / NET, (nb[3] - nb[1]) / NET])
    return dict(w0=w0, h0=h0, ratio_pad=((gain, gain), (left, top)), gt_cls=[c for c, _ in gt],
                xywhn=xywhn, dets=rows)


def new_validator(nc):
    save_dir = Path(tempfile.mkdtemp(prefix="metrics_fixture_"))
    v = DetectionValidator(save_dir=save_dir, args=dict(plots=False, verbose=True, save_json=False))
    v.data = {"val": ""}
    v.init_metrics(types.SimpleNamespace(names={i: f"class{i}" for i in range(nc)}))
    v.training = False
    v.device = torch.device("cpu")
    return v


def run_validation(name, seed, nc, n_images, gt_classes, det_classes, far_only=False):
    rng = np.random.default_rng(seed)
    v = new_validator(nc)
    images = []
    for i in range(n_images):
        n_gt = int(rng.integers(0, 6)) if i != 3 else 0  # image 3: no labels
        n_fp = int(rng.integers(0, 3))
        p_det = 0.0 if i == 5 else 0.85                   # image 5: usually no detections
        if i == 7:                                         # image 7: neither labels nor detections
            n_gt, n_fp, p_det = 0, 0, 0.0
        images.append(make_image(rng, gt_classes, det_classes, n_gt, p_det, n_fp, far_only))

    per_image = []
    for im in images:
        n_gt = len(im["gt_cls"])
        batch = {
            "batch_idx": torch.zeros(n_gt),
            "cls": torch.tensor(im["gt_cls"], dtype=torch.float32).view(-1, 1),
            "bboxes": torch.tensor(im["xywhn"], dtype=torch.float32).view(-1, 4),
            "ori_shape": [(im["h0"], im["w0"])],
            "img": types.SimpleNamespace(shape=torch.Size([1, 3, NET, NET])),
            "ratio_pad": [im["ratio_pad"]],
            "im_file": ["none.jpg"],
        }
        pred = torch.tensor(im["dets"], dtype=torch.float32).view(-1, 6)
        before = len(v.stats["tp"])
        # The network-pixel xyxy labels exactly as _prepare_batch forms them.
        gt_net = (ops.xywh2xyxy(batch["bboxes"]) * torch.tensor((NET, NET))[[1, 0, 1, 0]]) if n_gt else batch["bboxes"]
        v.args.plots = True  # only for the confusion matrix; get_stats then draws nothing
        v.update_metrics([pred], batch)
        v.args.plots = False
        tp = v.stats["tp"][-1].numpy().astype(int).tolist() if len(v.stats["tp"]) > before else []
        per_image.append({
            "orig_w": im["w0"], "orig_h": im["h0"],
            "ratio": f32(im["ratio_pad"][0][0]), "pad_x": im["ratio_pad"][1][0], "pad_y": im["ratio_pad"][1][1],
            "gt_cls": im["gt_cls"],
            "gt_net_xyxy": [[float(x) for x in row] for row in gt_net.tolist()],
            "dets": im["dets"],
            "tp": tp,
        })

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    LOGGER.addHandler(handler)
    results = v.get_stats()
    v.print_results()
    LOGGER.removeHandler(handler)
    box = v.metrics.box
    classes = []
    for i, c in enumerate(box.ap_class_index):
        classes.append({
            "cls": int(c), "images": int(v.nt_per_image[c]), "instances": int(v.nt_per_class[c]),
            "p": float(box.p[i]), "r": float(box.r[i]), "ap50": float(box.ap50[i]), "ap50_95": float(box.ap[i]),
            "ap": [float(a) for a in box.all_ap[i]],
        })
    table = [v.get_desc()] + [ln for ln in buf.getvalue().splitlines() if ln.strip()]
    curves = None
    if len(box.ap_class_index):
        idx = sorted(set(range(0, 1000, CURVE_STRIDE)) | {999})
        curves = {"index": idx, "px": [float(box.px[i]) for i in idx]}
        for key, arr in (("p", box.p_curve), ("r", box.r_curve), ("f1", box.f1_curve), ("pr", box.prec_values)):
            curves[key] = [[float(row[i]) for i in idx] for row in np.asarray(arr)]
    shutil.rmtree(v.save_dir, ignore_errors=True)
    return {
        "ultralytics": ultralytics.__version__, "name": name, "nc": nc, "images": per_image,
        "expected": {
            "seen": v.seen, "instances": int(v.nt_per_class.sum()),
            "mp": float(results["metrics/precision(B)"]), "mr": float(results["metrics/recall(B)"]),
            "map50": float(results["metrics/mAP50(B)"]), "map50_95": float(results["metrics/mAP50-95(B)"]),
            "fitness": float(results["fitness"]), "classes": classes, "table": table,
            "confusion": v.confusion_matrix.matrix.astype(int).tolist(), "curves": curves,
        },
    }


def clustered_pred(rng, nc, n_anchors):
    """(4 + nc, A): boxes jittered around a few centres so NMS has work; sigmoid scores."""
    centres = rng.uniform(60, 580, (12, 2))
    sizes = rng.uniform(30, 160, (12, 2))
    k = rng.integers(0, 12, n_anchors)
    jitter = rng.normal(0, 0.08, (n_anchors, 4))
    cx = centres[k, 0] + jitter[:, 0] * sizes[k, 0]
    cy = centres[k, 1] + jitter[:, 1] * sizes[k, 1]
    w = sizes[k, 0] * np.exp(jitter[:, 2])
    h = sizes[k, 1] * np.exp(jitter[:, 3])
    scores = 1 / (1 + np.exp(-(rng.normal(0, 2.0, (nc, n_anchors)) - 3.0)))
    return np.concatenate([np.stack([cx, cy, w, h]), scores]).astype(np.float32)


def cap_pred(nc, n_anchors):
    """Integer formula shared with the C test. Anchors < 10000 carry the 30000
    highest scores on one nearly fixed box, so NMS keeps one per class; the
    others are scattered boxes with lower scores that appear in the output
    only if the 30000-candidate cap is missing. All scores distinct."""
    a = np.arange(n_anchors)
    hi = a < 10000
    cx = np.where(hi, 320 + a % 5, (a * 37) % 600 + 20)
    cy = np.where(hi, 320 + a % 3, (a * 53) % 600 + 20)
    w = np.where(hi, 100, (a * 13) % 100 + 20)
    h = np.where(hi, 100, (a * 29) % 100 + 20)
    rows = [cx, cy, w, h]
    for c in range(nc):
        idx = a * nc + c
        m = np.where(hi, (idx * 7919) % 30011 + 6100, ((idx - 30000) * 7919) % 6007 + 50)
        rows.append(m.astype(np.float32) * np.float32(1.0 / 65536))
    return np.stack([np.asarray(r, dtype=np.float32) for r in rows]).astype(np.float32)


def run_nms(name, pred, conf, iou, max_det, store_input=True, formula=None):
    nc = pred.shape[0] - 4
    out = ops.non_max_suppression(torch.from_numpy(pred.copy())[None], conf, iou, multi_label=True, max_det=max_det)[0]
    fx = {"ultralytics": ultralytics.__version__, "name": name, "nc": nc, "n_anchors": int(pred.shape[1]),
          "conf": conf, "iou": iou, "max_det": max_det,
          "n_candidates": int((torch.from_numpy(pred[4:]) > conf).sum()),
          "kept": [[float(x) for x in row] for row in out.tolist()]}
    if store_input:
        fx["pred"] = [[float(x) for x in row] for row in pred.tolist()]
    if formula:
        fx["formula"] = formula
    return fx


def main():
    if ultralytics.__version__ != "8.3.63":
        sys.exit(f"needs ultralytics 8.3.63 (see the docstring for ULTRALYTICS_SRC); found {ultralytics.__version__}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    fixtures = {
        "val_basic": run_validation("val_basic", 1, 3, 20, [0, 1, 2], [0, 1, 2]),
        "val_missing_class": run_validation("val_missing_class", 2, 4, 20, [0, 1, 2], [0, 1, 3]),
        "val_no_tp": run_validation("val_no_tp", 3, 3, 6, [0, 1, 2], [0, 1, 2], far_only=True),
        "val_single_class": run_validation("val_single_class", 4, 1, 12, [0], [0]),
    }
    rng = np.random.default_rng(5)
    fixtures["nms_multi"] = run_nms("nms_multi", clustered_pred(rng, 3, 300), 0.001, 0.7, 300)
    fixtures["nms_single"] = run_nms("nms_single", clustered_pred(rng, 1, 240), 0.05, 0.6, 40)
    fixtures["nms_cap"] = run_nms(
        "nms_cap", cap_pred(3, 12000), 0.001, 0.7, 300, store_input=False,
        formula="idx=a*nc+c; a<10000: cx=320+a%5 cy=320+a%3 w=h=100 score=((idx*7919)%30011+6100)/65536; "
                "else: cx=(a*37)%600+20 cy=(a*53)%600+20 w=(a*13)%100+20 h=(a*29)%100+20 "
                "score=(((idx-30000)*7919)%6007+50)/65536 (float32)")
    total = 0
    for name, fx in fixtures.items():
        path = OUT_DIR / f"{name}.json"
        path.write_text(json.dumps(fx, separators=(",", ":")) + "\n")
        total += path.stat().st_size
        print(f"{path.name}: {path.stat().st_size} bytes", file=sys.stderr)
    print(f"ultralytics {ultralytics.__version__}; total {total} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
