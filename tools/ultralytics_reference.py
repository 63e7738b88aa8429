#!/usr/bin/env python3
"""Ground-truth model summaries from the real Ultralytics package, for yolocc's tests.

For every in-scope YAML of the compatibility corpus and every scale in its
`scales` mapping (or the single implicit scale when it has none), this builds
`ultralytics.nn.tasks.DetectionModel(cfg, ch=3, nc=NC, verbose=False)` exactly as
`YOLO("yolov8n.yaml")` would (the YAML loaded with `yaml_model_load`, then
`cfg["scale"] = <letter>`), and records what Ultralytics reports about it:

  * layers      len(list(model.modules()))           (the 8.3.63 summary convention)
  * leaf_layers number of modules without children     (the later 8.3.x / 8.4 convention)
  * parameters / gradients (numel of all / of requires_grad parameters)
  * gflops      raw float of ultralytics.utils.torch_utils.get_flops(model, imgsz)
  * gflops_printed  f"{gflops:.1f}", as model_info prints it
  * summary_line    the summary line Ultralytics' own model_info prints for it
  * stride, save
  * rows        the parse_model table (i, from, n, params, module, args), parsed from
                the text parse_model logs with verbose=True (args = printed string,
                right padding stripped)
  * state_dict  [key, shape] for every state_dict entry, in order (first scale of each
                file, nc=80 only)

plus a few extra cases (nc=3 / nc=64 for yolov8n and yolo11n -- the `c2 == nc`
quirk -- and yolov8n at imgsz 320).  No YAML content is copied into the output,
only file names.

Out of scope (skipped): rtdetr-*.yaml, yolov8-rtdetr.yaml, yolo26.yaml,
yolov12_sunsmarterjie.yaml.

Setup (Debian bookworm; Debian's CPU torch 1.13 -- do not pip-install torch):

    apt-get update
    apt-get install -y python3-venv python3-pip python3-torch python3-torchvision \\
        python3-opencv python3-scipy python3-matplotlib python3-pandas python3-yaml \\
        python3-tqdm python3-psutil python3-requests python3-pil python3-seaborn
    /usr/bin/python3 -m venv --system-site-packages /opt/ultra
    /opt/ultra/bin/pip install --no-deps ultralytics==8.3.253 ultralytics-thop==2.0.15 py-cpuinfo

  ultralytics-thop is pinned on purpose: GFLOPs depend on the thop version.
  2.0.15 is the last release whose rules match ultralytics-semantics.md §9
  (nn.Upsample nearest = 1 op per output element, ConvTranspose2d counted with the
  Conv2d formula).  2.0.16+ count ConvTranspose2d as in_numel*(Cout/g)*k^2 (changes
  yolov6 only); 2.1.x/2.2.x count nearest Upsample as 0 and add functional hooks.
  (8.3.253's metadata asks for thop>=2.0.18; --no-deps lets the pin stand, and
  get_flops only uses thop.profile.)

  Cross-check venv (same commands, other version):
    /usr/bin/python3 -m venv --system-site-packages /opt/ultra63
    /opt/ultra63/bin/pip install --no-deps ultralytics==8.3.63 ultralytics-thop==2.0.15 py-cpuinfo

Run (from the repository root; takes a few minutes on 2 cores):

    /opt/ultra/bin/python tools/ultralytics_reference.py \\
        /work/shared/reference/ultralytics-cfg tests/fixtures/ultralytics_summaries.json

Options: --only NAME[,NAME...] restricts to those YAML basenames (for quick checks).
"""

import argparse
import ast
import copy
import json
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

# No network, no settings file in $HOME, INFO-level logging (needed for the parse_model table).
os.environ["YOLO_OFFLINE"] = "true"
os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(tempfile.gettempdir(), "yolocc-ultralytics-config"))
os.makedirs(os.environ["YOLO_CONFIG_DIR"], exist_ok=True)
os.environ["YOLO_VERBOSE"] = "true"
os.environ.setdefault("YOLO_AUTOINSTALL", "false")

import torch  # noqa: E402

import ultralytics  # noqa: E402
from ultralytics.nn import tasks  # noqa: E402
from ultralytics.nn.modules import Conv  # noqa: E402
from ultralytics.utils import LOGGER  # noqa: E402
from ultralytics.utils.torch_utils import get_flops, model_info  # noqa: E402

OUT_OF_SCOPE = {"yolov8-rtdetr.yaml", "yolo26.yaml", "yolov12_sunsmarterjie.yaml"}

# Extra cases: (file, scale, nc, imgsz)
EXTRA_CASES = [
    ("yolov8.yaml", "n", 3, 640),
    ("yolov8.yaml", "n", 64, 640),
    ("yolo11.yaml", "n", 3, 640),
    ("yolo11.yaml", "n", 64, 640),
    ("yolov8.yaml", "n", 80, 320),
]

# parse_model prints f"{i:>3}{f!s:>20}{n_:>3}{np:10.0f}  {type:<45}{args!s:<30}"; a long `from` list
# (yolov9e CBFuse rows) overflows its column and touches the index, hence \s* after the index.
ROW_RE = re.compile(r"^\s*(\d+)\s*(\[[^\]]*\]|-?\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s*(.*?)\s*$")


def in_scope(name):
    return name.endswith(".yaml") and not name.startswith("rtdetr-") and name not in OUT_OF_SCOPE


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.extend(record.getMessage().splitlines())


class captured_log:
    """Route the Ultralytics logger to a list while inside the block (nothing printed)."""

    def __enter__(self):
        self.cap = Capture()
        self.saved = (LOGGER.handlers[:], LOGGER.level, LOGGER.propagate)
        LOGGER.handlers = [self.cap]
        LOGGER.setLevel(logging.INFO)
        LOGGER.propagate = False
        return self.cap.lines

    def __exit__(self, *exc):
        LOGGER.handlers, level, LOGGER.propagate = self.saved
        LOGGER.setLevel(level)
        return False


def load_cfg(path, scale, nc):
    """What YOLO('yolov8n.yaml') does: yaml_model_load, then the scale letter is set."""
    d = tasks.yaml_model_load(str(path))
    assert Path(d["yaml_file"]).resolve() == Path(path).resolve(), (d["yaml_file"], path)
    d["scale"] = scale
    return d


def reset_default_act():
    # parse_model sets Conv.default_act process-wide from a YAML `activation:` (yolov6: ReLU)
    # and never resets it; every case must start from a fresh process's default.
    Conv.default_act = torch.nn.SiLU()


def parse_rows(lines):
    rows = []
    for line in lines:
        m = ROW_RE.match(line)
        if not m:
            continue
        i, f, n, p, mod, args = m.groups()
        rows.append(
            {
                "i": int(i),
                "from": ast.literal_eval(f),
                "n": int(n),
                "params": int(p),
                "module": mod,
                "args": args,
            }
        )
    return rows


def build_case(path, scale, nc, imgsz, want_state_dict):
    name = Path(path).name
    reset_default_act()
    cfg = load_cfg(path, scale, nc)
    with captured_log():
        model = tasks.DetectionModel(cfg, ch=3, nc=nc, verbose=False)

    # The printed parse_model table: same dict the model was built from (DetectionModel
    # keeps self.yaml unmodified except for the nc override and `channels`).
    reset_default_act()
    with captured_log() as lines:
        tasks.parse_model(copy.deepcopy(model.yaml), ch=3, verbose=True)
    rows = parse_rows(lines)
    reset_default_act()

    seq = model.model
    if len(rows) != len(seq):
        raise RuntimeError(f"{name} {scale}: parsed {len(rows)} rows, model has {len(seq)}:\n" + "\n".join(lines))
    for r, m in zip(rows, seq):
        np_ = sum(x.numel() for x in m.parameters())
        if (r["i"], r["from"], r["params"]) != (m.i, m.f, np_) or r["module"] != m.type:
            raise RuntimeError(f"{name} {scale}: row {r} does not match module attrs {(m.i, m.f, np_, m.type)}")

    n_params = sum(p.numel() for p in model.parameters())
    n_grads = sum(p.numel() for p in model.parameters() if p.requires_grad)
    gflops = get_flops(model, imgsz)
    if not gflops:
        raise RuntimeError(f"{name} {scale}: get_flops returned {gflops!r} (thop failed?)")
    with captured_log() as info_lines:
        model_info(model, verbose=True, imgsz=imgsz)
    summary = [ln for ln in info_lines if " summary" in ln]

    case = {
        "file": name,
        "scale": scale,
        "nc": nc,
        "imgsz": imgsz,
        "layers": len(list(model.modules())),
        "leaf_layers": sum(1 for m in model.modules() if len(m._modules) == 0),
        "parameters": n_params,
        "gradients": n_grads,
        "gflops": gflops,
        "gflops_printed": f"{gflops:.1f}",
        "summary_line": summary[-1] if summary else None,
        "stride": [float(s) for s in model.stride.tolist()],
        "save": list(model.save),
        "rows": rows,
    }
    if want_state_dict:
        case["state_dict"] = [[k, list(v.shape)] for k, v in model.state_dict().items()]
    return case


def scales_of(path):
    d = tasks.yaml_model_load(str(path))
    scales = d.get("scales")
    return list(scales.keys()) if scales else [""]


# ---------------------------------------------------------------- JSON writing
def dumps_compact(obj):
    return json.dumps(obj, separators=(", ", ": "))


def wrap_items(items, indent, width=118):
    """Join JSON fragments with ', ', several per line."""
    out, line = [], ""
    for it in items:
        if line and len(indent) + len(line) + 2 + len(it) > width:
            out.append(indent + line + ",")
            line = it
        else:
            line = it if not line else line + ", " + it
    if line:
        out.append(indent + line)
    return out


def dump_case(case):
    lines = ["    {"]
    scalars = {k: v for k, v in case.items() if k not in ("rows", "state_dict")}
    lines += [x.rstrip(",") + "," for x in wrap_items([dumps_compact({k: v})[1:-1] for k, v in scalars.items()], "      ")]
    lines.append('      "rows": [')
    rows = [dumps_compact(r) for r in case["rows"]]
    lines += ["        " + r + ("," if j + 1 < len(rows) else "") for j, r in enumerate(rows)]
    if "state_dict" in case:
        lines.append("      ],")
        lines.append('      "state_dict": [')
        lines += wrap_items([dumps_compact(e) for e in case["state_dict"]], "        ")
        lines.append("      ]")
    else:
        lines.append("      ]")
    lines.append("    }")
    return "\n".join(lines)


def dump(doc):
    head = {k: v for k, v in doc.items() if k != "cases"}
    out = ["{"]
    for k, v in head.items():
        if isinstance(v, list) and v and any(isinstance(x, (str, dict)) for x in v):
            out.append(f"  {json.dumps(k)}: [")
            out += [f"    {dumps_compact(x)}" + ("," if j + 1 < len(v) else "") for j, x in enumerate(v)]
            out.append("  ],")
        else:
            out.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    out.append('  "cases": [')
    out.append(",\n".join(dump_case(c) for c in doc["cases"]))
    out.append("  ]")
    out.append("}")
    text = "\n".join(out) + "\n"
    assert json.loads(text) == json.loads(json.dumps(doc)), "custom JSON writer mismatch"
    return text


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cfg_dir", help="directory with the Ultralytics model YAMLs")
    ap.add_argument("out", help="output JSON path")
    ap.add_argument("--only", default="", help="comma-separated YAML basenames to restrict to")
    a = ap.parse_args()

    cfg_dir = Path(a.cfg_dir)
    files = sorted(p for p in cfg_dir.glob("*.yaml") if in_scope(p.name))
    only = {x for x in a.only.split(",") if x}
    if only:
        files = [p for p in files if p.name in only]
    skipped = sorted(p.name for p in cfg_dir.glob("*.yaml") if not in_scope(p.name))

    try:
        import thop

        thop_version = getattr(thop, "__version__", "unknown")
    except ImportError:
        sys.exit("ultralytics-thop is not installed (get_flops would return 0.0)")

    cases, failures = [], []
    todo = []
    for p in files:
        for j, s in enumerate(scales_of(p)):
            todo.append((p, s, 80, 640, j == 0))
    for f, s, nc, imgsz in EXTRA_CASES:
        p = cfg_dir / f
        if p in files:
            todo.append((p, s, nc, imgsz, False))

    for p, s, nc, imgsz, sd in todo:
        tag = f"{p.name} scale={s or '-'} nc={nc} imgsz={imgsz}"
        try:
            c = build_case(p, s, nc, imgsz, sd)
        except Exception as e:  # record and continue
            failures.append({"file": p.name, "scale": s, "nc": nc, "imgsz": imgsz, "error": f"{type(e).__name__}: {e}"})
            print(f"FAIL {tag}: {e}", file=sys.stderr, flush=True)
            continue
        cases.append(c)
        print(
            f"ok   {tag}: {c['layers']} layers, {c['parameters']:,} params, {c['gradients']:,} grads, "
            f"{c['gflops']:.4f} GFLOPs",
            file=sys.stderr,
            flush=True,
        )

    doc = {
        "ultralytics_version": ultralytics.__version__,
        "torch_version": torch.__version__,
        "thop_version": thop_version,
        "generated_by": "tools/ultralytics_reference.py",
        "notes": [
            "layers = len(list(model.modules())) (8.3.63 summary convention); leaf_layers = modules without "
            "children (what later 8.3.x and 8.4 print); summary_line is what this ultralytics version prints",
            "gflops = raw get_flops(model, imgsz) with the thop_version above; gflops_printed = f'{gflops:.1f}'",
            "thop >= 2.0.16 counts ConvTranspose2d as in_numel*(Cout/g)*k*k (yolov6 changes); thop 2.1.x/2.2.x "
            "count nearest Upsample as 0 (every model with nn.Upsample changes slightly)",
            "rows: parse_model's verbose table; n = repeats after depth scaling; args = printed string",
            "state_dict only for the first scale of each file at nc=80",
        ],
        "skipped_files": skipped,
        "failures": failures,
        "cases": cases,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dump(doc))
    print(f"wrote {out}: {len(cases)} cases, {len(failures)} failures, {out.stat().st_size:,} bytes", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
