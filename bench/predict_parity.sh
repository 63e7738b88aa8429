#!/usr/bin/env bash
# bench/predict_parity.sh — `yolort predict` against Ultralytics'
# DetectionPredictor for every in-scope model of the Ultralytics corpus: the
# same initial weights made to detect (tools/make_predict_fixture.py's
# make_detecting: head scaled, BN statistics recalibrated), the same images
# (the predict fixture's three PNGs and generated JPEGs), conf 0.25, the
# label files compared as sets: each line of one side matched to a line of
# the other with the same class and values within 1e-3 (near-equal scores
# may come in either order). A model agrees when at most 1% of the lines
# find no match: yolocc's generated kernels sum in double, PyTorch in float,
# and boxes ~1e-4 of the image apart flip an IoU-0.7 decision now and then
# (SHOW=1 prints the unmatched lines). Each file at its
# default scale on both sides. Needs the Ultralytics venv (ULTRA_PY).
# Both sides fold each BN into its conv, as Ultralytics' predictor does for a
# .pt model (AutoBackend's fuse; yolocc's runtime/cpu_fold.c); until
# 2026-12-01 yolocc did not, and Ultralytics' side ran --no-fuse to match.
# --cls-gain (0.25): the class convolutions' factor; the fixtures' 4 (and
# for the large YOLOv10s even 1) saturates scores to 1.0, whose ties
# torch.topk and NMS then break differently on the two sides.
# --onnx: Ultralytics' side predicts with the ONNX file `yolort export` writes
# from the same weights (AutoBackend, ONNX Runtime) instead of the PyTorch
# model: the exported file against yolort predict, through Ultralytics' own
# pre- and postprocessing (rows in their own table).
# Usage: bench/predict_parity.sh [--append] [--imgsz N (128)] [--only NAME,...] [--cls-gain X] [--onnx]
append="" imgsz=128 only="" gain=0.25 onnx=""
while [ $# -gt 0 ]; do
  case "$1" in
    --append) append=1 ;;
    --imgsz) imgsz=$2; shift ;;
    --only) only=$2; shift ;;
    --cls-gain) gain=$2; shift ;;
    --onnx) onnx=1 ;;
    *) echo "usage: bench/predict_parity.sh [--append] [--imgsz N] [--only NAME,...] [--cls-gain X] [--onnx]" >&2; exit 2 ;;
  esac
  shift
done
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort
bench_need_ultralytics
mapfile -t files < <(bench_corpus_files "$only")
[ ${#files[@]} -gt 0 ] || { echo "no corpus model to run" >&2; exit 1; }
mkdir "$tmp/images"
cp tests/parity/predict/*.png "$tmp/images/"
build/yolort datagen "$tmp/data" --images 5 --size 160 --classes 3 --seed 3 >/dev/null
cp "$tmp"/data/images/*/*.jpg "$tmp/images/"
for f in "${files[@]}"; do
  name=$(basename "$f" .yaml)
  echo "$name" >>"$tmp/names"
  if ! build/yolocc "$f" --imgsz "$imgsz" --batch 1 --nc 3 -o "$tmp/$name.plan" >"$tmp/$name.cerr" 2>&1; then
    sed -n '1p' "$tmp/$name.cerr" >"$tmp/$name.refused"
    continue
  fi
  echo "$name: Ultralytics, yolocc" >&2
  "$ULTRA_PY" tools/ultralytics_predict_run.py --cfg "$f" --scale "" --imgsz "$imgsz" --batch 2 --threads "$(nproc)" --detecting --cls-gain "$gain" \
    --source "$tmp/images" --weights-out "$tmp/$name.safetensors" --labels-out "$tmp/$name.u" >/dev/null
  if [ -n "$onnx" ]; then
    # dynamic batch: the predictor batches 2 images
    if build/yolort export "$tmp/$name.plan" --weights "$tmp/$name.safetensors" -o "$tmp/$name.onnx" --dynamic >/dev/null 2>"$tmp/$name.xerr"; then
      rm -rf "$tmp/$name.u"
      "$ULTRA_PY" tools/ultralytics_predict_run.py --model "$tmp/$name.onnx" --imgsz "$imgsz" --batch 2 --threads "$(nproc)" \
        --source "$tmp/images" --labels-out "$tmp/$name.u" >/dev/null 2>"$tmp/$name.oerr" || sed -n '$p' "$tmp/$name.oerr" >"$tmp/$name.failed"
    else
      sed -n '1p' "$tmp/$name.xerr" >"$tmp/$name.failed"
    fi
  fi
  build/yolort predict "$tmp/$name.plan" --weights "$tmp/$name.safetensors" --source "$tmp/images" --save-txt --save-conf --no-save \
    --batch 2 --no-rect --project "$tmp" --name "$name.y" >/dev/null 2>"$tmp/$name.yerr" || sed -n '1p' "$tmp/$name.yerr" >"$tmp/$name.failed"
done
status=0
rows=$(TMP=$tmp IMGSZ=$imgsz DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) MACHINE="$(bench_machine)" python3 - <<'PY'
import glob, os, sys
E = os.environ
tmp = E["TMP"]
def rows(path):
    return [l.split() for l in open(path)] if os.path.exists(path) else []
stems = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(f"{tmp}/images/*"))
out, bad = [], []
for name in open(f"{tmp}/names").read().split():
    head = f"| {E['DATE']} | {E['COMMIT']} | {E['MACHINE']} | {name} | {E['IMGSZ']} |"
    for why in ("refused", "failed"):
        if os.path.exists(f"{tmp}/{name}.{why}"):
            msg = open(f"{tmp}/{name}.{why}").read().strip().replace("|", "/").split("error: ")[-1]
            out.append(head + f" {why}: {msg} | | | |")
            bad.append(name)
            break
    else:
        ny = nu = mism = 0
        worst = 0.0
        for s in stems:
            y, u = rows(f"{tmp}/{name}.y/labels/{s}.txt"), rows(f"{tmp}/{name}.u/labels/{s}.txt")
            ny, nu = ny + len(y), nu + len(u)
            # each of yolocc's lines matched to an unused one of Ultralytics' of the same class and
            # values within 1e-3 (the closest): near-equal scores may come in either order, so the
            # lists are compared as sets
            used = [False] * len(u)
            for a in y:
                best, bd = -1, None
                for j, b in enumerate(u):
                    if used[j] or a[0] != b[0]:
                        continue
                    d = max(abs(float(p) - float(q)) for p, q in zip(a[1:], b[1:]))
                    if d <= 1e-3 and (bd is None or d < bd):
                        best, bd = j, d
                if best < 0:
                    mism += 1
                    if os.environ.get("SHOW"):
                        sys.stderr.write(f"  {name} {s}: yolocc line {' '.join(a)} unmatched\n")
                else:
                    used[best] = True
                    worst = max(worst, bd)
            mism += used.count(False)  # Ultralytics' lines nothing of yolocc's matched
            for j, k in enumerate(used):
                if not k and os.environ.get("SHOW"):
                    sys.stderr.write(f"  {name} {s}: Ultralytics line {' '.join(u[j])} unmatched (line {j + 1} of {len(u)})\n")
        # yolocc's generated kernels sum in double, PyTorch in float: boxes differ by ~1e-4 of the
        # image, enough to flip an IoU-0.7 decision or reorder near-equal scores now and then
        ok = nu > 0 and mism <= 0.01 * max(ny, nu) and worst <= 1e-3
        if not ok:
            bad.append(name)
        sys.stderr.write(f"{name:18s} detections {ny:5d} / {nu:5d}, lines unmatched {mism}, worst value difference {worst:.1e}\n")
        out.append(head + f" {ny} / {nu} | {mism} | {worst:.1e} | {'agree' if ok else 'DIFFERENT'} |")
print("\n".join(out))
if bad:
    sys.stderr.write(f"FAIL: {' '.join(bad)}\n")
    sys.exit(1)
PY
) || status=$? # the rows are recorded whatever the verdict
echo "$rows"
if [ -n "$append" ]; then bench_append_rows "$([ -n "$onnx" ] && echo "| detections yolort predict / Ultralytics on the ONNX file |" || echo "| detections yolocc / Ultralytics |")" "$rows"; fi
exit $status
