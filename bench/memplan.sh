#!/usr/bin/env bash
# bench/memplan.sh — memory-plan numbers of the training step, read from
# `yolocc inspect --json` (no GPU needed), for the three policies issue 4
# compares: `--fuse none --recompute none` (the baseline, measured in the same
# run), `--fuse full --recompute pointwise`, and a byte budget of 0.65x that
# plan's arena. Prints saved activations and lower bound against the
# baseline, arena / lower bound, extra FLOPs, and kernel launches.
# Usage: bench/memplan.sh [--append]   (--append adds dated rows to bench/RESULTS.md)
append=${1:-}
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc
rows=""
fmt='%-8s %5s %-5s %-10s %9s %9s %9s %8s %8s %9s %9s %7s\n'
printf "$fmt" model batch fuse recompute arena_GB lower_GB saved_GB saved/b lower/b arena/lb extraflops launches
stats() {
  build/yolocc inspect "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
g = d["groups"]
print(d["arena_bytes"], d["lower_bound_bytes"], d["saved_activation_bytes"], "%.4f" % (d["recompute_flops"] / d["step_flops"]), g["library_calls"] + g["generated_launches"])'
}
for spec in "yolov8.yaml n yolov8n" "yolov8.yaml s yolov8s" "yolo11.yaml n yolo11n"; do
  for batch in 16 64; do
    set -- $spec
    base_saved=0 base_lb=0 pw_arena=0
    for policy in "none none" "full pointwise" "full budget"; do
      set -- $spec $policy
      rc=$5
      if [ "$rc" = budget ]; then rc=$(python3 -c "print(int(0.65 * $pw_arena))"); fi
      build/yolocc "models/$1" --scale "$2" --imgsz 640 --batch "$batch" --precision bf16 --fuse "$4" --recompute "$rc" -o "$tmp/p.plan" >/dev/null
      read -r arena lb saved extra launches <<<"$(stats "$tmp/p.plan")"
      if [ "$4 $5" = "none none" ]; then base_saved=$saved base_lb=$lb; fi
      if [ "$5" = pointwise ]; then pw_arena=$arena; fi
      line=$(python3 -c "
a, lb, s, bs, blb = $arena, $lb, $saved, $base_saved, $base_lb
print('%.3f %.3f %.3f %.3f %.3f %.4f' % (a / 1e9, lb / 1e9, s / 1e9, s / bs, lb / blb, a / lb))")
      read -r ag lg sg sr lr alr <<<"$line"
      label=$5; [ "$5" = budget ] && label="0.65x=${rc}"
      printf "$fmt" "$3" "$batch" "$4" "$5" "$ag" "$lg" "$sg" "$sr" "$lr" "$alr" "$extra" "$launches"
      rows+="| $(date -u +%F) | $(git rev-parse --short HEAD) | CPU compile (no device) | $3 | 640 | $batch | bf16 | $4 | $label | $ag | $lg | $sg | $sr | $alr | $extra | $launches |"$'\n'
    done
  done
done
if [ "$append" = "--append" ]; then bench_append_rows "| fuse | recompute | arena |" "$rows"; fi
