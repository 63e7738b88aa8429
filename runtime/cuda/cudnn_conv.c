/* runtime/cuda/cudnn_conv.c — cuDNN 9 backend graphs for the plan's
 * convolutions: keys, execution plans (heuristics mode A, then the fallback
 * list; the candidates to time), the plan cache and execution. Must not allocate plan memory or
 * include CUDA headers; the enum values below are copied from them. */
#include "cudnn_conv.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"
#include "../../passes/views.h"
#include "cuda_abi.h"
#include "cuda_device.h"

enum { MAX_CFGS = 64, TENSOR_ALIGN = 16, UID_X = 1, UID_W = 2, UID_Y = 3 };

/* ---- keys (pure) ---- */

/* memplan's storage type as cuDNN names it */
static int storage_type(const Graph *g, int t, Precision p, const bool *persistent) {
    DType d = memplan_storage_dtype(g, t, persistent[t], p);
    return d == DT_BF16 ? DNN_DATA_BFLOAT16 : d == DT_F16 ? DNN_DATA_HALF : DNN_DATA_FLOAT;
}

/* weights are read through their low-precision compute copies in bf16/fp16 plans */
static int weight_type(const Graph *g, int t, Precision p, const bool *persistent) {
    if (p != PREC_FP32 && g->tensors[t].kind == TK_PARAM) return p == PREC_BF16 ? DNN_DATA_BFLOAT16 : DNN_DATA_HALF;
    return storage_type(g, t, p, persistent);
}

/* A view's image stride, and the alignment of its address: its base sits on
 * a 256-byte boundary, the view some channels in. */
static void view_layout(const Graph *g, const Views *v, int t, Precision p, const bool *persistent, int64_t *bs, int64_t *align) {
    *bs = 0, *align = TENSOR_ALIGN;
    if (!v || v->base[t] == t) return;
    *bs = views_row_stride(g, v, t);
    int64_t bytes = views_elem_offset(g, v, t) * (memplan_tensor_bytes(g, t, persistent[t], p) / shape_numel(&g->tensors[t].shape));
    while (*align > 1 && bytes % *align) *align /= 2;
}

bool conv_key_from_op(const Graph *g, const Op *op, Precision p, const bool *persistent, const Views *views, ConvKey *k, char *err, int errcap) {
    memset(k, 0, sizeof *k);
    const Shape *x, *w, *y;
    int xt, wt, yt;
    switch (op->kind) {
    case OP_CONV2D: /* (x, w[, b]) -> y */
        x = &g->tensors[op->in[0]].shape, w = &g->tensors[op->in[1]].shape, y = &g->tensors[op->out[0]].shape;
        xt = op->in[0], wt = op->in[1], yt = op->out[0];
        k->dir = CONV_FWD;
        k->w_type = weight_type(g, wt, p, persistent);
        break;
    case OP_CONV2D_DGRAD: /* (dy, w) -> dx, dx's shape in a.shape */
        x = &op->a.shape, w = &g->tensors[op->in[1]].shape, y = &g->tensors[op->in[0]].shape;
        xt = op->out[0], wt = op->in[1], yt = op->in[0];
        k->dir = CONV_DGRAD;
        k->w_type = weight_type(g, wt, p, persistent);
        break;
    case OP_CONV2D_WGRAD: /* (dy, x) -> dw, dw's shape in a.shape */
        x = &g->tensors[op->in[1]].shape, w = &op->a.shape, y = &g->tensors[op->in[0]].shape;
        xt = op->in[1], wt = op->out[0], yt = op->in[0];
        k->dir = CONV_WGRAD;
        k->w_type = storage_type(g, wt, p, persistent);
        break;
    default: return errf(err, errcap, "op %d (%s) is not a convolution cuDNN runs here", op->id, op_def(op->kind)->name);
    }
    if (x->nd != 4 || w->nd != 4 || y->nd != 4) return errf(err, errcap, "op %d (%s): convolutions must be 2-D over 4-D tensors", op->id, op_def(op->kind)->name);
    /* dgrad's dx and wgrad's dw are outputs whose shapes sit in the attributes: their layout is the output tensor's */
    k->channels_last = g->tensors[yt].channels_last;
    if (g->tensors[xt].channels_last != k->channels_last || g->tensors[wt].channels_last != k->channels_last)
        return errf(err, errcap, "op %d (%s): x, w and y must share one layout (channels last or NCHW)", op->id, op_def(op->kind)->name);
    const OpAttrs *a = &op->a;
    k->x_type = storage_type(g, xt, p, persistent);
    k->y_type = storage_type(g, yt, p, persistent);
    view_layout(g, views, xt, p, persistent, &k->x_bs, &k->x_align);
    view_layout(g, views, yt, p, persistent, &k->y_bs, &k->y_align);
    k->n = x->d[0], k->ci = x->d[1], k->h = x->d[2], k->w = x->d[3];
    k->co = y->d[1], k->ho = y->d[2], k->wo = y->d[3];
    k->kh = w->d[2], k->kw = w->d[3], k->groups = a->groups;
    k->stride[0] = a->stride[0], k->stride[1] = a->stride[1];
    k->dilation[0] = a->dilation[0], k->dilation[1] = a->dilation[1];
    /* OpAttrs pad is [top, bottom, left, right]; cuDNN takes pre (top, left) and post (bottom, right) */
    k->pre_pad[0] = a->pad[0], k->pre_pad[1] = a->pad[2], k->post_pad[0] = a->pad[1], k->post_pad[1] = a->pad[3];
    if (k->groups < 1 || k->ci % k->groups || k->co % k->groups || w->d[0] != k->co || w->d[1] * k->groups != k->ci)
        return errf(err, errcap, "op %d (%s): weight [%lld,%lld,%lld,%lld] does not match %lld input and %lld output channels in %lld groups", op->id,
                    op_def(op->kind)->name, (long long)w->d[0], (long long)w->d[1], (long long)w->d[2], (long long)w->d[3], (long long)k->ci,
                    (long long)k->co, (long long)k->groups);
    return true;
}

ConvKey conv_bias_key(const ConvKey *fwd) {
    ConvKey k;
    memset(&k, 0, sizeof k);
    k.dir = CONV_FWD;
    k.accumulate = 1;
    k.x_type = fwd->y_type;
    k.w_type = fwd->w_type;
    k.y_type = fwd->y_type;
    k.n = fwd->n, k.ci = 1, k.h = fwd->ho, k.w = fwd->wo;
    k.co = fwd->co, k.ho = fwd->ho, k.wo = fwd->wo;
    k.kh = k.kw = k.groups = 1;
    k.stride[0] = k.stride[1] = k.dilation[0] = k.dilation[1] = 1;
    k.y_bs = fwd->y_bs, k.x_align = TENSOR_ALIGN, k.y_align = fwd->y_align;
    k.channels_last = fwd->channels_last;
    return k;
}

#define KEY_FIELDS(X)                                                                                                                            \
    X(dir) X(accumulate) X(x_type) X(w_type) X(y_type) X(n) X(ci) X(h) X(w) X(co) X(ho) X(wo) X(kh) X(kw) X(groups) X(stride[0]) X(stride[1]) \
        X(dilation[0]) X(dilation[1]) X(pre_pad[0]) X(pre_pad[1]) X(post_pad[0]) X(post_pad[1]) X(x_bs) X(y_bs) X(x_align) X(y_align) \
            X(channels_last)

bool conv_key_equal(const ConvKey *a, const ConvKey *b) {
#define EQ(f) && a->f == b->f
    return true KEY_FIELDS(EQ);
#undef EQ
}

#define ONE(f) +1
_Static_assert(0 KEY_FIELDS(ONE) == CONV_KEY_NFIELDS, "CONV_KEY_NFIELDS counts KEY_FIELDS");
#undef ONE

void conv_key_fields(const ConvKey *k, int64_t out[CONV_KEY_NFIELDS]) {
    int n = 0;
#define PUT(f) out[n++] = (int64_t)k->f;
    KEY_FIELDS(PUT)
#undef PUT
}

/* FNV-1a over each field's value, so padding bytes never enter the hash */
uint64_t conv_key_hash(const ConvKey *k) {
    uint64_t h = 1469598103934665603ULL;
#define MIX(f)                                                \
    {                                                         \
        uint64_t v = (uint64_t)(int64_t)k->f;                 \
        for (int i = 0; i < 8; i++, v >>= 8) h = (h ^ (v & 0xff)) * 1099511628211ULL; \
    }
    KEY_FIELDS(MIX)
#undef MIX
    return h;
}

static const char *type_name(int t) { return t == DNN_DATA_FLOAT ? "fp32" : t == DNN_DATA_BFLOAT16 ? "bf16" : t == DNN_DATA_HALF ? "fp16" : "?"; }

void conv_key_describe(const ConvKey *k, char *buf, int cap) {
    static const char *const dir[] = {"forward", "dgrad", "wgrad"};
    snprintf(buf, (size_t)cap, "%s%s%s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld] y[%lld,%lld,%lld,%lld] stride %lldx%lld pad %lld,%lld,%lld,%lld dilation %lldx%lld groups %lld %s/%s/%s",
             dir[k->dir >= 0 && k->dir <= 2 ? k->dir : 0], k->accumulate ? " (accumulating)" : "", k->channels_last ? " NHWC" : "", (long long)k->n, (long long)k->ci, (long long)k->h,
             (long long)k->w, (long long)k->co, (long long)(k->groups ? k->ci / k->groups : 0), (long long)k->kh, (long long)k->kw, (long long)k->n,
             (long long)k->co, (long long)k->ho, (long long)k->wo, (long long)k->stride[0], (long long)k->stride[1], (long long)k->pre_pad[0],
             (long long)k->post_pad[0], (long long)k->pre_pad[1], (long long)k->post_pad[1], (long long)k->dilation[0], (long long)k->dilation[1],
             (long long)k->groups, type_name(k->x_type), type_name(k->w_type), type_name(k->y_type));
}

/* ---- cuDNN calls ---- */

static bool dn_ok(const CudaLibs *L, CudnnStatus s, const char *call, const char *doing, char *err, int errcap) {
    if (s == 0) return true;
    const char *name = L->cudnnGetErrorString ? L->cudnnGetErrorString(s) : NULL;
    return errf(err, errcap, "%s failed with %s (%d) while %s", call, name ? name : "an unknown cudnnStatus_t", s, doing);
}
#define DN(fn, args) dn_ok(cc->L, cc->L->fn args, #fn, doing, err, errcap)
#define SET(d, attr, type, count, ptr) DN(cudnnBackendSetAttribute, (d, attr, type, count, ptr))

void cudnn_conv_keep_nvrtc(void) {
    static const char *const nvrtc[2] = {"libnvrtc.so.13", "libnvrtc.so.12"};
    for (int i = 0; i < 2; i++) {
        void *h = dlopen(nvrtc[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (h) (void)dlclose(h); /* drops the reference; RTLD_NODELETE keeps the library */
    }
}

bool cudnn_conv_open(CudnnConv *cc, const CudaLibs *L, CuStream s, char *err, int errcap) {
    memset(cc, 0, sizeof *cc);
    cc->L = L;
    cc->stream = s;
    cudnn_conv_keep_nvrtc();
    const char *doing = "creating the cuDNN handle";
    if (!DN(cudnnCreate, (&cc->h))) return false;
    doing = "setting the cuDNN handle's stream";
    if (!DN(cudnnSetStream, (cc->h, s))) return cudnn_conv_close(cc), false;
    return true;
}

static void destroy(const CudaLibs *L, CudnnBackendDescriptor *d) {
    if (*d) (void)L->cudnnBackendDestroyDescriptor(*d); /* releasing host-side descriptors cannot leave anything behind */
    *d = NULL;
}

static void release(CudnnConv *cc, ConvPlan *e) {
    for (int j = 0; j < CONV_TUNE_MAX; j++) destroy(cc->L, &e->cand[j]), destroy(cc->L, &e->cand_cfg[j]);
    for (int j = 0; j < 6; j++) destroy(cc->L, &e->keep[j]);
    e->n_cand = 0;
}

void cudnn_conv_close(CudnnConv *cc) {
    for (int i = 0; i < cc->n_plans; i++) release(cc, &cc->plans[i]);
    if (cc->h) (void)cc->L->cudnnDestroy(cc->h); /* teardown */
    free(cc->plans);
    free(cc->persistent);
    memset(cc, 0, sizeof *cc);
}

static bool make(CudnnConv *cc, int type, CudnnBackendDescriptor *d, const char *doing, char *err, int errcap) {
    return DN(cudnnBackendCreateDescriptor, (type, d));
}

/* Dimensions in NCHW (KCRS) order whatever the layout, which the strides
 * give: packed, or channels last (NHWC, KRSC). bs: elements between images
 * (0: packed). */
static bool tensor(CudnnConv *cc, CudnnBackendDescriptor *d, int64_t uid, int type, int64_t d0, int64_t d1, int64_t d2, int64_t d3, int64_t bs, int64_t align,
                   bool channels_last, const char *doing, char *err, int errcap) {
    int64_t dims[4] = {d0, d1, d2, d3}, strides[4] = {bs ? bs : d1 * d2 * d3, d2 * d3, d3, 1};
    if (channels_last) strides[1] = 1, strides[2] = d3 * d1, strides[3] = d1;
    return make(cc, DN_TENSOR_DESCRIPTOR, d, doing, err, errcap) && SET(*d, DA_TENSOR_DATA_TYPE, AT_DATA_TYPE, 1, &type) &&
           SET(*d, DA_TENSOR_DIMENSIONS, AT_INT64, 4, dims) && SET(*d, DA_TENSOR_STRIDES, AT_INT64, 4, strides) &&
           SET(*d, DA_TENSOR_UNIQUE_ID, AT_INT64, 1, &uid) && SET(*d, DA_TENSOR_BYTE_ALIGNMENT, AT_INT64, 1, &align) && DN(cudnnBackendFinalize, (*d));
}

/* The handle attributes of operation graphs and execution plans: required
 * by early cuDNN 9 releases, deprecated later (the handle comes with each
 * call). Their status is deliberately not checked: where the attribute is
 * still needed, finalizing the descriptor reports the failure. */
static void set_handle(CudnnConv *cc, CudnnBackendDescriptor d, int attr) { (void)cc->L->cudnnBackendSetAttribute(d, attr, AT_HANDLE, 1, &cc->h); }

/* What the engine of config cfg is for key k. */
typedef struct EngineFacts {
    bool acceptable;    /* none of the numerical notes this key refuses */
    bool compiles;      /* cuDNN compiles its kernels when its plan is finalized (also when that cannot be read) */
    bool loose;         /* rounds its inputs down or reduces in lower precision */
    int64_t index;      /* CUDNN_ATTR_ENGINE_GLOBAL_INDEX, -1 when it cannot be read */
} EngineFacts;

/* False only when the engine or its numerical notes cannot be read. */
static bool engine_facts(CudnnConv *cc, CudnnBackendDescriptor cfg, const ConvKey *k, EngineFacts *f, const char *doing, char *err, int errcap) {
    CudnnBackendDescriptor eng = NULL;
    int notes[32], behavior[32];
    int64_t n_eng = 0, n_notes = 0, n_behavior = 0, n_index = 0;
    f->index = -1;
    bool ok = make(cc, DN_ENGINE_DESCRIPTOR, &eng, doing, err, errcap) &&
              DN(cudnnBackendGetAttribute, (cfg, DA_ENGINECFG_ENGINE, AT_BACKEND_DESCRIPTOR, 1, &n_eng, &eng)) &&
              DN(cudnnBackendGetAttribute, (eng, DA_ENGINE_NUMERICAL_NOTE, AT_NUMERICAL_NOTE, 32, &n_notes, notes));
    /* the behaviour notes and the index only narrow the candidates to time: unreadable, they exclude nothing but later candidates */
    const bool behavior_read = ok && cc->L->cudnnBackendGetAttribute(eng, DA_ENGINE_BEHAVIOR_NOTE, AT_BEHAVIOR_NOTE, 32, &n_behavior, behavior) == 0;
    if (ok && (cc->L->cudnnBackendGetAttribute(eng, DA_ENGINE_GLOBAL_INDEX, AT_INT64, 1, &n_index, &f->index) != 0 || n_index != 1)) f->index = -1;
    destroy(cc->L, &eng);
    if (!ok) return false;
    f->compiles = !behavior_read;
    for (int64_t i = 0; behavior_read && i < n_behavior && i < 32; i++) f->compiles |= behavior[i] == BNOTE_RUNTIME_COMPILATION;
    const bool fp32 = k->x_type == DNN_DATA_FLOAT && k->w_type == DNN_DATA_FLOAT && k->y_type == DNN_DATA_FLOAT;
    f->acceptable = true, f->loose = false;
    for (int64_t i = 0; i < n_notes && i < 32; i++) {
        if (notes[i] == NOTE_NONDETERMINISTIC) f->acceptable = false;
        if (fp32 && (notes[i] == NOTE_TENSOR_CORE || notes[i] == NOTE_DOWN_CONVERT_INPUTS || notes[i] == NOTE_REDUCED_PRECISION_REDUCTION || notes[i] == NOTE_FFT))
            f->acceptable = false;
        f->loose |= notes[i] == NOTE_DOWN_CONVERT_INPUTS || notes[i] == NOTE_REDUCED_PRECISION_REDUCTION;
    }
    return true;
}

/* The acceptable engine configs of one heuristics mode that finalize into
 * execution plans, in its order, into e's candidates: the first, then up to
 * want - 1 more that cuDNN need not compile, that are not loose and whose
 * workspace stays within max(the first's, CONV_TUNE_WORKSPACE). *tried counts the configs looked at. */
static bool plan_from_heuristics(CudnnConv *cc, ConvPlan *e, CudnnBackendDescriptor graph, int mode, int want, int *tried, const char *doing, char *err,
                                 int errcap) {
    CudnnBackendDescriptor heur = NULL, cfgs[MAX_CFGS] = {0};
    int64_t n = 0;
    if (!make(cc, DN_ENGINEHEUR_DESCRIPTOR, &heur, doing, err, errcap)) return false;
    /* a graph no engine of this mode supports fails here: that is "no config", not an error */
    if (SET(heur, DA_ENGINEHEUR_OPERATION_GRAPH, AT_BACKEND_DESCRIPTOR, 1, &graph) && SET(heur, DA_ENGINEHEUR_MODE, AT_HEUR_MODE, 1, &mode) &&
        cc->L->cudnnBackendFinalize(heur) == 0 && cc->L->cudnnBackendGetAttribute(heur, DA_ENGINEHEUR_RESULTS, AT_BACKEND_DESCRIPTOR, 0, &n, NULL) == 0) {
        if (n > MAX_CFGS) n = MAX_CFGS;
        int64_t made = 0;
        while (made < n && make(cc, DN_ENGINECFG_DESCRIPTOR, &cfgs[made], doing, err, errcap)) made++;
        int64_t got = 0;
        if (made == n && DN(cudnnBackendGetAttribute, (heur, DA_ENGINEHEUR_RESULTS, AT_BACKEND_DESCRIPTOR, n, &got, cfgs))) {
            for (int64_t i = 0; i < got && e->n_cand < want; i++) {
                ++*tried;
                EngineFacts f;
                if (!engine_facts(cc, cfgs[i], &e->key, &f, doing, err, errcap) || !f.acceptable || (e->n_cand && (f.compiles || f.loose))) continue;
                CudnnBackendDescriptor plan = NULL;
                if (!make(cc, DN_EXECUTION_PLAN_DESCRIPTOR, &plan, doing, err, errcap)) break;
                /* a config that cannot finalize for this graph is skipped for the next one */
                set_handle(cc, plan, DA_EXECUTION_PLAN_HANDLE);
                int64_t ws = 0, cnt = 0;
                if (cc->L->cudnnBackendSetAttribute(plan, DA_EXECUTION_PLAN_ENGINE_CONFIG, AT_BACKEND_DESCRIPTOR, 1, &cfgs[i]) == 0 &&
                    cc->L->cudnnBackendFinalize(plan) == 0 && DN(cudnnBackendGetAttribute, (plan, DA_EXECUTION_PLAN_WORKSPACE_SIZE, AT_INT64, 1, &cnt, &ws)) &&
                    (!e->n_cand || ws <= (e->cand_ws[0] > CONV_TUNE_WORKSPACE ? e->cand_ws[0] : CONV_TUNE_WORKSPACE))) {
                    e->cand[e->n_cand] = plan, e->cand_cfg[e->n_cand] = cfgs[i], e->cand_ws[e->n_cand] = ws, e->cand_engine[e->n_cand] = f.index, cfgs[i] = NULL;
                    e->n_cand++;
                    continue;
                }
                destroy(cc->L, &plan);
            }
        }
    }
    for (int i = 0; i < MAX_CFGS; i++) destroy(cc->L, &cfgs[i]);
    destroy(cc->L, &heur);
    return e->n_cand > 0; /* chosen is 0 (build_plan cleared e): the heuristics' first */
}

/* Builds the operation graph of key k and its execution plan into e.
 * *no_engine: the failure was that no acceptable engine finalized. */
static bool build_plan(CudnnConv *cc, const ConvKey *k, ConvPlan *e, int want, bool *no_engine, char *err, int errcap) {
    *no_engine = false;
    memset(e, 0, sizeof *e);
    e->key = *k;
    e->hash = conv_key_hash(k);
    char what[384], doing[448];
    conv_key_describe(k, what, sizeof what);
    snprintf(doing, sizeof doing, "building the cuDNN plan of convolution %s", what);
    CudnnBackendDescriptor *x = &e->keep[0], *w = &e->keep[1], *y = &e->keep[2], *conv = &e->keep[3], *op = &e->keep[4], *graph = &e->keep[5];
    int comp = DNN_DATA_FLOAT, cmode = DNN_CROSS_CORRELATION;
    float alpha = 1, beta = k->accumulate ? 1.0f : 0.0f;
    const bool cl = k->channels_last;
    if (!tensor(cc, x, UID_X, k->x_type, k->n, k->ci, k->h, k->w, k->x_bs, k->x_align, cl, doing, err, errcap) ||
        !tensor(cc, w, UID_W, k->w_type, k->co, k->ci / k->groups, k->kh, k->kw, 0, TENSOR_ALIGN, cl, doing, err, errcap) ||
        !tensor(cc, y, UID_Y, k->y_type, k->n, k->co, k->ho, k->wo, k->y_bs, k->y_align, cl, doing, err, errcap))
        return false;
    int64_t dims = 2;
    if (!make(cc, DN_CONVOLUTION_DESCRIPTOR, conv, doing, err, errcap) || !SET(*conv, DA_CONV_SPATIAL_DIMS, AT_INT64, 1, &dims) ||
        !SET(*conv, DA_CONV_COMP_TYPE, AT_DATA_TYPE, 1, &comp) || !SET(*conv, DA_CONV_MODE, AT_CONVOLUTION_MODE, 1, &cmode) ||
        !SET(*conv, DA_CONV_PRE_PADDINGS, AT_INT64, 2, k->pre_pad) || !SET(*conv, DA_CONV_POST_PADDINGS, AT_INT64, 2, k->post_pad) ||
        !SET(*conv, DA_CONV_DILATIONS, AT_INT64, 2, k->dilation) || !SET(*conv, DA_CONV_FILTER_STRIDES, AT_INT64, 2, k->stride) ||
        !DN(cudnnBackendFinalize, (*conv)))
        return false;
    static const int kinds[] = {DN_OP_CONV_FORWARD, DN_OP_CONV_BACKWARD_DATA, DN_OP_CONV_BACKWARD_FILTER};
    /* per direction: alpha, beta, conv desc, and the attributes naming x, w and y */
    static const int attrs[3][6] = {
        {DA_OP_FWD_ALPHA, DA_OP_FWD_BETA, DA_OP_FWD_CONV_DESC, DA_OP_FWD_X, DA_OP_FWD_W, DA_OP_FWD_Y},
        {DA_OP_BWD_DATA_ALPHA, DA_OP_BWD_DATA_BETA, DA_OP_BWD_DATA_CONV_DESC, DA_OP_BWD_DATA_DX, DA_OP_BWD_DATA_W, DA_OP_BWD_DATA_DY},
        {DA_OP_BWD_FILTER_ALPHA, DA_OP_BWD_FILTER_BETA, DA_OP_BWD_FILTER_CONV_DESC, DA_OP_BWD_FILTER_X, DA_OP_BWD_FILTER_DW, DA_OP_BWD_FILTER_DY},
    };
    const int *at = attrs[k->dir];
    if (!make(cc, kinds[k->dir], op, doing, err, errcap) || !SET(*op, at[0], AT_FLOAT, 1, &alpha) || !SET(*op, at[1], AT_FLOAT, 1, &beta) ||
        !SET(*op, at[2], AT_BACKEND_DESCRIPTOR, 1, conv) || !SET(*op, at[3], AT_BACKEND_DESCRIPTOR, 1, x) ||
        !SET(*op, at[4], AT_BACKEND_DESCRIPTOR, 1, w) || !SET(*op, at[5], AT_BACKEND_DESCRIPTOR, 1, y) || !DN(cudnnBackendFinalize, (*op)))
        return false;
    if (!make(cc, DN_OPERATIONGRAPH_DESCRIPTOR, graph, doing, err, errcap) || !SET(*graph, DA_OPERATIONGRAPH_OPS, AT_BACKEND_DESCRIPTOR, 1, op))
        return false;
    set_handle(cc, *graph, DA_OPERATIONGRAPH_HANDLE);
    if (!DN(cudnnBackendFinalize, (*graph))) return false;
    int tried = 0;
    err[0] = 0;
    if (plan_from_heuristics(cc, e, *graph, DNN_HEUR_MODE_A, want, &tried, doing, err, errcap) ||
        plan_from_heuristics(cc, e, *graph, DNN_HEUR_MODE_FALLBACK, want, &tried, doing, err, errcap))
        return true;
    if (err[0]) return false;
    *no_engine = true;
    bool asym = k->pre_pad[0] != k->post_pad[0] || k->pre_pad[1] != k->post_pad[1];
    return errf(err, errcap, "cuDNN %zu has no deterministic%s engine for convolution %s (%d engine configs tried in heuristics modes A and fallback)%s",
                cc->L->cudnnGetVersion(), k->x_type == DNN_DATA_FLOAT ? " full-fp32" : "", what, tried,
                asym ? "; its padding is asymmetric, which cuDNN engines may not support" : "");
}

static ConvPlan *find_plan(CudnnConv *cc, const ConvKey *k) {
    uint64_t h = conv_key_hash(k);
    for (int i = 0; i < cc->n_plans; i++)
        if (cc->plans[i].hash == h && conv_key_equal(&cc->plans[i].key, k)) return &cc->plans[i];
    return NULL;
}

/* A weight gradient from bf16 / fp16 x and dy into fp32 dw: cuDNN's engines
 * may want dw in the inputs' type, as its legacy API did. */
static bool stageable(const ConvKey *k) { return k->dir == CONV_WGRAD && k->w_type == DNN_DATA_FLOAT && k->x_type != DNN_DATA_FLOAT && k->x_type == k->y_type; }

static int64_t dw_numel(const ConvKey *k) { return k->co * (k->ci / k->groups) * k->kh * k->kw; }

/* The plan of key k, built with up to want candidates when it is new. */
static ConvPlan *get_plan(CudnnConv *cc, const ConvKey *k, int want, char *err, int errcap) {
    ConvPlan *e = find_plan(cc, k);
    if (e) return e;
    if (cc->n_plans == cc->cap_plans) {
        int cap = cc->cap_plans ? cc->cap_plans * 2 : 16;
        ConvPlan *np = realloc(cc->plans, sizeof *np * (size_t)cap);
        if (!np) return errf(err, errcap, "out of memory"), NULL;
        cc->plans = np, cc->cap_plans = cap;
    }
    e = &cc->plans[cc->n_plans];
    bool no_engine;
    bool ok = build_plan(cc, k, e, want, &no_engine, err, errcap);
    if (!ok && no_engine && stageable(k)) {
        /* PyTorch's AMP takes this path always: dw in the inputs' type,
         * then widened into the fp32 gradient */
        release(cc, e);
        ConvKey staged = *k;
        staged.w_type = k->x_type;
        char direct[768];
        snprintf(direct, sizeof direct, "%s", err);
        ok = build_plan(cc, &staged, e, want, &no_engine, err, errcap);
        if (ok) e->key = *k, e->hash = conv_key_hash(k), e->staged = true;
        else if (no_engine) {
            char staged_err[768];
            snprintf(staged_err, sizeof staged_err, "%s", err);
            errf(err, errcap, "%s; nor with dw in %s to widen afterwards: %s", direct, type_name(k->x_type), staged_err);
        }
    }
    if (!ok) return release(cc, e), NULL;
    cc->n_plans++;
    int64_t stage = e->staged ? memplan_align(dw_numel(k) * 2) : 0;
    if (stage > cc->stage_bytes) cc->stage_bytes = stage;
    return e;
}

static bool is_conv(OpKind k) { return k == OP_CONV2D || k == OP_CONV2D_DGRAD || k == OP_CONV2D_WGRAD; }

static int key_candidates(const CudnnConv *cc) { return cc->candidates < 1 ? 1 : cc->candidates > CONV_TUNE_MAX ? CONV_TUNE_MAX : cc->candidates; }

bool cudnn_conv_prepare(CudnnConv *cc, const Graph *g, const Views *views, Precision p, char *err, int errcap) {
    free(cc->persistent);
    cc->persistent = calloc((size_t)g->n_tensors + 1, sizeof *cc->persistent);
    if (!cc->persistent) return errf(err, errcap, "out of memory");
    memplan_mark_persistent(g, cc->persistent);
    cc->g = g;
    cc->views = views;
    cc->precision = p;
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        if (!is_conv(op->kind)) continue;
        ConvKey k;
        ConvPlan *e;
        if (!conv_key_from_op(g, op, p, cc->persistent, cc->views, &k, err, errcap) || !(e = get_plan(cc, &k, key_candidates(cc), err, errcap))) return false;
        cc->staged_ops += e->staged;
        if (op->kind == OP_CONV2D && op->n_in == 3) {
            ConvKey b = conv_bias_key(&k);
            if (!get_plan(cc, &b, 1, err, errcap)) return false;
            if (b.n * b.h * b.w > cc->ones_elems) cc->ones_elems = b.n * b.h * b.w;
        }
    }
    return true;
}

static int64_t ones_bytes(const CudnnConv *cc) { return memplan_align(cc->ones_elems * 4); }

/* the workspace: the ones tensor, the staged weight gradient, the plans' workspace */
static int64_t plan_workspace_offset(const CudnnConv *cc) { return ones_bytes(cc) + cc->stage_bytes; }

int64_t cudnn_conv_workspace_bytes(const CudnnConv *cc) {
    int64_t most = 0;
    for (int i = 0; i < cc->n_plans; i++)
        for (int j = 0; j < cc->plans[i].n_cand; j++)
            if (cc->plans[i].cand[j] && cc->plans[i].cand_ws[j] > most) most = cc->plans[i].cand_ws[j];
    return plan_workspace_offset(cc) + most;
}

ConvPlan *cudnn_conv_plan_of(CudnnConv *cc, const Op *op, char *err, int errcap) {
    ConvKey k;
    if (!cc->g) return errf(err, errcap, "cudnn_conv_plan_of before cudnn_conv_prepare"), NULL;
    if (!conv_key_from_op(cc->g, op, cc->precision, cc->persistent, cc->views, &k, err, errcap)) return NULL;
    ConvPlan *e = find_plan(cc, &k);
    if (!e) errf(err, errcap, "op %d's convolution was not prepared", op->id);
    return e;
}

void cudnn_conv_settle(CudnnConv *cc) {
    for (int i = 0; i < cc->n_plans; i++) {
        ConvPlan *e = &cc->plans[i];
        for (int j = 0; j < e->n_cand; j++)
            if (j != e->chosen) destroy(cc->L, &e->cand[j]), destroy(cc->L, &e->cand_cfg[j]);
    }
}

void cudnn_conv_bind(CudnnConv *cc, CuDevicePtr workspace, int64_t bytes) {
    cc->workspace = workspace;
    cc->workspace_bytes = bytes;
}

static bool execute(CudnnConv *cc, const ConvPlan *e, CuDevicePtr x, CuDevicePtr w, CuDevicePtr y, char *err, int errcap) {
    char what[416], doing[448];
    conv_key_describe(&e->key, what, sizeof what);
    if (e->staged) snprintf(what + strlen(what), sizeof what - strlen(what), " (dw in %s, widened)", type_name(e->key.x_type));
    snprintf(doing, sizeof doing, "running convolution %s", what);
    int64_t bound = cc->workspace_bytes - plan_workspace_offset(cc);
    const int64_t need = e->cand_ws[e->chosen];
    if (need > bound)
        return errf(err, errcap, "convolution %s needs %lld bytes of workspace but %lld are bound (prepare the graph first)", what, (long long)need,
                    (long long)bound);
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {(void *)(uintptr_t)x, (void *)(uintptr_t)w, (void *)(uintptr_t)y};
    void *ws = (void *)(uintptr_t)(cc->workspace + (CuDevicePtr)plan_workspace_offset(cc));
    CudnnBackendDescriptor vp = NULL;
    bool ok = make(cc, DN_VARIANT_PACK_DESCRIPTOR, &vp, doing, err, errcap) && SET(vp, DA_VARIANT_PACK_UNIQUE_IDS, AT_INT64, 3, uids) &&
              SET(vp, DA_VARIANT_PACK_DATA_POINTERS, AT_VOID_PTR, 3, ptrs) && SET(vp, DA_VARIANT_PACK_WORKSPACE, AT_VOID_PTR, 1, &ws) &&
              DN(cudnnBackendFinalize, (vp)) && DN(cudnnBackendExecute, (cc->h, e->cand[e->chosen], vp));
    destroy(cc->L, &vp);
    return ok;
}

bool cudnn_conv_run(CudnnConv *cc, const Op *op, const CuDevicePtr *in, CuDevicePtr out, ConvWiden *widen, char *err, int errcap) {
    widen->src = 0, widen->n = 0;
    if (!cc->g) return errf(err, errcap, "cudnn_conv_run before cudnn_conv_prepare");
    ConvKey k;
    if (!conv_key_from_op(cc->g, op, cc->precision, cc->persistent, cc->views, &k, err, errcap)) return false;
    ConvPlan *e = get_plan(cc, &k, key_candidates(cc), err, errcap);
    if (!e) return false;
    bool ok;
    switch (op->kind) {
    case OP_CONV2D: ok = execute(cc, e, in[0], in[1], out, err, errcap); break;
    case OP_CONV2D_DGRAD: ok = execute(cc, e, out, in[1], in[0], err, errcap); break;
    default:
        if (e->staged) {
            widen->src = cc->workspace + (CuDevicePtr)ones_bytes(cc), widen->n = dw_numel(&k);
            if (cc->workspace_bytes < plan_workspace_offset(cc)) return errf(err, errcap, "the staged weight gradient of op %d was not prepared", op->id);
        }
        ok = execute(cc, e, in[1], e->staged ? widen->src : out, in[0], err, errcap);
        break;
    }
    if (!ok || op->kind != OP_CONV2D || op->n_in != 3) return ok;
    /* the bias as a 1x1 convolution of a ones tensor, accumulated into y:
     * cuDNN without a fused bias epilogue for these layouts and types */
    ConvKey bk = conv_bias_key(&k);
    ConvPlan *b = get_plan(cc, &bk, 1, err, errcap);
    if (!b) return false;
    int64_t n = bk.n * bk.h * bk.w;
    if (n > cc->ones_elems) return errf(err, errcap, "the bias step of op %d was not prepared", op->id);
    char doing[96];
    snprintf(doing, sizeof doing, "filling the ones tensor of op %d's bias", op->id);
    /* 1.0 in each storage type: fp32 0x3f800000, bf16 0x3f80, fp16 0x3c00 */
    unsigned short one16 = bk.x_type == DNN_DATA_BFLOAT16 ? 0x3f80 : 0x3c00;
    if (bk.x_type == DNN_DATA_FLOAT ? !CUDA_CALL(cc->L, cuMemsetD32Async, (cc->workspace, 0x3f800000u, (size_t)n, cc->stream), doing, err, errcap)
                                    : !CUDA_CALL(cc->L, cuMemsetD16Async, (cc->workspace, one16, (size_t)n, cc->stream), doing, err, errcap))
        return false;
    return execute(cc, b, cc->workspace, in[2], out, err, errcap);
}
