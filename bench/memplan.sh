#!/usr/bin/env bash
# bench/memplan.sh — memory-plan numbers of the training step, read from
# `yolocc inspect --json` (no GPU needed): arena vs its lower bound vs no
# reuse, saved activations, persistent bytes. Ratios are against the no-reuse
# baseline computed in the same run. Usage: bench/memplan.sh [--append]
set -euo pipefail
append=${1:-}
cd "$(dirname "$0")/.."
make -s build/yolocc >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rows=""
printf '%-9s %5s %4s %-9s %11s %11s %11s %11s %9s %9s\n' model batch prec recompute arena_GB lower_GB noreuse_GB saved_GB arena/lb extraflops
for spec in "yolov8.yaml n yolov8n" "yolov8.yaml s yolov8s" "yolo11.yaml n yolo11n"; do
  set -- $spec
  for batch in 16 64; do
   for rc in none pointwise; do
    set -- $spec
    build/yolocc "models/$1" --scale "$2" --imgsz 640 --batch "$batch" --precision bf16 --recompute "$rc" -o "$tmp/p.plan" >/dev/null
    line=$(build/yolocc inspect "$tmp/p.plan" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
a, lb, nv, sv = d["arena_bytes"], d["lower_bound_bytes"], d["naive_bytes"], d["saved_activation_bytes"]
print("%.3f %.3f %.3f %.3f %.4f %.4f" % (a / 1e9, lb / 1e9, nv / 1e9, sv / 1e9, a / lb, d["recompute_flops"] / d["step_flops"]))')
    read -r arena lb naive saved r1 r2 <<<"$line"
    printf '%-9s %5s %4s %-9s %11s %11s %11s %11s %9s %9s\n' "$3" "$batch" bf16 "$rc" "$arena" "$lb" "$naive" "$saved" "$r1" "$r2"
    rows+="| $(date -u +%F) | $(git rev-parse --short HEAD) | CPU compile (no device) | $3 | 640 | $batch | bf16 | none | $rc | $arena | $lb | $naive | $saved | $r1 | $r2 |"$'\n'
   done
  done
done
if [ "$append" = "--append" ]; then printf '%s' "$rows" >> bench/RESULTS.md; fi
