#!/usr/bin/env bash
# bench/traffic.sh — the device memory a training step must move, read from
# `yolocc inspect --json` (groups.traffic_bytes; no GPU needed): CUDA plans of
# YOLOv8n and YOLOv8s at 640, bf16, batch 16 and 64, both layouts, with
# `--recompute none` (the baseline of the same run: nothing made twice, the
# most memory) and the default `--recompute pointwise`. Prints GB by what moves
# them and the time those bytes take at a given bandwidth (H100 SXM's
# 3.35 TB/s unless BANDWIDTH_TBS says otherwise): a floor under the step that
# no kernel tuning can pass, only moving fewer bytes.
# Usage: bench/traffic.sh [--append]   (--append adds dated rows to bench/RESULTS.md)
append=${1:-}
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc
bw=${BANDWIDTH_TBS:-3.35}
fmt='%-8s %5s %-6s %-10s %9s %9s %9s %9s %9s %9s %11s %9s\n'
printf "$fmt" model batch layout recompute total_GB library_GB maps_GB reduce_GB copies_GB moved/base "floor_ms@${bw}" arena_GB
rows=""
for spec in "n yolov8n" "s yolov8s"; do
  set -- $spec
  for batch in 16 64; do
    for layout in nhwc nchw; do
      base=0
      for rc in none pointwise; do
        build/yolocc models/yolov8.yaml --scale "$1" --imgsz 640 --batch "$batch" --precision bf16 --layout "$layout" --recompute "$rc" \
          --target cuda --arch sm_90 -o "$tmp/p.plan" >/dev/null
        line=$(build/yolocc inspect "$tmp/p.plan" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
t = d["groups"]["traffic_bytes"]
s = t["generated_by_skeleton"]
print(t["total"], t["library"], s["map"], s["channel_reduce"] + s["list_norm"], s["copy"], d["arena_bytes"])')
        read -r total library maps reduce copies arena <<<"$line"
        [ "$rc" = none ] && base=$total
        cols=$(python3 -c "
t, l, m, r, c, a, b, bw = $total, $library, $maps, $reduce, $copies, $arena, $base, $bw
print('%.3f %.3f %.3f %.3f %.3f %.3f %.2f %.3f' % (t / 1e9, l / 1e9, m / 1e9, r / 1e9, c / 1e9, t / b, t / (bw * 1e12) * 1e3, a / 1e9))")
        read -r tg lg mg rg cg ratio floor ag <<<"$cols"
        printf "$fmt" "$2" "$batch" "$layout" "$rc" "$tg" "$lg" "$mg" "$rg" "$cg" "$ratio" "$floor" "$ag"
        rows+="| $(date -u +%F) | $(git rev-parse --short HEAD) | CPU compile (no device) | $2 | 640 | $batch | bf16 | $layout | $rc | $tg | $lg | $mg | $rg | $cg | $ratio | $floor | $ag |"$'\n'
      done
    done
  done
done
if [ "$append" = "--append" ]; then bench_append_rows "floor ms" "$rows"; fi
