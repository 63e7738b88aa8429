#!/usr/bin/env bash
# scripts/update-golden.sh — rewrites tests/golden/codegen from what the
# current yolocc generates (the tiny model: C for the CPU target, CUDA at
# bf16). Run it only for an intended change, then review `git diff`.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${YOLOCC_BIN:-build/yolocc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf tests/golden/codegen
mkdir -p tests/golden/codegen
"$bin" models/tiny.yaml --imgsz 64 --batch 2 --target cpu --emit-src tests/golden/codegen/cpu -o "$tmp/p.plan"
"$bin" models/tiny.yaml --imgsz 64 --batch 2 --precision bf16 --target cuda --emit-src tests/golden/codegen/cuda -o "$tmp/p.plan"
git status --short tests/golden/codegen
