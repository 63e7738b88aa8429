#!/usr/bin/env bash
# bench/loader.sh — data-pipeline throughput (bench/loader_bench.c): plain
# decode vs the training loader without/with mosaic, 1 and 2 workers. Builds
# the bench with the project's flags against the sources it needs; writes a
# 200-image 640x480 JPEG dataset to $LOADER_BENCH_DIR (default
# /tmp/yolocc-loader-bench) unless --data DATA.yaml is given.
# Usage: bench/loader.sh [--append] [--data DATA.yaml] [loader_bench options]
set -euo pipefail
cd "$(dirname "$0")/.."
append=0
args=()
for a in "$@"; do
  if [ "$a" = "--append" ]; then append=1; else args+=("$a"); fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -O2 -g \
  bench/loader_bench.c runtime/rng.c runtime/data/augment.c runtime/data/augment_warp.c runtime/data/augment_color.c \
  runtime/data/loader.c runtime/data/image_io.c runtime/data/npy_image.c runtime/data/dataset.c \
  compiler/yaml_doc.c ir/arena.c ir/atomic_file.c ir/diag.c \
  -o "$tmp/loader_bench" -lyaml -ljpeg -lpng -lz -lpthread -lm
"$tmp/loader_bench" --gen "${LOADER_BENCH_DIR:-/tmp/yolocc-loader-bench}" --row "$tmp/row" ${args[@]+"${args[@]}"}
if [ "$append" = 1 ]; then
  cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //; s/  */ /g')
  printf '| %s | %s | %s, %s cores | %s |\n' "$(date -u +%F)" "$(git rev-parse --short HEAD)" "$cpu" "$(nproc)" "$(cat "$tmp/row")" >> bench/LOADER.md
fi
