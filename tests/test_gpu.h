/* tests/test_gpu.h — helpers of the CUDA suites (test_cuda.c,
 * test_cuda_step.c): compile the tiny model into a plan through the CLI, and
 * open device 0 or skip with the line every GPU test prints without one. */
#ifndef YOLOCC_TEST_GPU_H
#define YOLOCC_TEST_GPU_H
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/file.h>

#include "../compiler/lib_kernels.h"
#include "../compiler/nvrtc_build.h"
#include "../runtime/cuda/cuda_device.h"
#include "../runtime/plan_read.h"
#include "test_util.h"

/* The CUDA toolkit's stub driver: every entry point resolves, no device starts. */
#define CUDA_TOOLKIT_STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

/* true when the library file opens by itself (the machine has it) */
static inline bool tu_loadable(const char *name) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h) dlclose(h);
    return h != NULL;
}

/* True when the toolkit's stub driver, cuDNN 9 and cuBLASLt 13 or 12 all open here: the
 * libraries build their host-side descriptors without a device. */
static inline bool tu_cuda_host_libs(void) {
    return tu_loadable(CUDA_TOOLKIT_STUB) && tu_loadable("libcudnn.so.9") && (tu_loadable("libcublasLt.so.13") || tu_loadable("libcublasLt.so.12"));
}

/* Compiles `yolocc ARGS` into a temporary file and reads the plan; the
 * fast (unsanitised) binary when YOLOCC_FAST_BIN names one: some models are big. */
static inline void compile_plan(const char *model_args, Plan *p) {
    const char *bin = getenv("YOLOCC_FAST_BIN") ? getenv("YOLOCC_FAST_BIN") : tu_bin();
    char dir[] = "/tmp/yolocc-plan-XXXXXX", args[1200], path[64], err[512];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/t.plan", dir);
    snprintf(args, sizeof args, "%s -o %s", model_args, path);
    CliResult r = tu_run_bin(bin, args);
    cr_assert_eq(r.status, 0, "yolocc %s: %s", args, r.err);
    tu_free(&r);
    cr_assert(plan_read(path, p, err, sizeof err), "%s", err);
    unlink(path);
    rmdir(dir);
}

/* Compiles `yolocc models/tiny.yaml EXTRA` and reads the plan. */
static inline void tiny_plan(const char *extra, Plan *p) {
    char args[1024];
    snprintf(args, sizeof args, "models/tiny.yaml %s", extra);
    compile_plan(args, p);
}

/* The tiny model's CPU plan (`cpu_args --target cpu`) and CUDA plan
 * (`cuda_args --target cuda`, sm_80 and sm_90): the same step, so tensor and
 * op ids name the same things in both. */
static inline void tiny_plans_cpu_cuda(const char *cpu_args, const char *cuda_args, Plan *pc, Plan *pg) {
    char extra[512];
    snprintf(extra, sizeof extra, "%s --target cpu", cpu_args);
    tiny_plan(extra, pc);
    snprintf(extra, sizeof extra, "%s --target cuda --arch sm_80,sm_90", cuda_args);
    tiny_plan(extra, pg);
    cr_assert(pc->g.n_tensors == pg->g.n_tensors && pc->g.n_ops == pg->g.n_ops, "both targets compile the same step");
    for (int o = 0; o < pc->g.n_ops; o++) cr_assert_eq(pc->g.ops[o].kind, pg->g.ops[o].kind, "op %d", o);
}

/* Renders library kernel k and expects NVRTC to compile it for sm_80. */
static inline void expect_lib_kernel_compiles(const LibKernel *k) {
    char *src = lib_kernel_render(k), err[4096];
    cr_assert_not_null(src, "%s", k->name);
    unsigned char *bin = NULL;
    size_t len = 0;
    cr_expect(nvrtc_compile(k->name, src, "sm_80", false, &bin, &len, err, sizeof err), "%s: %s", k->name, err);
    free(bin);
    free(src);
}

/* GPU tests run in parallel processes on one device, and those that read the device's free
 * memory need it to themselves. Every test that finds a device holds a shared lock on one file
 * until its process exits; tu_gpu_alone trades it for an exclusive one, waiting until no other
 * GPU test runs. One descriptor per process (tu_gpu_lock_fd, defined in test_cuda.c): an
 * exclusive lock through a second one would wait for the first one's shared lock forever. */
extern int tu_gpu_lock_fd;
static inline void tu_gpu_lock(int how) {
    if (tu_gpu_lock_fd < 0) tu_gpu_lock_fd = open("/tmp/yolocc-gpu-tests.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    cr_assert_geq(tu_gpu_lock_fd, 0, "opening /tmp/yolocc-gpu-tests.lock: %s", strerror(errno));
    int rc;
    while ((rc = flock(tu_gpu_lock_fd, how)) != 0 && errno == EINTR) continue;
    cr_assert_eq(rc, 0, "locking /tmp/yolocc-gpu-tests.lock: %s", strerror(errno));
}
static inline void tu_gpu_alone(void) { tu_gpu_lock(LOCK_EX); }

/* True when a CUDA driver with a device is here (the test then shares it: tu_gpu_lock); err says why not. */
static inline bool have_gpu(char *err, int errcap) {
    CudaLibs L;
    int n = 0;
    bool have = cuda_libs_open(&L, NULL, false, err, errcap);
    if (have) {
        have = cuda_libs_check_device(&L, &n, err, errcap);
        cuda_libs_close(&L);
    }
    if (have) tu_gpu_lock(LOCK_SH);
    return have;
}

/* Opens device 0 (its primary context is the one CudaStep shares), or
 * prints `SKIP: no CUDA device` and skips the test. */
static inline void open_gpu_or_skip(CudaDevice *d) {
    char err[1024];
    if (!have_gpu(err, sizeof err)) {
        printf("SKIP: no CUDA device\n");
        fflush(stdout);
        cr_skip_test("no CUDA device: %s", err);
    }
    cr_assert(cuda_device_open(d, 0, false, err, sizeof err), "%s", err);
    cr_log_info("device 0: %s, sm_%d, %d multiprocessors", d->name, d->sm, d->sm_count);
}

static inline int lib_graph_op(Graph *g, OpKind k, const int *in, int n_in, const OpAttrs *a) {
    int o = graph_add_op(g, k, in, n_in, a, 1, 0, op_def(k)->name);
    cr_assert_geq(o, 0, "%s", g->err);
    return g->ops[o].out[0];
}

/* A graph of every library op on odd sizes (the CUDA library kernels'
 * tests): pools with padding, stride and dilation, overlapping windows,
 * non-integer resize ratios, asymmetric pads. Ops in order: 3 x (max pool,
 * its backward), avg pool and backward, resize and backward, pad, crop. */
static inline void lib_odd_graph(Graph *g, Arena *ar) {
    arena_init(ar, 0);
    graph_init(g, ar);
    int x = graph_add_input(g, "x", shape4(2, 3, 9, 11), DT_F32);
    OpAttrs mp = {.kernel = {3, 3}, .stride = {2, 1}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}};
    OpAttrs md = {.kernel = {3, 2}, .stride = {1, 2}, .pad = {1, 1, 0, 0}, .dilation = {2, 3}};
    OpAttrs sp = {.kernel = {5, 5}, .stride = {1, 1}, .pad = {2, 2, 2, 2}, .dilation = {1, 1}};
    OpAttrs ap = {.kernel = {3, 2}, .stride = {2, 1}, .pad = {1, 1, 1, 1}, .dilation = {1, 1}};
    OpAttrs rs = {.out_hw = {20, 22}}, rb = {.out_hw = {9, 11}}, pad = {.pad = {1, 2, 0, 3}};
    const OpAttrs *pools[] = {&mp, &md, &sp};
    for (int i = 0; i < 3; i++) {
        int in[2] = {lib_graph_op(g, OP_MAXPOOL2D, &x, 1, pools[i]), x};
        lib_graph_op(g, OP_MAXPOOL2D_BWD, in, 2, pools[i]);
    }
    int y = lib_graph_op(g, OP_AVGPOOL2D, &x, 1, &ap);
    OpAttrs apb = ap;
    apb.shape = g->tensors[x].shape;
    lib_graph_op(g, OP_AVGPOOL2D_BWD, &y, 1, &apb);
    y = lib_graph_op(g, OP_RESIZE_NEAREST, &x, 1, &rs);
    lib_graph_op(g, OP_RESIZE_NEAREST_BWD, &y, 1, &rb);
    y = lib_graph_op(g, OP_ZEROPAD2D, &x, 1, &pad);
    lib_graph_op(g, OP_CROP2D, &y, 1, &pad);
}

/* The attention library ops on odd sizes (not in lib_odd_graph: attention has
 * two outputs and its gradient four operands and two launches): per case an
 * attention(qkv) and an attention_bwd(d_o, d_v, qkv), ops 2i and 2i + 1.
 * Several heads, key_dim != head_dim (channel groups of LIB_ATT_GROUP cut
 * short), area 1, area 4 as YOLO12 and areas of one token. */
enum { LIB_ATT_CASES = 4 };
static inline void lib_attention_graph(Graph *g, Arena *ar) {
    arena_init(ar, 0);
    graph_init(g, ar);
    /* heads, key_dim, head_dim, area, H, W */
    static const int cases[LIB_ATT_CASES][6] = {{3, 5, 7, 1, 5, 7}, {2, 9, 10, 4, 4, 6}, {1, 16, 3, 3, 3, 5}, {2, 2, 3, 9, 3, 3}};
    for (int i = 0; i < LIB_ATT_CASES; i++) {
        const int *c = cases[i];
        OpAttrs at = {.heads = c[0], .key_dim = c[1], .head_dim = c[2], .area = c[3], .scale = 1.0 / sqrt((double)c[1])};
        char name[16];
        snprintf(name, sizeof name, "qkv%d", i);
        int qkv = graph_add_input(g, name, shape4(2, (int64_t)c[0] * (2 * c[1] + c[2]), c[4], c[5]), DT_F32);
        int o = graph_add_op(g, OP_ATTENTION, &qkv, 1, &at, 2, 0, "attention");
        cr_assert_geq(o, 0, "%s", g->err);
        snprintf(name, sizeof name, "d_o%d", i);
        int in[3] = {graph_add_input(g, name, g->tensors[g->ops[o].out[0]].shape, DT_F32), -1, qkv};
        snprintf(name, sizeof name, "d_v%d", i);
        in[1] = graph_add_input(g, name, g->tensors[g->ops[o].out[1]].shape, DT_F32);
        cr_assert_geq(graph_add_op(g, OP_ATTENTION_BWD, in, 3, &at, 1, 0, "attention_bwd"), 0, "%s", g->err);
    }
}

/* |gpu - cpu| / max(|cpu|, 1e-3); NaN or infinity on one side only is
 * infinitely far */
static inline double rel_diff(double gpu, double cpu) {
    if (isnan(gpu) || isnan(cpu)) return isnan(gpu) && isnan(cpu) ? 0 : INFINITY;
    if (isinf(gpu) || isinf(cpu)) return gpu == cpu ? 0 : INFINITY;
    return fabs(gpu - cpu) / fmax(fabs(cpu), 1e-3);
}

#endif
