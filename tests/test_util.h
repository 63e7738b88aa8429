/* tests/test_util.h — helpers shared by the Criterion suites: run the yolocc
 * binary and capture its output, compile a model in-process, find the
 * Ultralytics corpus (tests skip cleanly without it). */
#ifndef YOLOCC_TEST_UTIL_H
#define YOLOCC_TEST_UTIL_H
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../compiler/lower.h"
#include "../compiler/summary.h"

typedef struct CliResult {
    int status;        /* exit status, or -1 if it did not exit normally */
    char *out, *err;   /* malloc'd, NUL-terminated */
} CliResult;

static inline char *tu_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (buf) buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

static inline const char *tu_bin(void) {
    const char *b = getenv("YOLOCC_BIN");
    return b ? b : "build/yolocc";
}

/* The binary named by $ENV (e.g. YOLORT_FAST_BIN, an optimised build), else fallback. */
static inline const char *tu_env_bin(const char *env, const char *fallback) {
    const char *b = getenv(env);
    return b ? b : fallback;
}

/* Runs `BIN ARGS` through the shell; ARGS is trusted test text. */
static inline CliResult tu_run_bin(const char *bin, const char *args) {
    char out[] = "/tmp/yolocc-test-out-XXXXXX", err[] = "/tmp/yolocc-test-err-XXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    cr_assert(fo >= 0 && fe >= 0, "mkstemp failed");
    close(fo);
    close(fe);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", bin, args, out, err);
    int st = system(cmd);
    CliResult r = {WIFEXITED(st) ? WEXITSTATUS(st) : -1, tu_slurp(out, NULL), tu_slurp(err, NULL)};
    unlink(out);
    unlink(err);
    cr_assert(r.out && r.err, "cannot read captured output");
    return r;
}

/* Runs `yolocc ARGS` (the binary named by $YOLOCC_BIN). */
static inline CliResult tu_run(const char *args) { return tu_run_bin(tu_bin(), args); }

static inline void tu_free(CliResult *r) {
    free(r->out);
    free(r->err);
}

static inline int tu_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* Loads and compiles a model file in-process; fails the test on error. */
typedef struct Compiled {
    Arena arena;
    ModelConfig cfg;
    Model m;
    ModelSummary s;
    Diag d;
} Compiled;

static inline bool tu_compile(Compiled *c, const char *path, const char *scale, int64_t nc, int imgsz) {
    arena_init(&c->arena, 0);
    diag_init(&c->d, path);
    ModelOptions o = {.scale = scale, .nc = nc};
    return model_cfg_load(&c->arena, path, &o, &c->cfg, &c->d) && model_compile(&c->arena, &c->cfg, imgsz, 1, false, &c->m, &c->s, &c->d);
}

/* Same from YAML text. */
static inline bool tu_compile_text(Compiled *c, const char *name, const char *yaml, const char *scale, int64_t nc) {
    arena_init(&c->arena, 0);
    diag_init(&c->d, name);
    ModelOptions o = {.scale = scale, .nc = nc};
    return model_cfg_parse(&c->arena, name, yaml, strlen(yaml), &o, &c->cfg, &c->d) &&
           model_compile(&c->arena, &c->cfg, 640, 1, false, &c->m, &c->s, &c->d);
}

static inline void tu_release(Compiled *c) { arena_free(&c->arena); }

/* A generated dataset and a tiny-model plan for a trainer test:
 * `yolort datagen DIR/data DATAGEN` and `yolocc models/tiny.yaml PLAN_ARGS -o
 * DIR/PLAN_FILE`, each asserted to succeed. */
static inline void tu_tiny_data_and_plan(const char *dir, const char *datagen, const char *plan_args, const char *plan_file) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "datagen %s/data %s", dir, datagen);
    CliResult r = tu_run_bin(tu_env_bin("YOLORT_BIN", "build/yolort"), cmd);
    cr_assert_eq(r.status, 0, "yolort %s: %s", cmd, r.err);
    tu_free(&r);
    snprintf(cmd, sizeof cmd, "models/tiny.yaml %s -o %s/%s", plan_args, dir, plan_file);
    r = tu_run(cmd);
    cr_assert_eq(r.status, 0, "yolocc %s: %s", cmd, r.err);
    tu_free(&r);
}

/* The Python with onnxruntime, onnx and numpy: $YOLOCC_ORT_PYTHON, else the venv of `make ort-venv`. */
static inline const char *tu_ort_python(void) {
    const char *p = getenv("YOLOCC_ORT_PYTHON");
    return p ? p : "build/ort/bin/python";
}

/* True when tu_ort_python() imports every module of the comma-separated list. */
static inline bool tu_python_has(const char *modules) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -c 'import %s' >/dev/null 2>&1", tu_ort_python(), modules);
    return system(cmd) == 0;
}

/* Runs cmd through the shell; its output (stdout, and stderr when cmd
 * redirects it) into out, cut at cap - 1 bytes; returns pclose's status. */
static inline int tu_popen_read(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen failed: %s", cmd);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    return pclose(p);
}

/* The Python with PyTorch 2 (its TCPStore and torchrun): $YOLOCC_TORCH_PYTHON, else the venv of `make torch-venv`. */
static inline const char *tu_torch_python(void) {
    const char *p = getenv("YOLOCC_TORCH_PYTHON");
    return p ? p : "build/torch/bin/python";
}

/* True when tu_torch_python() has PyTorch 2's TCPStore; else the calling test is skipped, saying why. */
static inline bool tu_have_torch(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s -c 'import torch, sys; from torch.distributed import TCPStore; sys.exit(int(torch.__version__.split(\".\")[0]) < 2)' >/dev/null 2>&1",
             tu_torch_python());
    if (system(cmd) == 0) return true;
    cr_skip_test("no PyTorch 2 (make torch-venv, or YOLOCC_TORCH_PYTHON)");
    return false;
}

static inline const char *tu_corpus(void) {
    const char *d = getenv("YOLOCC_CORPUS");
    if (!d) d = "../shared/reference/ultralytics-cfg";
    struct stat st;
    return stat(d, &st) == 0 && S_ISDIR(st.st_mode) ? d : NULL;
}

#endif
