#!/usr/bin/env bash
# bench/synthetic_parity.sh — yolocc's training trajectory against the real
# Ultralytics step over many SGD steps on `yolort train --synthetic`'s batch,
# from the same initial weights (tools/ultralytics_synthetic_run.py makes
# them and re-makes the batch). The 3-step parity fixtures pin the step
# itself; this shows what a long run on one batch does on both sides, and how
# far rounding alone moves it: Ultralytics is run twice, with 1 and 2 torch
# threads (another summation order), and that pair's spread is the yardstick
# for yolocc's difference. Needs the Ultralytics venv of
# tools/ultralytics_reference.py (ULTRA_PY, default /opt/ultra/bin/python).
# Usage: bench/synthetic_parity.sh [--append] [--steps N (100)] [--seeds K (4)]
append="" steps=100 seeds=4
while [ $# -gt 0 ]; do
  case "$1" in
    --append) append=1 ;;
    --steps) steps=$2; shift ;;
    --seeds) seeds=$2; shift ;;
    *) echo "usage: bench/synthetic_parity.sh [--append] [--steps N] [--seeds K]" >&2; exit 2 ;;
  esac
  shift
done
CORPUS=${YOLOCC_CORPUS:-../shared/reference/ultralytics-cfg}
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort
bench_need_ultralytics
machine=$(bench_machine)
for spec in "yolov8 n yolov8n" "yolo11 n yolo11n"; do
  set -- $spec
  [ -f "$CORPUS/$1.yaml" ] || { echo "no $CORPUS/$1.yaml (the corpus): $3 skipped" >&2; continue; }
  build/yolocc "models/$1.yaml" --scale "$2" --imgsz 64 --batch 2 --nc 3 -o "$tmp/$3.plan" >/dev/null 2>&1
  for ((seed = 0; seed < seeds; seed++)); do
    echo "$3 seed $seed: Ultralytics (1 and 2 threads) and yolocc, $steps steps each" >&2
    w=(); [ "$seed" = 0 ] && w=(--weights-out "$tmp/$3.safetensors")
    "$ULTRA_PY" tools/ultralytics_synthetic_run.py --cfg "$CORPUS/$1.yaml" --scale "$2" --seed "$seed" --steps "$steps" "${w[@]}" >"$tmp/$3.$seed.u1"
    "$ULTRA_PY" tools/ultralytics_synthetic_run.py --cfg "$CORPUS/$1.yaml" --scale "$2" --seed "$seed" --steps "$steps" --threads 2 >"$tmp/$3.$seed.u2"
    build/yolort train "$tmp/$3.plan" --synthetic --seed "$seed" --steps "$steps" --weights "$tmp/$3.safetensors" --json >"$tmp/$3.$seed.y" 2>/dev/null
  done
done
rows=$(TMP=$tmp STEPS=$steps SEEDS=$seeds DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) MACHINE="$machine" python3 - <<'PY'
import json, os, sys
tmp, steps, seeds = os.environ["TMP"], int(os.environ["STEPS"]), int(os.environ["SEEDS"])
late = range(steps // 2, steps)  # the second half: after the rise every run has settled into
def read(p):
    rows = [json.loads(l) for l in open(p) if l.startswith("{")]
    if len(rows) != steps:
        sys.exit(f"{p}: {len(rows)} steps, not {steps}")
    return [r["loss"] for r in rows]
fmt = "%-8s %4s %11s %9s %9s %9s %9s %9s %9s %9s\n"
sys.stderr.write(fmt % ("model", "seed", "step1 diff", "first u1", "peak u1", "peak y", "late u1", "late u2", "late y", "y/u1"))
out, bad = [], 0
for model in ("yolov8n", "yolo11n"):
    if not os.path.exists(f"{tmp}/{model}.0.y"):
        continue
    agg = {"u1": [], "u2": [], "y": []}
    for seed in range(seeds):
        runs = {k: read(f"{tmp}/{model}.{seed}.{k}") for k in ("u1", "u2", "y")}
        u1, y = runs["u1"], runs["y"]
        d1 = abs(y[0] - u1[0]) / abs(u1[0])
        bad += d1 > 1e-4  # same weights, same batch: the first step is the same computation
        m = {k: sum(v[i] for i in late) / len(late) for k, v in runs.items()}
        for k in agg:
            agg[k].append(m[k])
        sys.stderr.write(fmt % (model, seed, "%.1e" % d1, "%.4f" % u1[0], "%.3f" % max(u1), "%.3f" % max(y), "%.3f" % m["u1"], "%.3f" % m["u2"], "%.3f" % m["y"], "%.3f" % (m["y"] / m["u1"])))
        out.append(f"| {os.environ['DATE']} | {os.environ['COMMIT']} | {os.environ['MACHINE']} | {model} | {seed} | {steps} | {d1:.1e} | {u1[0]:.4f} | {max(u1):.3f} | {max(runs['u2']):.3f} | {max(y):.3f} | {m['u1']:.3f} | {m['u2']:.3f} | {m['y']:.3f} | {m['y'] / m['u1']:.3f} | {m['u2'] / m['u1']:.3f} |")
    mean = {k: sum(v) / len(v) for k, v in agg.items()}
    sys.stderr.write(f"{model}: mean late loss over {seeds} seeds: Ultralytics {mean['u1']:.3f} (1 thread), {mean['u2']:.3f} (2 threads), yolocc {mean['y']:.3f}: yolocc/Ultralytics {mean['y'] / mean['u1']:.3f}, 2 threads/1 thread {mean['u2'] / mean['u1']:.3f}\n")
print("\n".join(out))
if bad:
    sys.stderr.write(f"FAIL: {bad} run(s) whose first step differs from Ultralytics' by more than 1e-4 (relative)\n")
    sys.exit(1)
PY
)
if [ -n "$append" ]; then bench_append_rows "| late u1 |" "$rows"; fi
