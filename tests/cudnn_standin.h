/* tests/cudnn_standin.h — a stand-in for the cuDNN 9 backend API, for test_cudnn_conv.c:
 * descriptors keep typed attributes and refuse misuse (an attribute on the wrong descriptor or of
 * the wrong type, a finalize with one missing, a set after finalize), a fixed list of engines
 * with numerical and behaviour notes, workspace sizes and global indices, and every execution
 * recorded. Test-only; one includer (its functions are static). */
#ifndef YOLOCC_CUDNN_STANDIN_H
#define YOLOCC_CUDNN_STANDIN_H
#include "../runtime/cuda/cuda_abi.h"
#include "../runtime/cuda/cuda_convert.h"
#include "../runtime/cuda/cudnn_conv.h"
#include "test_util.h"

enum { SD_MAX_ATTR = 12, SD_ATTR_BYTES = 64, SD_BAD_PARAM = 2000, SD_NOT_SUPPORTED = 3000, SD_MAX_EXEC = 64 };

typedef struct SAttr {
    int name, type;
    int64_t count;
    unsigned char v[SD_ATTR_BYTES];
} SAttr;

typedef struct SDesc {
    int type;
    bool final;
    int engine;             /* engine configs and engines: which of ENGINES */
    struct SDesc *graph;    /* engine configs: the graph their heuristics ran on */
    SAttr a[SD_MAX_ATTR];
    int na;
} SDesc;

/* What one execution saw, by role: x (dx), w (dw), y (dy). */
typedef struct SExec {
    int op_type, engine;
    int type[3];
    CuDevicePtr ptr[3];
    CuDevicePtr ws;
} SExec;

static struct {
    int live, misuse;
    char misuse_what[256];
    bool refuse_mixed_wgrad, refuse_wgrad, write_dw;
    bool more_engines;      /* mode A also lists the engines marked `more` (candidates to time) */
    bool hide_behavior;     /* engines' behaviour notes cannot be read */
    int n_exec;
    SExec exec[SD_MAX_EXEC];
} SD;

/* mode A lists engines 0 and 1 (and with SD.more_engines 3 to 9), the fallback mode engine 2;
 * engine 3 is compiled by cuDNN at finalize, engine 5 needs more workspace than timing may take,
 * engine 6 reduces in lower precision; an engine's global index is 100 + its position */
static const struct {
    int mode, note, behavior;
    int64_t workspace;
    bool more;
} ENGINES[] = {
    {DNN_HEUR_MODE_A, NOTE_NONDETERMINISTIC, -1, 4096, false},
    {DNN_HEUR_MODE_A, NOTE_TENSOR_CORE, -1, 2048, false},
    {DNN_HEUR_MODE_FALLBACK, -1, -1, 512, false},
    {DNN_HEUR_MODE_A, NOTE_TENSOR_CORE, BNOTE_RUNTIME_COMPILATION, 0, true},
    {DNN_HEUR_MODE_A, NOTE_TENSOR_CORE, -1, 8192, true},
    {DNN_HEUR_MODE_A, NOTE_TENSOR_CORE, -1, CONV_TUNE_WORKSPACE + 1, true},
    {DNN_HEUR_MODE_A, NOTE_REDUCED_PRECISION_REDUCTION, -1, 64, true},
    {DNN_HEUR_MODE_A, NOTE_TENSOR_CORE, -1, 1024, true},
    {DNN_HEUR_MODE_A, NOTE_TENSOR_CORE, -1, 16, true},
    {DNN_HEUR_MODE_A, NOTE_TENSOR_CORE, -1, 32, true},
};
enum { N_ENGINES = 10 };

/* Every attribute cudnn_conv.c may set: its descriptor and element type. */
static const struct {
    int name, desc, type;
} SETTABLE[] = {
    {DA_CONV_COMP_TYPE, DN_CONVOLUTION_DESCRIPTOR, AT_DATA_TYPE}, {DA_CONV_MODE, DN_CONVOLUTION_DESCRIPTOR, AT_CONVOLUTION_MODE},
    {DA_CONV_DILATIONS, DN_CONVOLUTION_DESCRIPTOR, AT_INT64}, {DA_CONV_FILTER_STRIDES, DN_CONVOLUTION_DESCRIPTOR, AT_INT64},
    {DA_CONV_POST_PADDINGS, DN_CONVOLUTION_DESCRIPTOR, AT_INT64}, {DA_CONV_PRE_PADDINGS, DN_CONVOLUTION_DESCRIPTOR, AT_INT64},
    {DA_CONV_SPATIAL_DIMS, DN_CONVOLUTION_DESCRIPTOR, AT_INT64},
    {DA_ENGINEHEUR_MODE, DN_ENGINEHEUR_DESCRIPTOR, AT_HEUR_MODE}, {DA_ENGINEHEUR_OPERATION_GRAPH, DN_ENGINEHEUR_DESCRIPTOR, AT_BACKEND_DESCRIPTOR},
    {DA_EXECUTION_PLAN_HANDLE, DN_EXECUTION_PLAN_DESCRIPTOR, AT_HANDLE}, {DA_EXECUTION_PLAN_ENGINE_CONFIG, DN_EXECUTION_PLAN_DESCRIPTOR, AT_BACKEND_DESCRIPTOR},
    {DA_OP_FWD_ALPHA, DN_OP_CONV_FORWARD, AT_FLOAT}, {DA_OP_FWD_BETA, DN_OP_CONV_FORWARD, AT_FLOAT},
    {DA_OP_FWD_CONV_DESC, DN_OP_CONV_FORWARD, AT_BACKEND_DESCRIPTOR}, {DA_OP_FWD_W, DN_OP_CONV_FORWARD, AT_BACKEND_DESCRIPTOR},
    {DA_OP_FWD_X, DN_OP_CONV_FORWARD, AT_BACKEND_DESCRIPTOR}, {DA_OP_FWD_Y, DN_OP_CONV_FORWARD, AT_BACKEND_DESCRIPTOR},
    {DA_OP_BWD_DATA_ALPHA, DN_OP_CONV_BACKWARD_DATA, AT_FLOAT}, {DA_OP_BWD_DATA_BETA, DN_OP_CONV_BACKWARD_DATA, AT_FLOAT},
    {DA_OP_BWD_DATA_CONV_DESC, DN_OP_CONV_BACKWARD_DATA, AT_BACKEND_DESCRIPTOR}, {DA_OP_BWD_DATA_W, DN_OP_CONV_BACKWARD_DATA, AT_BACKEND_DESCRIPTOR},
    {DA_OP_BWD_DATA_DX, DN_OP_CONV_BACKWARD_DATA, AT_BACKEND_DESCRIPTOR}, {DA_OP_BWD_DATA_DY, DN_OP_CONV_BACKWARD_DATA, AT_BACKEND_DESCRIPTOR},
    {DA_OP_BWD_FILTER_ALPHA, DN_OP_CONV_BACKWARD_FILTER, AT_FLOAT}, {DA_OP_BWD_FILTER_BETA, DN_OP_CONV_BACKWARD_FILTER, AT_FLOAT},
    {DA_OP_BWD_FILTER_CONV_DESC, DN_OP_CONV_BACKWARD_FILTER, AT_BACKEND_DESCRIPTOR}, {DA_OP_BWD_FILTER_DW, DN_OP_CONV_BACKWARD_FILTER, AT_BACKEND_DESCRIPTOR},
    {DA_OP_BWD_FILTER_X, DN_OP_CONV_BACKWARD_FILTER, AT_BACKEND_DESCRIPTOR}, {DA_OP_BWD_FILTER_DY, DN_OP_CONV_BACKWARD_FILTER, AT_BACKEND_DESCRIPTOR},
    {DA_OPERATIONGRAPH_HANDLE, DN_OPERATIONGRAPH_DESCRIPTOR, AT_HANDLE}, {DA_OPERATIONGRAPH_OPS, DN_OPERATIONGRAPH_DESCRIPTOR, AT_BACKEND_DESCRIPTOR},
    {DA_TENSOR_BYTE_ALIGNMENT, DN_TENSOR_DESCRIPTOR, AT_INT64}, {DA_TENSOR_DATA_TYPE, DN_TENSOR_DESCRIPTOR, AT_DATA_TYPE},
    {DA_TENSOR_DIMENSIONS, DN_TENSOR_DESCRIPTOR, AT_INT64}, {DA_TENSOR_STRIDES, DN_TENSOR_DESCRIPTOR, AT_INT64},
    {DA_TENSOR_UNIQUE_ID, DN_TENSOR_DESCRIPTOR, AT_INT64},
    {DA_VARIANT_PACK_UNIQUE_IDS, DN_VARIANT_PACK_DESCRIPTOR, AT_INT64}, {DA_VARIANT_PACK_DATA_POINTERS, DN_VARIANT_PACK_DESCRIPTOR, AT_VOID_PTR},
    {DA_VARIANT_PACK_WORKSPACE, DN_VARIANT_PACK_DESCRIPTOR, AT_VOID_PTR},
};

/* per op descriptor type: the attribute names of x, w, y (in that order) */
static const int *roles(int op_type) {
    static const int fwd[3] = {DA_OP_FWD_X, DA_OP_FWD_W, DA_OP_FWD_Y}, data[3] = {DA_OP_BWD_DATA_DX, DA_OP_BWD_DATA_W, DA_OP_BWD_DATA_DY},
                     filter[3] = {DA_OP_BWD_FILTER_X, DA_OP_BWD_FILTER_DW, DA_OP_BWD_FILTER_DY};
    return op_type == DN_OP_CONV_FORWARD ? fwd : op_type == DN_OP_CONV_BACKWARD_DATA ? data : op_type == DN_OP_CONV_BACKWARD_FILTER ? filter : NULL;
}

static CudnnStatus misuse(const char *what, int v) {
    if (!SD.misuse++) snprintf(SD.misuse_what, sizeof SD.misuse_what, "%s %d", what, v);
    return SD_BAD_PARAM;
}

static size_t element_size(int at) {
    return at == AT_DATA_TYPE || at == AT_FLOAT || at == AT_CONVOLUTION_MODE || at == AT_HEUR_MODE || at == AT_NUMERICAL_NOTE || at == AT_BEHAVIOR_NOTE ? 4 : 8;
}

static const SAttr *attr(const SDesc *d, int name) {
    for (int i = 0; i < d->na; i++)
        if (d->a[i].name == name) return &d->a[i];
    return NULL;
}
static int64_t attr_i64(const SDesc *d, int name, int i) {
    const SAttr *a = attr(d, name);
    int64_t v = 0;
    if (a && i < a->count) memcpy(&v, a->v + (size_t)i * 8, 8);
    return v;
}
static int attr_int(const SDesc *d, int name) {
    const SAttr *a = attr(d, name);
    int v = -1;
    if (a) memcpy(&v, a->v, 4);
    return v;
}
static SDesc *attr_desc(const SDesc *d, int name) {
    const SAttr *a = attr(d, name);
    SDesc *v = NULL;
    if (a) memcpy(&v, a->v, sizeof v);
    return v;
}

static size_t sd_version(void) { return 91900; }
static const char *sd_error_string(CudnnStatus s) { return s == SD_NOT_SUPPORTED ? "CUDNN_STATUS_NOT_SUPPORTED (stand-in)" : "CUDNN_STATUS_BAD_PARAM (stand-in)"; }
static CudnnStatus sd_create(CudnnHandle *h) { return *h = (CudnnHandle)(uintptr_t)0xd00d, 0; }
static CudnnStatus sd_destroy(CudnnHandle h) { return h == (CudnnHandle)(uintptr_t)0xd00d ? 0 : misuse("destroying an unknown handle", 0); }
static CudnnStatus sd_set_stream(CudnnHandle h, CuStream s) { return (void)h, (void)s, 0; }

static CudnnStatus sd_create_desc(CudnnBackendDescriptorType type, CudnnBackendDescriptor *d) {
    SDesc *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->type = type, s->engine = -1;
    SD.live++;
    *d = s;
    return 0;
}
static CudnnStatus sd_destroy_desc(CudnnBackendDescriptor d) {
    if (!d) return misuse("destroying a NULL descriptor", 0);
    free(d);
    SD.live--;
    return 0;
}

static CudnnStatus sd_set(CudnnBackendDescriptor dd, CudnnBackendAttributeName name, CudnnBackendAttributeType type, int64_t count, const void *v) {
    SDesc *d = dd;
    if (d->final) return misuse("set after finalize: attribute", name);
    size_t k = 0;
    while (k < sizeof SETTABLE / sizeof SETTABLE[0] && SETTABLE[k].name != name) k++;
    if (k == sizeof SETTABLE / sizeof SETTABLE[0] || SETTABLE[k].desc != d->type) return misuse("attribute on the wrong descriptor:", name);
    if (SETTABLE[k].type != type) return misuse("attribute of the wrong element type:", name);
    if (count < 1 || (size_t)count * element_size(type) > SD_ATTR_BYTES || d->na == SD_MAX_ATTR) return misuse("attribute count:", name);
    SAttr *a = (SAttr *)attr(d, name);
    if (!a) a = &d->a[d->na++];
    a->name = name, a->type = type, a->count = count;
    memcpy(a->v, v, (size_t)count * element_size(type));
    return 0;
}

static bool has_all(const SDesc *d, const int *names, int n) {
    for (int i = 0; i < n; i++)
        if (!attr(d, names[i])) return false;
    return true;
}

/* The op of an execution plan's graph. */
static SDesc *plan_op(const SDesc *plan) {
    SDesc *cfg = attr_desc(plan, DA_EXECUTION_PLAN_ENGINE_CONFIG);
    return cfg && cfg->graph ? attr_desc(cfg->graph, DA_OPERATIONGRAPH_OPS) : NULL;
}

static CudnnStatus sd_finalize(CudnnBackendDescriptor dd) {
    SDesc *d = dd;
    if (d->final) return misuse("finalizing twice: descriptor type", d->type);
    static const int tensor[] = {DA_TENSOR_BYTE_ALIGNMENT, DA_TENSOR_DATA_TYPE, DA_TENSOR_DIMENSIONS, DA_TENSOR_STRIDES, DA_TENSOR_UNIQUE_ID},
                     conv[] = {DA_CONV_COMP_TYPE, DA_CONV_MODE, DA_CONV_DILATIONS, DA_CONV_FILTER_STRIDES, DA_CONV_POST_PADDINGS, DA_CONV_PRE_PADDINGS, DA_CONV_SPATIAL_DIMS},
                     heur[] = {DA_ENGINEHEUR_MODE, DA_ENGINEHEUR_OPERATION_GRAPH}, pack[] = {DA_VARIANT_PACK_UNIQUE_IDS, DA_VARIANT_PACK_DATA_POINTERS, DA_VARIANT_PACK_WORKSPACE};
    switch (d->type) {
    case DN_TENSOR_DESCRIPTOR:
        if (!has_all(d, tensor, 5) || attr(d, DA_TENSOR_DIMENSIONS)->count != 4 || attr(d, DA_TENSOR_STRIDES)->count != 4) return misuse("incomplete tensor", 0);
        break;
    case DN_CONVOLUTION_DESCRIPTOR:
        if (!has_all(d, conv, 7)) return misuse("incomplete convolution", 0);
        break;
    case DN_OP_CONV_FORWARD:
    case DN_OP_CONV_BACKWARD_DATA:
    case DN_OP_CONV_BACKWARD_FILTER: {
        const int *r = roles(d->type);
        for (int i = 0; i < 3; i++) {
            SDesc *t = attr_desc(d, r[i]);
            if (!t || !t->final || t->type != DN_TENSOR_DESCRIPTOR) return misuse("operation without a finalized tensor: role", i);
        }
        SDesc *c = attr_desc(d, d->type == DN_OP_CONV_FORWARD ? DA_OP_FWD_CONV_DESC : d->type == DN_OP_CONV_BACKWARD_DATA ? DA_OP_BWD_DATA_CONV_DESC : DA_OP_BWD_FILTER_CONV_DESC);
        if (!c || !c->final) return misuse("operation without a finalized convolution", d->type);
        if (d->na != 6) return misuse("operation without alpha or beta", d->type);
        break;
    }
    case DN_OPERATIONGRAPH_DESCRIPTOR: {
        SDesc *op = attr_desc(d, DA_OPERATIONGRAPH_OPS);
        if (!op || !op->final || !roles(op->type)) return misuse("graph without a finalized convolution operation", 0);
        break;
    }
    case DN_ENGINEHEUR_DESCRIPTOR: {
        if (!has_all(d, heur, 2)) return misuse("incomplete heuristics", 0);
        SDesc *g = attr_desc(d, DA_ENGINEHEUR_OPERATION_GRAPH);
        if (!g->final) return misuse("heuristics of an unfinished graph", 0);
        break;
    }
    case DN_EXECUTION_PLAN_DESCRIPTOR: {
        SDesc *cfg = attr_desc(d, DA_EXECUTION_PLAN_ENGINE_CONFIG), *op = plan_op(d);
        if (!cfg || !cfg->final || !op) return misuse("execution plan without a filled engine config", 0);
        SDesc *x = attr_desc(op, roles(op->type)[0]), *w = attr_desc(op, roles(op->type)[1]);
        if (op->type == DN_OP_CONV_BACKWARD_FILTER && (SD.refuse_wgrad || (SD.refuse_mixed_wgrad && attr_int(w, DA_TENSOR_DATA_TYPE) != attr_int(x, DA_TENSOR_DATA_TYPE))))
            return SD_NOT_SUPPORTED;
        break;
    }
    case DN_VARIANT_PACK_DESCRIPTOR:
        if (!has_all(d, pack, 3)) return misuse("incomplete variant pack", 0);
        break;
    default: return misuse("finalizing a descriptor of type", d->type);
    }
    d->final = true;
    return 0;
}

static CudnnStatus sd_get(CudnnBackendDescriptor dd, CudnnBackendAttributeName name, CudnnBackendAttributeType type, int64_t requested, int64_t *count, void *out) {
    SDesc *d = dd;
    if (!d->final && d->type != DN_ENGINE_DESCRIPTOR) return misuse("get from an unfinished descriptor: attribute", name);
    if (name == DA_ENGINEHEUR_RESULTS && d->type == DN_ENGINEHEUR_DESCRIPTOR && type == AT_BACKEND_DESCRIPTOR) {
        int mode = attr_int(d, DA_ENGINEHEUR_MODE);
        int64_t n = 0;
        for (int e = 0; e < N_ENGINES; e++) {
            if (ENGINES[e].mode != mode || (ENGINES[e].more && !SD.more_engines)) continue;
            if (n < requested) {
                SDesc *cfg = ((SDesc **)out)[n];
                if (!cfg || cfg->type != DN_ENGINECFG_DESCRIPTOR) return misuse("results into a descriptor that is no engine config", 0);
                cfg->engine = e, cfg->graph = attr_desc(d, DA_ENGINEHEUR_OPERATION_GRAPH), cfg->final = true;
            }
            n++;
        }
        *count = requested ? (n < requested ? n : requested) : n;
        return 0;
    }
    if (name == DA_ENGINECFG_ENGINE && d->type == DN_ENGINECFG_DESCRIPTOR && type == AT_BACKEND_DESCRIPTOR && requested == 1) {
        SDesc *eng = *(SDesc **)out;
        if (!eng || eng->type != DN_ENGINE_DESCRIPTOR) return misuse("engine into a descriptor that is no engine", 0);
        eng->engine = d->engine;
        *count = 1;
        return 0;
    }
    if (name == DA_ENGINE_NUMERICAL_NOTE && d->type == DN_ENGINE_DESCRIPTOR && type == AT_NUMERICAL_NOTE) {
        if (d->engine < 0) return misuse("notes of an engine no config filled", 0);
        *count = ENGINES[d->engine].note >= 0;
        if (*count && requested >= 1) ((int *)out)[0] = ENGINES[d->engine].note;
        return 0;
    }
    if (name == DA_ENGINE_GLOBAL_INDEX && d->type == DN_ENGINE_DESCRIPTOR && type == AT_INT64 && requested == 1) {
        if (d->engine < 0) return misuse("the index of an engine no config filled", 0);
        *(int64_t *)out = 100 + d->engine;
        *count = 1;
        return 0;
    }
    if (name == DA_ENGINE_BEHAVIOR_NOTE && d->type == DN_ENGINE_DESCRIPTOR && type == AT_BEHAVIOR_NOTE) {
        if (d->engine < 0) return misuse("behavior notes of an engine no config filled", 0);
        if (SD.hide_behavior) return SD_NOT_SUPPORTED;
        *count = ENGINES[d->engine].behavior >= 0;
        if (*count && requested >= 1) ((int *)out)[0] = ENGINES[d->engine].behavior;
        return 0;
    }
    if (name == DA_EXECUTION_PLAN_WORKSPACE_SIZE && d->type == DN_EXECUTION_PLAN_DESCRIPTOR && type == AT_INT64 && requested == 1) {
        *(int64_t *)out = ENGINES[attr_desc(d, DA_EXECUTION_PLAN_ENGINE_CONFIG)->engine].workspace;
        *count = 1;
        return 0;
    }
    return misuse("get of attribute", name);
}

/* 1/8 steps between -6 and 6: exact in bf16 and fp16 */
static float dw_value(int64_t i) { return (float)(i % 97 - 48) * 0.125f; }

static CudnnStatus sd_execute(CudnnHandle h, CudnnBackendDescriptor plan, CudnnBackendDescriptor pack) {
    SDesc *p = plan, *vp = pack;
    if (h != (CudnnHandle)(uintptr_t)0xd00d || !p->final || !vp->final || p->type != DN_EXECUTION_PLAN_DESCRIPTOR) return misuse("execute", 0);
    SDesc *op = plan_op(p), *cfg = attr_desc(p, DA_EXECUTION_PLAN_ENGINE_CONFIG);
    cr_assert(SD.n_exec < SD_MAX_EXEC);
    SExec *e = &SD.exec[SD.n_exec++];
    e->op_type = op->type, e->engine = cfg->engine, e->ws = (CuDevicePtr)attr_i64(vp, DA_VARIANT_PACK_WORKSPACE, 0);
    const SAttr *uids = attr(vp, DA_VARIANT_PACK_UNIQUE_IDS);
    for (int r = 0; r < 3; r++) {
        SDesc *t = attr_desc(op, roles(op->type)[r]);
        int64_t uid = attr_i64(t, DA_TENSOR_UNIQUE_ID, 0), align = attr_i64(t, DA_TENSOR_BYTE_ALIGNMENT, 0);
        e->type[r] = attr_int(t, DA_TENSOR_DATA_TYPE);
        int k = 0;
        while (k < uids->count && attr_i64(vp, DA_VARIANT_PACK_UNIQUE_IDS, k) != uid) k++;
        if (k == uids->count) return misuse("variant pack without tensor uid", (int)uid);
        e->ptr[r] = (CuDevicePtr)attr_i64(vp, DA_VARIANT_PACK_DATA_POINTERS, k);
        if (!e->ptr[r] || e->ptr[r] % (CuDevicePtr)align) return misuse("a pointer off its tensor's alignment: role", r);
    }
    if (op->type == DN_OP_CONV_BACKWARD_FILTER && SD.write_dw) {
        SDesc *dw = attr_desc(op, DA_OP_BWD_FILTER_DW);
        int64_t n = attr_i64(dw, DA_TENSOR_DIMENSIONS, 0) * attr_i64(dw, DA_TENSOR_DIMENSIONS, 1) * attr_i64(dw, DA_TENSOR_DIMENSIONS, 2) * attr_i64(dw, DA_TENSOR_DIMENSIONS, 3);
        int type = e->type[1];
        float *v = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) v[i] = dw_value(i);
        cuda_f32_to_storage(type == DNN_DATA_FLOAT ? DT_F32 : type == DNN_DATA_BFLOAT16 ? DT_BF16 : DT_F16, v, (void *)(uintptr_t)e->ptr[1], n);
        free(v);
    }
    return 0;
}

static void standin_cudnn(CudaLibs *L) {
    L->cudnnGetVersion = sd_version, L->cudnnGetErrorString = sd_error_string, L->cudnnCreate = sd_create, L->cudnnDestroy = sd_destroy;
    L->cudnnSetStream = sd_set_stream, L->cudnnBackendCreateDescriptor = sd_create_desc, L->cudnnBackendDestroyDescriptor = sd_destroy_desc;
    L->cudnnBackendFinalize = sd_finalize, L->cudnnBackendSetAttribute = sd_set, L->cudnnBackendGetAttribute = sd_get, L->cudnnBackendExecute = sd_execute;
}

static void standin_reset(void) {
    cr_assert_eq(SD.live, 0, "descriptors left from an earlier case");
    memset(&SD, 0, sizeof SD);
}

#endif
