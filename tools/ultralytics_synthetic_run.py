#!/usr/bin/env python3
"""The real Ultralytics training step on `yolort train --synthetic`'s batch, for many steps.

Answers one question the 3-step parity fixtures (tests/parity) cannot: over tens of
SGD steps on one fixed batch at a constant lr, does Ultralytics' own loss trajectory
do what yolocc's does (fall, then rise again)? Both start from the same weights and
the same batch:

  * the model is built as tests/parity/make_fixtures.py builds it (DetectionModel
    after torch.manual_seed(0), the trainer's attributes, `.dfl` frozen) from a
    model YAML (default: the corpus' yolov8.yaml, scale n, nc 3);
  * its initial state_dict is written to --weights-out (safetensors, PyTorch names)
    for `yolort train PLAN --synthetic --weights FILE`;
  * the batch is runtime/synthetic.c's (splitmix64, same seed, same float
    roundings), re-made here and turned into the trainer's batch dict;
  * each step is the fixture's: train-mode forward, model.loss, backward,
    clip_grad_norm_(10), the trainer's SGD groups (nesterov, decay 5e-4), zero_grad.

Prints one JSON object a step, in yolort's --json keys (loss = box + cls + dfl, the
items as the trainer logs them; total = what backward ran on; grad_norm before
clipping). Run from the repository root with the venv of tools/ultralytics_reference.py:

    /opt/ultra/bin/python tools/ultralytics_synthetic_run.py --steps 100 \\
        --weights-out /tmp/v8n-init.safetensors > /tmp/ultra-steps.jsonl

or run bench/synthetic_parity.sh, which runs both sides and compares them.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "parity"))
import make_fixtures as mf  # noqa: E402  (sets the Ultralytics environment, imports torch)

torch, np = mf.torch, mf.np
M64 = (1 << 64) - 1


class SplitMix64:
    """runtime/synthetic.c's generator, bit for bit."""

    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) / 9007199254740992.0


def synthetic_batch(seed, batch, size, nc, max_boxes):
    """runtime/synthetic.c's synthetic_batch as the trainer's batch dict."""
    rng = SplitMix64(seed)
    f32 = np.float32
    img = np.empty((batch, 3, size, size), dtype=f32)
    rows = []
    for b in range(batch):
        flat = img[b].reshape(-1)
        for i in range(flat.size):
            flat[i] = f32(0.1 + 0.3 * rng.uniform())
        n = min(1 + rng.next() % 4, max_boxes)
        for _ in range(n):
            cls = rng.next() % nc
            w = 0.15 + 0.35 * rng.uniform()
            h = 0.15 + 0.35 * rng.uniform()
            cx = w / 2 + (1 - w) * rng.uniform()
            cy = h / 2 + (1 - h) * rng.uniform()
            rows.append((b, cls, f32(cx), f32(cy), f32(w), f32(h)))
            colour = [f32(0.6 + 0.4 * ((cls >> k) & 1)) for k in range(3)]
            # C's (int) truncates toward zero, as int() does; the bounds come from the doubles
            x0, x1 = int((cx - w / 2) * size), int((cx + w / 2) * size)
            y0, y1 = int((cy - h / 2) * size), int((cy + h / 2) * size)
            for c in range(3):
                img[b, c, max(y0, 0):min(y1, size), max(x0, 0):min(x1, size)] = colour[c]
    lab = torch.tensor([[r[0], r[1], r[2], r[3], r[4], r[5]] for r in rows], dtype=torch.float32)
    return {"img": torch.from_numpy(img), "batch_idx": lab[:, 0].clone(), "cls": lab[:, 1:2].clone(), "bboxes": lab[:, 2:6].clone()}



def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cfg", default="../shared/reference/ultralytics-cfg/yolov8.yaml")
    ap.add_argument("--scale", default="n")
    ap.add_argument("--nc", type=int, default=3)
    ap.add_argument("--imgsz", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--max-boxes", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0, help="the synthetic batch's seed (yolort --seed)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--lr0", type=float, default=mf.LR)
    ap.add_argument("--momentum", type=float, default=mf.MOMENTUM)
    ap.add_argument("--weights-out", help="write the initial state_dict here (safetensors)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (another summation order: how far rounding alone moves the run)")
    ap.add_argument("--double", action="store_true", help="run the step in fp64 (what both fp32 runs approximate)")
    a = ap.parse_args()

    mf.setup_determinism()
    torch.set_num_threads(a.threads)
    model = mf.build_detection_model(a.cfg, a.scale, a.nc)
    if a.weights_out:
        Path(a.weights_out).write_bytes(mf.safetensors_bytes(mf.state(model), {"source": f"ultralytics {mf.ultralytics.__version__}, {a.cfg} scale {a.scale} nc {a.nc}, seed {mf.MODEL_SEED}"}))
    batch = synthetic_batch(a.seed, a.batch, a.imgsz, a.nc, a.max_boxes)
    if a.double:
        model.double()
        batch["img"] = batch["img"].double()
    fake_self = mf.SimpleNamespace(args=mf.get_cfg(), data={"nc": a.nc})
    opt = mf.DetectionTrainer.build_optimizer(fake_self, model, name="SGD", lr=a.lr0, momentum=a.momentum, decay=mf.WEIGHT_DECAY, iterations=1e5)
    for step in range(1, a.steps + 1):
        preds = model(batch["img"])  # a list of levels; v10Detect's a dict of its two heads
        loss, items = model.loss(batch, preds)
        total = loss.sum()
        total.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=mf.MAX_NORM)
        opt.step()
        opt.zero_grad()
        box, cls, dfl = (float(x) for x in items)
        print(json.dumps({"step": step, "loss": box + cls + dfl, "box": box, "cls": cls, "dfl": dfl, "total": float(total), "grad_norm": float(norm)}), flush=True)


if __name__ == "__main__":
    main()
