/* runtime/export/onnx_builder.c — builds protobuf-c ONNX messages in an arena
 * and writes the packed model atomically. Must not know the IR or any op's
 * meaning; op_type strings and attributes come from the caller. */
#include "onnx_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/atomic_file.h"

void onnx_builder_init(OnnxBuilder *b, Arena *a) {
    memset(b, 0, sizeof *b);
    b->a = a;
}

static void *alloc(OnnxBuilder *b, size_t n) {
    void *p = arena_alloc(b->a, n ? n : 1);
    if (!p) b->oom = true;
    return p;
}

static char *dup(OnnxBuilder *b, const char *s) {
    char *d = arena_strdup(b->a, s ? s : "");
    if (!d) b->oom = true;
    return d;
}

const char *onnx_fresh(OnnxBuilder *b, const char *scope, const char *hint) {
    char *s = arena_printf(b->a, "/%s/%s_%d", scope && *scope ? scope : "graph", hint, b->fresh++);
    if (!s) b->oom = true;
    return s;
}

YoloccOnnx__NodeProto *onnx_node(OnnxBuilder *b, const char *op_type, const char *scope, const char *const *in, int n_in, const char *const *out, int n_out) {
    YoloccOnnx__NodeProto *n = alloc(b, sizeof *n);
    char **ins = alloc(b, sizeof(char *) * (size_t)n_in), **outs = alloc(b, sizeof(char *) * (size_t)n_out);
    if (!n || !ins || !outs) return NULL;
    yolocc_onnx__node_proto__init(n);
    for (int i = 0; i < n_in; i++) ins[i] = dup(b, in[i]);
    for (int i = 0; i < n_out; i++) outs[i] = dup(b, out[i]);
    n->n_input = (size_t)n_in, n->input = ins;
    n->n_output = (size_t)n_out, n->output = outs;
    n->op_type = dup(b, op_type);
    n->name = (char *)onnx_fresh(b, scope, op_type);
    if (!n->name || b->oom || !arena_grow(b->a, (void **)&b->nodes, b->n_nodes, &b->cap_nodes, sizeof *b->nodes)) {
        b->oom = true;
        return NULL;
    }
    b->nodes[b->n_nodes++] = n;
    return n;
}

const char *onnx_op(OnnxBuilder *b, const char *op_type, const char *scope, const char *const *in, int n_in) {
    const char *out = onnx_fresh(b, scope, op_type);
    return out && onnx_node(b, op_type, scope, in, n_in, &out, 1) ? out : NULL;
}

YoloccOnnx__NodeProto *onnx_last(OnnxBuilder *b) { return b->n_nodes ? b->nodes[b->n_nodes - 1] : NULL; }

static YoloccOnnx__AttributeProto *attr(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, int type) {
    if (!n) return NULL;
    YoloccOnnx__AttributeProto *at = alloc(b, sizeof *at), **list = alloc(b, sizeof(*list) * (n->n_attribute + 1));
    if (!at || !list) return NULL;
    yolocc_onnx__attribute_proto__init(at);
    at->name = dup(b, name);
    at->type = type;
    if (n->n_attribute) memcpy(list, n->attribute, sizeof(*list) * n->n_attribute);
    list[n->n_attribute++] = at;
    n->attribute = list;
    return at;
}

void onnx_attr_int(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, int64_t v) {
    YoloccOnnx__AttributeProto *at = attr(b, n, name, 2);
    if (at) at->i = v;
}

void onnx_attr_ints(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, const int64_t *v, int count) {
    YoloccOnnx__AttributeProto *at = attr(b, n, name, 7);
    int64_t *copy = alloc(b, sizeof(int64_t) * (size_t)count);
    if (!at || !copy) return;
    memcpy(copy, v, sizeof(int64_t) * (size_t)count);
    at->n_ints = (size_t)count, at->ints = copy;
}

void onnx_attr_float(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, float v) {
    YoloccOnnx__AttributeProto *at = attr(b, n, name, 1);
    if (at) at->f = v;
}

void onnx_attr_string(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, const char *v) {
    YoloccOnnx__AttributeProto *at = attr(b, n, name, 3);
    char *s = dup(b, v);
    if (at && s) at->s.data = (uint8_t *)s, at->s.len = strlen(s);
}

static const char *constant(OnnxBuilder *b, const char *name, const int64_t *dims, int nd, int dtype, const void *data, size_t elem) {
    YoloccOnnx__TensorProto *t = alloc(b, sizeof *t);
    int64_t *d = alloc(b, sizeof(int64_t) * (size_t)nd);
    size_t count = 1;
    for (int i = 0; i < nd; i++) count *= (size_t)dims[i];
    uint8_t *raw = alloc(b, count * elem);
    const char *nm = name ? dup(b, name) : onnx_fresh(b, "const", "c");
    if (!t || !d || !raw || !nm || !arena_grow(b->a, (void **)&b->inits, b->n_inits, &b->cap_inits, sizeof *b->inits)) {
        b->oom = true;
        return NULL;
    }
    yolocc_onnx__tensor_proto__init(t);
    if (nd) memcpy(d, dims, sizeof(int64_t) * (size_t)nd);
    memcpy(raw, data, count * elem); /* x86-64 is little-endian, as raw_data is */
    t->n_dims = (size_t)nd, t->dims = d;
    t->data_type = dtype;
    t->name = (char *)nm;
    t->raw_data.data = raw, t->raw_data.len = count * elem;
    b->inits[b->n_inits++] = t;
    return nm;
}

const char *onnx_const_f32(OnnxBuilder *b, const char *name, const int64_t *dims, int nd, const float *data) { return constant(b, name, dims, nd, ONNX_FLOAT, data, sizeof(float)); }
const char *onnx_const_i64(OnnxBuilder *b, const char *name, const int64_t *dims, int nd, const int64_t *data) { return constant(b, name, dims, nd, ONNX_INT64, data, sizeof(int64_t)); }

const char *onnx_const_i64s(OnnxBuilder *b, const int64_t *v, int count) {
    int64_t d = count;
    return onnx_const_i64(b, NULL, &d, 1, v);
}

const char *onnx_const_scalar(OnnxBuilder *b, float v) { return onnx_const_f32(b, NULL, NULL, 0, &v); }

static int by_name(const void *a, const void *b) { return strcmp((*(YoloccOnnx__TensorProto *const *)a)->name, (*(YoloccOnnx__TensorProto *const *)b)->name); }

/* ONNX requires unique initializer names; a duplicate would let a reader take either value. */
static bool initializers_unique(OnnxBuilder *b, char *err, int errcap) {
    YoloccOnnx__TensorProto **sorted = malloc(sizeof *sorted * (size_t)(b->n_inits + 1));
    if (!sorted) return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (b->n_inits) memcpy(sorted, b->inits, sizeof *sorted * (size_t)b->n_inits);
    qsort(sorted, (size_t)b->n_inits, sizeof *sorted, by_name);
    bool ok = true;
    for (int i = 1; i < b->n_inits && ok; i++)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) ok = snprintf(err, (size_t)errcap, "internal error: two initializers named %s", sorted[i]->name) < 0;
    free(sorted);
    return ok;
}

static YoloccOnnx__ValueInfoProto *value_info(OnnxBuilder *b, const OnnxValue *v) {
    YoloccOnnx__ValueInfoProto *vi = alloc(b, sizeof *vi);
    YoloccOnnx__TypeProto *ty = alloc(b, sizeof *ty);
    YoloccOnnx__TypeProto__Tensor *tt = alloc(b, sizeof *tt);
    YoloccOnnx__TensorShapeProto *sh = alloc(b, sizeof *sh);
    YoloccOnnx__TensorShapeProto__Dimension *dims = alloc(b, sizeof *dims * (size_t)v->nd), **dp = alloc(b, sizeof *dp * (size_t)v->nd);
    if (!vi || !ty || !tt || !sh || !dims || !dp) return NULL;
    yolocc_onnx__value_info_proto__init(vi);
    yolocc_onnx__type_proto__init(ty);
    yolocc_onnx__type_proto__tensor__init(tt);
    yolocc_onnx__tensor_shape_proto__init(sh);
    for (int i = 0; i < v->nd; i++) {
        yolocc_onnx__tensor_shape_proto__dimension__init(&dims[i]);
        if (i == 0 && v->batch_param) {
            dims[i].value_case = YOLOCC_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dims[i].dim_param = dup(b, v->batch_param);
        } else {
            dims[i].value_case = YOLOCC_ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dims[i].dim_value = v->d[i];
        }
        dp[i] = &dims[i];
    }
    sh->n_dim = (size_t)v->nd, sh->dim = dp;
    tt->elem_type = ONNX_FLOAT;
    tt->shape = sh;
    ty->value_case = YOLOCC_ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    ty->tensor_type = tt;
    vi->name = dup(b, v->name);
    vi->type = ty;
    return vi;
}

/* ONNX's IR version that goes with an opset of the default domain (onnx/helper.py's table) */
static int64_t ir_version_for(int opset) { return opset <= 17 ? 8 : opset <= 19 ? 9 : 10; }

bool onnx_write(OnnxBuilder *b, const char *path, const char *graph_name, const OnnxValue *in, int n_in, const OnnxValue *out, int n_out, int opset,
                const char *producer_version, const OnnxMeta *meta, int n_meta, size_t *bytes, char *err, int errcap) {
    YoloccOnnx__ModelProto *m = alloc(b, sizeof *m);
    YoloccOnnx__GraphProto *g = alloc(b, sizeof *g);
    YoloccOnnx__OperatorSetIdProto *os = alloc(b, sizeof *os), **osp = alloc(b, sizeof *osp);
    YoloccOnnx__ValueInfoProto **ins = alloc(b, sizeof *ins * (size_t)n_in), **outs = alloc(b, sizeof *outs * (size_t)n_out);
    YoloccOnnx__StringStringEntryProto *kv = alloc(b, sizeof *kv * (size_t)n_meta), **kvp = alloc(b, sizeof *kvp * (size_t)n_meta);
    if (!m || !g || !os || !osp || !ins || !outs || !kv || !kvp || b->oom) return snprintf(err, (size_t)errcap, "out of memory"), false;
    yolocc_onnx__model_proto__init(m);
    yolocc_onnx__graph_proto__init(g);
    yolocc_onnx__operator_set_id_proto__init(os);
    for (int i = 0; i < n_in; i++) ins[i] = value_info(b, &in[i]);
    for (int i = 0; i < n_out; i++) outs[i] = value_info(b, &out[i]);
    for (int i = 0; i < n_meta; i++) {
        yolocc_onnx__string_string_entry_proto__init(&kv[i]);
        kv[i].key = dup(b, meta[i].key);
        kv[i].value = dup(b, meta[i].value);
        kvp[i] = &kv[i];
    }
    if (b->oom) return snprintf(err, (size_t)errcap, "out of memory"), false;
    if (!initializers_unique(b, err, errcap)) return false;
    g->n_node = (size_t)b->n_nodes, g->node = b->nodes;
    g->n_initializer = (size_t)b->n_inits, g->initializer = b->inits;
    g->n_input = (size_t)n_in, g->input = ins;
    g->n_output = (size_t)n_out, g->output = outs;
    g->name = dup(b, graph_name);
    os->version = opset;
    osp[0] = os;
    m->ir_version = ir_version_for(opset);
    m->producer_name = dup(b, "yolocc");
    m->producer_version = dup(b, producer_version);
    m->graph = g;
    m->n_opset_import = 1, m->opset_import = osp;
    m->n_metadata_props = (size_t)n_meta, m->metadata_props = kvp;
    size_t len = yolocc_onnx__model_proto__get_packed_size(m);
    /* protobuf caps a message at 2 GiB; past it readers refuse the file (ONNX then needs external data) */
    if (len >= (size_t)1 << 31) return snprintf(err, (size_t)errcap, "the model is %zu bytes, over protobuf's 2 GiB limit for one message", len), false;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return snprintf(err, (size_t)errcap, "out of memory (%zu bytes for the packed model)", len), false;
    size_t packed = yolocc_onnx__model_proto__pack(m, buf);
    const void *chunks[1] = {buf};
    bool ok = packed == len;
    if (!ok) snprintf(err, (size_t)errcap, "internal error: packed %zu bytes, %zu expected", packed, len);
    else ok = atomic_write(path, chunks, &len, 1, err, errcap);
    free(buf);
    if (ok && bytes) *bytes = len;
    return ok;
}
