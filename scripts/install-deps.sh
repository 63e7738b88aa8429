#!/usr/bin/env bash
# scripts/install-deps.sh — installs the Debian packages yolocc builds and
# tests with, skipping what is already there. Needs root (or sudo) only when
# something is missing. Open MPI (openmpi-bin, libopenmpi-dev) builds and tests
# the CPU target's data parallelism; libdnnl-dev (oneDNN) runs the CPU
# convolutions; libssl-dev (libcrypto) hashes kernel-cache
# keys; protobuf-c writes the ONNX files of yolort export; g++ builds the CUDA kernels' source for the host in the cuda_emul
# tests; FFmpeg's libraries (libavformat, libavcodec, libswscale; headers to
# build, opened at run time only for videos) read and write videos for
# yolort predict. The CUDA toolkit is expected at /usr/local/cuda (NVRTC and the
# headers the CUDA tests check against; no GPU needed).
set -euo pipefail

# header or tool that proves the package is present -> package name
declare -A NEED=(
  [/usr/include/yaml.h]=libyaml-dev
  [/usr/include/cjson/cJSON.h]=libcjson-dev
  [/usr/include/jansson.h]=libjansson-dev
  [/usr/include/zlib.h]=zlib1g-dev
  [/usr/include/jpeglib.h]=libjpeg62-turbo-dev
  [/usr/include/png.h]=libpng-dev
  [/usr/include/gd.h]=libgd-dev
  [/usr/include/x86_64-linux-gnu/libavformat/avformat.h]=libavformat-dev
  [/usr/include/x86_64-linux-gnu/libavcodec/avcodec.h]=libavcodec-dev
  [/usr/include/x86_64-linux-gnu/libswscale/swscale.h]=libswscale-dev
  [/usr/include/protobuf-c/protobuf-c.h]=libprotobuf-c-dev
  [/usr/bin/protoc-c]=protobuf-c-compiler
  [/usr/include/openssl/evp.h]=libssl-dev
  [/usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h]=libopenblas-dev
  [/usr/include/oneapi/dnnl/dnnl.h]=libdnnl-dev
  [/usr/include/criterion/criterion.h]=libcriterion-dev
  [/usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h]=libopenmpi-dev
  [/usr/bin/mpirun]=openmpi-bin
  [/usr/bin/pkg-config]=pkg-config
  [/usr/bin/clang]=clang
  [/usr/bin/g++]=g++
)
missing=()
for f in "${!NEED[@]}"; do
  [ -e "$f" ] || missing+=("${NEED[$f]}")
done
# libFuzzer's runtime ships with clang's compiler-rt package
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || missing+=(libclang-rt-dev)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "deps: need root to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
