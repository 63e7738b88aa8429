#!/usr/bin/env bash
# bench/codegen.sh — code generation numbers (issue 5), no GPU needed:
#  1. `yolocc` compile time of YOLOv8n and YOLO11n (640, b16, bf16) for the
#     CUDA target at sm_80,sm_90: cold (an empty kernel cache) and cached (the
#     same command again), whole command wall time and the codegen share;
#  2. CPU-target training step time of the tiny model (its generated kernels,
#     with the fast library kernels) against the reference interpreter, both
#     measured in this run on the same plan and batch.
# Usage: bench/codegen.sh [--append]   (--append adds dated rows to bench/RESULTS.md)
append=${1:-}
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort
unset YOLOCC_NO_CACHE
machine=$(bench_machine)
commit=$(git rev-parse --short HEAD)
rows=""
now() { date +%s.%N; }
printf '%-8s %-6s %8s %10s %9s %9s\n' model cache wall_s codegen_s compiled cached
for spec in "yolov8.yaml yolov8n" "yolo11.yaml yolo11n"; do
  set -- $spec
  export XDG_CACHE_HOME=$tmp/cache-$2   # cold: nothing this model shares with another is cached
  for run in cold cached; do
    t0=$(now)
    out=$(build/yolocc "models/$1" --scale n --imgsz 640 --batch 16 --precision bf16 --target cuda --arch sm_80,sm_90 -o "$tmp/g.plan")
    t1=$(now)
    read -r cg compiled cached <<<"$(sed -n 's/^kernels (cuda): .*, \([0-9]*\) compiled, \([0-9]*\) from the cache, \([0-9.]*\) s$/\3 \1 \2/p' <<<"$out")"
    wall=$(python3 -c "print('%.2f' % ($t1 - $t0))")
    printf '%-8s %-6s %8s %10s %9s %9s\n' "$2" "$run" "$wall" "$cg" "$compiled" "$cached"
    rows+="| $(date -u +%F) | $commit | $machine | $2 | compile, CUDA sm_80+sm_90, $run cache | $wall s | codegen $cg s | $compiled compiled, $cached cached |"$'\n'
  done
done
build/yolocc models/tiny.yaml --imgsz 128 --batch 16 --target cpu -o "$tmp/t.plan" >/dev/null
steps=20
step_ms() {
  build/yolort train "$tmp/t.plan" --synthetic --steps $steps --json "$@" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
times = sorted(r["seconds"] for r in rows[2:])  # the first steps warm caches up
print("%.1f" % (1000 * times[len(times) // 2]))'
}
ref=$(step_ms --reference)
gen=$(step_ms)
ratio=$(python3 -c "print('%.2f' % ($ref / $gen))")
printf 'tiny 128 b16 fp32 training step (median of %d): reference interpreter %s ms, CPU target %s ms, speed-up %sx\n' $((steps - 2)) "$ref" "$gen" "$ratio"
rows+="| $(date -u +%F) | $commit | $machine | tiny | CPU training step, 128 b16 fp32 | reference ${ref} ms | CPU target ${gen} ms | ${ratio}x faster |"$'\n'
if [ "$append" = "--append" ]; then bench_append_rows "| cache / ratio |" "$rows"; fi
