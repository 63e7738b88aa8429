# yolocc — build, test, demo. Host code is C11 with warnings as errors; the
SHELL := /bin/bash
# test suite runs under AddressSanitizer and UndefinedBehaviorSanitizer.

CC      ?= cc
BUILD   ?= build
WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla
# Open MPI (CPU data parallelism, runtime/dist); its headers as system headers
MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell pkg-config --cflags ompi-c 2>/dev/null))
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)
DEFS    := -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE $(MPI_CFLAGS) -I$(BUILD)/gen
CFLAGS  ?= -O2 -g
# OpenMP: the fast CPU convolutions share the generated kernels' thread pool
OMP     := -fopenmp
# libgomp: the CPU target's generated kernels (built with -fopenmp, loaded
# at run time) start its worker threads; linked even though nothing here
# calls it, so it stays loaded after a plan's kernels are closed (unloading it
# under its idle workers crashes the process at exit)
LIBS    := -lyaml -lcjson -ljansson -lz -ljpeg -lpng -lopenblas -ldnnl -lcrypto -lprotobuf-c $(MPI_LIBS) -Wl,--no-as-needed -lgomp -Wl,--as-needed -ldl -lpthread -lm
SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer

# the ONNX schema yolort export writes, turned into C by protoc-c (runtime/export/onnx.proto)
PB_SRC  := $(BUILD)/gen/onnx.pb-c.c
LIB_SRC := $(wildcard ir/*.c) $(filter-out compiler/main.c,$(wildcard compiler/*.c)) $(wildcard passes/*.c) $(filter-out runtime/yolort_main.c,$(wildcard runtime/*.c runtime/*/*.c)) $(PB_SRC)
HDRS    := $(wildcard ir/*.h ir/*.def compiler/*.h passes/*.h runtime/*.h runtime/*/*.h templates/*.h) $(BUILD)/gen/onnx.pb-c.h
TEST_SRC:= $(wildcard tests/*.c)
CORPUS  ?= ../shared/reference/ultralytics-cfg

# kernel templates (templates/, files two levels down: cuda/lib/*.cu), embedded as one blob (scripts/embed-templates.sh)
TPL     := $(sort $(wildcard templates/*.h templates/*/*.* templates/*/*/*.*))
TPL_OBJ := $(BUILD)/obj/templates.o

OBJ     := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(TPL_OBJ)
SAN_OBJ := $(LIB_SRC:%.c=$(BUILD)/san/%.o) $(TPL_OBJ)

.PHONY: all deps demo test check check-gpu fuzz fuzz-run bench-loader golden clean ort-venv torch-venv

all: $(BUILD)/yolocc $(BUILD)/yolort

$(BUILD)/.deps: scripts/install-deps.sh
	@mkdir -p $(BUILD)
	./scripts/install-deps.sh
	@touch $@

deps: $(BUILD)/.deps

$(BUILD)/gen/onnx.pb-c.c $(BUILD)/gen/onnx.pb-c.h &: runtime/export/onnx.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen --proto_path=runtime/export runtime/export/onnx.proto

$(BUILD)/gen/templates.S: $(TPL) scripts/embed-templates.sh
	@mkdir -p $(dir $@)
	scripts/embed-templates.sh $@ $(TPL)

$(TPL_OBJ): $(BUILD)/gen/templates.S $(TPL)
	@mkdir -p $(dir $@)
	$(CC) -c $< -o $@

$(BUILD)/obj/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(OMP) $(CFLAGS) -c $< -o $@

$(BUILD)/san/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(OMP) -O1 -g $(SAN) -c $< -o $@

$(BUILD)/yolocc: $(OBJ) $(BUILD)/obj/compiler/main.o
	$(CC) $(CFLAGS) $^ -o $@ $(LIBS)

$(BUILD)/san/yolocc: $(SAN_OBJ) $(BUILD)/san/compiler/main.o
	$(CC) $(SAN) $^ -o $@ $(LIBS)

$(BUILD)/yolort: $(OBJ) $(BUILD)/obj/runtime/yolort_main.o
	$(CC) $(CFLAGS) $^ -o $@ $(LIBS)

$(BUILD)/san/yolort: $(SAN_OBJ) $(BUILD)/san/runtime/yolort_main.o
	$(CC) $(SAN) $^ -o $@ $(LIBS)

$(BUILD)/san/run_tests: $(SAN_OBJ) $(TEST_SRC) $(wildcard tests/*.h) $(HDRS)
	$(CC) $(WARN) $(DEFS) $(OMP) -O1 -g $(SAN) $(TEST_SRC) $(SAN_OBJ) -o $@ $(LIBS) -lcriterion

# The quick start: set-up, build, then the main job on a built-in default:
# generate a shapes dataset, compile a small YOLOv8-style model into a plan and
# train it on the CPU with validation mAP, progress bars and a run directory,
# then detect objects in the validation images with the best weights and
# export them as a deployable ONNX file.
DEMO        := $(BUILD)/demo
DEMO_EPOCHS ?= 12
demo: $(BUILD)/.deps
	$(MAKE) $(BUILD)/yolocc $(BUILD)/yolort
	$(BUILD)/yolocc summary models/tiny.yaml
	test -f $(DEMO)/data/data.yaml || $(BUILD)/yolort datagen $(DEMO)/data --images 2000 --size 128 --classes 3
	$(BUILD)/yolocc models/tiny.yaml --imgsz 128 --batch 16 --optimizer adamw -o $(DEMO)/tiny.plan
	$(BUILD)/yolort train $(DEMO)/tiny.plan --data $(DEMO)/data/data.yaml --epochs $(DEMO_EPOCHS) --close-mosaic 3 \
	  --project $(DEMO)/runs --name train --exist-ok
	rm -rf $(DEMO)/runs/predict
	$(BUILD)/yolort predict $(DEMO)/tiny.plan --weights $(DEMO)/runs/train/weights/best.safetensors \
	  --source $(DEMO)/data/images/val --save-txt --project $(DEMO)/runs --name predict
	$(BUILD)/yolort export $(DEMO)/tiny.plan --weights $(DEMO)/runs/train/weights/best.safetensors

# ONNX Runtime and onnx (its checker) from PyPI, for the export tests: the
# exported file is checked against the ONNX spec and runs in the runtime it
# is deployed with. Where PyPI cannot be reached those tests skip
# (.ci/run makes the venv first, so CI fails instead).
ORT_VERSION := 1.32.0
ONNX_VERSION := 1.23.2
# the stamp names the versions, so changing one remakes the venv and nothing else does
ORT_STAMP := $(BUILD)/ort/.installed-$(ORT_VERSION)-$(ONNX_VERSION)
$(ORT_STAMP):
	rm -rf $(BUILD)/ort
	python3 -m venv $(BUILD)/ort
	$(BUILD)/ort/bin/pip install -q --disable-pip-version-check onnxruntime==$(ORT_VERSION) onnx==$(ONNX_VERSION)
	touch $@

ort-venv: $(ORT_STAMP)

# PyTorch 2 for the torchrun and TCPStore tests (tests/test_dist.c,
# tests/test_tcpstore.c): its launcher and its store's servers are the other
# side of those tests. About 3 GB from PyPI (its Linux wheels carry CUDA), so
# neither .ci/run nor `make test` makes it; without it those tests are skipped.
# 2.11.0 is the GPU machine's version (the tests also passed with 2.5.1 and 2.15.0).
TORCH_VERSION := 2.11.0
TORCH_STAMP := $(BUILD)/torch/.installed-$(TORCH_VERSION)
$(TORCH_STAMP):
	rm -rf $(BUILD)/torch
	python3 -m venv $(BUILD)/torch
	$(BUILD)/torch/bin/pip install -q --disable-pip-version-check torch==$(TORCH_VERSION)
	touch $@

torch-venv: $(TORCH_STAMP)

# The whole suite under ASan+UBSan. CLI tests run the sanitized binary.
test: $(BUILD)/.deps
	-$(MAKE) ort-venv
	$(MAKE) $(BUILD)/san/yolocc $(BUILD)/san/yolort $(BUILD)/san/run_tests $(BUILD)/yolocc $(BUILD)/yolort
	YOLOCC_BIN=$(BUILD)/san/yolocc YOLORT_BIN=$(BUILD)/san/yolort YOLOCC_FAST_BIN=$(BUILD)/yolocc YOLORT_FAST_BIN=$(BUILD)/yolort \
	  YOLOCC_CORPUS=$(CORPUS) ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  $(BUILD)/san/run_tests --jobs=2 $(TEST_ARGS)
	$(MAKE) fuzz-run FUZZ_SECONDS=$(FUZZ_SECONDS)

# The CUDA backend's tests on a machine with a GPU (without one they print
# `SKIP: no CUDA device`): its suites in one runner without sanitizers, which
# do not mix well with the CUDA driver (tests at -O0, library at -O2); also
# the tcpstore suite, against the GPU machine's own PyTorch (YOLOCC_TORCH_PYTHON).
# bench/gpu.sh --prepare ships this runner prebuilt for a GPU machine that
# cannot build the project (bench/GPU.md).
GPU_TEST_SRC := tests/test_cuda.c tests/test_cuda_step.c tests/test_cuda_step2.c tests/test_cuda_layout.c tests/test_cuda_step_gpu.c tests/test_lib_kernels.c tests/test_bench_step.c tests/test_dynload.c tests/test_train_cuda.c tests/test_comm_nccl.c tests/test_cuda_loss.c tests/test_cuda_divergence.c tests/test_tcpstore.c
$(BUILD)/gpu/run_tests: $(OBJ) $(GPU_TEST_SRC) $(wildcard tests/*.h) $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) -O0 -g $(GPU_TEST_SRC) $(OBJ) -o $@ $(LIBS) -lcriterion

check-gpu: $(BUILD)/.deps
	$(MAKE) $(BUILD)/gpu/run_tests $(BUILD)/yolocc $(BUILD)/yolort
	YOLOCC_BIN=$(BUILD)/yolocc YOLORT_BIN=$(BUILD)/yolort YOLOCC_FAST_BIN=$(BUILD)/yolocc YOLORT_FAST_BIN=$(BUILD)/yolort \
	  $(BUILD)/gpu/run_tests --verbose $(TEST_ARGS)

# libFuzzer harnesses: every tests/fuzz/fuzz_NAME.c becomes build/fuzz/fuzz_NAME;
# scripts/fuzz.sh seeds and runs each for FUZZ_SECONDS.
FUZZ_SECONDS ?= 30
FUZZERS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(LIB_SRC) $(HDRS) $(TPL_OBJ)
	@mkdir -p $(dir $@)
	clang $(WARN) $(DEFS) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	  $< $(LIB_SRC) $(TPL_OBJ) -o $@ $(LIBS)

fuzz: $(FUZZERS)

fuzz-run: $(FUZZERS) $(BUILD)/yolocc
	FUZZ_SECONDS=$(FUZZ_SECONDS) BUILD=$(BUILD) ./scripts/fuzz.sh $(FUZZERS)

# Data-pipeline throughput against a plain decode loop (bench/LOADER.md).
bench-loader: $(BUILD)/.deps
	bench/loader.sh

# Rewrites the golden generated sources (tests/golden/codegen) after an
# intended codegen change; review the diff before committing.
golden: $(BUILD)/yolocc
	YOLOCC_BIN=$(BUILD)/yolocc scripts/update-golden.sh

clean:
	rm -rf $(BUILD)
