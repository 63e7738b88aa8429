#!/usr/bin/env bash
# bench/sass.sh — whether YOLOv8n/s's generated kernels (640, batch 64,
# bf16, channels last) can keep up with the memory, with no GPU: each
# kernel's sm_90 SASS (nvcc -cubin, nvdisasm) read by bench/sass.py, its
# element loop's instructions against the bytes it moves (H100 SXM: 128
# instructions a cycle a multiprocessor, 3.35 TB/s). A kernel whose
# issue/mem is above 1 cannot reach the bandwidth floor (bench/traffic.sh)
# however well its loads are spread; one whose lat_ms is above its mem_ms
# has too few loads in flight (flight_B a thread, at the blocks its
# registers allow) to cover the memory's latency. A static model: the
# profile of a GPU run (bench/gpu.sh, profile.txt) is the measurement.
# Needs nvcc (CUDA_HOME, else /usr/local/cuda) and nvdisasm: NVDISASM, the
# toolkit's, or the nvidia-cuda-nvdisasm wheel fetched once into build/tools.
# Usage: bench/sass.sh [--append]   (--append adds dated rows to bench/RESULTS.md)
append=${1:-}
. "$(dirname "$0")/lib.sh"
bench_start build/yolocc
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc=$cuda/bin/nvcc
[ -x "$nvcc" ] || { echo "bench/sass.sh: no nvcc at $nvcc (set CUDA_HOME)" >&2; exit 2; }
nvdisasm=${NVDISASM:-}
[ -n "$nvdisasm" ] || [ ! -x "$cuda/bin/nvdisasm" ] || nvdisasm=$cuda/bin/nvdisasm
if [ -z "$nvdisasm" ]; then
  nvdisasm=$(find build/tools -name nvdisasm -type f 2>/dev/null | head -1 || true)
  if [ -z "$nvdisasm" ]; then
    mkdir -p build/tools
    python3 -m pip download --no-deps -q -d build/tools nvidia-cuda-nvdisasm
    (cd build/tools && python3 -m zipfile -e nvidia_cuda_nvdisasm-*.whl nvdisasm)
    nvdisasm=$(find build/tools/nvdisasm -name nvdisasm -type f | head -1)
    chmod +x "$nvdisasm"
  fi
fi
[ -x "$nvdisasm" ] || { echo "bench/sass.sh: no nvdisasm (set NVDISASM)" >&2; exit 2; }
rows=""
for scale in n s; do
  src=$tmp/src-$scale one=$tmp/one-$scale
  mkdir -p "$one"
  build/yolocc models/yolov8.yaml --scale $scale --imgsz 640 --batch 64 --precision bf16 --layout nhwc --target cuda --arch sm_90 \
    -o "$tmp/p.plan" --emit-src "$src" >/dev/null
  build/yolocc inspect "$tmp/p.plan" --json >"$tmp/inspect-$scale.json"
  : >"$tmp/regs-$scale"
  for name in $(python3 -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))["groups"]["traffic_bytes"]["by_kernel"]))' "$tmp/inspect-$scale.json"); do
    # registers: the whole kernel, both paths (a launch allocates for the larger)
    regs=$("$nvcc" -arch=sm_90 -cubin -o "$tmp/k.cubin" -Xptxas -v "$src/$name.cu" 2>&1 | sed -n 's/.*Used \([0-9]*\) registers.*/\1/p' | head -1)
    echo "$name ${regs:-0}" >>"$tmp/regs-$scale"
    # the loops: the 32-bit path alone, the one every launch of these plans takes
    grep -v '^ *else [a-z0-9_]*_run<1[,>]' "$src/$name.cu" >"$one/$name.cu"
    "$nvcc" -arch=sm_90 -cubin -o "$tmp/k.cubin" "$one/$name.cu" 2>/dev/null
    "$nvdisasm" -c "$tmp/k.cubin" >"$one/$name.sass"
  done
  echo "== yolov8$scale 640 b64 bf16 nhwc (sm_90 SASS)"
  python3 bench/sass.py "$tmp/inspect-$scale.json" "$one" "$tmp/regs-$scale"
  cells=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("%.2f | %.2f | %.2f | %.2f | %.2f | %s" % (d["floor_ms"], d["issue_ms"], d["latency_ms"], d["bound_ms"], d["bound_ms"] / d["floor_ms"], d["worst"]))' "$tmp/regs-$scale.json")
  rows+="| $(date -u +%F) | $(git rev-parse --short HEAD) | CPU compile (no device) | yolov8$scale | 640 | 64 | bf16 | nhwc | $cells |"$'\n'
done
if [ "$append" = "--append" ]; then bench_append_rows "latency-bound ms" "$rows"; fi
