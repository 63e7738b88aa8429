/* compiler/modules.h — the module library: every Ultralytics module as a
 * composition of primitive IR ops, and the registry of modules a YAML row may
 * name (printed type, argument spec, scaling rules, builder). How rows are
 * wired and scaled is lower.c's job. */
#ifndef YOLOCC_MODULES_H
#define YOLOCC_MODULES_H
#include "build.h"

/* How parse_model rewrites a row's arguments (semantics §2). */
typedef enum {
    RK_CHANNEL,     /* args[0] is c2, width-scaled; ctor(c1, c2, ...) */
    RK_PLAIN,       /* args as given; output channels = input channels */
    RK_CONCAT,      /* output channels = sum of inputs */
    RK_HEAD,        /* Detect family: ctor(nc, [ch of inputs]) */
    RK_CBLINEAR,    /* ctor(c1, c2s list, ...); output is a list */
    RK_CBFUSE,      /* ctor(idx list); channels of the last input */
    RK_BATCHNORM,   /* ctor(ch) */
} RowKind;

enum {
    MF_REPEAT = 1 << 0,       /* repeat count becomes ctor arg 2 (C2f, C3, ...) */
    MF_NONLEGACY = 1 << 1,    /* seeing this row switches Detect to the DW class branch */
    MF_C3K_AT_MLX = 1 << 2,   /* C3k2: args[3] = True when scale in "mlx" */
    MF_A2_AT_LX = 1 << 3,     /* A2C2f: append residual=True, mlp_ratio=1.2 when scale in "lx" */
    MF_MULTI_INPUT = 1 << 4,  /* takes a list in 'from' */
};

typedef struct RowArgs {
    const Value *v;
    int n;
} RowArgs;

typedef struct RowIO {
    int in[MODEL_MAX_FROM];     /* one tensor per 'from' entry (-1 for a list) */
    int n_in;
    int lists[MODEL_MAX_FROM][IR_MAX_SPLIT];  /* list inputs (CBLinear outputs) */
    int list_n[MODEL_MAX_FROM];
    int out[IR_MAX_SPLIT];
    int n_out;
} RowIO;

typedef bool (*RowBuildFn)(Builder *b, const RowArgs *a, RowIO *io);

/* A row with one output tensor t; false if building it failed. */
static inline bool row_out(RowIO *io, int t) {
    io->out[0] = t;
    io->n_out = 1;
    return t >= 0;
}

typedef struct ModuleDef {
    const char *name;       /* as written in YAML */
    const char *pytype;     /* as Ultralytics prints it */
    RowKind kind;
    unsigned flags;
    /* constructor arguments after rewriting: "name:type" with '?' for
     * optional; types c channels, i int, f number, b bool, k kernel (int or
     * [kh, kw]), p padding (None, int or pair), z ZeroPad2d padding (int or
     * 4-list), u size (None, int or pair), s string, l list of ints, v list
     * of two kernels, x anything */
    const char *ctor;
    RowBuildFn build;
} ModuleDef;

const ModuleDef *module_find(const char *name);
/* A comma-separated list of supported names, for error messages. */
const char *module_names(void);
/* Checks ctor args (types, count) against def->ctor; `inserted` leading and
 * `appended` trailing args were added by rewriting (messages use YAML terms). */
bool module_check_args(Builder *b, const ModuleDef *def, const RowArgs *a, int inserted, int appended, Mark args_mark);

/* ctor argument readers (types are checked already) */
int64_t arg_int(const RowArgs *a, int i, int64_t dflt);
double arg_num(const RowArgs *a, int i, double dflt);
bool arg_bool(const RowArgs *a, int i, bool dflt);
bool arg_none(const RowArgs *a, int i);
void arg_pair(const RowArgs *a, int i, int dflt, int out[2]);

/* ---- module functions (attr NULL = build into the current scope) ---- */
/* conv family (mod_conv.c) */
int dwconv(Builder *b, const char *attr, int x, int c2, int k, int s, int d, ActMode act);
int ghostconv(Builder *b, const char *attr, int x, int c2, int k, int s, int g, ActMode act);
int repconv(Builder *b, const char *attr, int x, int c2, int k, int s, int p, int g);
/* bottleneck family (mod_blocks.c) */
int bottleneck(Builder *b, const char *attr, int x, int c2, bool shortcut, int g, const int k1[2], const int k2[2], double e, bool rep);
int c3(Builder *b, const char *attr, int x, int c2, int n, bool shortcut, int g, double e, int variant, int k);
int c2f(Builder *b, const char *attr, int x, int c2, int n, bool shortcut, int g, double e, int variant, bool flag);
int ghost_bottleneck(Builder *b, const char *attr, int x, int c2, int k, int s);
/* attention (mod_attn.c) */
int psa_block(Builder *b, const char *attr, int x, double attn_ratio, int heads, bool shortcut);
int abl_block(Builder *b, const char *attr, int x, int heads, double mlp_ratio, int area);
int rep_vgg_dw(Builder *b, const char *attr, int x);
int cib(Builder *b, const char *attr, int x, int c2, bool shortcut, double e, bool lk);

/* C3 / C2f variants: which inner block fills m */
enum { C3_PLAIN, C3_X, C3_GHOST, C3_K, C3_REP };
enum { C2F_PLAIN, C2F_C3K2, C2F_CIB, C2F_PSA };

/* row builders, one per registry entry */
bool row_conv(Builder *b, const RowArgs *a, RowIO *io);
bool row_dwconv(Builder *b, const RowArgs *a, RowIO *io);
bool row_ghostconv(Builder *b, const RowArgs *a, RowIO *io);
bool row_conv_transpose(Builder *b, const RowArgs *a, RowIO *io);
bool row_concat(Builder *b, const RowArgs *a, RowIO *io);
bool row_upsample(Builder *b, const RowArgs *a, RowIO *io);
bool row_maxpool(Builder *b, const RowArgs *a, RowIO *io);
bool row_zeropad(Builder *b, const RowArgs *a, RowIO *io);
bool row_identity(Builder *b, const RowArgs *a, RowIO *io);
bool row_batchnorm(Builder *b, const RowArgs *a, RowIO *io);
bool row_bottleneck(Builder *b, const RowArgs *a, RowIO *io);
bool row_ghost_bottleneck(Builder *b, const RowArgs *a, RowIO *io);
bool row_spp(Builder *b, const RowArgs *a, RowIO *io);
bool row_sppf(Builder *b, const RowArgs *a, RowIO *io);
bool row_c1(Builder *b, const RowArgs *a, RowIO *io);
bool row_c2(Builder *b, const RowArgs *a, RowIO *io);
bool row_c2f(Builder *b, const RowArgs *a, RowIO *io);
bool row_c3(Builder *b, const RowArgs *a, RowIO *io);
bool row_c3x(Builder *b, const RowArgs *a, RowIO *io);
bool row_c3ghost(Builder *b, const RowArgs *a, RowIO *io);
bool row_c3k2(Builder *b, const RowArgs *a, RowIO *io);
bool row_bottleneck_csp(Builder *b, const RowArgs *a, RowIO *io);
bool row_repncspelan4(Builder *b, const RowArgs *a, RowIO *io);
bool row_elan1(Builder *b, const RowArgs *a, RowIO *io);
bool row_aconv(Builder *b, const RowArgs *a, RowIO *io);
bool row_adown(Builder *b, const RowArgs *a, RowIO *io);
bool row_sppelan(Builder *b, const RowArgs *a, RowIO *io);
bool row_cblinear(Builder *b, const RowArgs *a, RowIO *io);
bool row_cbfuse(Builder *b, const RowArgs *a, RowIO *io);
bool row_scdown(Builder *b, const RowArgs *a, RowIO *io);
bool row_c2fcib(Builder *b, const RowArgs *a, RowIO *io);
bool row_c2psa(Builder *b, const RowArgs *a, RowIO *io);
bool row_c2fpsa(Builder *b, const RowArgs *a, RowIO *io);
bool row_psa(Builder *b, const RowArgs *a, RowIO *io);
bool row_a2c2f(Builder *b, const RowArgs *a, RowIO *io);
bool row_detect(Builder *b, const RowArgs *a, RowIO *io);
bool row_v10detect(Builder *b, const RowArgs *a, RowIO *io);

#endif
