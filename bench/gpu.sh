#!/usr/bin/env bash
# bench/gpu.sh — the GPU benchmark of issue 6 (deliverable 6) in one command: yolocc's training step
# against Ultralytics' in PyTorch (eager AMP, torch.compile), table and dated rows in bench/RESULTS.md.
# Owns no compiler or runtime code; runs `yolort bench` and bench/torch_step.py. See bench/GPU.md.
#
# Usage (on the GPU machine):  bash bench/gpu.sh [--append] [--arch sm_90] [--models "yolov8n yolov8s"] [--batches "16 64"]
#                                                 [--layouts "nhwc nchw"]   (yolocc's plans; PyTorch runs channels last)
#        GPU verification first:  bash bench/gpu.sh --check [--append]   (make check-gpu's suites, then the bench)
#                                 bash bench/gpu.sh --check-only          (the suites alone)
#        where the time goes:     bash bench/gpu.sh --profile 30 [--models ...] [--batches ...]   (yolort bench --profile
#                                 for each plan, no PyTorch, nothing appended)
#        (here, no GPU needed): bash bench/gpu.sh --prepare [--arch sm_90]
#                               bash bench/gpu.sh --dry-run     (the whole pipeline on the CPU, tiny sizes)
#
# --prepare builds release yolocc/yolort here, packs them with the shared libraries they load, and
# compiles the CUDA plans (per model, batch and layout) into .whl/prebuilt/ (the device call carries .whl), because the GPU
# machine may lack this project's build dependencies and cannot install any. On the GPU machine the
# prebuilt binaries are used when their source stamp equals the checkout's; otherwise it runs make,
# and falls back to a stale prebuilt only if make fails. A yolocc failure (build, compile or step) is
# printed and recorded in place of its numbers; the PyTorch side runs and is recorded regardless.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t_start=$SECONDS

append=0 prepare=0 dry=0 check=0 profile=0 arch=sm_90 models="yolov8n yolov8s" batches="16 64" layouts="nhwc nchw"
while [ $# -gt 0 ]; do
  case $1 in
    --append) append=1 ;;
    --prepare) prepare=1 ;;
    --dry-run) dry=1 ;;
    --check) check=1 ;;
    --check-only) check=2 ;;
    --profile) profile=${2:?--profile needs a number of rows}; shift ;;
    --arch) arch=${2:?--arch needs a value}; shift ;;
    --models) models=${2:?--models needs a value}; shift ;;
    --batches) batches=${2:?--batches needs a value}; shift ;;
    --layouts) layouts=${2:?--layouts needs a value}; shift ;;
    *) echo "gpu.sh: unknown option '$1' (see the head of bench/gpu.sh)" >&2; exit 2 ;;
  esac
  shift
done
PY=${PYTHON:-python3}
imgsz=640 precision=bf16
budget=${GPU_BENCH_BUDGET_S:-510}   # the whole run: the device call's limit is 600 s
prebuilt=.whl/prebuilt

# A hash of everything the binaries are built from, equal here and on the GPU machine for the same tree.
src_stamp() {
  find Makefile ir compiler passes runtime templates scripts tests -type f ! -path '*/__pycache__/*' 2>/dev/null \
    | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16
}

# The checkout's commit without running git (HEAD, then its ref file or packed-refs); YOLOCC_COMMIT wins.
checkout_commit() {
  if [ -n "${YOLOCC_COMMIT:-}" ]; then echo "$YOLOCC_COMMIT"; return; fi
  local h r
  h=$(cat .git/HEAD 2>/dev/null) || { echo unknown; return; }
  if [[ $h == "ref: "* ]]; then
    r=${h#ref: }
    if [ -f ".git/$r" ]; then h=$(cat ".git/$r"); else h=$(grep " $r\$" .git/packed-refs 2>/dev/null | cut -d' ' -f1); fi
  fi
  [ -n "$h" ] && echo "${h:0:7}" || echo unknown
}

plan_name() { echo "${1}_${imgsz}_b${2}_${precision}_${3}_${arch}.plan"; }   # model batch layout

if [ $prepare = 1 ]; then
  set -e
  jobs=$(nproc)
  make -s -j"$jobs" BUILD=build/gpu-prep build/gpu-prep/yolocc build/gpu-prep/yolort build/gpu-prep/gpu/run_tests
  rm -rf "$prebuilt" && mkdir -p "$prebuilt/bin" "$prebuilt/plans" && tmp=$(mktemp -d)
  for b in yolocc yolort; do cp build/gpu-prep/$b "$prebuilt/bin/$b" && strip "$prebuilt/bin/$b"; done
  # make check-gpu's runner (the CUDA suites), for --check
  cp build/gpu-prep/gpu/run_tests "$prebuilt/bin/gpu_tests" && strip "$prebuilt/bin/gpu_tests"
  # every shared library the binaries load except the C library itself (glibc is the GPU machine's own,
  # as new or newer than this one's: the binaries are built against the older)
  mkdir -p "$tmp/lib"
  ldd build/gpu-prep/yolocc build/gpu-prep/yolort build/gpu-prep/gpu/run_tests | awk '$3 ~ /^\// {print $3}' | sort -u \
    | grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' | while read -r so; do cp -L "$so" "$tmp/lib/"; done
  tar -C "$tmp" -cJf "$prebuilt/lib.tar.xz" lib
  for m in $models; do
    for b in $batches; do
      for l in $layouts; do
        build/gpu-prep/yolocc models/yolov8.yaml --scale "${m#yolov8}" --imgsz $imgsz --batch "$b" --precision $precision --layout "$l" \
          --target cuda --arch "$arch" -o "$prebuilt/plans/$(plan_name "$m" "$b" "$l")" | sed 's/^/  /'
        xz -T0 -f "$prebuilt/plans/$(plan_name "$m" "$b" "$l")"   # 1.9 MB -> about 0.1 MB: the tree that travels is limited
      done
    done
  done
  src_stamp > "$prebuilt/STAMP"
  checkout_commit > "$prebuilt/COMMIT"
  rm -rf "$tmp"
  echo "prepared $prebuilt ($(du -sh "$prebuilt" | cut -f1)): commit $(cat "$prebuilt/COMMIT"), stamp $(cat "$prebuilt/STAMP"), plans for $arch"
  echo "now: the device call with carry [\".whl\"] and command 'bash bench/gpu.sh --check --append --batches 64 --layouts nhwc', timeout_s 600 (bench/GPU.md)"
  exit 0
fi

if [ $dry = 1 ]; then   # the pipeline on the CPU at toy sizes: nothing is appended to the real RESULTS.md
  imgsz=64 models=yolov8n batches=2
fi
work=${GPU_BENCH_WORK:-/tmp/yolocc-gpu-bench}
rm -rf "$work" && mkdir -p "$work"
out=${OUT:-$work}
mkdir -p "$out"
say() { printf '[gpu.sh %3ds] %s\n' $((SECONDS - t_start)) "$*"; }

run() {

# ---- Python side: the carried wheels (ultralytics and ultralytics-thop, pure Python)
if ls .whl/*.whl >/dev/null 2>&1; then
  if $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" .whl/*.whl; then
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
    say "installed $(ls .whl/*.whl | xargs -n1 basename | tr '\n' ' ')into $work/site"
  else
    say "WARNING: installing .whl/*.whl failed; torch_step.py will say what it cannot import"
  fi
fi

# ---- device and commit
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ -n "$device" ] || device=$($PY -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null)
[ -n "$device" ] || device="no GPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
commit=$(checkout_commit)
[ "$commit" = unknown ] && [ -f "$prebuilt/COMMIT" ] && commit=$(cat "$prebuilt/COMMIT")

# ---- the CUDA libraries yolort loads (cuDNN, cuBLASLt) and yolocc's NVRTC: the system's or the
# Python packages' (PyTorch's wheels carry them); only yolocc/yolort see this path, never Python
cuda_dirs=$($PY - <<'EOF' 2>/dev/null
import glob, os, site, sys
names = ["libcudnn.so.9", "libcublasLt.so.13", "libcublasLt.so.12", "libnvrtc.so.13", "libnvrtc.so.12"]
roots = [p for p in (site.getsitepackages() if hasattr(site, "getsitepackages") else []) + sys.path if p.endswith("-packages")]
dirs = []
for r in ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"] + roots:
    for n in names:
        for f in glob.glob(os.path.join(r, n)) + glob.glob(os.path.join(r, "nvidia", "*", "lib", n)):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
EOF
)
yolo_ld=$cuda_dirs

# ---- yolocc and yolort: the prebuilt ones when they are of this tree, else make
yolocc_err="" YOLOCC="" YOLORT="" use_prebuilt=0
stamp=$(src_stamp)
if [ -x "$prebuilt/bin/yolort" ] && [ "$(cat "$prebuilt/STAMP" 2>/dev/null)" = "$stamp" ]; then
  use_prebuilt=1
else
  [ -d "$prebuilt" ] && say "prebuilt binaries are of another tree (stamp $(cat "$prebuilt/STAMP" 2>/dev/null) != $stamp): building"
  say "make (BUILD=build/gpu)"
  if make -s -j"$(nproc)" BUILD=build/gpu build/gpu/yolocc build/gpu/yolort > "$work/make.log" 2>&1; then
    YOLOCC=$root/build/gpu/yolocc YOLORT=$root/build/gpu/yolort
  else
    tail -5 "$work/make.log"
    if [ -x "$prebuilt/bin/yolort" ]; then
      say "WARNING: make failed; using the STALE prebuilt binaries (commit $(cat "$prebuilt/COMMIT" 2>/dev/null))"
      use_prebuilt=1
    else
      yolocc_err="build failed: $(grep -m1 -E 'error|No such file|not found' "$work/make.log" | cut -c1-200)"
    fi
  fi
fi
if [ $use_prebuilt = 1 ]; then
  # Python's tarfile and lzma rather than tar/xz, which a minimal image may lack
  $PY -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$prebuilt/lib.tar.xz" "$work/prebuilt"
  YOLOCC=$root/$prebuilt/bin/yolocc YOLORT=$root/$prebuilt/bin/yolort
  yolo_ld="$work/prebuilt/lib${yolo_ld:+:$yolo_ld}"
  say "using the prebuilt yolocc/yolort of commit $(cat "$prebuilt/COMMIT" 2>/dev/null)"
  # the rows name the commit whose binaries ran, whatever the machine's copy of .git says
  commit=$(cat "$prebuilt/COMMIT" 2>/dev/null || echo "$commit")
fi
yolo_env() { env LD_LIBRARY_PATH="$yolo_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
say "device: $device; commit: $commit; arch $arch; models $models; batches $batches; layouts $layouts; imgsz $imgsz $precision"

# ---- GPU verification first (--check): make check-gpu's suites, with the prebuilt runner when the
# binaries are prebuilt, else built here; the log comes back as check_gpu.log
if [ $check -ge 1 ]; then
  tests=""
  if [ $use_prebuilt = 1 ] && [ -x "$prebuilt/bin/gpu_tests" ]; then tests=$root/$prebuilt/bin/gpu_tests
  elif make -s -j"$(nproc)" BUILD=build/gpu build/gpu/gpu/run_tests >> "$work/make.log" 2>&1; then tests=$root/build/gpu/gpu/run_tests
  fi
  if [ -n "$tests" ]; then
    say "check-gpu suites ($tests)"
    # the machine's PyTorch is the other side of the tcpstore suite (its TCPStore servers, another version than CI's)
    timeout -k 10 "${GPU_CHECK_TIMEOUT_S:-300}" env YOLOCC_BIN="$YOLOCC" YOLORT_BIN="$YOLORT" YOLOCC_FAST_BIN="$YOLOCC" YOLORT_FAST_BIN="$YOLORT" \
      YOLOCC_TORCH_PYTHON="$(command -v "$PY")" LD_LIBRARY_PATH="$yolo_ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tests" --verbose > "$out/check_gpu.log" 2>&1
    say "check-gpu exit $?: $(grep -a 'Synthesis' "$out/check_gpu.log" | tail -1)"
    grep -a -E '^\[(FAIL|----)\]' "$out/check_gpu.log" | head -40
  else
    say "check-gpu: no test runner (make failed: see $work/make.log)"
  fi
  [ $check = 2 ] && exit 0
fi

# ---- plans: the prebuilt one for this arch when the binaries are prebuilt, else compiled here
declare -A plan_err
for m in $models; do
  for b in $batches; do
    for l in $layouts; do
      k=$m/$b/$l p=$work/$(plan_name "$m" "$b" "$l") log=$work/compile_${m}_${b}_$l.log
      if [ -n "$yolocc_err" ]; then plan_err[$k]=$yolocc_err; continue; fi
      if [ $use_prebuilt = 1 ] && [ -f "$prebuilt/plans/$(plan_name "$m" "$b" "$l").xz" ]; then
        $PY -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
          "$prebuilt/plans/$(plan_name "$m" "$b" "$l").xz" "$p"
      elif ! yolo_env "$YOLOCC" models/yolov8.yaml --scale "${m#yolov8}" --imgsz $imgsz --batch "$b" --precision $precision --layout "$l" \
            --target cuda --arch "$arch" -o "$p" > "$log" 2>&1; then
        plan_err[$k]="compile failed: $(tail -1 "$log" | cut -c1-200)"
      fi
      [ -z "${plan_err[$k]:-}" ] && say "plan $m b$b $l: $(grep -m1 -- '->' "$log" 2>/dev/null || echo prebuilt)"
    done
  done
done

# ---- --profile: where each plan's step spends the device's time, then stop
if [ "$profile" != 0 ]; then
  for m in $models; do
    for b in $batches; do
      for l in $layouts; do
        [ -n "${plan_err[$m/$b/$l]:-}" ] && { say "$m b$b $l: ${plan_err[$m/$b/$l]}"; continue; }
        say "yolort bench --profile $profile $m b$b $l"
        yolo_env timeout -k 10 120 "$YOLORT" bench "$work/$(plan_name "$m" "$b" "$l")" --steps 5 --warmup 2 --profile "$profile" 2>&1 | tee -a "$out/profile.txt"
      done
    done
  done
  exit 0
fi

torch_dev=cuda steps=20
[ $dry = 1 ] && torch_dev=cpu steps=1
csv() { echo "$1" | tr ' ' ','; }
left() { echo $((budget - (SECONDS - t_start))); }

# ---- PyTorch eager AMP first: it is quick, and recorded even if yolocc takes the device down
say "PyTorch eager AMP"
t=$(left); [ "$t" -gt 200 ] && t=200; [ "$t" -lt 60 ] && t=60   # timeout 0 would mean none
timeout -k 10 "$t" $PY bench/torch_step.py --device $torch_dev --imgsz $imgsz \
  --models "$(csv "$models")" --batches "$(csv "$batches")" --modes eager --steps $steps --warmup 3 > "$work/torch_eager.jsonl"
say "PyTorch eager exit $?"; cat "$work/torch_eager.jsonl"

# ---- yolocc: each step timed from the host after the device finished (cuda_step_run synchronises);
# each configuration's timeout leaves torch.compile at least 150 s of the budget
n_left=$(( $(echo $models | wc -w) * $(echo $batches | wc -w) * $(echo $layouts | wc -w) ))
for m in $models; do
  for b in $batches; do
    for l in $layouts; do
      j=$work/yolocc_${m}_${b}_$l.json
      if [ -n "${plan_err[$m/$b/$l]:-}" ]; then echo "${plan_err[$m/$b/$l]}" > "$j.err"; n_left=$((n_left - 1)); continue; fi
      cap=$(( ($(left) - 150) / n_left )); [ $cap -lt 30 ] && cap=30
      [ $cap -gt "${YOLOCC_STEP_TIMEOUT_S:-120}" ] && cap=${YOLOCC_STEP_TIMEOUT_S:-120}
      n_left=$((n_left - 1))
      say "yolort bench $m b$b $l (timeout ${cap} s)"
      yolo_env timeout -k 10 "$cap" "$YOLORT" bench "$work/$(plan_name "$m" "$b" "$l")" --steps $steps --warmup 2 \
        --max-seconds 20 --json > "$j" 2> "$j.err"
      rc=$?
      cat "$j" "$j.err"
      if [ $rc -ne 0 ]; then
        [ $rc = 124 ] || [ $rc = 137 ] && echo "timed out after $cap s" >> "$j.err"
        [ -s "$j.err" ] || echo "yolort exited $rc" > "$j.err"
        rm -f "$j"
      fi
    done
  done
done

# ---- where yolocc's step spends the device's time, in the same call: one eager step timed launch by
# launch for each model at the largest batch in the first layout (profile.txt comes back), so a session
# with one device call learns what limits the step without starting the machine again. It comes
# before torch.compile, whose column the target does not need (GPU_BENCH_PROFILE_ROWS=0: no profile).
prof_rows=${GPU_BENCH_PROFILE_ROWS:-25}
prof_batch=$(echo "$batches" | tr ' ' '\n' | sort -rn | head -1) prof_layout=${layouts%% *}
if [ "$prof_rows" -gt 0 ]; then
  for m in $models; do
    [ -n "${plan_err[$m/$prof_batch/$prof_layout]:-}" ] && continue
    t=$(( $(left) - 60 )); [ $t -gt 60 ] && t=60
    [ $t -lt 20 ] && { say "profile $m b$prof_batch $prof_layout: skipped, the budget is spent"; continue; }
    say "yolort bench --profile $prof_rows $m b$prof_batch $prof_layout (timeout $t s)"
    yolo_env timeout -k 5 "$t" "$YOLORT" bench "$work/$(plan_name "$m" "$prof_batch" "$prof_layout")" --steps 3 --warmup 1 \
      --profile "$prof_rows" >> "$out/profile.txt" 2>&1
    say "profile exit $?"
  done
fi

# ---- torch.compile last: compilation takes minutes; whatever the budget leaves (batch 64 first)
if [ $dry = 0 ] && [ "$(left)" -gt 60 ]; then
  say "PyTorch torch.compile (budget $(( $(left) - 30 )) s)"
  timeout -k 10 $(( $(left) - 30 )) $PY bench/torch_step.py --device $torch_dev --imgsz $imgsz --models "$(csv "$models")" \
    --batches "$(echo "$batches" | tr ' ' '\n' | sort -rn | paste -sd,)" --modes compile --steps $steps --warmup 3 > "$work/torch_compile.jsonl"
  say "PyTorch compile exit $?"; cat "$work/torch_compile.jsonl"
else
  : > "$work/torch_compile.jsonl"
fi

# ---- the table, and with --append the rows
results=bench/RESULTS.md
if [ $dry = 1 ]; then cp "$results" "$work/RESULTS.md"; results=$work/RESULTS.md; fi
WORK=$work IMGSZ=$imgsz MODELS=$models BATCHES=$batches LAYOUTS=$layouts PRECISION=$precision DEVICE=$device COMMIT=$commit RESULTS=$results OUTDIR=$out \
  APPEND=$append $PY - <<'EOF'
# the table: yolocc against eager AMP and torch.compile per (model, batch); rows for RESULTS.md
import datetime, json, os, re
E = os.environ
work, out = E["WORK"], E["OUTDIR"]
models, batches, layouts = E["MODELS"].split(), [int(b) for b in E["BATCHES"].split()], E["LAYOUTS"].split()


def jsonl(path):
    rows = {}
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("{"):
                r = json.loads(line)
                rows[(r["model"], int(r["batch"]))] = r
    return rows


eager, comp = jsonl(f"{work}/torch_eager.jsonl"), jsonl(f"{work}/torch_compile.jsonl")
yolo = {}
for m in models:
    for b in batches:
        for lay in layouts:
            j, e = f"{work}/yolocc_{m}_{b}_{lay}.json", f"{work}/yolocc_{m}_{b}_{lay}.json.err"
            if os.path.exists(j) and os.path.getsize(j):
                yolo[(m, b, lay)] = json.loads(open(j).read().strip().splitlines()[-1])
            elif os.path.exists(e):
                msg = " / ".join(l.strip() for l in open(e) if l.strip()) or "failed"
                msg = re.sub(r"^yolort: error: \S+\.plan: ", "", msg)  # the plan's temporary path says nothing
                yolo[(m, b, lay)] = {"error": msg[:250]}


def ok(r):
    return r is not None and "error" not in r and r.get("images_per_s")


def ips(r):
    if r is None:
        return "not run"
    if "error" in r:
        return "failed: " + r["error"]
    return f"{r['images_per_s']:.1f}"


def gb(r):
    return f"{r['peak_bytes'] / 1e9:.3f}" if ok(r) and r.get("peak_bytes") is not None else "—"


def ratio(x, y, key):
    return f"{x[key] / y[key]:.2f}" if ok(x) and ok(y) and x.get(key) is not None and y.get(key) else "—"


def cell(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
rows, console, combined = [], [], []
for m in models:
    for b in batches:
        e, c = eager.get((m, b)), comp.get((m, b))
        for side, r in (("eager_amp", e), ("compile_amp", c)):
            if r is not None:
                combined.append(dict(r, side=side, model=m, batch=b))
        for lay in layouts:
            y = yolo.get((m, b, lay))
            if y is not None:
                combined.append(dict(y, side="yolocc", model=m, batch=b, layout=lay))
            host = y.get("host_line", "—") if ok(y) else "—"
            imgsz = next((r["imgsz"] for r in (y, e, c) if r and r.get("imgsz")), E["IMGSZ"])
            cells = [date, E["COMMIT"], E["DEVICE"], m, imgsz, b, E["PRECISION"], lay, ips(y), ips(e), ips(c), ratio(y, e, "images_per_s"),
                     gb(y), gb(e), ratio(y, e, "peak_bytes"), host]
            rows.append("| " + " | ".join(cell(x) for x in cells) + " |")
            console.append((m, b, lay, ips(y), ips(e), ips(c), ratio(y, e, "images_per_s"), gb(y), gb(e), gb(c), ratio(y, e, "peak_bytes"),
                            f"{y['plan_device_bytes'] / 1e9:.3f}" if ok(y) and y.get("plan_device_bytes") is not None else "—"))

print(f"\nGPU training step, {E['PRECISION']}, imgsz {E['IMGSZ']}; device {E['DEVICE']}, commit {E['COMMIT']}")
print("images/s = batch / median step; peak GB: yolocc = device used-memory increase (cuMemGetInfo), "
      "PyTorch = torch.cuda.max_memory_allocated")
hdr = ("model", "batch", "layout", "yolocc img/s", "eager img/s", "compile img/s", "y/eager", "yolocc GB", "eager GB", "compile GB", "mem y/eager", "plan GB")
w = [8, 5, 6, 14, 12, 13, 8, 10, 9, 10, 11, 8]
print("  ".join(h.rjust(n) for h, n in zip(hdr, w)))
for r in console:
    print("  ".join((str(x) if len(str(x)) <= n else str(x)[: n - 1] + "…").rjust(n) for x, n in zip(r, w)))
for (m, b, lay), y in yolo.items():
    if not ok(y):
        print(f"yolocc {m} b{b} {lay}: {ips(y)}")
    else:
        print(f"yolocc {m} b{b} {lay}: set-up {y.get('setup_s', '?')} s before step 0; {y.get('host_line', '')}")
for m in models:
    for lay in layouts:
        y, e = yolo.get((m, 64, lay)), eager.get((m, 64))
        if ok(y) and ok(e):
            s, mem = y["images_per_s"] / e["images_per_s"], y["peak_bytes"] / e["peak_bytes"]
            print(f"target, {m} batch 64 {lay}: images/s {s:.2f}x eager (>= 2: {'met' if s >= 2 else 'NOT met'}), "
                  f"peak memory {mem:.2f}x eager (<= 0.5: {'met' if mem <= 0.5 else 'NOT met'})")
        elif (m, 64, lay) in yolo or (m, 64) in eager:
            print(f"target, {m} batch 64 {lay}: not measured (a side failed or did not run)")

with open(f"{out}/results.jsonl", "w") as f:
    for r in combined:
        f.write(json.dumps(r) + "\n")
with open(f"{out}/table.md", "w") as f:
    f.write("\n".join(rows) + "\n")
if E.get("APPEND") == "1":
    path = E["RESULTS"]
    lines = open(path).read().split("\n")
    head = next((i for i, l in enumerate(lines) if l.startswith("## GPU training step")), None)
    if head is None:  # the section is missing: add it at the end
        lines += ["", "## GPU training step against PyTorch (`bench/gpu.sh --append`, issue 6)", "",
                  "| date | commit | device | model | imgsz | batch | precision | yolocc layout | yolocc img/s | eager img/s | compile img/s "
                  "| yolocc/eager img/s | yolocc peak GB | eager peak GB | yolocc/eager peak | host ops |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        head = len(lines) - 3
    i = next(k for k in range(head, len(lines)) if lines[k].startswith("| date |"))
    while i + 1 < len(lines) and lines[i + 1].startswith("|"):
        i += 1
    lines[i + 1:i + 1] = rows
    text = "\n".join(lines)
    with open(path, "w") as f:
        f.write(text if text.endswith("\n") else text + "\n")
    print(f"appended {len(rows)} rows under the GPU section of {path}")
EOF
local rc=$?
if [ -n "${OUT:-}" ]; then cp "$results" "$OUT/RESULTS.md"; fi
say "done in $((SECONDS - t_start)) s"
return $rc
}

run 2>&1 | tee "$out/gpu_bench.log"
exit "${PIPESTATUS[0]}"
