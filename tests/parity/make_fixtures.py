#!/usr/bin/env python3
"""Training-step parity fixtures from the real Ultralytics package, for yolocc's C tests.

For each of the two tiny models in this folder (v8tiny.yaml, v11tiny.yaml) this builds
`ultralytics.nn.tasks.DetectionModel(cfg, ch=3, nc=3)` as the trainer does, runs the
detection training step exactly as `ultralytics/engine/trainer.py` (8.3.253) runs it
(FP32, no AMP, no EMA, no warmup, one optimizer step per batch) and writes every
intermediate a C implementation must reproduce to `tests/parity/<model>.safetensors`:

  init/<key>          initial state_dict (parameters and buffers; fp32,
                      num_batches_tracked int64)
  input/images        (2, 3, 64, 64) fp32 in [0, 1) (already "/255"-normalised)
  targets/batch_idx   (4,) fp32   image index of each label (0, 0, 0, 1)
  targets/cls         (4, 1) fp32 class of each label
  targets/bboxes      (4, 4) fp32 normalised cx, cy, w, h
  out/level0..1       training-mode Detect outputs at the initial weights,
                      (2, 64 + 3, H_i, W_i), i.e. cat(box logits, class logits)
  loss/items          (3,) box, cls, dfl as the trainer logs them (gains applied,
                      NOT multiplied by the batch size)
  loss/total          () the scalar the trainer calls backward() on:
                      (loss_items * batch_size).sum()
  grad/<param>        d loss/total / d param at the initial weights, raw (before
                      clipping); every parameter except the frozen DFL weight
  steploss/items      (3, 3) loss items of training steps 1, 2, 3 (row = step)
  steploss/total      (3,) loss/total of steps 1, 2, 3
  steploss/grad_norm  (3,) total gradient norm returned by clip_grad_norm_ in each step
  step1/<key>         state_dict after optimizer step 1
  step3/<key>         state_dict after optimizer step 3
  empty/loss_items    (3,) loss items at the initial weights with no labels at all
  empty/loss_total    ()
  empty/grad/<param>  gradients for that empty-label batch (same images)

Run from the repository root:

    /opt/ultra/bin/python tests/parity/make_fixtures.py

/opt/ultra is the venv described in tools/ultralytics_reference.py (ultralytics 8.3.253,
Debian's CPU torch 1.13), plus `pip install safetensors` (used only to verify the
files; they are written by hand). See tests/parity/README.md for the semantics.
"""

import argparse
import copy
import hashlib
import json
import os
import struct
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

os.environ["YOLO_OFFLINE"] = "true"
os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(tempfile.gettempdir(), "yolocc-ultralytics-config"))
os.makedirs(os.environ["YOLO_CONFIG_DIR"], exist_ok=True)
os.environ["YOLO_VERBOSE"] = "false"
os.environ.setdefault("YOLO_AUTOINSTALL", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ultralytics  # noqa: E402
from ultralytics.cfg import get_cfg  # noqa: E402
from ultralytics.engine.trainer import BaseTrainer  # noqa: E402
from ultralytics.models.yolo.detect import DetectionTrainer  # noqa: E402
from ultralytics.nn.tasks import DetectionModel, yaml_model_load  # noqa: E402

HERE = Path(__file__).resolve().parent

IMGSZ = 64
BATCH = 2
NC = 3
LR = 0.01
MOMENTUM = 0.937
# The trainer passes decay = weight_decay * batch * accumulate / nbs. For batch 2,
# accumulate = max(round(64 / 2), 1) = 32, so the scaled value is 5e-4 * 2 * 32 / 64
# = 5e-4: the value used here is the one the trainer would compute for batch 2.
WEIGHT_DECAY = 5e-4
MAX_NORM = 10.0
STEPS = 3
MODEL_SEED = 0
IMAGE_SEED = 1

# (batch_idx, cls, cx, cy, w, h); all multiples of 1/32 so that the pixel boxes
# (x 64) are exact in fp32. Image 0 has 3 boxes, image 1 has 1; all fully inside.
LABELS = [
    (0, 0, 10 / 32, 11 / 32, 10 / 32, 12 / 32),
    (0, 2, 22 / 32, 19 / 32, 12 / 32, 10 / 32),
    (0, 1, 16 / 32, 24 / 32, 6 / 32, 8 / 32),
    (1, 1, 15 / 32, 16 / 32, 16 / 32, 14 / 32),
]

# model name -> (yaml file, scale). v11tiny has a one-entry `scales` mapping and is
# built with scale "n" (see v11tiny.yaml for why). v8tiny has no `scales`:
# yaml_model_load gives it scale "" exactly as YOLO("v8tiny.yaml") would.
MODELS = {
    "v8tiny": ("v8tiny.yaml", None),
    "v11tiny": ("v11tiny.yaml", "n"),
    "v10tiny": ("v10tiny.yaml", None),
}

TOTAL_NOTE = (
    "loss/total = (loss_items * batch_size).sum() = batch_size * (box + cls + dfl), where "
    "loss_items = (7.5*L_box, 0.5*L_cls, 1.5*L_dfl) as logged by the trainer; this is "
    "trainer.loss (self.loss = loss.sum(); no world_size factor outside DDP), the tensor "
    "backward() is called on"
)


def setup_determinism():
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set (second in-process run)
    torch.use_deterministic_algorithms(True)


def build_model(name):
    path, scale = MODELS[name]
    return build_detection_model(HERE / path, scale, NC)


def build_detection_model(cfg_path, scale, nc):
    """Build the model as DetectionTrainer.get_model does (DetectionModel(cfg, nc, ch));
    scale None or "": the one yaml_model_load guesses from the file name."""
    cfg = yaml_model_load(cfg_path)
    if scale:
        cfg["scale"] = scale
    torch.manual_seed(MODEL_SEED)
    model = DetectionModel(cfg, ch=3, nc=nc, verbose=False)
    # trainer.set_model_attributes()
    model.nc = nc
    model.names = {i: f"{i}" for i in range(nc)}
    model.args = get_cfg()  # defaults: box 7.5, cls 0.5, dfl 1.5
    assert (model.args.box, model.args.cls, model.args.dfl) == (7.5, 0.5, 1.5)
    # trainer._setup_train(): freeze ".dfl", make everything else trainable
    for k, v in model.named_parameters():
        if ".dfl" in k:
            v.requires_grad = False
        elif not v.requires_grad and v.dtype.is_floating_point:
            v.requires_grad = True
    model.train()
    return model


def make_batch(empty=False):
    g = torch.Generator().manual_seed(IMAGE_SEED)
    img = torch.rand(BATCH, 3, IMGSZ, IMGSZ, generator=g, dtype=torch.float32)
    lab = torch.tensor(LABELS, dtype=torch.float32)
    if empty:
        lab = lab[:0]
    return {
        "img": img,
        "batch_idx": lab[:, 0].clone(),
        "cls": lab[:, 1:2].clone(),
        "bboxes": lab[:, 2:6].clone(),
    }


def build_optimizer(model):
    """Call the trainer's own build_optimizer (unbound; it only reads self.args for 'auto')."""
    fake_self = SimpleNamespace(args=get_cfg(), data={"nc": NC})
    opt = DetectionTrainer.build_optimizer(
        fake_self, model, name="SGD", lr=LR, momentum=MOMENTUM, decay=WEIGHT_DECAY, iterations=1e5
    )
    assert DetectionTrainer.build_optimizer is BaseTrainer.build_optimizer
    return opt


def state(model):
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().clone()
        if k.endswith("num_batches_tracked"):
            assert v.dtype == torch.int64
        else:
            assert v.dtype == torch.float32, k
        out[k] = v
    return out


def train_forward(model, batch):
    """Trainer forward: loss, loss_items = model(batch); self.loss = loss.sum()."""
    preds = model(batch["img"])  # training mode: list of per-level Detect outputs
    # v10Detect: {"one2many": levels, "one2one": levels}; out/level* holds both, in that order
    levels = preds["one2many"] + preds["one2one"] if isinstance(preds, dict) else preds
    assert isinstance(levels, list)
    outs = [p.detach().clone() for p in levels]
    loss, items = model.loss(batch, preds)  # == model(batch) (DetectionModel.loss)
    total = loss.sum()
    return outs, items.detach().clone(), total


def capture_assigner(model):
    """Record the assigner's inputs of every loss evaluation (for the robustness check)."""
    if getattr(model, "criterion", None) is None:
        model.criterion = model.init_criterion()
    calls = []
    for assigner in assigners(model):
        orig = assigner.forward

        def forward(*args, orig=orig):
            calls.append((orig.__self__, tuple(a.detach().clone() for a in args)))
            return orig(*args)

        assigner.forward = forward
    return calls


def assigners(model):
    """The loss' task-aligned assigners: E2EDetectLoss has two (topk 10 and 1)."""
    c = model.criterion
    return [c.one2many.assigner, c.one2one.assigner] if hasattr(c, "one2one") else [c.assigner]


def assignment_robustness(assigner, inputs, trials=16, score_rel=1e-4, box_abs=1e-3):
    """The task-aligned assignment must not sit on a knife edge: perturbing the
    predicted scores by a relative 1e-4 and the predicted boxes by 1e-3 pixel
    (far above FP32 differences between two implementations) must leave every
    positive anchor with a non-zero weight, its GT index and (to 1e-2 relative)
    its target score unchanged. Otherwise a C implementation could legitimately
    pick another assignment and the fixture would be useless after step 1."""
    pd_scores, pd_bboxes, anc, gt_labels, gt_bboxes, mask_gt = inputs
    ref = type(assigner).forward(assigner, *inputs)
    _, _, ts0, fg0, idx0 = ref
    w0 = ts0.sum(-1)
    key0 = fg0 & (w0 > 0)
    g = torch.Generator().manual_seed(1234)
    for _ in range(trials):
        s = pd_scores * (1 + score_rel * (2 * torch.rand(pd_scores.shape, generator=g) - 1))
        b = pd_bboxes + box_abs * (2 * torch.rand(pd_bboxes.shape, generator=g) - 1)
        _, _, ts, fg, idx = type(assigner).forward(assigner, s, b, anc, gt_labels, gt_bboxes, mask_gt)
        w = ts.sum(-1)
        key = fg & (w > 0)
        assert torch.equal(key, key0), "assignment flips under a tiny perturbation"
        assert torch.equal(idx[key0], idx0[key0]), "GT index flips under a tiny perturbation"
        assert torch.allclose(w[key0], w0[key0], rtol=1e-2, atol=0), "target scores unstable"
    return {"fg": int(fg0.sum()), "weighted_fg": int(key0.sum())}


def grads(model):
    out = {}
    for k, p in model.named_parameters():
        if not p.requires_grad:
            assert ".dfl" in k and p.grad is None, k
            continue
        assert p.grad is not None, k
        out[k] = p.grad.detach().clone()
    return out


def run_model(name):
    model = build_model(name)
    init = state(model)
    model_empty = copy.deepcopy(model)  # same initial weights and buffers
    batch = make_batch()
    T = {}
    for k, v in init.items():
        T[f"init/{k}"] = v
    T["input/images"] = batch["img"]
    T["targets/batch_idx"] = batch["batch_idx"]
    T["targets/cls"] = batch["cls"]
    T["targets/bboxes"] = batch["bboxes"]

    opt = build_optimizer(model)
    pid = {id(p): k for k, p in model.named_parameters()}
    groups = [[pid[id(p)] for p in g["params"]] for g in opt.param_groups]
    group_info = [
        {"weight_decay": g["weight_decay"], "lr": g["lr"], "momentum": g["momentum"], "nesterov": g["nesterov"],
         "dampening": g["dampening"], "count": len(g["params"])}
        for g in opt.param_groups
    ]
    assert len(groups) == 3
    assert all("bias" in k for k in groups[0])
    assert [gi["weight_decay"] for gi in group_info] == [0.0, WEIGHT_DECAY, 0.0]

    captured = capture_assigner(model)
    step_items, step_total, step_norm = [], [], []
    for step in range(1, STEPS + 1):
        outs, items, total = train_forward(model, batch)
        total.backward()
        if step == 1:
            for i, o in enumerate(outs):
                T[f"out/level{i}"] = o
            T["loss/items"] = items
            T["loss/total"] = total.detach().clone()
            g1 = grads(model)
            for k, v in g1.items():
                T[f"grad/{k}"] = v
        # trainer.optimizer_step(): scaler.unscale_ (no-op, AMP off), clip, step, zero_grad
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=MAX_NORM)
        opt.step()
        opt.zero_grad()
        step_items.append(items)
        step_total.append(total.detach().clone())
        step_norm.append(norm.detach().clone().float())
        if step == 1:
            s1 = state(model)
            for k, v in s1.items():
                T[f"step1/{k}"] = v
        if step == STEPS:
            s3 = state(model)
            for k, v in s3.items():
                T[f"step3/{k}"] = v
    T["steploss/items"] = torch.stack(step_items)
    T["steploss/total"] = torch.stack(step_total)
    T["steploss/grad_norm"] = torch.stack(step_norm)

    # Empty target set at the initial weights.
    eb = make_batch(empty=True)
    assert torch.equal(eb["img"], batch["img"])
    _, e_items, e_total = train_forward(model_empty, eb)
    e_total.backward()
    ge = grads(model_empty)
    T["empty/loss_items"] = e_items
    T["empty/loss_total"] = e_total.detach().clone()
    for k, v in ge.items():
        T[f"empty/grad/{k}"] = v

    # An end-to-end head's validation at the weights after step 3 (eval mode:
    # the running statistics of step3/): v10Detect's output after its own top-k selection
    # (`eval/pred`, [B, min(300, anchors), 6]: x1 y1 x2 y2 score class), the
    # one2one boxes decoded before it (`eval/decoded`, [B, 4 + nc, anchors]),
    # and E2EDetectLoss on both heads' levels (`eval/loss_items`).
    if getattr(model, "end2end", False):
        model_eval = copy.deepcopy(model).eval()  # the weights and BN statistics after step 3
        model_eval.criterion = model_eval.init_criterion()  # not the copy's hooked assigners
        with torch.no_grad():
            head = model_eval.model[-1]
            captured_decoded = []
            orig_inference = head._inference

            def inference(x):
                y = orig_inference(x)
                captured_decoded.append(y.clone())
                return y

            head._inference = inference
            y, raw = model_eval(batch["img"])
            _, v_items = model_eval.loss(batch, (y, raw))
        assert len(captured_decoded) == 1
        T["eval/decoded"] = captured_decoded[0]
        T["eval/pred"] = y
        T["eval/loss_items"] = v_items

    # ---- sanity checks ----
    totals = [float(t) for t in step_total]
    # Not strictly monotone (see README: with target_scores_sum < 1 the loss is not
    # normalised and grows with the IoU of the positives), but a later step is lower.
    assert min(totals[1:]) < totals[0], f"{name}: loss does not fall in {STEPS} steps: {totals}"
    for k, v in g1.items():
        assert torch.isfinite(v).all(), k
        # the one2one loss (topk 1) gives each GT one anchor: a level none of
        # them lies on has no box or DFL term, so its one2one box branch no gradient
        assert v.abs().sum() > 0 or ".one2one_cv2." in k, f"{name}: zero grad {k}"
    for k, v in ge.items():
        assert torch.isfinite(v).all(), k
    # total is exactly batch_size * sum(items) (the *2 is exact; 3-term sum in order)
    it = T["loss/items"]
    assert float(T["loss/total"]) == float(((it * BATCH).sum())), "total formula"
    assert float(e_items[0]) == 0.0 and float(e_items[2]) == 0.0 and float(e_items[1]) > 0
    dfl = [k for k in init if ".dfl." in k]
    assert dfl == [f"model.{len(model.model) - 1}.dfl.conv.weight"], dfl
    for st in (init, s1, s3):
        assert torch.equal(st[dfl[0]].flatten(), torch.arange(16, dtype=torch.float32))
    assert dfl[0] not in g1 and dfl[0] not in ge
    for k in init:
        if k.endswith("running_var"):
            assert not torch.equal(init[k], s1[k]), f"running_var unchanged: {k}"
            assert torch.all(init[k] == 1.0), f"{k}: initial running_var is not 1.0"
        if k.endswith("running_mean"):
            assert torch.all(init[k] == 0.0), k
        if k.endswith("num_batches_tracked"):
            assert int(init[k]) == 0 and int(s1[k]) == 1 and int(s3[k]) == 3, k
    # the class branch of the empty batch gets gradients; the box branch gets zeros
    det = len(model.model) - 1
    for k, v in ge.items():
        if k.startswith((f"model.{det}.cv2.", f"model.{det}.one2one_cv2.")):
            assert v.abs().sum() == 0, k
        elif k.startswith((f"model.{det}.cv3.", f"model.{det}.one2one_cv3.")):
            assert v.abs().sum() > 0, k

    assert len(captured) == STEPS * len(assigners(model))
    margins = [assignment_robustness(a, c) for a, c in captured]

    nparams = sum(p.numel() for p in model.parameters())
    info = {
        "fg": [m["fg"] for m in margins],
        "weighted_fg": [m["weighted_fg"] for m in margins],
        "params": nparams,
        "state_keys": len(init),
        "param_tensors": sum(1 for _ in model.parameters()),
        "groups": groups,
        "group_info": group_info,
        "legacy_head": bool(model.model[-1].legacy),
        "end2end": bool(getattr(model, "end2end", False)),
        "stride": [float(s) for s in model.stride],
        "items": [[float(x) for x in r] for r in T["steploss/items"]],
        "totals": totals,
        "grad_norms": [float(x) for x in step_norm],
        "empty_items": [float(x) for x in e_items],
        "empty_total": float(e_total),
    }
    return T, info


# ---------------- safetensors writer (by hand; deterministic) ----------------

DTYPES = {torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8")}


def safetensors_bytes(tensors, metadata):
    header = {"__metadata__": {k: str(v) for k, v in sorted(metadata.items())}}
    blobs, off = [], 0
    # Data order as the safetensors library lays it out: larger element size first
    # (I64 before F32), then by name, so every tensor is naturally aligned.
    for name in sorted(tensors, key=lambda n: (-tensors[n].element_size(), n)):
        t = tensors[name].detach().contiguous()
        dt, npdt = DTYPES[t.dtype]
        b = t.numpy().astype(npdt, copy=False).tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":"), sort_keys=False).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def metadata_for(name, info):
    path, scale = MODELS[name]
    g = info["groups"]
    return {
        "format": "yolocc parity fixture v1",
        "model": name,
        "model_yaml": f"tests/parity/{path}",
        "model_scale": scale if scale is not None else "",
        "ultralytics": ultralytics.__version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "imgsz": IMGSZ,
        "batch": BATCH,
        "nc": NC,
        "params": info["params"],
        "stride": json.dumps(info["stride"]),
        "legacy_head": str(info["legacy_head"]).lower(),
        **({"end2end": "true"} if info["end2end"] else {}),
        "optimizer": "SGD(nesterov=True, dampening=0) built by BaseTrainer.build_optimizer(name='SGD')",
        "lr": LR,
        "momentum": MOMENTUM,
        "weight_decay": WEIGHT_DECAY,
        "weight_decay_note": "passed unscaled as decay; equals the trainer's weight_decay*batch*accumulate/nbs "
        "for batch 2 (accumulate 32, nbs 64)",
        "max_norm": MAX_NORM,
        "steps": STEPS,
        "step_recipe": "per step: train-mode forward, loss, total.backward(), clip_grad_norm_(all params, 10.0), "
        "optimizer.step(), zero_grad(); same batch every step; no AMP/EMA/warmup; lr constant",
        "seeds": f"torch.manual_seed({MODEL_SEED}) before DetectionModel(); images "
        f"torch.rand(2,3,64,64, generator=Generator().manual_seed({IMAGE_SEED}))",
        "loss_gains": "box 7.5, cls 0.5, dfl 1.5",
        "total_note": TOTAL_NOTE,
        "grad_note": "raw gradients of loss/total (before clipping); frozen DFL weight has none",
        "empty_note": "empty/*: same images, no labels, fresh copy of the initial model",
        "param_groups": json.dumps(
            {"0_bias_no_decay": g[0], "1_weight_decay": g[1], "2_norm_weight_no_decay": g[2]},
            separators=(",", ":"),
        ),
        "param_group_counts": json.dumps([len(x) for x in g]),
        "fg_anchors_per_step": json.dumps(info["fg"]),
        "weighted_fg_anchors_per_step": json.dumps(info["weighted_fg"]),
        "assignment_check": "per step, the assignment is unchanged when predicted scores are perturbed by 1e-4 "
        "relative and predicted boxes by 1e-3 px (16 draws)",
    }


def verify_file(path, tensors, metadata):
    try:
        from safetensors import safe_open
    except ImportError:
        print("  (safetensors not installed: skipped reading back)")
        return
    with safe_open(str(path), framework="np") as f:
        assert f.metadata() == {k: str(v) for k, v in metadata.items()}
        keys = set(f.keys())
        assert keys == set(tensors), keys ^ set(tensors)
        for k in keys:
            a = f.get_tensor(k)
            assert np.array_equal(a, tensors[k].numpy()), k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(HERE), help="output folder (default: tests/parity)")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--no-repeat", action="store_true", help="skip the in-process determinism re-run")
    args = ap.parse_args()
    setup_determinism()
    names = [n for n in MODELS if not args.only or n in args.only.split(",")]
    for name in names:
        T, info = run_model(name)
        meta = metadata_for(name, info)
        data = safetensors_bytes(T, meta)
        if not args.no_repeat:
            T2, info2 = run_model(name)
            data2 = safetensors_bytes(T2, metadata_for(name, info2))
            assert data == data2, f"{name}: second in-process run differs"
        path = Path(args.out) / f"{name}.safetensors"
        path.write_bytes(data)
        verify_file(path, T, meta)
        mb = len(data) / 1e6
        assert mb < 7, f"{path} is {mb:.2f} MB"
        print(f"{name}: {path} {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}")
        print(f"  params {info['params']} ({info['param_tensors']} tensors), state keys {info['state_keys']}, "
              f"stride {info['stride']}, legacy head {info['legacy_head']}")
        print(f"  groups (bias/no decay, weight/decay, norm weight/no decay): {[len(g) for g in info['groups']]}")
        for i, (it, tot, gn) in enumerate(zip(info["items"], info["totals"], info["grad_norms"]), 1):
            print(f"  step {i}: items box {it[0]:.6f} cls {it[1]:.6f} dfl {it[2]:.6f}  total {tot:.6f}  "
                  f"grad norm {gn:.4f}")
        print(f"  fg anchors per step {info['fg']}, with non-zero weight {info['weighted_fg']}")
        print(f"  empty: items {info['empty_items']} total {info['empty_total']:.6f}")


if __name__ == "__main__":
    main()
