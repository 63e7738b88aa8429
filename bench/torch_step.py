#!/usr/bin/env python3
# bench/torch_step.py — the PyTorch side of bench/gpu.sh: the training step of the real Ultralytics
# DetectionModel (its v8DetectionLoss, SGD as Ultralytics builds it) on one synthetic batch, timed.
# Owns no yolocc code and never writes bench/RESULTS.md (gpu.sh does). Needs torch and ultralytics.
"""Times Ultralytics' YOLOv8 training step in PyTorch, one JSON line per (model, batch, mode).

The step is what Ultralytics' trainer does per batch, less the EMA update
(a yolocc plan's step has none either): forward of batch["img"], the
detection loss (model.loss with the batch dict of img, cls, bboxes,
batch_idx), backward, gradient clipping at norm 10, SGD (lr 0.01, momentum
0.937, nesterov, weight decay 5e-4 on conv/linear weights only, as
BaseTrainer.build_optimizer makes the three groups), zero_grad.

Modes (CUDA): eager_amp (torch.autocast bf16, channels_last model and
input) and compile_amp (the same with the model's forward through
torch.compile; the loss stays eager, as its assigner has data-dependent
shapes). On the CPU (--device cpu): eager_fp32_cpu, a smoke test (and
compile_fp32_cpu when --modes names compile: a check that the model traces).

Each step is timed on the host between torch.cuda.synchronize() calls;
warm-up steps are not timed (for compile_amp their time, which includes
compilation, is reported as compile_s). peak_bytes is
torch.cuda.max_memory_allocated over the timed steps (stats reset after the
warm-up, so parameters, gradients, optimizer state and the step's
activations are all in it); reserved_bytes is max_memory_reserved.
"""
import argparse
import contextlib
import gc
import json
import math
import os
import resource
import sys
import tempfile
import time


def fail(msg, code=2):
    print("torch_step.py: error: " + msg, file=sys.stderr)
    sys.exit(code)


def synthetic_batch(torch, batch, imgsz, nc, boxes, seed, device):
    """Random images in [0, 1] and `boxes` random boxes per image (class,
    normalised cx, cy, w, h inside the image), in Ultralytics' batch layout."""
    g = torch.Generator().manual_seed(seed)
    img = torch.rand(batch, 3, imgsz, imgsz, generator=g)
    n = batch * boxes
    wh = 0.05 + 0.25 * torch.rand(n, 2, generator=g)
    c = wh / 2 + (1 - wh) * torch.rand(n, 2, generator=g)
    cls = torch.randint(0, nc, (n, 1), generator=g).float()
    idx = torch.arange(batch).repeat_interleave(boxes).float()
    return {"img": img.to(device), "cls": cls.to(device), "bboxes": torch.cat([c, wh], 1).to(device), "batch_idx": idx.to(device)}


def build_optimizer(torch, model, lr, momentum, decay):
    """BaseTrainer.build_optimizer's SGD: biases, norm weights, other weights."""
    g = [], [], []
    bn = tuple(v for k, v in torch.nn.__dict__.items() if "Norm" in k)
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            fullname = f"{module_name}.{param_name}" if module_name else param_name
            if "bias" in fullname:
                g[2].append(param)
            elif isinstance(module, bn):
                g[1].append(param)
            else:
                g[0].append(param)
    opt = torch.optim.SGD(g[2], lr=lr, momentum=momentum, nesterov=True)
    opt.add_param_group({"params": g[0], "weight_decay": decay})
    opt.add_param_group({"params": g[1], "weight_decay": 0.0})
    return opt


def run_one(torch, mods, a, model_name, batch, mode):
    DetectionModel, get_cfg = mods
    cuda = a.device != "cpu"
    device = torch.device(a.device)
    torch.manual_seed(a.seed)
    model = DetectionModel(f"{model_name}.yaml", nc=a.nc, verbose=False)
    model.args = get_cfg()  # the trainer's hyper-parameters (box 7.5, cls 0.5, dfl 1.5), as BaseTrainer sets them
    model = model.to(device).train()
    data = synthetic_batch(torch, batch, a.imgsz, a.nc, a.boxes, a.seed, device)
    if cuda:
        model = model.to(memory_format=torch.channels_last)
        data["img"] = data["img"].contiguous(memory_format=torch.channels_last)
    opt = build_optimizer(torch, model, a.lr, a.momentum, a.weight_decay)
    fwd = model
    if mode.startswith("compile"):
        torch._dynamo.reset()  # each configuration compiles afresh, for its own static shapes
        fwd = torch.compile(model, dynamic=False)
    amp = cuda

    def step():
        # no autocast context at all off CUDA: a CPU-only torch fails even to build a disabled CUDA one
        with torch.autocast("cuda", dtype=torch.bfloat16) if amp else contextlib.nullcontext():
            preds = fwd(data["img"])
            loss, items = model.loss(data, preds)
        loss.sum().backward()  # as BaseTrainer: newer Ultralytics returns the three terms, older their sum
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
        opt.step()
        opt.zero_grad()
        return items

    def sync():
        if cuda:
            torch.cuda.synchronize()

    sync()
    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    warm_s = time.perf_counter() - t0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    items = None
    for _ in range(a.steps):
        sync()
        t = time.perf_counter()
        items = step()
        sync()
        times.append(time.perf_counter() - t)
    times.sort()
    k = len(times)
    med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
    loss = float(items.float().sum()) if items is not None else float("nan")
    row = {
        "model": model_name, "imgsz": a.imgsz, "batch": batch, "mode": mode,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "steps": a.steps, "warmup": a.warmup,
        "median_ms": 1e3 * med, "min_ms": 1e3 * times[0], "max_ms": 1e3 * times[-1],
        "images_per_s": batch / med,
        "loss": loss if math.isfinite(loss) else None,
        "boxes_per_image": a.boxes,
        "torch": torch.__version__,
    }
    if cuda:
        row["peak_bytes"] = int(torch.cuda.max_memory_allocated(device))
        row["reserved_bytes"] = int(torch.cuda.max_memory_reserved(device))
        row["peak_kind"] = "torch.cuda.max_memory_allocated over the timed steps"
    else:
        row["peak_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        row["peak_kind"] = "process peak resident set (getrusage)"
    if mode.startswith("compile"):
        row["compile_s"] = warm_s  # the warm-up steps, compilation included
    else:
        row["warmup_s"] = warm_s
    del model, fwd, opt, data
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    p.add_argument("--models", default="yolov8n,yolov8s", help="Ultralytics model YAML names without .yaml")
    p.add_argument("--batches", default="16,64")
    p.add_argument("--imgsz", type=int, default=640)
    p.add_argument("--batch", type=int, help="one batch size (overrides --batches)")
    p.add_argument("--modes", help="eager and/or compile (default both on CUDA; eager alone on the CPU, "
                   "where an explicit compile adds compile_fp32_cpu, a check that the model traces)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--nc", type=int, default=80)
    p.add_argument("--boxes", type=int, default=4, help="boxes per image (4: yolocc's synthetic batch has 1 to 4, and "
                   "Ultralytics pads every image's targets to the batch's largest count, so the loss costs as for 4)")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.937)
    p.add_argument("--weight-decay", type=float, default=5e-4)
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.imgsz < 32 or a.imgsz % 32:
        fail("--steps must be >= 1, --warmup >= 0 and --imgsz a multiple of 32")
    # ultralytics checks connectivity at import and writes a settings file: neither is wanted here
    os.environ.setdefault("YOLO_OFFLINE", "True")
    os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(tempfile.gettempdir(), "yolocc-bench-ultralytics"))
    os.environ.setdefault("YOLO_VERBOSE", "False")  # its banners go to stdout, where the JSON lines go
    try:
        import torch
    except ImportError as e:
        fail(f"cannot import torch ({e})")
    try:
        from ultralytics.cfg import get_cfg
        from ultralytics.nn.tasks import DetectionModel
    except ImportError as e:
        fail(f"cannot import ultralytics ({e}); on the GPU machine bench/gpu.sh installs the wheels carried in .whl/ (see bench/GPU.md)")
    cuda = a.device != "cpu"
    if cuda and not torch.cuda.is_available():
        fail(f"--device {a.device}: torch {torch.__version__} sees no CUDA device (use --device cpu for the smoke test)", 1)
    if cuda:
        torch.backends.cudnn.benchmark = True  # as Ultralytics' trainer leaves it for fixed-size batches
    modes = [m.strip() for m in (a.modes or ("eager,compile" if cuda else "eager")).split(",") if m.strip()]
    for m in modes:
        if m not in ("eager", "compile"):
            fail(f"unknown mode '{m}' (eager, compile)")
    modes = [m + ("_amp" if cuda else "_fp32_cpu") for m in modes]
    batches = [a.batch] if a.batch else [int(b) for b in a.batches.split(",")]
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    for mode in modes:  # all eager rows first: compilation is the slow part
        for batch in batches:  # batch outer: gpu.sh passes 64 first, the batch the target is about
            for model_name in models:
                try:
                    row = run_one(torch, (DetectionModel, get_cfg), a, model_name, batch, mode)
                except Exception as e:  # one configuration's failure (out of memory, a compile error) is its row
                    msg = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                    row = {"model": model_name, "imgsz": a.imgsz, "batch": batch, "mode": mode, "error": msg}
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
