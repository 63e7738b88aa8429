#!/usr/bin/env bash
# bench/export.sh — `yolort export` against Ultralytics' own ONNX export of
# the same model and weights, in one run: Ultralytics builds the model
# (torch.manual_seed(0), 80 classes) and exports it (opset 17, batch 1, no
# simplifier; tools/ultralytics_export_run.py), yolort exports a plan of the
# same YAML with the weights Ultralytics wrote. Both files then run in the
# same ONNX Runtime (build/ort, CPU) on the same input: the largest output
# difference, the nodes, the file size, the export time and the median
# inference time of each. Needs the Ultralytics venv (ULTRA_PY) with onnx.
# Usage: bench/export.sh [--append] [--imgsz N (640)] [--runs N (10)]
append="" imgsz=640 runs=10
while [ $# -gt 0 ]; do
  case "$1" in
    --append) append=1 ;;
    --imgsz) imgsz=$2; shift ;;
    --runs) runs=$2; shift ;;
    *) echo "usage: bench/export.sh [--append] [--imgsz N] [--runs N]" >&2; exit 2 ;;
  esac
  shift
done
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc build/yolort ort-venv
bench_need_ultralytics
corpus=${YOLOCC_CORPUS:-../shared/reference/ultralytics-cfg}
models=("models/yolov8.yaml:n" "models/yolo11.yaml:n")
[ -f "$corpus/yolov10n.yaml" ] && models+=("$corpus/yolov10n.yaml:")
rows=""
for spec in "${models[@]}"; do
  f=${spec%:*} scale=${spec##*:}
  name=$(basename "$f" .yaml)$scale
  echo "$name: Ultralytics export, yolort export" >&2
  useconds=$("$ULTRA_PY" tools/ultralytics_export_run.py --cfg "$f" --scale "$scale" --imgsz "$imgsz" \
    --weights-out "$tmp/$name.safetensors" --onnx-out "$tmp/$name.u.onnx" 2>"$tmp/$name.uerr" | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["seconds"])')
  # a CUDA plan compiles fastest (NVRTC) and exports the same graph as a CPU plan; no GPU is used
  build/yolocc "$f" ${scale:+--scale "$scale"} --imgsz "$imgsz" --batch 1 --nc 80 --target cuda -o "$tmp/$name.plan" >/dev/null
  t0=$(date +%s.%N)
  build/yolort export "$tmp/$name.plan" --weights "$tmp/$name.safetensors" -o "$tmp/$name.y.onnx" >/dev/null
  yseconds=$(python3 -c "print($(date +%s.%N) - $t0)")
  rows+=$(NAME=$name Y="$tmp/$name.y.onnx" U="$tmp/$name.u.onnx" YS=$yseconds US=$useconds RUNS=$runs IMGSZ=$imgsz \
    DATE=$(date -u +%F) COMMIT=$(git rev-parse --short HEAD) MACHINE="$(bench_machine)" build/ort/bin/python - <<'PY'
import os, time
import numpy as np, onnx, onnxruntime as ort
E = os.environ
x = np.random.default_rng(0).random((1, 3, int(E["IMGSZ"]), int(E["IMGSZ"])), dtype=np.float32)
out, info = {}, {}
for side in ("Y", "U"):
    path = E[side]
    onnx.checker.check_model(onnx.load(path), full_check=True)
    s = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    out[side] = s.run(None, {"images": x})[0]
    ts = []
    for _ in range(int(E["RUNS"])):
        t = time.perf_counter()
        s.run(None, {"images": x})
        ts.append(time.perf_counter() - t)
    info[side] = (len(onnx.load(path).graph.node), os.path.getsize(path) / 1e6, 1e3 * float(np.median(ts)))
y, u = out["Y"], out["U"]
assert y.shape == u.shape, (y.shape, u.shape)
d = float(np.abs(y - u).max())
rel = float((np.abs(y - u) / (1 + np.abs(u))).max())
(yn, ymb, yms), (un, umb, ums) = info["Y"], info["U"]
print(f"| {E['DATE']} | {E['COMMIT']} | {E['MACHINE']} | {E['NAME']} | {E['IMGSZ']} | {'x'.join(map(str, y.shape))} | {d:.1e} | {rel:.1e} | "
      f"{float(E['YS']):.2f} / {float(E['US']):.2f} | {ymb:.1f} / {umb:.1f} | {yn} / {un} | {yms:.1f} / {ums:.1f} | {yms / ums:.2f} |")
PY
)$'\n'
done
echo -n "$rows"
if [ -n "$append" ]; then bench_append_rows "| export s yolort / Ultralytics |" "$rows"; fi
