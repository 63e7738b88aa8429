#!/usr/bin/env bash
# bench/train_cpu.sh — a CPU training step of yolocc against PyTorch's in the
# same run: `yolort bench` on a plan compiled from the project's YAML, and
# bench/torch_step.py --device cpu (the real Ultralytics DetectionModel, its
# loss, SGD as its trainer builds it, eager fp32 on as many threads as the
# machine has cores), the same model, batch and image size, each timing its
# own median step after warm-up on one synthetic batch. Peak memory is each
# process's peak resident set. Needs the Ultralytics venv (ULTRA_PY).
# Usage: bench/train_cpu.sh [--append] [--models yolov8n,yolo11n,yolo12n] [--imgsz 320] [--batch 8] [--steps 10]
append="" models="yolov8n,yolo11n,yolo12n" imgsz=320 batch=8 steps=10
while [ $# -gt 0 ]; do
  case "$1" in
    --append) append=1 ;;
    --models) models=$2; shift ;;
    --imgsz) imgsz=$2; shift ;;
    --batch) batch=$2; shift ;;
    --steps) steps=$2; shift ;;
    *) echo "usage: bench/train_cpu.sh [--append] [--models LIST] [--imgsz N] [--batch N] [--steps N]" >&2; exit 2 ;;
  esac
  shift
done
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort
bench_need_ultralytics
rows=""
for m in ${models//,/ }; do
  base=${m%?} scale=${m: -1}
  [ -f "models/$base.yaml" ] || { echo "$0: no models/$base.yaml for $m" >&2; exit 2; }
  echo "$m at $imgsz, batch $batch: yolocc" >&2
  build/yolocc "models/$base.yaml" --scale "$scale" --nc 80 --imgsz "$imgsz" --batch "$batch" -o "$tmp/$m.plan" >/dev/null
  build/yolort bench "$tmp/$m.plan" --steps "$steps" --warmup 2 --json >"$tmp/y.json"
  echo "$m: PyTorch" >&2
  "$ULTRA_PY" bench/torch_step.py --device cpu --models "$m" --batch "$batch" --imgsz "$imgsz" --steps "$steps" --warmup 2 >"$tmp/t.json"
  row=$(TMP=$tmp DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) MACHINE="$(bench_machine)" MODEL=$m THREADS=$(nproc) python3 - <<'PY'
import json, os, sys
E = os.environ
y = json.loads(open(f"{E['TMP']}/y.json").read().strip().splitlines()[-1])
t = json.loads(open(f"{E['TMP']}/t.json").read().strip().splitlines()[-1])
if "error" in t:
    sys.exit(f"PyTorch failed: {t['error']}")
gb = lambda b: b / 1e9
sys.stderr.write(f"{E['MODEL']}: yolocc {y['median_ms']:.0f} ms ({y['images_per_s']:.2f} img/s, {gb(y['peak_bytes']):.2f} GB), "
                 f"PyTorch {t['median_ms']:.0f} ms ({t['images_per_s']:.2f} img/s, {gb(t['peak_bytes']):.2f} GB)\n")
print(f"| {E['DATE']} | {E['COMMIT']} | {E['MACHINE']} | {E['MODEL']} | {y['imgsz']} | {y['batch']} | {E['THREADS']} | "
      f"{y['median_ms']:.0f} | {t['median_ms']:.0f} | {t['median_ms'] / y['median_ms']:.2f} | {gb(y['peak_bytes']):.2f} | {gb(t['peak_bytes']):.2f} | "
      f"{y['peak_bytes'] / t['peak_bytes']:.2f} |")
PY
)
  rows+="$row"$'\n'
done
printf '%s' "$rows"
if [ -n "$append" ]; then bench_append_rows "| yolocc step ms | PyTorch step ms |" "$rows"; fi
