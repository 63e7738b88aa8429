#!/usr/bin/env python3
# tools/pt_to_safetensors.py — converts PyTorch/Ultralytics weights to and from
# the safetensors files yolocc reads (runtime/weights.c). Owns this conversion
# only; must not touch yolocc's sources or write anywhere but the named outputs.
"""Convert Ultralytics / PyTorch weights to safetensors for yolocc, and back.

Forward (.pt -> .safetensors):

    pt_to_safetensors.py IN.pt OUT.safetensors [--check-against STATE.json]

  IN.pt is either an Ultralytics checkpoint (a dict whose "ema" or "model" entry
  is the pickled DetectionModel, usually FP16; "ema" is preferred when set, as
  Ultralytics' attempt_load_one_weight does), a pickled nn.Module, or a plain
  state_dict (name -> tensor, e.g. torch.save(model.state_dict(), ...)).
  Floating tensors are written as F32, integer ones (num_batches_tracked) as
  I64, with the state_dict keys as names. Unpickling a checkpoint needs the
  `ultralytics` package, so run it with the venv: /opt/ultra/bin/python.

Reverse (.safetensors -> state_dict .pt):

    pt_to_safetensors.py --reverse IN.safetensors OUT.pt [--check-against STATE.json]

  Writes an OrderedDict name -> tensor with torch.save, in the file's data
  order (yolocc's weights_save writes state_dict order). Load it in PyTorch with
  model.load_state_dict(torch.load("OUT.pt")).

--check-against STATE.json compares the tensors with the output of
`yolocc state-dict MODEL.yaml --scale S --nc N --json` ("-" reads stdin):
same names, shapes and order; prints the counts and exits 1 on a difference.

Self-test (builds the real Ultralytics model, round-trips it both ways and,
when a yolocc binary is given, checks every name and shape against it):

    /opt/ultra/bin/python tools/pt_to_safetensors.py --self-test models/yolov8.yaml \
        --scale n --nc 80 --yolocc build/yolocc
"""
import argparse
import collections
import copy
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file


def die(msg):
    print(f"pt_to_safetensors: {msg}", file=sys.stderr)
    sys.exit(1)


def extract_state_dict(obj, where):
    """The name -> tensor mapping inside whatever torch.load returned."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        # Ultralytics checkpoint: the module under "ema" (None after strip_optimizer) or "model"
        for key in ("ema", "model"):
            m = obj.get(key)
            if isinstance(m, torch.nn.Module):
                return m.state_dict()
        if obj and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
            return obj
        if isinstance(obj.get("state_dict"), dict):
            return extract_state_dict(obj["state_dict"], where)
    die(f"{where}: neither an Ultralytics checkpoint, an nn.Module nor a state_dict (got {type(obj).__name__})")


def normalise(sd):
    """fp32 for floating tensors, int64 for integer ones; contiguous copies
    (save_file refuses tensors that share storage)."""
    out = collections.OrderedDict()
    for k, v in sd.items():
        v = v.detach().cpu()
        if v.is_floating_point():
            v = v.float()
        elif v.dtype != torch.bool:
            v = v.long()
        else:
            die(f"{k}: bool tensors are not model state")
        out[k] = v.contiguous().clone()
    return out


def read_header_order(path):
    """Tensor names in data-offset order (the order they were written)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    names = [k for k in header if k != "__metadata__"]
    return sorted(names, key=lambda k: header[k]["data_offsets"][0])


def check_against(tensors, json_path):
    """Compares names, shapes and order with yolocc's state-dict --json."""
    text = sys.stdin.read() if json_path == "-" else open(json_path).read()
    want = [(row[0], list(row[1])) for row in json.loads(text)]
    have = [(k, list(v.shape)) for k, v in tensors.items()]
    want_d, have_d = dict(want), dict(have)
    missing = [k for k, _ in want if k not in have_d]
    extra = [k for k, _ in have if k not in want_d]
    shapes = [k for k, s in want if k in have_d and have_d[k] != s]
    order = [k for k, _ in want] == [k for k, _ in have]
    nbt = [k for k, v in tensors.items() if k.endswith("num_batches_tracked") and (v.dtype != torch.int64 or v.dim() != 0)]
    print(f"check: {len(have)} tensors vs {len(want)} yolocc state entries; "
          f"{len(want) - len(missing) - len(shapes)} names+shapes match, {len(missing)} missing, "
          f"{len(extra)} extra, {len(shapes)} shape mismatches, order {'identical' if order else 'DIFFERENT'}, "
          f"{len(nbt)} bad num_batches_tracked")
    for label, names in (("missing", missing), ("extra", extra), ("shape", shapes), ("num_batches_tracked", nbt)):
        for k in names[:5]:
            print(f"  {label}: {k} {have_d.get(k)} vs {want_d.get(k)}")
    return not (missing or extra or shapes or nbt or not order)


def forward(src, dst):
    obj = torch.load(src, map_location="cpu")
    sd = normalise(extract_state_dict(obj, src))
    save_file(sd, dst, metadata={"format": "pt", "source": os.path.basename(src)})
    nf = sum(v.is_floating_point() for v in sd.values())
    print(f"{src} -> {dst}: {len(sd)} tensors ({nf} F32, {len(sd) - nf} I64), "
          f"{sum(v.numel() for v in sd.values() if v.is_floating_point())} float values")
    return sd


def reverse(src, dst):
    from safetensors import safe_open
    sd = collections.OrderedDict()
    with safe_open(src, framework="pt") as f:
        for k in read_header_order(src):
            sd[k] = f.get_tensor(k)
    torch.save(sd, dst)
    print(f"{src} -> {dst}: {len(sd)} tensors")
    return sd


def same(a, b, ordered=True):
    names_ok = list(a) == list(b) if ordered else sorted(a) == sorted(b)
    return names_ok and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def self_test(yaml_path, scale, nc, yolocc):
    from ultralytics.nn.tasks import DetectionModel, yaml_model_load
    cfg = yaml_model_load(yaml_path)
    if scale:
        cfg["scale"] = scale
    torch.manual_seed(0)
    model = DetectionModel(cfg, ch=3, nc=nc, verbose=False)
    ref = normalise(model.state_dict())
    ok = True
    with tempfile.TemporaryDirectory() as d:
        p = lambda name: os.path.join(d, name)
        # 1. plain state_dict .pt -> safetensors: exact
        torch.save(model.state_dict(), p("sd.pt"))
        got = forward(p("sd.pt"), p("sd.safetensors"))
        ok &= report("state_dict .pt -> safetensors exact", same(got, ref))
        # 2. Ultralytics-style FP16 checkpoint (as the trainer saves it) -> safetensors
        half = copy.deepcopy(model).half()
        torch.save({"epoch": -1, "model": None, "ema": half, "updates": 0, "optimizer": None}, p("ckpt.pt"))
        got = forward(p("ckpt.pt"), p("ckpt.safetensors"))
        want = normalise(half.state_dict())
        ok &= report("FP16 checkpoint (ema) -> safetensors = fp16 values as fp32", same(got, want))
        # 3. safetensors -> .pt -> same tensors (Python's save_file sorts the
        #    names, so only yolocc-written files keep state_dict order)
        back = reverse(p("sd.safetensors"), p("back.pt"))
        ok &= report("safetensors -> .pt round trip exact", same(back, ref, ordered=False))
        loaded = torch.load(p("back.pt"))
        m2 = DetectionModel(cfg, ch=3, nc=nc, verbose=False)
        m2.load_state_dict(loaded, strict=True)
        ok &= report("reverse .pt loads into DetectionModel (strict)", same(normalise(m2.state_dict()), ref))
        if yolocc:
            cmd = [yolocc, "state-dict", yaml_path, "--nc", str(nc), "--json"] + (["--scale", scale] if scale else [])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            with open(p("state.json"), "w") as f:
                f.write(out)
            ok &= report(f"names/shapes/order vs `{' '.join(cmd)}`", check_against(ref, p("state.json")))
    print("self-test", "passed" if ok else "FAILED")
    return ok


def report(what, ok):
    print(f"  [{'ok' if ok else 'FAIL'}] {what}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input", nargs="?")
    ap.add_argument("output", nargs="?")
    ap.add_argument("--reverse", action="store_true", help="safetensors -> state_dict .pt")
    ap.add_argument("--check-against", metavar="JSON", help="yolocc state-dict --json output to compare with ('-': stdin)")
    ap.add_argument("--self-test", metavar="MODEL_YAML", help="build the Ultralytics model and test the conversion")
    ap.add_argument("--scale", help="self-test: model scale")
    ap.add_argument("--nc", type=int, default=80, help="self-test: number of classes (80)")
    ap.add_argument("--yolocc", help="self-test: yolocc binary whose state-dict to compare with")
    a = ap.parse_args()
    if a.self_test:
        sys.exit(0 if self_test(a.self_test, a.scale, a.nc, a.yolocc) else 1)
    if not a.input or not a.output:
        ap.error("INPUT and OUTPUT are required")
    sd = reverse(a.input, a.output) if a.reverse else forward(a.input, a.output)
    if a.check_against and not check_against(sd, a.check_against):
        sys.exit(1)


if __name__ == "__main__":
    main()
