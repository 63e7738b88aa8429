/* runtime/cpu_conv_dnnl.c — fp32 convolutions (forward, dgrad) through
 * oneDNN's direct kernels for the CPU interpreter: one primitive per shape,
 * made once and cached, the plan's NCHW tensors reordered to and from
 * oneDNN's blocked layouts in process-wide scratch. Must not change op
 * semantics: ref_conv.c stays the oracle, cpu_conv.c picks the path. */
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_conv_geom.h"

/* Why oneDNN: its direct kernels keep a block of output channels in vector
 * registers over the taps, where im2col + sgemm writes and reads back nine
 * copies of a 3x3 conv's input; PyTorch's CPU convolutions are the same
 * kernels. The reorders to its channel-blocked layout cost a pass over each
 * tensor, far less than the im2col they replace. Weight gradients stay
 * with cpu_conv.c's tiles: oneDNN's split their sums over the threads, so
 * their bits would follow the thread count. */

enum { DIR_FORWARD, DIR_DGRAD, N_DIRS };
enum { ARG_A, ARG_B, ARG_OUT, N_ARGS }; /* a call's two inputs and its output */
enum { T_X, T_W, T_Y, N_TENSORS };      /* the conv's input, weights, output */
enum { PAD = N_ARGS, N_SCRATCH };        /* scratch: one per argument, then the primitives' own */

/* Which tensor each argument of a direction is, where its primitive says
 * its layout, and its execution argument. */
static const struct {
    int tensor[N_ARGS];
    dnnl_query_t query[N_ARGS];
    int arg[N_ARGS];
} ROLE[N_DIRS] = {
    [DIR_FORWARD] = {{T_X, T_W, T_Y}, {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md}, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}},
    [DIR_DGRAD] = {{T_Y, T_W, T_X},
                   {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
                   {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}},
};

typedef struct Prim {
    Geom c;
    int dir, threads;
    bool bias;
    dnnl_primitive_t conv;
    dnnl_primitive_t reorder[N_ARGS]; /* user <-> inner; NULL: the conv reads or writes the user's tensor */
    dnnl_memory_desc_t user[N_ARGS], inner[N_ARGS], bias_md, pad;
    size_t need[N_SCRATCH];           /* its scratch: reordered arguments, the largest scratchpad */
} Prim;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static dnnl_primitive_attr_t attr; /* scratchpads in our scratch, so that they are counted */
static Prim *prims;
static int n_prims, cap_prims;
static void *scratch[N_SCRATCH];
static size_t scratch_bytes[N_SCRATCH];

static bool ok_(dnnl_status_t s, const char *what, char *err, int errcap) {
    if (s == dnnl_success) return true;
    snprintf(err, (size_t)errcap, "oneDNN: %s: %s", what, dnnl_status2str(s));
    return false;
}
#define DN(call, what) ok_((call), (what), err, errcap)

static bool same_geom(const Geom *a, const Geom *b) {
    return a->n == b->n && a->ci == b->ci && a->h == b->h && a->w == b->w && a->co == b->co && a->ho == b->ho && a->wo == b->wo && a->kh == b->kh &&
           a->kw == b->kw && a->sh == b->sh && a->sw == b->sw && a->pt == b->pt && a->pl == b->pl && a->dh == b->dh && a->dw == b->dw &&
           a->groups == b->groups;
}

/* The padding after the last row (column) that makes oneDNN's output size
 * formula give `out`; a conv whose last taps stop short of the input's end
 * has none (its formula floors). */
static int64_t pad_after(int64_t in, int64_t out, int k, int s, int d, int before) {
    int64_t p = (out - 1) * s + (int64_t)(k - 1) * d + 1 - in - before;
    return p > 0 ? p : 0;
}

static bool engine_ready(char *err, int errcap) {
    if (engine) return true;
    if (!DN(dnnl_engine_create(&engine, dnnl_cpu, 0), "creating the CPU engine")) return false;
    if (DN(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "creating a stream") &&
        DN(dnnl_primitive_attr_create(&attr), "creating attributes") &&
        DN(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "setting the scratchpad mode"))
        return true;
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (stream) dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    engine = NULL, stream = NULL, attr = NULL;
    return false;
}

/* The scratchpad pd's primitive needs, into *most when larger. */
static void pad_need(const_dnnl_primitive_desc_t pd, size_t *most) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t b = md ? dnnl_memory_desc_get_size(md) : 0;
    if (b > *most) *most = b;
}

/* A reorder from `from` to `to`, or NULL when they are the same layout. */
static bool reorder_make(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to, dnnl_primitive_t *r, size_t *pad, char *err, int errcap) {
    *r = NULL;
    if (dnnl_memory_desc_equal(from, to)) return true;
    dnnl_primitive_desc_t pd;
    if (!DN(dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, attr), "a reorder's descriptor")) return false;
    pad_need(pd, pad);
    bool ok = DN(dnnl_primitive_create(r, pd), "a reorder");
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* Direction dir's descriptor (layouts left to oneDNN), and p's user layouts
 * for it: the plan's NCHW, weights OIHW (GOIHW when grouped). */
static bool conv_desc(const Geom *c, int dir, bool bias, dnnl_convolution_desc_t *cd, Prim *p, char *err, int errcap) {
    const dnnl_dims_t x = {c->n, c->ci, c->h, c->w}, y = {c->n, c->co, c->ho, c->wo}, b = {c->co};
    const dnnl_dims_t w4 = {c->co, c->cig, c->kh, c->kw}, w5 = {c->groups, c->cog, c->cig, c->kh, c->kw};
    const dnnl_dims_t strides = {c->sh, c->sw}, dil = {c->dh - 1, c->dw - 1}, pl = {c->pt, c->pl};
    const dnnl_dims_t pr = {pad_after(c->h, c->ho, c->kh, c->sh, c->dh, c->pt), pad_after(c->w, c->wo, c->kw, c->sw, c->dw, c->pl)};
    const bool grouped = c->groups > 1;
    dnnl_memory_desc_t user[N_TENSORS], any[N_TENSORS];
    if (!DN(dnnl_memory_desc_init_by_tag(&user[T_X], 4, x, dnnl_f32, dnnl_nchw), "the input's layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&user[T_Y], 4, y, dnnl_f32, dnnl_nchw), "the output's layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&user[T_W], grouped ? 5 : 4, grouped ? w5 : w4, dnnl_f32, grouped ? dnnl_goihw : dnnl_oihw),
            "the weights' layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&p->bias_md, 1, b, dnnl_f32, dnnl_x), "the bias' layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&any[T_X], 4, x, dnnl_f32, dnnl_format_tag_any), "the input's layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&any[T_Y], 4, y, dnnl_f32, dnnl_format_tag_any), "the output's layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&any[T_W], grouped ? 5 : 4, grouped ? w5 : w4, dnnl_f32, dnnl_format_tag_any), "the weights' layout"))
        return false;
    for (int k = 0; k < N_ARGS; k++) p->user[k] = user[ROLE[dir].tensor[k]];
    if (dir == DIR_DGRAD)
        return DN(dnnl_dilated_convolution_backward_data_desc_init(cd, dnnl_convolution_direct, &any[T_X], &any[T_W], &any[T_Y], strides, dil, pl, pr),
                  "a convolution's dgrad descriptor");
    return DN(dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training, dnnl_convolution_direct, &any[T_X], &any[T_W],
                                                         bias ? &p->bias_md : NULL, &any[T_Y], strides, dil, pl, pr),
              "a convolution's descriptor");
}

/* The conv's layouts as its primitive chose them, and the reorders to them. */
static bool prim_make(Prim *p, char *err, int errcap) {
    dnnl_convolution_desc_t fwd, cd;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    const bool f = p->dir == DIR_FORWARD;
    bool ok = conv_desc(&p->c, DIR_FORWARD, p->bias, &fwd, p, err, errcap) &&
              DN(dnnl_primitive_desc_create(&hint, &fwd, f ? attr : NULL, engine, NULL), "a convolution's primitive descriptor");
    if (ok && !f) /* a backward primitive is chosen against its forward one */
        ok = conv_desc(&p->c, p->dir, false, &cd, p, err, errcap) &&
             DN(dnnl_primitive_desc_create(&pd, &cd, attr, engine, hint), "a convolution gradient's primitive descriptor");
    else if (ok) {
        pd = hint;
        hint = NULL;
    }
    for (int k = 0; ok && k < N_ARGS; k++) p->inner[k] = *dnnl_primitive_desc_query_md(pd, ROLE[p->dir].query[k], 0);
    if (ok) pad_need(pd, &p->need[PAD]);
    ok = ok && DN(dnnl_primitive_create(&p->conv, pd), "a convolution primitive") &&
         reorder_make(&p->user[ARG_A], &p->inner[ARG_A], &p->reorder[ARG_A], &p->need[PAD], err, errcap) &&
         reorder_make(&p->user[ARG_B], &p->inner[ARG_B], &p->reorder[ARG_B], &p->need[PAD], err, errcap) &&
         reorder_make(&p->inner[ARG_OUT], &p->user[ARG_OUT], &p->reorder[ARG_OUT], &p->need[PAD], err, errcap);
    for (int k = 0; ok && k < N_ARGS; k++) p->need[k] = p->reorder[k] ? dnnl_memory_desc_get_size(&p->inner[k]) : 0;
    if (ok) ok = DN(dnnl_memory_desc_init_by_tag(&p->pad, 1, (dnnl_dims_t){(int64_t)p->need[PAD]}, dnnl_u8, dnnl_x), "the scratchpad's layout");
    if (hint) dnnl_primitive_desc_destroy(hint);
    if (pd) dnnl_primitive_desc_destroy(pd);
    return ok;
}

/* The threads a conv runs on: one for a small conv, else the team's. */
static int conv_threads(const Geom *c) { return geom_macs(c) < PARALLEL_MIN_MACS ? 1 : omp_get_max_threads(); }

/* oneDNN cuts a primitive's work for the threads it will have when it is
 * made (omp_get_max_threads then), so a primitive is made again for another
 * thread count, and made and run with conv_threads. */
static Prim *prim_find(const Geom *c, int dir, bool bias, int threads, char *err, int errcap) {
    for (int i = 0; i < n_prims; i++)
        if (prims[i].dir == dir && prims[i].bias == bias && prims[i].threads == threads && same_geom(&prims[i].c, c)) return &prims[i];
    if (!engine_ready(err, errcap)) return NULL;
    if (n_prims == cap_prims) {
        int cap = cap_prims ? 2 * cap_prims : 32;
        Prim *np = realloc(prims, (size_t)cap * sizeof *np);
        if (!np) {
            snprintf(err, (size_t)errcap, "out of memory for oneDNN's convolution cache");
            return NULL;
        }
        prims = np, cap_prims = cap;
    }
    Prim *p = &prims[n_prims];
    memset(p, 0, sizeof *p);
    p->c = *c, p->dir = dir, p->bias = bias, p->threads = threads;
    if (!prim_make(p, err, errcap)) {
        for (int k = 0; k < N_ARGS; k++)
            if (p->reorder[k]) dnnl_primitive_destroy(p->reorder[k]);
        if (p->conv) dnnl_primitive_destroy(p->conv);
        return NULL;
    }
    n_prims++;
    return p;
}

/* Scratch buffers are 64-byte aligned and sized in whole 64-byte lines. */
static size_t lines64(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* Scratch k of at least `bytes`, kept for the next call. */
static void *scratch_get(int k, size_t bytes, char *err, int errcap) {
    if (scratch_bytes[k] >= bytes) return scratch[k];
    free(scratch[k]);
    size_t round = lines64(bytes);
    scratch[k] = aligned_alloc(64, round);
    scratch_bytes[k] = scratch[k] ? round : 0;
    if (!scratch[k]) snprintf(err, (size_t)errcap, "out of memory for %zu bytes of oneDNN convolution scratch", round);
    return scratch[k];
}

/* Runs p with its scratchpad (args[n] is left for it). */
static bool run(dnnl_primitive_t p, int n, dnnl_exec_arg_t *args, dnnl_memory_t pad, char *err, int errcap) {
    args[n] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
    return DN(dnnl_primitive_execute(p, stream, n + 1, args), "running a primitive") && DN(dnnl_stream_wait(stream), "waiting for a primitive");
}

/* A memory object over `data` with layout md. */
static bool mem(const dnnl_memory_desc_t *md, const void *data, dnnl_memory_t *m, char *err, int errcap) {
    return DN(dnnl_memory_create(m, md, engine, (void *)data), "wrapping a tensor");
}

/* m: the user's arguments, their inner copies, the bias, the scratchpad */
enum { M_USER = 0, M_INNER = N_ARGS, M_BIAS = 2 * N_ARGS, M_PAD, N_MEM };

/* Takes the lock and c's thread count (*team: the count to restore) and
 * finds or makes its primitive; leave() undoes the first two. */
static Prim *enter(const Geom *c, int dir, bool bias, int *team, char *err, int errcap) {
    pthread_mutex_lock(&lock);
    const int threads = conv_threads(c);
    *team = omp_get_max_threads();
    if (threads != *team) omp_set_num_threads(threads);
    return prim_find(c, dir, bias, threads, err, errcap);
}

static void leave(int team) {
    if (omp_get_max_threads() != team) omp_set_num_threads(team);
    pthread_mutex_unlock(&lock);
}

static bool conv_run(const Geom *c, int dir, const float *a, const float *b, const float *bias, float *out, char *err, int errcap) {
    int team;
    Prim *p = enter(c, dir, bias != NULL, &team, err, errcap);
    dnnl_memory_t m[N_MEM] = {0};
    const void *user[N_ARGS] = {a, b, out};
    bool ok = p != NULL;
    for (int k = 0; ok && k < N_ARGS; k++) {
        const void *inner = p->reorder[k] ? scratch_get(k, p->need[k], err, errcap) : user[k];
        ok = inner && mem(&p->user[k], user[k], &m[M_USER + k], err, errcap) && mem(&p->inner[k], inner, &m[M_INNER + k], err, errcap);
    }
    if (ok && bias) ok = mem(&p->bias_md, bias, &m[M_BIAS], err, errcap);
    if (ok) {
        void *pad = p->need[PAD] ? scratch_get(PAD, p->need[PAD], err, errcap) : NULL;
        ok = (pad || !p->need[PAD]) && mem(&p->pad, pad, &m[M_PAD], err, errcap);
    }
    for (int k = 0; ok && k < ARG_OUT; k++)
        if (p->reorder[k]) {
            dnnl_exec_arg_t r[3] = {{DNNL_ARG_FROM, m[M_USER + k]}, {DNNL_ARG_TO, m[M_INNER + k]}};
            ok = run(p->reorder[k], 2, r, m[M_PAD], err, errcap);
        }
    if (ok) {
        dnnl_exec_arg_t args[5] = {{ROLE[dir].arg[ARG_A], m[M_INNER + ARG_A]},
                                   {ROLE[dir].arg[ARG_B], m[M_INNER + ARG_B]},
                                   {ROLE[dir].arg[ARG_OUT], m[M_INNER + ARG_OUT]},
                                   {DNNL_ARG_BIAS, m[M_BIAS]}};
        ok = run(p->conv, bias ? 4 : 3, args, m[M_PAD], err, errcap);
    }
    if (ok && p->reorder[ARG_OUT]) {
        dnnl_exec_arg_t r[3] = {{DNNL_ARG_FROM, m[M_INNER + ARG_OUT]}, {DNNL_ARG_TO, m[M_USER + ARG_OUT]}};
        ok = run(p->reorder[ARG_OUT], 2, r, m[M_PAD], err, errcap);
    }
    for (int k = 0; k < N_MEM; k++)
        if (m[k]) dnnl_memory_destroy(m[k]);
    leave(team);
    return ok;
}

bool dnnl_conv_forward(const Geom *c, const float *x, const float *w, const float *b, float *y, char *err, int errcap) {
    return conv_run(c, DIR_FORWARD, x, w, b, y, err, errcap);
}

bool dnnl_conv_dgrad(const Geom *c, const float *dy, const float *w, float *dx, char *err, int errcap) {
    return conv_run(c, DIR_DGRAD, dy, w, NULL, dx, err, errcap);
}

bool dnnl_conv_prepare(const Geom *c, bool forward, bool bias, char *err, int errcap) {
    int team;
    const bool ok = enter(c, forward ? DIR_FORWARD : DIR_DGRAD, bias, &team, err, errcap) != NULL;
    leave(team);
    return ok;
}

int64_t cpu_conv_layout_scratch_bytes(void) {
    pthread_mutex_lock(&lock);
    size_t most[N_SCRATCH] = {0}, total = 0;
    for (int i = 0; i < n_prims; i++)
        for (int k = 0; k < N_SCRATCH; k++)
            if (prims[i].need[k] > most[k]) most[k] = prims[i].need[k];
    for (int k = 0; k < N_SCRATCH; k++) total += lines64(most[k]);
    pthread_mutex_unlock(&lock);
    return (int64_t)total;
}

int cpu_conv_primitives(void) {
    pthread_mutex_lock(&lock);
    int n = n_prims;
    pthread_mutex_unlock(&lock);
    return n;
}
