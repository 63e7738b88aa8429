/* compiler/build.h — the builder that module code uses to emit IR: module
 * scopes (which give parameters their state_dict names), the Ultralytics 8.3
 * layer count, and the leaf layers (Conv2d, BatchNorm2d, activations) that
 * every module is made of. Module structure lives in mod_*.c. */
#ifndef YOLOCC_BUILD_H
#define YOLOCC_BUILD_H
#include <stdbool.h>
#include <stdint.h>

#include "../ir/ir.h"
#include "model_cfg.h"

enum { BUILD_MAX_DEPTH = 48, BUILD_MAX_DOMAINS = 64 };

/* Which activation a Conv applies. Ultralytics shares one default activation
 * object per class (Conv.default_act, RepConv.default_act); deep copies of a
 * head get their own, which matters for the layer count. */
typedef enum {
    ACTM_DEFAULT,   /* Conv.default_act: the model's activation, shared */
    ACTM_OFF,       /* act=False: an nn.Identity per Conv */
    ACTM_REPCONV,   /* RepConv.default_act: SiLU, shared */
    ACTM_OWN_SILU,  /* a module's own nn.SiLU() instance */
} ActMode;

typedef struct Builder {
    Graph *g;
    Arena *a;
    Diag *d;
    const ModelConfig *cfg;
    bool eval;              /* eval-mode forward: heads decode boxes */
    bool legacy;            /* Detect uses the legacy class branch */
    bool channels_last;     /* rank-4 activations stored channels last (BuildOptions) */
    int images;             /* what rows with from -1 read: the images, or their channels-last copy */
    int batch;
    int row;
    const char *row_module;
    Mark mark;              /* where errors of the current row point */
    char path[1024];
    int path_len[BUILD_MAX_DEPTH];
    int depth;
    /* registration order, for the state_dict order of parameters: the index
     * of each open scope among its siblings, and counters for the next child
     * and the scope's own parameters/buffers */
    int reg[BUILD_MAX_DEPTH];
    int next_child[BUILD_MAX_DEPTH + 1];
    int own_state[BUILD_MAX_DEPTH + 1];
    int pending_reg;        /* registration index for the next mod_enter, or -1 */
    struct StateKey *keys;
    int n_keys, cap_keys;
    int64_t layers;         /* distinct nn.Module objects (Ultralytics 8.3 count) */
    int domain;             /* deep-copy domain of shared activations */
    int next_domain;
    uint64_t shared_counted[2];
    int nstrides;
    double strides[IR_MAX_LEVELS];
    bool trunc_normal_convs;    /* inside an ABlock: its Conv2d weights use trunc_normal(0.02) */
} Builder;

/* Records "row I (MODULE): MSG" at the row's position; returns false. */
bool build_fail(Builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Enters a child nn.Module named attr (or index) and counts it. Children are
 * registered in the order entered unless reg_next says otherwise (a module
 * whose forward order differs from its __init__ order). */
void reg_next(Builder *b, int idx);
bool mod_enter(Builder *b, const char *attr);
bool mod_enter_idx(Builder *b, int idx);
void mod_exit(Builder *b);
/* Counts a module that holds no parameters and emits nothing here (e.g. an
 * nn.Identity, an nn.MaxPool2d object). */
void mod_count(Builder *b);
/* A deep copy (v10Detect's one2one heads) owns copies of shared activations. */
int  build_begin_copy(Builder *b);
void build_end_copy(Builder *b, int saved);

/* Sorts the parameters and buffers into state_dict order (g->state). */
bool build_finish_state(Builder *b);

int  build_param(Builder *b, const char *leaf, Shape s);
/* Records how a fresh model initialises state tensor t. */
void build_init(Builder *b, int t, InitKind k, double arg);
int  build_buffer(Builder *b, const char *leaf, Shape s, DType dt);
/* Appends an op; returns output 0 (or -1). Errors name the row. */
int  build_op(Builder *b, OpKind k, const int *in, int n_in, const OpAttrs *a);
/* The weight as a convolution reads it: w itself, or in channels-last
 * builds its KRSC copy (a layout reshape; the gradient flows back through it,
 * so parameters, gradients and optimizer state keep PyTorch's order). */
int  build_weight_layout(Builder *b, int w);
/* Multi-output op; fills outs[0..n_out). */
bool build_op_n(Builder *b, OpKind k, const int *in, int n_in, const OpAttrs *a, int n_out, int *outs);
int  chan(const Builder *b, int t);

/* ---- leaf layers ---- */
typedef struct ConvOpt {
    int k[2], s, p[2], g, d;
    bool auto_pad;
    ActMode act;
} ConvOpt;

ConvOpt conv_opt(int k, int s);
/* nn.Conv2d as a leaf module named attr. */
int conv2d_leaf(Builder *b, const char *attr, int x, int c2, int kh, int kw, int s, int ph, int pw, int g, int d, bool bias);
/* attr NULL: the current scope is the BatchNorm2d itself (an nn.BatchNorm2d row). */
int batchnorm_leaf(Builder *b, const char *attr, int x);
int activation(Builder *b, int x, ActMode m);
/* Module functions take attr NULL to build into the current scope (the row
 * module itself), else they enter a child named attr. */
bool enter_opt(Builder *b, const char *attr);
void exit_opt(Builder *b, const char *attr);
/* Ultralytics Conv: conv (no bias) + bn + act, autopad(k, p, d). */
int conv_block(Builder *b, const char *attr, int x, int c2, ConvOpt o);

/* ---- layout helpers (functional ops, no modules) ---- */
int  add(Builder *b, int x, int y);
int  concat(Builder *b, const int *xs, int n);
/* torch.chunk(2, dim=1): sizes ceil(C/2), floor(C/2). */
bool chunk2(Builder *b, int x, int out[2]);
bool split2(Builder *b, int x, int c0, int c1, int out[2]);

#endif
