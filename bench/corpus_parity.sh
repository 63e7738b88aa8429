#!/usr/bin/env bash
# bench/corpus_parity.sh — the first two training steps of every in-scope
# model of the Ultralytics corpus, yolocc against the real Ultralytics step
# from the same initial weights on `yolort train --synthetic`'s batch
# (tools/ultralytics_synthetic_run.py), each file at its default scale on
# both sides. Ultralytics runs twice, in fp32 and in fp64: the fp64 run is
# what both fp32 runs approximate, so each side's error is measured against
# it rather than against the other. Needs the Ultralytics venv (ULTRA_PY).
# Usage: bench/corpus_parity.sh [--append] [--imgsz N (128)] [--only NAME,...]
append="" imgsz=128 only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --append) append=1 ;;
    --imgsz) imgsz=$2; shift ;;
    --only) only=$2; shift ;;
    *) echo "usage: bench/corpus_parity.sh [--append] [--imgsz N] [--only NAME,...]" >&2; exit 2 ;;
  esac
  shift
done
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort
bench_need_ultralytics
mapfile -t files < <(bench_corpus_files "$only")
[ ${#files[@]} -gt 0 ] || { echo "no corpus model to run" >&2; exit 1; }
for f in "${files[@]}"; do
  name=$(basename "$f" .yaml)
  echo "$name" >>"$tmp/names"
  # yolocc first: a model it refuses to train gets its message, and no Ultralytics run
  if ! build/yolocc "$f" --imgsz "$imgsz" --batch 2 --nc 3 -o "$tmp/$name.plan" >"$tmp/$name.cerr" 2>&1; then
    sed -n '1p' "$tmp/$name.cerr" >"$tmp/$name.refused"
    echo "$name: yolocc refused: $(cat "$tmp/$name.refused")" >&2
    continue
  fi
  echo "$name: Ultralytics fp64 and fp32, yolocc" >&2
  "$ULTRA_PY" tools/ultralytics_synthetic_run.py --cfg "$f" --scale "" --imgsz "$imgsz" --steps 2 --double >"$tmp/$name.u64"
  "$ULTRA_PY" tools/ultralytics_synthetic_run.py --cfg "$f" --scale "" --imgsz "$imgsz" --steps 2 --weights-out "$tmp/$name.safetensors" >"$tmp/$name.u32"
  build/yolort train "$tmp/$name.plan" --synthetic --steps 2 --weights "$tmp/$name.safetensors" --json >"$tmp/$name.y" 2>"$tmp/$name.yerr"
done
rows=$(TMP=$tmp IMGSZ=$imgsz DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) MACHINE="$(bench_machine)" python3 - <<'PY'
import json, os, sys
E = os.environ
tmp = E["TMP"]
def read(p):
    return [json.loads(l) for l in open(p) if l.startswith("{")]
def err(x, t):
    return abs(x - t) / abs(t)
fmt = "%-16s %9s %9s %9s %9s %9s %9s %9s\n"
sys.stderr.write(fmt % ("model", "loss1", "y err", "u32 err", "gnorm1", "y err", "u32 err", "loss2 y/u32 err"))
out, bad = [], []
for name in open(f"{tmp}/names").read().split():
    head = f"| {E['DATE']} | {E['COMMIT']} | {E['MACHINE']} | {name} | {E['IMGSZ']} |"
    if os.path.exists(f"{tmp}/{name}.refused"):
        why = open(f"{tmp}/{name}.refused").read().strip().replace("|", "/")
        out.append(head + f" refused by yolocc: {why.split('error: ')[-1]} | | | | | | | |")
        continue
    t, u, y = read(f"{tmp}/{name}.u64"), read(f"{tmp}/{name}.u32"), read(f"{tmp}/{name}.y")
    e = {k: (err(y[i][f], t[i][f]), err(u[i][f], t[i][f])) for k, (i, f) in {"l1": (0, "loss"), "g1": (0, "grad_norm"), "l2": (1, "loss")}.items()}
    # the same computation: yolocc's first loss within 10x Ultralytics' own fp32 error of fp64, or 1e-5
    if e["l1"][0] > max(10 * e["l1"][1], 1e-5):
        bad.append(name)
    sys.stderr.write(fmt % (name, "%.5f" % t[0]["loss"], "%.1e" % e["l1"][0], "%.1e" % e["l1"][1], "%.3f" % t[0]["grad_norm"], "%.1e" % e["g1"][0], "%.1e" % e["g1"][1], "%.1e/%.1e" % e["l2"]))
    out.append(head + f" {t[0]['loss']:.5f} | {e['l1'][0]:.1e} | {e['l1'][1]:.1e} | {t[0]['grad_norm']:.3f} | {e['g1'][0]:.1e} | {e['g1'][1]:.1e} | {e['l2'][0]:.1e} | {e['l2'][1]:.1e} |")
print("\n".join(out))
if bad:
    sys.stderr.write(f"FAIL: first-step loss off the fp64 step by more than 10x Ultralytics' fp32 error: {' '.join(bad)}\n")
    sys.exit(1)
PY
)
if [ -n "$append" ]; then bench_append_rows "| fp64 loss1 |" "$rows"; fi
