#!/usr/bin/env bash
# bench/host_memory.sh — how well a CPU run's host memory is known before
# step 0: `yolort train --data` on a generated dataset prints the bytes it
# will hold (its "CPU: X GB of host memory" line) and, at its end, the
# process's peak resident set; one row per configuration with both and their
# ratio (peak / known: below 1, the line was an upper bound).
# Usage: bench/host_memory.sh [--append] [--configs "yolov8n:320:8 yolov8s:640:2"] [--workers 2] [--cache]
append="" configs="yolov8n:160:8 yolov8n:320:8 yolov8n:640:4 yolov8s:640:2 yolo11n:320:8" workers=2 cache=""
while [ $# -gt 0 ]; do
  case "$1" in
    --append) append=1 ;;
    --configs) configs=$2; shift ;;
    --workers) workers=$2; shift ;;
    --cache) cache="--cache ram" ;;
    *) echo "usage: bench/host_memory.sh [--append] [--configs \"MODEL:IMGSZ:BATCH ...\"] [--workers N] [--cache]" >&2; exit 2 ;;
  esac
  shift
done
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort
# 48 images of 640 px (40 train, 8 val): the loaders decode full-size images
build/yolort datagen "$tmp/data" --images 48 --size 640 --val-fraction 0.17 --seed 3 >/dev/null
rows=""
for c in $configs; do
  IFS=: read -r m imgsz batch <<<"$c"
  base=${m%?} scale=${m: -1}
  [ -f "models/$base.yaml" ] || { echo "$0: no models/$base.yaml for $m" >&2; exit 2; }
  echo "$m at $imgsz, batch $batch" >&2
  build/yolocc "models/$base.yaml" --scale "$scale" --nc 3 --imgsz "$imgsz" --batch "$batch" -o "$tmp/$m.plan" >/dev/null
  # shellcheck disable=SC2086
  build/yolort train "$tmp/$m.plan" --data "$tmp/data/data.yaml" --epochs 1 --workers "$workers" --no-plots $cache \
    --project "$tmp/runs" --name "$m-$imgsz-$batch" >"$tmp/out.txt"
  row=$(OUT="$tmp/out.txt" DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) MACHINE="$(bench_machine)" MODEL=$m IMGSZ=$imgsz BATCH=$batch \
    WORKERS=$workers CACHE="${cache:+ram}" python3 - <<'PY'
import os, re, sys
E = os.environ
out = open(E["OUT"]).read()
line = re.search(r"^CPU: ([0-9.]+) GB of host memory[^(]*\((.*?)\), ([0-9.]+) GB more", out, re.M)
peak = re.search(r"^Peak host memory ([0-9.]+) GB \(([0-9.]+) GB known before step 0\)", out, re.M)
if not line or not peak:
    sys.exit("no memory lines in the run's output:\n" + out[-2000:])
known, p = float(line.group(1)), float(peak.group(1))
parts = line.group(2).replace("|", "/")
print(f"| {E['DATE']} | {E['COMMIT']} | {E['MACHINE']} | {E['MODEL']} | {E['IMGSZ']} | {E['BATCH']} | {E['WORKERS']} | {E['CACHE'] or 'none'} | "
      f"{known:.3f} | {p:.3f} | {p / known:.2f} | {parts} |")
PY
)
  echo "$row"
  rows+="$row"$'\n'
done
if [ -n "$append" ]; then
  bench_append_rows "peak / known" "$rows"
  echo "appended to bench/RESULTS.md" >&2
fi
