/* tests/test_kernel_reuse.c — the C target's two-phase reductions compute
 * their activation once (compiler/kernel_reuse.c): which kernels the
 * rewrite takes and what it leaves in each phase, and that each rewritten
 * kernel, built with the system compiler, writes the same bits as the
 * kernel rendered without the rewrite on the same random buffers. */
#include <stdint.h>

#include "../compiler/cc_build.h"
#include "../compiler/kernel_render.h"
#include "../compiler/kernel_reuse.h"
#include "../runtime/kernel_so.h"
#include "test_step.h"

static int count_ops(const Kernel *k, KSection s, KInstrOp op) {
    int n = 0;
    for (int r = 0; r < s.n; r++) n += k->code[s.first + r].op == op;
    return n;
}

static bool element_store_in(const Kernel *k, KSection s) {
    for (int r = 0; r < s.n; r++)
        if (k->code[s.first + r].op == KI_STORE && k->code[s.first + r].at == KA_ELEM) return true;
    return false;
}

static void lower_plan(const char *args, Plan *p, KProgram *kp) {
    char path[22], err[512];
    compile_and_read(args, path, p);
    unlink(path);
    cr_assert(kernel_lower(&p->g, &p->fusion, p->precision, kp, err, sizeof err), "%s", err);
}

/* Every BN-SiLU backward (two phases, a sigmoid in each, one element store
 * in the second) is rewritten: its first phase keeps its sigmoids and gains
 * the store, its second has none left; nothing else is rewritten. */
static void check_rewrites(const char *args) {
    Plan p;
    KProgram kp;
    lower_plan(args, &p, &kp);
    int rewritten = 0;
    for (int i = 0; i < kp.n_kernels; i++) {
        const Kernel *k = &kp.kernels[i];
        Kernel r;
        const bool bn_silu_bwd = k->skel == KS_CHANNEL_REDUCE && k->n_phases == 2 && count_ops(k, k->body[1], KI_SIGMOID) > 0 && element_store_in(k, k->body[1]);
        const bool did = kernel_reuse_phase_value(k, &r);
        cr_expect_eq(did, bn_silu_bwd, "%s: kernel %s (%s, %d phases) rewritten %d", args, k->name, kernel_skel_name(k->skel), k->n_phases, did);
        if (!did) continue;
        rewritten++;
        cr_expect_eq(count_ops(&r, r.body[0], KI_SIGMOID), count_ops(k, k->body[0], KI_SIGMOID), "%s: %s", args, k->name);
        cr_expect_eq(count_ops(&r, r.body[0], KI_STORE), count_ops(k, k->body[0], KI_STORE) + 1, "%s: %s", args, k->name);
        cr_expect_eq(count_ops(&r, r.body[1], KI_SIGMOID) + count_ops(&r, r.body[1], KI_EXP), 0, "%s: %s", args, k->name);
        cr_expect_lt(r.body[1].n, k->body[1].n, "%s: %s", args, k->name);
        /* the sums, variables and per-channel work are untouched */
        cr_expect_eq(count_ops(&r, r.body[0], KI_ACCUM), count_ops(k, k->body[0], KI_ACCUM));
        cr_expect_eq(r.finalize[0].n, k->finalize[0].n);
        cr_expect_eq(r.finalize[1].n, k->finalize[1].n);
        cr_expect_str_eq(r.name, k->name);
        kernel_reuse_free(&r);
    }
    cr_expect_gt(rewritten, 0, "%s: no kernel rewritten", args);
    kernel_program_free(&kp);
    plan_free(&p);
}

Test(kernel_reuse, every_bn_silu_backward_and_nothing_else_is_rewritten) {
    check_rewrites("models/tiny.yaml --imgsz 64 --batch 2 --max-boxes 8");
    check_rewrites("tests/parity/v11tiny.yaml --scale n --imgsz 64 --batch 2 --max-boxes 8");
    check_rewrites("models/yolov5.yaml --scale n --imgsz 64 --batch 2 --max-boxes 8");
}

/* kernel_render_c_unit of kp, built; the shared object's bytes opened. */
static void build_unit(const KProgram *kp, bool reuse, KernelSo *so) {
    char *src = kernel_render_c_unit(kp, reuse), err[1024];
    cr_assert(src);
    unsigned char *bytes;
    size_t len;
    cr_assert(cc_build_shared(src, reuse ? "rewritten" : "plain", &bytes, &len, err, sizeof err), "%s", err);
    free(src);
    cr_assert(kernel_so_open(so, bytes, len, err, sizeof err), "%s", err);
    free(bytes);
}

typedef void (*Fn)(const YkArgs *);

/* Runs f on copies of the same random buffers; the copies afterwards. */
static void run_on(Fn f, int n_bufs, int64_t n, int64_t c, int64_t inner, uint32_t seed, float **bufs, size_t elems) {
    YkArgs a;
    memset(&a, 0, sizeof a);
    a.n = n, a.c = c, a.inner = inner;
    for (int s = 0; s < n_bufs; s++) {
        bufs[s] = malloc(elems * sizeof(float));
        cr_assert(bufs[s]);
        for (size_t e = 0; e < elems; e++) {
            seed = seed * 1664525u + 1013904223u;
            bufs[s][e] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 12.0f; /* [-6, 6): sigmoids far from 0 and 1 as well */
        }
        a.t[s] = bufs[s];
        a.bs[s] = c * inner;
    }
    f(&a);
}

/* Each rewritten kernel against the plain one: every buffer's bytes equal,
 * at a size whose rows end between the C skeleton's 8 lanes and at one big
 * enough for its OpenMP team. */
static void check_bits(const char *args) {
    Plan p;
    KProgram kp;
    lower_plan(args, &p, &kp);
    KernelSo plain = {0}, rewritten = {0};
    build_unit(&kp, false, &plain);
    build_unit(&kp, true, &rewritten);
    const int64_t shapes[][3] = {{2, 5, 37}, {3, 7, 4099}};
    int compared = 0;
    for (int i = 0; i < kp.n_kernels; i++) {
        const Kernel *k = &kp.kernels[i];
        Kernel r;
        if (!kernel_reuse_phase_value(k, &r)) continue;
        kernel_reuse_free(&r);
        Fn f0 = (Fn)kernel_so_sym(&plain, k->name), f1 = (Fn)kernel_so_sym(&rewritten, k->name);
        cr_assert(f0 && f1, "%s missing", k->name);
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
            const int64_t n = shapes[sh][0], c = shapes[sh][1], inner = shapes[sh][2];
            const size_t elems = (size_t)(n * c * inner) + 16; /* an int64 counter fits too */
            float *b0[KIR_MAX_BUFS], *b1[KIR_MAX_BUFS];
            run_on(f0, k->n_bufs, n, c, inner, 7u + (uint32_t)i, b0, elems);
            run_on(f1, k->n_bufs, n, c, inner, 7u + (uint32_t)i, b1, elems);
            for (int s = 0; s < k->n_bufs; s++) {
                cr_expect(memcmp(b0[s], b1[s], elems * sizeof(float)) == 0, "%s: %s, slot %d differs at [%lld, %lld, %lld]", args, k->name, s, (long long)n, (long long)c,
                          (long long)inner);
                free(b0[s]);
                free(b1[s]);
            }
            compared++;
        }
    }
    cr_expect_gt(compared, 0, "%s: nothing compared", args);
    kernel_so_close(&plain);
    kernel_so_close(&rewritten);
    kernel_program_free(&kp);
    plan_free(&p);
}

Test(kernel_reuse, rewritten_kernels_write_the_same_bits, .timeout = 300) {
    check_bits("models/tiny.yaml --imgsz 64 --batch 2 --max-boxes 8");
    check_bits("tests/parity/v11tiny.yaml --scale n --imgsz 64 --batch 2 --max-boxes 8");
}
