/* compiler/kernel_build.h — building one kernel's code (kernel_ir.c) and the
 * per-op rules that emit it (kernel_rules.c); used by the lowering only.
 * Knows no fusion groups and no target syntax. */
#ifndef YOLOCC_KERNEL_BUILD_H
#define YOLOCC_KERNEL_BUILD_H
#include "kernel_ir.h"

/* A kernel under construction with its buffer slots bound to tensors. */
typedef struct KBuild {
    Kernel k;
    int cap;
    int sec_first;              /* first instruction of the open section */
    int slot_tensor[KIR_MAX_BUFS];
    bool failed;                /* out of memory or out of slots */
    char why[160];
} KBuild;

void kb_init(KBuild *kb, KSkel s);
void kb_free(KBuild *kb);
/* Opens a new section (body or finalize); later registers count from 0. */
void kb_section(KBuild *kb);
/* Closes the open section as body / finalize of phase p. */
void kb_end_body(KBuild *kb, int phase);
void kb_end_finalize(KBuild *kb, int phase);
int kb_emit(KBuild *kb, KInstr in);
int kb_slot(KBuild *kb, int tensor);
int kb_load(KBuild *kb, int tensor, KAccess at, double index);
void kb_store(KBuild *kb, int tensor, KAccess at, double index, int value);
int kb_const(KBuild *kb, double v);
int kb_un(KBuild *kb, KInstrOp op, int a);
int kb_bin(KBuild *kb, KInstrOp op, int a, int b);
int kb_sel(KBuild *kb, KInstrOp op, int a, int b, int c, int d);
/* Drops instructions whose results nothing stores or sums, and unused slots; renumbers. */
void kb_compact(KBuild *kb);
/* The registers an instruction reads (into r, at most 4); how many. */
int kb_reg_operands(const KInstr *in, int *r);
/* One section of n instructions without its dead ones, renumbered, into
 * out (room for n); the new count. */
int kb_compact_section(const KInstr *code, int n, KInstr *out);
/* Bytes that identify the kernel's code and storage types (for sharing and naming). */
char *kb_signature(const Kernel *k, size_t *len);

/* How the lowering treats an op (kernel_rules.c). */
typedef enum {
    KR_LIBRARY,     /* a library routine runs the op */
    KR_ELEMENTWISE, /* registers in, registers out: joins the group's pending map */
    KR_ALONE_MAP,   /* a map kernel of its own (in-place updates) */
    KR_REDUCE,      /* per-channel sums, then (BN) elementwise work in the pending map */
    KR_NORM,        /* the gradient norm over a tensor list */
    KR_COPY,        /* slice copies */
} KRuleClass;

/* The lowering's view of registers: value(i) gives the register holding
 * input i of the op in the kernel being built, loading it if needed. */
typedef struct KValues {
    int (*value)(void *ctx, KBuild *kb, int tensor);
    /* opens a body section; on a reduction built from a pending map it first
     * re-evaluates that map's chain, so value() can hand out its registers */
    void (*begin_body)(void *ctx, KBuild *kb);
    void *ctx;
} KValues;

typedef struct KRule {
    KRuleClass cls;
    /* ELEMENTWISE and the elementwise part of REDUCE: out[i] = register of output i */
    bool (*elementwise)(KBuild *kb, const Graph *g, const Op *op, const KValues *v, int *out);
    /* REDUCE: emits the reduce kernel's phases into kb (a fresh or cloned build) */
    bool (*reduce)(KBuild *kb, const Graph *g, const Op *op, const KValues *v);
    /* ALONE_MAP: the whole kernel */
    bool (*map)(KBuild *kb, const Graph *g, const Op *op);
} KRule;

const KRule *kernel_rule(OpKind k);
/* [n, c, inner] of a tensor as stored: nd >= 2 splits at the channel axis,
 * else one row; channels last is [n*h*w, c, 1] */
void kernel_extents(const Tensor *t, int64_t *n, int64_t *c, int64_t *inner);

#endif
