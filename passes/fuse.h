/* passes/fuse.h — fusion groups: the step's ops, in schedule order, cut into
 * contiguous groups that a backend runs as one library call and/or a few
 * generated kernels; tensors that never leave their group need no memory.
 * Knows no kernels and no memory offsets (memplan reads `internal`). */
#ifndef YOLOCC_FUSE_H
#define YOLOCC_FUSE_H
#include "../ir/ir.h"

typedef enum { FUSE_NONE, FUSE_FULL } FusePolicy;

/* What a group is, by its anchor: a library call (conv, dgrad, wgrad,
 * attention) with prologue/epilogue work, a generated elementwise kernel,
 * per-channel reductions (BN statistics, BN-grad sums, bias grads), data
 * movement (concat, split, pad), the detection loss, the optimizer, or
 * anything else (pooling, upsample, ...). */
typedef enum { GROUP_LIBRARY, GROUP_POINTWISE, GROUP_REDUCTION, GROUP_DATA, GROUP_LOSS, GROUP_OPTIMIZER, GROUP_OTHER, GROUP_KINDS } GroupKind;

/* The fusion rules (one op alone is PATTERN_SINGLE). */
typedef enum {
    PATTERN_SINGLE,
    PATTERN_CONV_BN_ACT,    /* conv -> BN (statistics + apply) -> activation [-> residual add] */
    PATTERN_BN_ACT,         /* training BN -> activation, without a conv in front */
    PATTERN_POINTWISE,      /* a chain of elementwise ops, each reading the previous one */
    PATTERN_BN_ACT_BWD,     /* [gradient sum of two ->] [recomputed BN-apply ->] activation grad -> BN grad */
    PATTERN_OPTIMIZER,      /* gradient clipping and every parameter update */
    PATTERN_COUNT
} GroupPattern;

typedef struct FusionGroup {
    GroupKind kind;
    GroupPattern pattern;
    int first, n;           /* ops [first, first + n) */
} FusionGroup;

/* Zero-copy concat and split (passes/views.h): tensors that live inside
 * another tensor's buffer, as a base and a first channel on axis 1. */
typedef struct Views {
    int *base;          /* per tensor: the tensor whose storage holds it (itself when it has its own) */
    int64_t *chan;      /* per tensor: its first channel on base's axis 1 (0 for a base) */
    int n_views;        /* tensors with base != itself */
} Views;

typedef struct Fusion {
    FusePolicy policy;
    FusionGroup *groups;
    int n_groups;
    bool *internal;         /* per tensor: produced and read only inside one group */
    Views views;            /* identity until views_build (FUSE_FULL plans) */
} Fusion;


bool fuse_build(const Graph *g, FusePolicy p, Arena *a, Fusion *f, char *err, int errcap);
/* Checks that groups partition the ops in order and that each group matches
 * its pattern; fills f->internal and identity views (a plan's reader then
 * installs the views its memory plan stores). For groups read back from a plan. */
bool fuse_check(const Graph *g, Arena *a, Fusion *f, char *err, int errcap);
const char *group_kind_name(GroupKind k);
const char *group_pattern_name(GroupPattern p);
const char *fuse_policy_name(FusePolicy p);

#endif
