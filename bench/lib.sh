# bench/lib.sh — what the host-side bench scripts share (sourced, not run):
# starting from the repository root with fresh binaries and a scratch folder,
# and putting dated rows at the end of their own table in bench/RESULTS.md.

# bench_start MAKE_TARGET...: cd to the root, make the targets quietly, and
# set $tmp to a scratch folder removed on exit.
bench_start() {
  set -euo pipefail
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  make -s "$@" >/dev/null
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
}

# bench_append_rows KEY ROWS: ROWS (lines) after the last row of the last
# table in bench/RESULTS.md whose header line contains KEY, wherever that
# table sits (the file has several sections; appending at its end would put
# rows under another table's header).
bench_append_rows() {
  KEY="$1" ROWS="$2" python3 - <<'PY'
import os
path = "bench/RESULTS.md"
lines = open(path).read().split("\n")
heads = [i for i, l in enumerate(lines) if l.startswith("| date |") and os.environ["KEY"] in l]
if not heads:
    raise SystemExit("bench/RESULTS.md has no table whose header has " + repr(os.environ["KEY"]))
end = heads[-1] + 1
while end < len(lines) and lines[end].startswith("|"):
    end += 1
lines[end:end] = os.environ["ROWS"].rstrip("\n").split("\n")
open(path, "w").write("\n".join(lines))
PY
}

# bench_need_ultralytics: the Python of the Ultralytics venv
# (tools/ultralytics_reference.py says how to make it) in $ULTRA_PY, or exit 1.
bench_need_ultralytics() {
  ULTRA_PY=${ULTRA_PY:-/opt/ultra/bin/python}
  if ! "$ULTRA_PY" -c 'import torch, ultralytics' >/dev/null 2>&1; then
    echo "$0: $ULTRA_PY cannot import torch and ultralytics; set it up as tools/ultralytics_reference.py says, or set ULTRA_PY" >&2
    exit 1
  fi
}

# bench_machine: "N-core CPU MODEL (no GPU)" for a row's machine column.
bench_machine() {
  echo "$(nproc)-core $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//') (no GPU)"
}

# bench_corpus_files ONLY: the in-scope model files of the Ultralytics corpus
# ($YOLOCC_CORPUS, default ../shared/reference/ultralytics-cfg), one path a
# line; ONLY, when not empty, keeps the names it lists (comma-separated).
# Exits 1 when there is no corpus.
bench_corpus_files() {
  local corpus=${YOLOCC_CORPUS:-../shared/reference/ultralytics-cfg} only=$1 f name
  [ -d "$corpus" ] || { echo "no corpus at $corpus (YOLOCC_CORPUS)" >&2; exit 1; }
  for f in "$corpus"/*.yaml; do
    name=$(basename "$f" .yaml)
    case "$name" in rtdetr-* | yolov8-rtdetr | yolo26 | yolov12_sunsmarterjie) continue ;; esac # out of scope (the corpus README)
    if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then continue; fi
    echo "$f"
  done
}
