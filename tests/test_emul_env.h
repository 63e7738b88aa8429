/* tests/test_emul_env.h — the tiny plan's tensors as the device holds them,
 * for the suites that run its kernels' CUDA source on the host
 * (test_cuda_emul.c, test_cuda_emul_block.c): storage types, views with
 * poisoned gaps and red zones, fresh random fills, comparisons in ulps or
 * relative terms, and the C++ unit the rendered sources build into. */
#ifndef YOLOCC_TEST_EMUL_ENV_H
#define YOLOCC_TEST_EMUL_ENV_H
#include <math.h>
#include <stdint.h>

#include "../compiler/kernel_render.h"
#include "../compiler/lib_kernels.h"
#include "../passes/views.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/cuda/cuda_kernels.h"
#include "../runtime/gen_cpu.h"
#include "test_emul.h"
#include "test_gpu.h"

enum { RZ = 32 };

/* ---- the C++ compiler ---- */

static inline void skip_without_cxx(void) {
    char words[512], *argv[20], dir[] = "/tmp/yolocc-emul-XXXXXX", log[64];
    cr_assert(mkdtemp(dir));
    snprintf(log, sizeof log, "%s/v.log", dir);
    int n = emul_cxx_words(words, sizeof words, argv, 16);
    argv[n++] = "--version";
    argv[n] = NULL;
    int st = n > 1 ? emul_run_logged(argv, log) : -1;
    unlink(log);
    rmdir(dir);
    if (st != 0) cr_skip_test("no C++ compiler (%s): the CUDA source cannot be compiled for the host", argv[0]);
}

/* One translation unit of rendered sources, each in its own namespace (each
 * carries the prelude and the argument block), built into a shared object
 * and loaded. Fails the test on a compile error with the compiler's output. */
typedef struct Unit {
    char *text;
    size_t len;
    FILE *f;
    int n;
} Unit;

static inline void unit_begin(Unit *u) {
    memset(u, 0, sizeof *u);
    u->f = open_memstream(&u->text, &u->len);
    cr_assert_not_null(u->f);
}

static inline void unit_add(Unit *u, const char *src) {
    fprintf(u->f, "namespace yk_emu_%d {\n%s\n}\n", u->n++, src);
    /* the next source defines its own */
    /* (a library kernel's source undefines its own entry macro and loop) */
    fputs("#undef YK_KERNEL_ABI_H\n#undef YL_LIB_ABI_H\n#undef YK_BLOCK\n", u->f);
}

static inline void *unit_load(Unit *u) {
    cr_assert_eq(fclose(u->f), 0);
    char what[64];
    snprintf(what, sizeof what, "%d rendered sources", u->n);
    void *h = emul_build(u->text, u->len, what);
    free(u->text);
    return h;
}

typedef void (*YkFn)(YkArgs);
typedef void (*YlFn)(YlArgs);

/* ---- tensors as the device holds them ---- */

static inline size_t esize(DType t) { return t == DT_I64 ? 8 : t == DT_F32 ? 4 : 2; }
static inline const char *dt_name(DType t) { return t == DT_I64 ? "i64" : t == DT_F32 ? "f32" : t == DT_BF16 ? "bf16" : "f16"; }

static inline uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* poison of gaps and red zones: a NaN (or an odd integer) no kernel writes */
static const uint32_t POISON32 = 0x7fc0dead;
static const uint16_t POISON16 = 0x7fd5;
static const uint64_t POISON64 = 0x5a5a5a5a5a5a5a5aULL;

typedef struct Buf {
    DType dt;
    int64_t span, per, bs;       /* elements the device touches; elements per row (a view's:
                                  * views_geometry) or per image; row stride (0: packed) */
    unsigned char *emu_base, *emu; /* device layout, RZ poisoned elements either side */
    void *host;                  /* the same elements as fp32 (int64 for DT_I64), as the CPU side reads them */
} Buf;

typedef struct Env {
    Plan p;
    KProgram kp;
    LibProgram lp;
    DType *dt;
    Buf *b;
    CuDevicePtr *ptr;
    void **host;                 /* per tensor: its Buf's host copy */
} Env;

static inline bool in_view(const Buf *b, int64_t e) { return !b->bs || e % b->bs < b->per; }
/* Element e of b's span among the packed elements (rows of b->per, as stored). */
static inline int64_t packed_index(const Buf *b, int64_t e) { return b->bs ? e / b->bs * b->per + e % b->bs : e; }

static inline void poison(Buf *b, unsigned char *at) {
    if (b->dt == DT_I64) memcpy(at, &POISON64, 8);
    else if (b->dt == DT_F32) memcpy(at, &POISON32, 4);
    else memcpy(at, &POISON16, 2);
}

static inline bool poisoned(const Buf *b, const unsigned char *at) {
    return b->dt == DT_I64 ? memcmp(at, &POISON64, 8) == 0 : b->dt == DT_F32 ? memcmp(at, &POISON32, 4) == 0 : memcmp(at, &POISON16, 2) == 0;
}

/* emulated element e as fp32 (or int64 as double) */
static inline double emu_value(const Buf *b, int64_t e) {
    if (b->dt == DT_I64) return (double)((const int64_t *)b->emu)[e];
    float f;
    cuda_storage_to_f32(b->dt, b->emu + (size_t)e * esize(b->dt), &f, 1);
    return f;
}

/* Fresh values in t's view, poison in its gaps and red zones; levels > 0
 * draws from that many values (ties), else uniform in [lo, 1). The host copy
 * holds the stored values. */
static inline void fill_buf(Buf *b, int levels, float lo, uint64_t *seed) {
    size_t es = esize(b->dt);
    for (int64_t e = -RZ; e < b->span + RZ; e++) {
        unsigned char *at = b->emu + e * (int64_t)es;
        if (e < 0 || e >= b->span || !in_view(b, e)) {
            poison(b, at);
            if (e >= 0 && e < b->span) {
                if (b->dt == DT_I64) ((int64_t *)b->host)[e] = (int64_t)POISON64;
                else ((float *)b->host)[e] = NAN;
            }
            continue;
        }
        if (b->dt == DT_I64) {
            int64_t x = (int64_t)(rng_next(seed) % 7);
            memcpy(at, &x, 8);
            ((int64_t *)b->host)[e] = x;
            continue;
        }
        float x = levels > 0 ? (float)((int)(rng_next(seed) % (uint64_t)levels) - levels / 2) * 0.375f
                             : lo + (1.0f - lo) * (float)((rng_next(seed) >> 40) * (1.0 / 16777216.0));
        cuda_f32_to_storage(b->dt, &x, at, 1);
        cuda_storage_to_f32(b->dt, at, &((float *)b->host)[e], 1);
    }
}

static inline void fill(Env *v, int t, int levels, uint64_t *seed) {
    TensorKind kind = v->p.g.tensors[t].kind;
    fill_buf(&v->b[t], levels, kind == TK_OPTIM || kind == TK_BUFFER ? 0.1f : -1.0f, seed);
}

/* Red zones (and, with gaps, the view's gaps) still hold their poison; the first bad element or -1 - RZ. */
static inline int64_t damaged(const Buf *b, bool gaps) {
    size_t es = esize(b->dt);
    for (int64_t e = -RZ; e < b->span + RZ; e++) {
        bool outside = e < 0 || e >= b->span;
        if ((outside || (gaps && !in_view(b, e))) && !poisoned(b, b->emu + e * (int64_t)es)) return e;
    }
    return -1 - RZ;
}

static inline void env_open(Env *v, const char *precision, const char *layout) {
    memset(v, 0, sizeof *v);
    char extra[256], err[1024];
    snprintf(extra, sizeof extra, "--imgsz 64 --batch 2 --precision %s --layout %s --target cpu", precision, layout);
    tiny_plan(extra, &v->p);
    const Graph *g = &v->p.g;
    /* the CUDA runtime's lowering (cuda_kernels_open): the program does not depend on the target */
    cr_assert(kernel_lower(g, &v->p.fusion, v->p.precision, &v->kp, err, sizeof err), "%s", err);
    cr_assert(lib_program_build(g, v->p.precision, &v->kp, &v->lp, err, sizeof err), "%s", err);
    int n = g->n_tensors;
    v->dt = malloc(sizeof *v->dt * (size_t)n);
    v->b = calloc((size_t)n, sizeof *v->b);
    v->ptr = calloc((size_t)n, sizeof *v->ptr);
    v->host = calloc((size_t)n, sizeof *v->host);
    cr_assert(v->dt && v->b && v->ptr && v->host);
    /* storage types as the kernels' slots and library operands declare them */
    for (int t = 0; t < n; t++) v->dt[t] = g->tensors[t].dtype == DT_I64 ? DT_I64 : DT_F32;
    for (int l = 0; l < v->kp.n_launches; l++) {
        const KLaunch *ln = &v->kp.launches[l];
        if (ln->kernel >= 0) {
            for (int s = 0; s < ln->n_args; s++)
                if (v->dt[ln->args[s]] != DT_I64) v->dt[ln->args[s]] = v->kp.kernels[ln->kernel].buf_dtype[s];
        } else if (v->lp.launch_kernel[l] >= 0) {
            const Op *op = &g->ops[ln->op_lo];
            const LibKernel *k = &v->lp.kernels[v->lp.launch_kernel[l]];
            for (int i = 0; i <= op->n_in; i++) v->dt[i < op->n_in ? op->in[i] : op->out[0]] = k->dt[i];
        }
    }
    for (int t = 0; t < n; t++) {
        Buf *b = &v->b[t];
        const Shape *s = &g->tensors[t].shape;
        int64_t numel = shape_numel(s), d0 = s->nd >= 1 && s->d[0] > 0 ? s->d[0] : 1;
        b->dt = v->dt[t];
        int64_t rows, row;
        views_geometry(g, &v->p.fusion.views, t, &rows, &row, &b->bs);
        b->per = b->bs ? row : numel / d0;
        b->span = cuda_view_span(rows, row, b->bs);
        b->emu_base = calloc((size_t)(b->span + 2 * RZ), esize(b->dt));
        b->host = calloc((size_t)b->span + 1, 8);
        cr_assert(b->emu_base && b->host);
        b->emu = b->emu_base + RZ * esize(b->dt);
        v->ptr[t] = (CuDevicePtr)(uintptr_t)b->emu;
        v->host[t] = b->host;
    }
}

static inline void env_close(Env *v) {
    for (int t = 0; t < v->p.g.n_tensors; t++) free(v->b[t].emu_base), free(v->b[t].host);
    free(v->b), free(v->ptr), free(v->dt), free(v->host);
    lib_program_free(&v->lp);
    kernel_program_free(&v->kp);
    plan_free(&v->p);
}

/* The distance in units in the last place between two 16-bit floats of the same format (NaN: equal to NaN only). */
static inline double ulps16(DType dt, uint16_t a, uint16_t b) {
    float fa, fb;
    cuda_storage_to_f32(dt, &a, &fa, 1);
    cuda_storage_to_f32(dt, &b, &fb, 1);
    if (isnan(fa) || isnan(fb)) return isnan(fa) && isnan(fb) ? 0 : INFINITY;
    int oa = a & 0x8000 ? -(int)(a & 0x7fff) : (int)a, ob = b & 0x8000 ? -(int)(b & 0x7fff) : (int)b;
    return fabs((double)(oa - ob));
}

/* Emulated element e against want (fp32 or int64): fp32 storage as rel_diff,
 * 16-bit storage as ulps after rounding want to it; with `relative`, a
 * 16-bit result below 0.1 within 1e-6 of want counts as 1 ulp, the floor
 * fp32 storage has: what is left where O(1) terms cancel is their fp32
 * rounding (the CUDA kernel's fp32 SiLU against the CPU's double, then a
 * residual add that cancels to 1e-6, is 2 bf16 ulps there). */
static inline double diff(const Buf *b, int64_t e, double want, bool relative) {
    if (b->dt == DT_I64) return emu_value(b, e) == want ? 0 : INFINITY;
    if (b->dt == DT_F32) {
        double got = emu_value(b, e);
        if (!relative) return (isnan(got) && isnan(want)) || got == want ? 0 : fmax(rel_diff(got, want), 1e-30);
        /* inputs are O(1): below 0.1 the fp32 rounding of O(1) terms that cancel is what remains */
        if (isnan(got) || isnan(want) || isinf(got) || isinf(want)) return rel_diff(got, want);
        return fabs(got - want) / fmax(fabs(want), 0.1);
    }
    float w = (float)want;
    uint16_t h;
    cuda_f32_to_storage(b->dt, &w, &h, 1);
    uint16_t got;
    memcpy(&got, b->emu + (size_t)e * 2, 2);
    double u = ulps16(b->dt, got, h);
    if (relative && u > 1 && fabs(want) < 0.1 && fabs(emu_value(b, e) - want) <= 1e-6) return 1;
    return u;
}

static inline void run_threads(void *h, void (*call)(void *fn, const void *args), void *fn, const void *args) { run_grid(h, call, fn, args, EMU_GRID, EMU_BLOCK); }
static inline void call_yk(void *fn, const void *args) { ((YkFn)fn)(*(const YkArgs *)args); }
static inline void call_yl(void *fn, const void *args) { ((YlFn)fn)(*(const YlArgs *)args); }

/* After an emulated launch i (kernel k) of the tiny plan: every slot's red
 * zones and gaps keep their poison, and every written slot agrees with the
 * CPU's values in its host copy (fp32 storage: relative 1e-5 of
 * max(|CPU|, 0.1); 16-bit storage: 1 ulp; int64: exact). The worst
 * differences accumulate into worst_rel (fp32) and worst_ulp (16-bit),
 * *compared counts the slots compared and *failed the elements logged.
 * Returns this launch's worst. */
static inline double expect_launch_outputs(const Env *v, int i, const KLaunch *ln, const Kernel *k, int *failed, int *compared, double *worst_rel, double *worst_ulp) {
    double worst = 0;
    for (int rs = 0; rs < kernel_n_rows(&v->kp, ln) * ln->n_args; rs++) {
        const int s = rs % ln->n_args, t = kernel_row_args(&v->kp, ln, rs / ln->n_args)[s];
        const Buf *b = &v->b[t];
        int64_t bad = damaged(b, true);
        cr_expect_eq(bad, -1 - RZ, "launch %d %s slot %d (tensor %d): element %lld outside the view or its span changed", i, k->name, s, t, (long long)bad);
        if (!k->buf_written[s]) continue;
        bool wide = b->dt == DT_BF16 || b->dt == DT_F16;
        double tol = wide ? 1 : b->dt == DT_I64 ? 0 : 1e-5, w = 0;
        for (int64_t e = 0; e < b->span; e++) {
            if (!in_view(b, e)) continue;
            double want = b->dt == DT_I64 ? (double)((int64_t *)b->host)[e] : ((float *)b->host)[e];
            double d = diff(b, e, want, true);
            if (d > w) w = d;
            if (d > tol && (*failed)++ < 20)
                cr_log_error("launch %d %s (%s) slot %d tensor %d (%s) element %lld: emulated %.9g, CPU %.9g", i, k->name, kernel_skel_name(k->skel), s, t,
                             dt_name(b->dt), (long long)e, emu_value(b, e), want);
            cr_expect_leq(d, tol, "launch %d %s slot %d element %lld: %.3g over %.3g", i, k->name, s, (long long)e, d, tol);
            if (d > tol) break;
        }
        if (wide && w > *worst_ulp) *worst_ulp = w;
        if (!wide && w > *worst_rel) *worst_rel = w;
        if (w > worst) worst = w;
        (*compared)++;
    }
    return worst;
}

/* The tiny plan at precision and layout (v), its CPU target's kernels (gc),
 * and the CUDA source of its generated kernels whose skeleton is in skels (a
 * bit per KSkel) built for the host: the loaded object. block: YK_BLOCK for
 * those sources, or 0 for the prelude's. *others: the kernels left out. */
static inline void *emul_generated_open(Env *v, GenCpu *gc, const char *precision, const char *layout, unsigned skels, int block, int *others) {
    skip_without_cxx();
    env_open(v, precision, layout);
    char err[1024];
    cr_assert(gen_cpu_open(gc, &v->p, err, sizeof err), "%s", err);
    cr_assert_eq(gc->kp.n_launches, v->kp.n_launches);
    Unit u;
    unit_begin(&u);
    *others = 0;
    for (int k = 0; k < v->kp.n_kernels; k++) {
        const Kernel *kk = &v->kp.kernels[k];
        if (!(skels >> kk->skel & 1)) {
            ++*others;
            continue;
        }
        char *src = kernel_render_cuda(kk);
        cr_assert_not_null(src, "%s", kk->name);
        if (block) fprintf(u.f, "#define YK_BLOCK %d\n", block);
        unit_add(&u, src);
        free(src);
    }
    return unit_load(&u);
}

#endif
