/* ir/ir.h — the IR: tensors with shapes and dtypes, primitive ops, graphs.
 * Parameters and BN buffers carry their PyTorch state_dict names. Op meaning
 * (shapes, FLOPs) lives in the registry (ops.c), not here. */
#ifndef YOLOCC_IR_H
#define YOLOCC_IR_H
#include <stdbool.h>
#include <stdint.h>

#include "arena.h"

enum { IR_MAX_DIMS = 6, IR_MAX_SPLIT = 64, IR_MAX_LEVELS = 8, GRAPH_MAX_OPS = 1 << 20, GRAPH_MAX_TENSORS = 1 << 21 };

typedef enum { DT_F32, DT_F16, DT_BF16, DT_I64 } DType;
/* TK_OPTIM: optimizer state (momentum, Adam moments): persistent like
 * parameters but not part of the model's state_dict. */
typedef enum { TK_ACTIVATION, TK_INPUT, TK_PARAM, TK_BUFFER, TK_OPTIM } TensorKind;

typedef struct Shape {
    int nd;
    int64_t d[IR_MAX_DIMS];
} Shape;

/* How a fresh model initialises a state tensor (PyTorch / Ultralytics):
 * conv weights kaiming-uniform a=sqrt(5), i.e. U(-b, b) with b = 1/sqrt(fan_in),
 * fan_in = d1*d2*d3; conv biases U(-b, b) with the weight's fan_in (init_arg);
 * constants (BN, Detect bias_init, A2C2f gamma); DFL bins 0..n-1; ABlock convs
 * truncated normal (std init_arg, cut at +-2). */
typedef enum { INIT_NONE, INIT_KAIMING_UNIFORM, INIT_BIAS_UNIFORM, INIT_CONST, INIT_ARANGE, INIT_TRUNC_NORMAL } InitKind;

typedef struct Tensor {
    int id;
    TensorKind kind;
    DType dtype;
    Shape shape;
    const char *name;   /* state_dict key for params/buffers, else NULL */
    int producer;       /* op id, or -1 for inputs, params and buffers */
    bool frozen;        /* parameter without gradient (DFL) */
    InitKind init;      /* state tensors: how a fresh model fills them */
    double init_arg;    /* INIT_BIAS_UNIFORM: fan_in; INIT_CONST: value; INIT_TRUNC_NORMAL: std */
    /* a rank-4 activation stored (d0, d2, d3, d1): NHWC for images, KRSC for
     * conv weights. Set by graph_add_op (tensor_layout_rule); inputs and
     * state are always stored in their logical order. */
    bool channels_last;
} Tensor;

typedef enum {
#define OP(id) id,
#include "ops.def"
#undef OP
    OP_COUNT
} OpKind;

/* Attributes of all ops; each op reads only the fields its registry entry
 * documents. Spatial pairs are (h, w); pad is (top, bottom, left, right). */
typedef struct OpAttrs {
    int kernel[2], stride[2], pad[4], dilation[2], groups;
    int axis, nsplit, split[IR_MAX_SPLIT];
    int out_hw[2];
    int heads, key_dim, head_dim, area;
    int nlevels, level_hw[IR_MAX_LEVELS][2], reg_max;
    bool xywh;
    bool training;      /* batchnorm: batch statistics and running-stat update */
    int act_op;         /* activation_bwd: the forward activation's OpKind */
    int nc, topk;       /* detect_loss */
    double gains[3];    /* detect_loss: box, cls, dfl */
    int group;          /* optimizer steps: parameter group (0 biases, 1 weights, 2 BN weights) */
    bool nesterov;
    double weight_decay, beta2, max_norm;
    double eps, momentum, alpha, scale, strides[IR_MAX_LEVELS];
    Shape shape;        /* reshape target; the input shape a backward op restores */
    bool channels_last; /* reshape, zeros: a rank-4 output is stored channels last */
} OpAttrs;

typedef struct Op {
    int id;
    OpKind kind;
    int n_in, n_out;
    int *in, *out;
    OpAttrs a;
    int row;            /* model row that produced it */
    const char *scope;  /* module path, e.g. "model.2.m.0.cv1" */
    bool functional;    /* a torch functional call, not an nn.Module (thop counts 0) */
} Op;

typedef struct Graph {
    Arena *arena;
    Tensor *tensors;
    int n_tensors, cap_tensors;
    Op *ops;
    int n_ops, cap_ops;
    int *inputs, n_inputs, cap_inputs;
    int *outputs, n_outputs, cap_outputs;
    int *state, n_state;    /* parameters and buffers in state_dict order */
    char err[256];      /* why the last graph_* call failed */
} Graph;

void graph_init(Graph *g, Arena *a);
int graph_add_input(Graph *g, const char *name, Shape s, DType dt);
/* Parameter (kind TK_PARAM) or buffer (TK_BUFFER) with its state_dict name. */
int graph_add_state(Graph *g, TensorKind kind, const char *name, Shape s, DType dt);
/* Appends an op; output shapes come from the registry's shape rule.
 * Returns the op id, or -1 with g->err set. */
int graph_add_op(Graph *g, OpKind kind, const int *in, int n_in, const OpAttrs *a, int n_out, int row, const char *scope);
bool graph_mark_output(Graph *g, int tensor);
/* Element strides of the logical dims of a rank-4 tensor as it is stored
 * (NCHW or channels last). */
void tensor_strides4(const Tensor *t, int64_t st[4]);
/* Whether t is stored in its logical order: not channels last, or with one
 * channel or one pixel per image, where both orders agree. */
bool tensor_logical_order(const Tensor *t);

Shape shape4(int64_t n, int64_t c, int64_t h, int64_t w);
Shape shape1(int64_t n);
int64_t shape_numel(const Shape *s);
bool shape_eq(const Shape *a, const Shape *b);
const char *dtype_name(DType dt);

/* ---- op registry (ops.c) ---- */
typedef struct OpDef {
    const char *name;
    int min_in, max_in;     /* input count bounds */
    int n_out;              /* fixed output count (0: only updates state), or -1: given by the caller */
    /* Fills out[0..n_out) from the inputs; false with err on a mismatch. */
    bool (*infer)(const Graph *g, const Op *op, Shape *out, char *err, int errcap);
    /* Forward floating-point operations (multiply-add = 2). */
    double (*flops)(const Graph *g, const Op *op);
    /* Multiply-accumulates as ultralytics-thop counts them for the module
     * that issues this op (Ultralytics' GFLOPs convention). */
    double (*thop_macs)(const Graph *g, const Op *op);
    /* Gradient rule: appends ops computing the gradient of each input from
     * dy[i], the gradient of output i (-1: none reaches it). Sets dx[i]
     * (-1: no gradient). NULL: the op passes no gradient. False with g->err. */
    bool (*grad)(Graph *g, const Op *op, const int *dy, int *dx);
    /* bit i: input i is state updated in place (running statistics,
     * parameters and optimizer state); the memory plan must order it after
     * every read of the old value */
    unsigned mutates;
} OpDef;

const OpDef *op_def(OpKind k);

/* ---- verifier and printer ---- */
/* Topological order, one producer per tensor, shapes re-derived by the
 * registry equal the stored ones, unique state names. */
bool graph_verify(const Graph *g, char *err, int errcap);
void graph_print(const Graph *g, void *file /* FILE* */);
int64_t graph_state_numel(const Graph *g, TensorKind kind, bool trainable_only);
/* -1 when a and b hold the same parameters and buffers (names and shapes) in
 * the same order; else the first state position where they differ (the
 * shorter one's count when one merely has more). */
int graph_state_differs(const Graph *a, const Graph *b);
/* last[t] = the last op that reads tensor t (its producer, or -1, if none
 * does; n_ops for graph outputs, which live to the end of the step). */
void graph_last_use(const Graph *g, int *last);

#endif
