/* runtime/cpu_conv_dnnl.c — fp32 convolutions (forward, dgrad, wgrad) through
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
 * tensor, far less than the im2col they replace. A weight gradient
 * is the exception: oneDNN splits its sums over the threads it has, so its
 * bits would follow the thread count. It runs as tiles instead (wgrad_plan),
 * each a single-threaded primitive, with the split fixed by the shape. */
enum { ARG_A, ARG_B, ARG_OUT, N_ARGS }; /* a call's two inputs and its output */
enum { T_X, T_W, T_Y, N_TENSORS };      /* the conv's input, weights, output */
enum { PAD = N_ARGS, N_SCRATCH };        /* scratch: one per argument, then the primitives' own */

/* Which tensor each argument of a direction is, where its primitive says
 * its layout, and its execution argument. */
static const struct {
    int tensor[N_ARGS];
    dnnl_query_t query[N_ARGS];
    int arg[N_ARGS];
} ROLE[CONV_DIRS] = {
    [CONV_FORWARD] = {{T_X, T_W, T_Y}, {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md}, {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST}},
    [CONV_DGRAD] = {{T_Y, T_W, T_X},
                    {dnnl_query_diff_dst_md, dnnl_query_weights_md, dnnl_query_diff_src_md},
                    {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC}},
    [CONV_WGRAD] = {{T_Y, T_X, T_W},
                    {dnnl_query_diff_dst_md, dnnl_query_src_md, dnnl_query_diff_weights_md},
                    {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS}},
};

typedef struct Prim {
    Geom c;
    ConvLayout lay;                   /* the user's image strides, the forward's post-op */
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
/* A wgrad tile's thread: its stream and scratch (lane_most: the most any
 * tile primitive made so far needs, what every lane gets). */
typedef struct Lane {
    dnnl_stream_t stream;
    void *buf[N_SCRATCH];
    size_t bytes[N_SCRATCH];
} Lane;
static Lane *lanes;
static int n_lanes, lanes_planned;
static size_t lane_most[N_SCRATCH], partial_most;
static float *partial; /* the images chunks' partial weight gradients but the first */
static size_t partial_bytes;

static bool ok_(dnnl_status_t s, const char *what, char *err, int errcap) {
    if (s == dnnl_success) return true;
    snprintf(err, (size_t)errcap, "oneDNN: %s: %s", what, dnnl_status2str(s));
    return false;
}
#define DN(call, what) ok_((call), (what), err, errcap)

static bool same_layout(const ConvLayout *a, const ConvLayout *b) {
    return a->x_img == b->x_img && a->y_img == b->y_img && a->act == b->act && a->alpha == b->alpha;
}

/* The packed layout: each tensor's own image, no post-op. */
static ConvLayout packed(const Geom *c) { return (ConvLayout){c->ci * c->h * c->w, c->co * c->ho * c->wo, CONV_NO_ACT, 0}; }

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
    const dnnl_dims_t x_strides = {p->lay.x_img, c->h * c->w, c->w, 1}, y_strides = {p->lay.y_img, c->ho * c->wo, c->wo, 1};
    if (!DN(dnnl_memory_desc_init_by_strides(&user[T_X], 4, x, dnnl_f32, x_strides), "the input's layout") ||
        !DN(dnnl_memory_desc_init_by_strides(&user[T_Y], 4, y, dnnl_f32, y_strides), "the output's layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&user[T_W], grouped ? 5 : 4, grouped ? w5 : w4, dnnl_f32, grouped ? dnnl_goihw : dnnl_oihw),
            "the weights' layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&p->bias_md, 1, b, dnnl_f32, dnnl_x), "the bias' layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&any[T_X], 4, x, dnnl_f32, dnnl_format_tag_any), "the input's layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&any[T_Y], 4, y, dnnl_f32, dnnl_format_tag_any), "the output's layout") ||
        !DN(dnnl_memory_desc_init_by_tag(&any[T_W], grouped ? 5 : 4, grouped ? w5 : w4, dnnl_f32, dnnl_format_tag_any), "the weights' layout"))
        return false;
    for (int k = 0; k < N_ARGS; k++) p->user[k] = user[ROLE[dir].tensor[k]];
    if (dir == CONV_DGRAD)
        return DN(dnnl_dilated_convolution_backward_data_desc_init(cd, dnnl_convolution_direct, &any[T_X], &any[T_W], &any[T_Y], strides, dil, pl, pr),
                  "a convolution's dgrad descriptor");
    if (dir == CONV_WGRAD)
        return DN(dnnl_dilated_convolution_backward_weights_desc_init(cd, dnnl_convolution_direct, &any[T_X], &any[T_W], NULL, &any[T_Y], strides, dil, pl,
                                                                      pr),
                  "a convolution's wgrad descriptor");
    return DN(dnnl_dilated_convolution_forward_desc_init(cd, dnnl_forward_training, dnnl_convolution_direct, &any[T_X], &any[T_W],
                                                         bias ? &p->bias_md : NULL, &any[T_Y], strides, dil, pl, pr),
              "a convolution's descriptor");
}

/* oneDNN's eltwise algorithm for an activation op (PyTorch's formulas:
 * SiLU x sigmoid(x), GELU with erf), and its alpha. */
static bool eltwise_of(const ConvLayout *l, dnnl_alg_kind_t *alg, float *alpha) {
    *alpha = 0;
    switch (l->act) {
    case OP_SILU: *alg = dnnl_eltwise_swish, *alpha = 1; return true;
    case OP_RELU: *alg = dnnl_eltwise_relu; return true;
    case OP_LEAKY_RELU: *alg = dnnl_eltwise_relu, *alpha = l->alpha; return true;
    case OP_HARDSWISH: *alg = dnnl_eltwise_hardswish; return true;
    case OP_GELU: *alg = dnnl_eltwise_gelu_erf; return true;
    case OP_SIGMOID: *alg = dnnl_eltwise_logistic; return true;
    default: return false;
    }
}

/* The attributes of p's primitive: the scratchpad in our scratch and, for a
 * forward with an activation, that activation as its post-op (*made: a new
 * attribute object the caller destroys). */
static bool prim_attr(const Prim *p, dnnl_primitive_attr_t *a, bool *made, char *err, int errcap) {
    dnnl_alg_kind_t alg;
    float alpha;
    *a = attr, *made = false;
    if (p->lay.act == CONV_NO_ACT) return true;
    if (p->dir != CONV_FORWARD || !eltwise_of(&p->lay, &alg, &alpha)) return snprintf(err, (size_t)errcap, "oneDNN: no post-op for this activation"), false;
    dnnl_post_ops_t po = NULL;
    bool ok = DN(dnnl_primitive_attr_clone(a, attr), "copying attributes");
    *made = ok;
    ok = ok && DN(dnnl_post_ops_create(&po), "creating post-ops") && DN(dnnl_post_ops_append_eltwise(po, 1.0f, alg, alpha, 0.0f), "an activation post-op") &&
         DN(dnnl_primitive_attr_set_post_ops(*a, po), "setting post-ops");
    if (po) dnnl_post_ops_destroy(po);
    return ok;
}

/* The conv's layouts as its primitive chose them, and the reorders to them. */
static bool prim_make(Prim *p, char *err, int errcap) {
    dnnl_convolution_desc_t fwd, cd;
    dnnl_primitive_desc_t hint = NULL, pd = NULL;
    dnnl_primitive_attr_t fa;
    bool own_attr;
    const bool f = p->dir == CONV_FORWARD;
    if (!prim_attr(p, &fa, &own_attr, err, errcap)) {
        if (own_attr) dnnl_primitive_attr_destroy(fa);
        return false;
    }
    bool ok = conv_desc(&p->c, CONV_FORWARD, p->bias, &fwd, p, err, errcap) &&
              DN(dnnl_primitive_desc_create(&hint, &fwd, f ? fa : NULL, engine, NULL), "a convolution's primitive descriptor");
    if (own_attr) dnnl_primitive_attr_destroy(fa);
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
 * thread count, and made and run with that many threads. */
static Prim *prim_find(const Geom *c, int dir, bool bias, int threads, const ConvLayout *lay, char *err, int errcap) {
    for (int i = 0; i < n_prims; i++)
        if (prims[i].dir == dir && prims[i].bias == bias && prims[i].threads == threads && same_layout(&prims[i].lay, lay) && same_geom(&prims[i].c, c))
            return &prims[i];
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
    p->c = *c, p->dir = dir, p->bias = bias, p->threads = threads, p->lay = *lay;
    const int team = omp_get_max_threads();
    if (threads != team) omp_set_num_threads(threads);
    const bool made = prim_make(p, err, errcap);
    if (threads != team) omp_set_num_threads(team);
    if (!made) {
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

/* *buf of at least `bytes` (*have: its size), kept for the next call. */
static bool grow(void **buf, size_t *have, size_t bytes, char *err, int errcap) {
    if (*have >= bytes) return true;
    free(*buf);
    size_t round = lines64(bytes);
    *buf = aligned_alloc(64, round);
    *have = *buf ? round : 0;
    if (!*buf) snprintf(err, (size_t)errcap, "out of memory for %zu bytes of oneDNN convolution scratch", round);
    return *buf != NULL;
}

/* Runs p on stream s with its scratchpad (args[n] is left for it). */
static bool run(dnnl_primitive_t p, dnnl_stream_t s, int n, dnnl_exec_arg_t *args, dnnl_memory_t pad, char *err, int errcap) {
    args[n] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, pad};
    return DN(dnnl_primitive_execute(p, s, n + 1, args), "running a primitive") && DN(dnnl_stream_wait(s), "waiting for a primitive");
}

/* A memory object over `data` with layout md. */
static bool mem(const dnnl_memory_desc_t *md, const void *data, dnnl_memory_t *m, char *err, int errcap) {
    return DN(dnnl_memory_create(m, md, engine, (void *)data), "wrapping a tensor");
}

/* m: the user's arguments, their inner copies, the bias, the scratchpad */
enum { M_USER = 0, M_INNER = N_ARGS, M_BIAS = 2 * N_ARGS, M_PAD, N_MEM };

/* p on the user's tensors user[ARG_*] (and bias), through the inner copies
 * and scratchpad in buf[k] (at least p->need[k] bytes each), on stream s:
 * the inputs reordered in, the conv, its output reordered out. */
static bool prim_exec(const Prim *p, dnnl_stream_t s, const void *const user[N_ARGS], const float *bias, void *const buf[N_SCRATCH], char *err, int errcap) {
    dnnl_memory_t m[N_MEM] = {0};
    bool ok = true;
    for (int k = 0; ok && k < N_ARGS; k++)
        ok = mem(&p->user[k], user[k], &m[M_USER + k], err, errcap) && mem(&p->inner[k], p->reorder[k] ? buf[k] : user[k], &m[M_INNER + k], err, errcap);
    if (ok && bias) ok = mem(&p->bias_md, bias, &m[M_BIAS], err, errcap);
    ok = ok && mem(&p->pad, p->need[PAD] ? buf[PAD] : NULL, &m[M_PAD], err, errcap);
    for (int k = 0; ok && k < ARG_OUT; k++)
        if (p->reorder[k]) {
            dnnl_exec_arg_t r[3] = {{DNNL_ARG_FROM, m[M_USER + k]}, {DNNL_ARG_TO, m[M_INNER + k]}};
            ok = run(p->reorder[k], s, 2, r, m[M_PAD], err, errcap);
        }
    if (ok) {
        dnnl_exec_arg_t args[5] = {{ROLE[p->dir].arg[ARG_A], m[M_INNER + ARG_A]},
                                   {ROLE[p->dir].arg[ARG_B], m[M_INNER + ARG_B]},
                                   {ROLE[p->dir].arg[ARG_OUT], m[M_INNER + ARG_OUT]},
                                   {DNNL_ARG_BIAS, m[M_BIAS]}};
        ok = run(p->conv, s, bias ? 4 : 3, args, m[M_PAD], err, errcap);
    }
    if (ok && p->reorder[ARG_OUT]) {
        dnnl_exec_arg_t r[3] = {{DNNL_ARG_FROM, m[M_INNER + ARG_OUT]}, {DNNL_ARG_TO, m[M_USER + ARG_OUT]}};
        ok = run(p->reorder[ARG_OUT], s, 2, r, m[M_PAD], err, errcap);
    }
    for (int k = 0; k < N_MEM; k++)
        if (m[k]) dnnl_memory_destroy(m[k]);
    return ok;
}

/* Forward or dgrad: one primitive on conv_threads, the process' scratch. */
static bool conv_run(const Geom *c, int dir, const ConvLayout *lay, const float *a, const float *b, const float *bias, float *out, char *err, int errcap) {
    pthread_mutex_lock(&lock);
    const int threads = conv_threads(c), team = omp_get_max_threads();
    if (threads != team) omp_set_num_threads(threads);
    const Prim *p = prim_find(c, dir, bias != NULL, threads, lay, err, errcap);
    bool ok = p != NULL;
    for (int k = 0; ok && k < N_SCRATCH; k++) ok = grow(&scratch[k], &scratch_bytes[k], p->need[k], err, errcap);
    const void *user[N_ARGS] = {a, b, out};
    ok = ok && prim_exec(p, stream, user, bias, scratch, err, errcap);
    if (threads != team) omp_set_num_threads(team);
    pthread_mutex_unlock(&lock);
    return ok;
}

/* ---- weight gradients in tiles ---- */

/* A weight gradient's split, a function of the shape alone: blocks of
 * output channels (disjoint rows of dw; groups > 1 take one block) times
 * chunks of images, at most WGRAD_TILES tiles, all of one size (so one
 * primitive serves them: each costs milliseconds of JIT at set-up). Chunk 0
 * writes dw, the others partial sums, which are then added to it in chunk
 * order. Wide convs get more channel blocks and fewer chunks, so that the
 * partial sums stay small (under WGRAD_TILES * WGRAD_BLOCK_MIN * k
 * floats); a conv small enough to run on one thread is one tile. */
enum { WGRAD_TILES = 8, WGRAD_BLOCK_MIN = 32 };

typedef struct WgradPlan {
    int64_t cob, blocks;      /* output channels a block, blocks */
    int64_t per, chunks;      /* images a chunk, chunks */
} WgradPlan;

/* The largest divisor of n that is at most most (>= 1). */
static int64_t divisor_under(int64_t n, int64_t most) {
    for (int64_t d = most < n ? most : n; d > 1; d--)
        if (n % d == 0) return d;
    return 1;
}

static WgradPlan wgrad_plan(const Geom *c) {
    WgradPlan w = {c->co, 1, c->n, 1};
    if (geom_macs(c) < PARALLEL_MIN_MACS) return w;
    w.blocks = c->groups > 1 ? 1 : divisor_under(c->co, c->co / WGRAD_BLOCK_MIN < WGRAD_TILES ? c->co / WGRAD_BLOCK_MIN : WGRAD_TILES);
    w.chunks = divisor_under(c->n, WGRAD_TILES / w.blocks);
    w.cob = c->co / w.blocks, w.per = c->n / w.chunks;
    return w;
}

/* A tile's own convolution: its images and output channels. */
static Geom wgrad_tile_geom(const Geom *c, const WgradPlan *w) {
    Geom t = *c;
    t.n = w->per;
    if (c->groups == 1) t.co = t.cog = w->cob;
    return t;
}

static size_t dw_bytes(const Geom *c) { return (size_t)(c->co * c->k) * sizeof(float); }

/* The tile primitive of c, made single-threaded; the lanes' and partial
 * sums' needs raised to its. */
static Prim *wgrad_prim(const Geom *c, const WgradPlan *w, char *err, int errcap) {
    const Geom t = wgrad_tile_geom(c, w);
    /* its images of dy sit a whole dy's image apart */
    ConvLayout lay = packed(&t);
    lay.y_img = c->co * c->ho * c->wo;
    Prim *p = prim_find(&t, CONV_WGRAD, false, 1, &lay, err, errcap);
    if (!p) return NULL;
    for (int k = 0; k < N_SCRATCH; k++)
        if (p->need[k] > lane_most[k]) lane_most[k] = p->need[k];
    const size_t part = (size_t)(w->chunks - 1) * dw_bytes(c);
    if (part > partial_most) partial_most = part;
    if (omp_get_max_threads() > lanes_planned) lanes_planned = omp_get_max_threads();
    return p;
}

/* n lanes, each with a stream and lane_most bytes of scratch. */
static bool lanes_ready(int n, char *err, int errcap) {
    if (n > n_lanes) {
        Lane *nl = realloc(lanes, (size_t)n * sizeof *nl);
        if (!nl) return snprintf(err, (size_t)errcap, "out of memory for oneDNN's lanes"), false;
        memset(nl + n_lanes, 0, (size_t)(n - n_lanes) * sizeof *nl);
        lanes = nl;
        for (; n_lanes < n; n_lanes++)
            if (!DN(dnnl_stream_create(&lanes[n_lanes].stream, engine, dnnl_stream_default_flags), "creating a stream")) return false;
    }
    for (int l = 0; l < n; l++)
        for (int k = 0; k < N_SCRATCH; k++)
            if (!grow(&lanes[l].buf[k], &lanes[l].bytes[k], lane_most[k], err, errcap)) return false;
    return true;
}

bool dnnl_conv_wgrad(const Geom *c, const float *dy, const float *x, float *dw, char *err, int errcap) {
    pthread_mutex_lock(&lock);
    const WgradPlan w = wgrad_plan(c);
    const int64_t tiles = w.chunks * w.blocks, k = c->k, dw_n = c->co * k;
    const int team = conv_threads(c) > 1 && tiles > 1 ? omp_get_max_threads() : 1;
    const Prim *tp = engine_ready(err, errcap) ? wgrad_prim(c, &w, err, errcap) : NULL;
    bool ok = tp && lanes_ready(team, err, errcap) &&
              grow((void **)&partial, &partial_bytes, (size_t)(w.chunks - 1) * dw_bytes(c), err, errcap);
    char why[256] = "";
    int failed = !ok;
    /* one tile's primitives on the calling thread alone: oneDNN would wake the team for each reorder */
    const int threads_before = omp_get_max_threads();
    if (team == 1) omp_set_num_threads(1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team) if (ok && team > 1)
    for (int64_t t = 0; t < tiles; t++) {
        int stop;
#pragma omp atomic read
        stop = failed;
        if (stop) continue;
        const int64_t i = t / w.blocks, j = t % w.blocks;
        float *dst = i ? partial + (i - 1) * dw_n : dw;
        const void *user[N_ARGS] = {dy + (i * w.per * c->co + j * w.cob) * c->ho * c->wo, x + i * w.per * c->ci * c->h * c->w, dst + j * w.cob * k};
        char e[256];
        if (!prim_exec(tp, lanes[omp_get_thread_num()].stream, user, NULL, lanes[omp_get_thread_num()].buf, e, sizeof e)) {
#pragma omp critical(dnnl_wgrad_error)
            if (!why[0]) snprintf(why, sizeof why, "%s", e);
#pragma omp atomic write
            failed = 1;
        }
    }
    if (ok && failed) ok = false, snprintf(err, (size_t)errcap, "%s", why);
    /* the chunks' sums in chunk order, so the bits follow the shape alone */
    if (ok && w.chunks > 1) {
#pragma omp parallel for schedule(static) num_threads(team) if (team > 1)
        for (int64_t e = 0; e < dw_n; e++) {
            float s = dw[e];
            for (int64_t i = 1; i < w.chunks; i++) s += partial[(i - 1) * dw_n + e];
            dw[e] = s;
        }
    }
    if (team == 1) omp_set_num_threads(threads_before);
    pthread_mutex_unlock(&lock);
    return ok;
}

bool dnnl_conv_forward(const Geom *c, const ConvLayout *lay, const float *x, const float *w, const float *b, float *y, char *err, int errcap) {
    const ConvLayout own = packed(c);
    return conv_run(c, CONV_FORWARD, lay ? lay : &own, x, w, b, y, err, errcap);
}

bool dnnl_conv_dgrad(const Geom *c, const float *dy, const float *w, float *dx, char *err, int errcap) {
    const ConvLayout own = packed(c);
    return conv_run(c, CONV_DGRAD, &own, dy, w, NULL, dx, err, errcap);
}

bool dnnl_conv_prepare(const Geom *c, ConvDir dir, bool bias, char *err, int errcap) {
    pthread_mutex_lock(&lock);
    bool ok;
    if (dir == CONV_WGRAD) {
        const WgradPlan w = wgrad_plan(c);
        ok = engine_ready(err, errcap) && wgrad_prim(c, &w, err, errcap) != NULL;
    } else {
        const ConvLayout own = packed(c);
        ok = prim_find(c, dir, bias, conv_threads(c), &own, err, errcap) != NULL;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

int64_t cpu_conv_layout_scratch_bytes(void) {
    pthread_mutex_lock(&lock);
    size_t most[N_SCRATCH] = {0}, total = lines64(partial_most);
    for (int i = 0; i < n_prims; i++)
        for (int k = 0; prims[i].dir != CONV_WGRAD && k < N_SCRATCH; k++)
            if (prims[i].need[k] > most[k]) most[k] = prims[i].need[k];
    for (int k = 0; k < N_SCRATCH; k++) total += lines64(most[k]) + (size_t)lanes_planned * lines64(lane_most[k]);
    pthread_mutex_unlock(&lock);
    return (int64_t)total;
}

int cpu_conv_primitives(void) {
    pthread_mutex_lock(&lock);
    int n = n_prims;
    pthread_mutex_unlock(&lock);
    return n;
}
