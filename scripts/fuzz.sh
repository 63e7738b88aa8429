#!/usr/bin/env bash
# scripts/fuzz.sh — runs each libFuzzer binary given for FUZZ_SECONDS, seeded
# from the project's own files; fails on any crash, leak or timeout.
set -uo pipefail
BUILD=${BUILD:-build}
secs=${FUZZ_SECONDS:-30}
status=0
for bin in "$@"; do
  name=$(basename "$bin")
  corpus="$BUILD/fuzz/corpus-$name"
  mkdir -p "$corpus"
  max_len=65536
  case "$name" in
    fuzz_frontend) cp -f models/*.yaml tests/bad/*.yaml "$corpus"/ 2>/dev/null ;;
    fuzz_plan)
      # a real plan as the seed, made by this build's compiler
      "$BUILD/yolocc" models/tiny.yaml --imgsz 32 --batch 1 -o "$corpus/tiny.plan" >/dev/null || status=1
      max_len=800000 ;;
    *) [ -d "tests/fuzz/seeds/$name" ] && cp -f "tests/fuzz/seeds/$name"/* "$corpus"/ 2>/dev/null ;;
  esac
  dict=()
  [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
  echo "fuzz: $name for ${secs}s"
  "$bin" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "${dict[@]}" -artifact_prefix="$BUILD/fuzz/$name-" "$corpus" >"$BUILD/fuzz/$name.log" 2>&1
  rc=$?
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$BUILD/fuzz/$name.log" | sed "s/^/fuzz: $name /"
  if [ $rc -ne 0 ]; then
    echo "fuzz: $name FAILED (exit $rc)"; grep -E "ERROR|SUMMARY|Test unit written" "$BUILD/fuzz/$name.log" | head -20
    status=1
  fi
done
exit $status
