/* runtime/export/onnx_builder.h — an ONNX model under construction: nodes,
 * initializers, typed inputs and outputs, metadata, and its serialisation
 * through protobuf-c (runtime/export/onnx.proto). Knows nothing about the IR
 * or about which ops a model needs; every object lives in the caller's arena. */
#ifndef YOLOCC_ONNX_BUILDER_H
#define YOLOCC_ONNX_BUILDER_H
#include <stdbool.h>
#include <stdint.h>

#include "../../ir/arena.h"
#include "onnx.pb-c.h"

/* TensorProto.DataType values */
enum { ONNX_FLOAT = 1, ONNX_INT64 = 7 };

typedef struct OnnxBuilder {
    Arena *a;
    YoloccOnnx__NodeProto **nodes;
    int n_nodes, cap_nodes;
    YoloccOnnx__TensorProto **inits;
    int n_inits, cap_inits;
    int fresh;      /* counter behind generated value and node names */
    bool oom;       /* sticky: some allocation failed */
} OnnxBuilder;

/* A graph input or output: float tensor, dimension 0 named when batch_param is set (dynamic batch). */
typedef struct OnnxValue {
    const char *name;
    int nd;
    int64_t d[6];
    const char *batch_param;
} OnnxValue;

typedef struct OnnxMeta {
    const char *key, *value;
} OnnxMeta;

void onnx_builder_init(OnnxBuilder *b, Arena *a);
/* A value name no other call returns: SCOPE/HINT_N. */
const char *onnx_fresh(OnnxBuilder *b, const char *scope, const char *hint);
/* Appends node OP_TYPE reading IN[0..n_in) (NULL or "": an omitted optional
 * input) and writing OUT[0..n_out); named after SCOPE. NULL when out of memory. */
YoloccOnnx__NodeProto *onnx_node(OnnxBuilder *b, const char *op_type, const char *scope, const char *const *in, int n_in, const char *const *out, int n_out);
/* One-output node whose output gets a fresh name; returns that name (NULL when out of memory). */
const char *onnx_op(OnnxBuilder *b, const char *op_type, const char *scope, const char *const *in, int n_in);
/* Attributes of the node last appended (or of n). */
void onnx_attr_int(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, int64_t v);
void onnx_attr_ints(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, const int64_t *v, int count);
void onnx_attr_float(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, float v);
void onnx_attr_string(OnnxBuilder *b, YoloccOnnx__NodeProto *n, const char *name, const char *v);
YoloccOnnx__NodeProto *onnx_last(OnnxBuilder *b);
/* Initializers (constants): the data is copied. name NULL: a fresh name. Returns the name. */
const char *onnx_const_f32(OnnxBuilder *b, const char *name, const int64_t *dims, int nd, const float *data);
const char *onnx_const_i64(OnnxBuilder *b, const char *name, const int64_t *dims, int nd, const int64_t *data);
/* 1-D int64 and 0-D float constants, the usual shapes, axes and scalars. */
const char *onnx_const_i64s(OnnxBuilder *b, const int64_t *v, int count);
const char *onnx_const_scalar(OnnxBuilder *b, float v);

/* Serialises the model (ONNX IR version 8, default domain at OPSET) and
 * writes it to PATH atomically; *bytes receives the file size. False with err. */
bool onnx_write(OnnxBuilder *b, const char *path, const char *graph_name, const OnnxValue *in, int n_in, const OnnxValue *out, int n_out, int opset,
                const char *producer_version, const OnnxMeta *meta, int n_meta, size_t *bytes, char *err, int errcap);

#endif
