#!/usr/bin/env bash
# bench/predict.sh — `yolort predict` on the CPU against Ultralytics'
# predictor in the same run: the same model (built by Ultralytics from the
# project's YAML, its initial weights handed to yolort), the same generated
# images, the same batch, each side's own per-image milliseconds
# (preprocess, inference, postprocess) as its Speed line reports them.
# yolocc runs the training plan's validation graph (its batch is twice the
# plan's) with the CPU target's generated kernels and oneDNN convolutions,
# BN folded into them (runtime/cpu_fold.c); PyTorch runs its eager CPU model
# with BN fused, on as many threads.
# Needs the Ultralytics venv (ULTRA_PY).
# Usage: bench/predict.sh [--append] [--model yolov8|yolo11|yolo12|yolov10n ...] [--scale n] [--imgsz 640] [--images 32]
append="" model=yolov8 scale=n imgsz=640 images=32
while [ $# -gt 0 ]; do
  case "$1" in
    --append) append=1 ;;
    --model) model=$2; shift ;;
    --scale) scale=$2; shift ;;
    --imgsz) imgsz=$2; shift ;;
    --images) images=$2; shift ;;
    *) echo "usage: bench/predict.sh [--append] [--model NAME] [--scale S] [--imgsz N] [--images N]" >&2; exit 2 ;;
  esac
  shift
done
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort
bench_need_ultralytics
threads=$(nproc)
build/yolort datagen "$tmp/data" --images "$images" --size "$imgsz" --classes 3 >/dev/null
src="$tmp/data/images/*/*.jpg" # both splits, through a glob pattern (both sides list it the same way)
build/yolocc "models/$model.yaml" --scale "$scale" --nc 3 --imgsz "$imgsz" --batch 1 -o "$tmp/m.plan" >/dev/null
batch=$(build/yolocc inspect "$tmp/m.plan" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["eval"]["meta"]["batch"])')
echo "$model$scale at $imgsz, batch $batch, $images images, $threads threads: Ultralytics" >&2
"$ULTRA_PY" tools/ultralytics_predict_run.py --cfg "models/$model.yaml" --scale "$scale" --imgsz "$imgsz" --batch "$batch" \
  --threads "$threads" --source "$src" --weights-out "$tmp/w.safetensors" >"$tmp/u.json"
echo "yolocc" >&2
# the same batch and square letterbox as the predictor (rect is off there)
build/yolort predict "$tmp/m.plan" --weights "$tmp/w.safetensors" --source "$src" --no-save --batch "$batch" --no-rect >"$tmp/y.txt"
label=$model$scale
case $model in *[0-9]"$scale") label=$model ;; esac # yolov10n: the scale is in the file's name
rows=$(TMP=$tmp DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) MACHINE="$(bench_machine)" MODEL="$label" IMGSZ=$imgsz BATCH=$batch python3 - <<'PY'
import json, os, re, sys
E = os.environ
u = json.load(open(f"{E['TMP']}/u.json"))
text = open(f"{E['TMP']}/y.txt").read()
m = re.search(r"Speed: ([\d.]+)ms preprocess, ([\d.]+)ms inference, ([\d.]+)ms postprocess", text)
if not m:
    sys.exit("no Speed line in yolort's output:\n" + text)
y = dict(zip(("preprocess", "inference", "postprocess"), map(float, m.groups())))
ydet = sum(int(n) for n in re.findall(r"(\d+) \w+?s?,", "".join(l.split(": ", 1)[1] for l in text.splitlines() if l.startswith("image "))))
yt, ut = sum(y.values()), sum(u[k] for k in ("preprocess", "inference", "postprocess"))
sys.stderr.write(f"per image (ms): yolocc {y['preprocess']:.1f} + {y['inference']:.1f} + {y['postprocess']:.1f} = {yt:.1f}, "
                 f"Ultralytics {u['preprocess']:.1f} + {u['inference']:.1f} + {u['postprocess']:.1f} = {ut:.1f} ({u['threads']} threads); "
                 f"inference yolocc/Ultralytics {y['inference'] / u['inference']:.2f}x the time; detections {ydet} / {u['detections']}\n")
print(f"| {E['DATE']} | {E['COMMIT']} | {E['MACHINE']} | {E['MODEL']} | {E['IMGSZ']} | {E['BATCH']} | {u['images']} | "
      f"{y['preprocess']:.1f} / {y['inference']:.1f} / {y['postprocess']:.1f} | {u['preprocess']:.1f} / {u['inference']:.1f} / {u['postprocess']:.1f} | "
      f"{u['inference'] / y['inference']:.2f} | {ut / yt:.2f} | {ydet} / {u['detections']} |")
PY
)
echo "$rows"
if [ -n "$append" ]; then bench_append_rows "| yolocc ms pre / inf / post |" "$rows"; fi
