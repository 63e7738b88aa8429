#!/usr/bin/env bash
# bench/val_parity.sh — what `yolort val` writes against what Ultralytics' val
# writes for the same model, in one run: the demo's best weights through
# `yolort val --save-json --save-txt --save-conf` and their ONNX export
# (`yolort export`) through Ultralytics' val (tools/ultralytics_val_run.py,
# CPU, batch 1, plots on). Compared: predictions.json entry by entry (per
# image, in order: category, bbox, score), the confusion matrices, the label
# files, mAP. Needs `make demo` first and the Ultralytics venv (ULTRA_PY).
# Usage: bench/val_parity.sh [--append]
append=""
case "${1:-}" in --append) append=1 ;; "") ;; *) echo "usage: bench/val_parity.sh [--append]" >&2; exit 2 ;; esac
. "$(dirname "$0")/lib.sh"
bench_start build/yolort
bench_need_ultralytics
w=build/demo/runs/train/weights
[ -f "$w/best.safetensors" ] || { echo "$0: no $w/best.safetensors; run make demo first" >&2; exit 1; }
build/yolort export build/demo/tiny.plan --weights "$w/best.safetensors" -o "$tmp/best.onnx" >/dev/null
# an ONNX file is a static model to Ultralytics' val: batch 1 (its metadata), square (rect off)
build/yolort val build/demo/tiny.plan --weights "$w/best.safetensors" --data build/demo/data/data.yaml \
  --project "$tmp" --name y --save-json --save-txt --save-conf --batch 1 --no-rect >"$tmp/y.log"
"$ULTRA_PY" tools/ultralytics_val_run.py "$tmp/best.onnx" build/demo/data/data.yaml 128 "$tmp/u" >"$tmp/u.log" 2>&1
row=$(Y="$tmp/y" U="$tmp/u" YLOG="$tmp/y.log" ULOG="$tmp/u.log" DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) \
  MACHINE="$(bench_machine)" python3 - <<'PY'
import json, os, re
from collections import defaultdict
Y, U = os.environ["Y"], os.environ["U"]
a, b = json.load(open(f"{Y}/predictions.json")), json.load(open(f"{U}/predictions.json"))
ga, gb = defaultdict(list), defaultdict(list)
for e in a: ga[e["image_id"]].append(e)
for e in b: gb[e["image_id"]].append(e)
equal_counts = sum(len(ga[k]) == len(gb.get(k, [])) for k in ga)
diffs, cat, score = [], 0, 0.0
for k in ga:
    for x, y in zip(ga[k], gb.get(k, [])):
        cat += x["category_id"] != y["category_id"]
        diffs.append(max(abs(p - q) for p, q in zip(x["bbox"], y["bbox"])))
        score = max(score, abs(x["score"] - y["score"]))
diffs.sort()
pct = lambda q: diffs[min(len(diffs) - 1, int(len(diffs) * q))] if diffs else float("nan")
rows = open(f"{Y}/confusion_matrix.csv").read().split("\n")[1:]
cy = [[int(v) for v in r.split(",")[1:]] for r in rows if r]
cu = json.load(open(f"{U}/confusion_matrix.json"))
cells = sum(len(r) for r in cy)
cm_equal = sum(p == q for r1, r2 in zip(cy, cu) for p, q in zip(r1, r2))
cm_worst = max(abs(p - q) for r1, r2 in zip(cy, cu) for p, q in zip(r1, r2))
lines_same = lines_all = 0
field_worst = 0.0
for n in sorted(os.listdir(f"{Y}/labels")):
    ly = open(f"{Y}/labels/{n}").read().split("\n")
    lu = open(f"{U}/labels/{n}").read().split("\n") if os.path.exists(f"{U}/labels/{n}") else []
    for p, q in zip(ly, lu):
        if not p:
            continue
        lines_all += 1
        fp, fq = p.split(), q.split()
        lines_same += fp[:5] == fq[:5]
        field_worst = max([field_worst] + [abs(float(x) - float(z)) for x, z in zip(fp, fq)])
    lines_all += max(0, len([x for x in ly if x]) - len([x for x in lu if x]))
ymap = re.search(r"^\s+all\s+\d+\s+\d+\s+\S+\s+\S+\s+(\S+)\s+(\S+)", open(os.environ["YLOG"]).read(), re.M)
umap = re.search(r"mAP50 (\S+) mAP50-95 (\S+)", open(os.environ["ULOG"]).read())
print(f"| {os.environ['DATE']} | {os.environ['COMMIT']} | {os.environ['MACHINE']} | demo tiny 128 | {len(ga)} | {len(a)} / {len(b)} | "
      f"{equal_counts} | {cat} | {pct(0.5):.3g} / {pct(0.999):.3g} / {diffs[-1] if diffs else float('nan'):.3g} | {sum(d > 0.01 for d in diffs)} | "
      f"{score:.3g} | {cm_equal}/{cells} (worst {cm_worst}) | {lines_same}/{lines_all}, {field_worst:.2g} | {ymap.group(1)}, {ymap.group(2)} / {float(umap.group(1)):.3g}, {float(umap.group(2)):.3g} |")
PY
)
echo "$row"
if [ -n "$append" ]; then bench_append_rows "predictions.json entries" "$row"; fi
