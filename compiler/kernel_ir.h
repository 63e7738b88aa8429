/* compiler/kernel_ir.h — the kernel IR: loop skeletons with straight-line
 * bodies in SSA form that the fusion groups lower to (kernel_lower.c), and the
 * launches that run a plan's step. Knows no target syntax (kernel_render.c)
 * and no runtime buffers. */
#ifndef YOLOCC_KERNEL_IR_H
#define YOLOCC_KERNEL_IR_H
#include "../ir/ir.h"
#include "../passes/fuse.h"
#include "../passes/memplan.h"
#include "../templates/kernel_abi.h"

enum { KIR_MAX_BUFS = 16, KIR_MAX_ACCS = 4, KIR_MAX_VARS = 4, KIR_MAX_PHASES = 2, KIR_NAME = 40 };
enum { KIR_MAX_ROWS = 65535 }; /* a multi-tensor launch's rows: CUDA's grid y limit */
_Static_assert(KIR_MAX_ACCS == YK_RED_ACCS && KIR_MAX_VARS == YK_RED_VARS, "a split reduction's slots hold every sum and variable");

/* Loop skeletons. MAP: every element of an [n, c, inner] extent. CHANNEL_REDUCE:
 * per channel, phases of sums over [n, inner] each followed by a per-channel
 * finalize (deterministic: a fixed order, no atomics). LIST_NORM: the norm of
 * a list of tensors (each tensor's norm rounded to fp32 first, as
 * clip_grad_norm_ does), then a finalize. COPY: `outer` runs of `len`
 * contiguous elements between two strided buffers (concat, split, reshape). */
typedef enum { KS_MAP, KS_CHANNEL_REDUCE, KS_LIST_NORM, KS_COPY, KS_COUNT } KSkel;

/* Where a load or store lands: the element being visited, the current
 * channel's entry of a per-channel vector, a fixed index (imm), or the
 * current channel's first element (image 0, inner position 0) of an element
 * buffer: one sample of the channel that every thread of it can read. */
typedef enum { KA_ELEM, KA_CHAN, KA_FIXED, KA_FIRST, KA_COUNT } KAccess;

typedef enum {
    KI_LOAD,        /* r = buf[at] */
    KI_STORE,       /* buf[at] = a */
    KI_CONST,       /* r = imm */
    KI_ACC,         /* r = sum number b of this phase (finalize only) */
    KI_COUNT,       /* r = elements per channel, n * inner (reduce only) */
    KI_VAR,         /* r = per-channel variable b, set by an earlier finalize */
    KI_SETVAR,      /* variable b = a (finalize only) */
    KI_ACCUM,       /* sum number b += a (reduce bodies only) */
    KI_INC_I64,     /* buf[0] += 1 on an int64 counter, once per launch (finalize only) */
    KI_NEG, KI_EXP, KI_SQRT, KI_ERF,
    KI_F32,         /* r = a rounded to fp32 (a value PyTorch stores before using it) */
    KI_SIGMOID,     /* r = 1 / (1 + exp(-a)) */
    KI_ADD, KI_SUB, KI_MUL, KI_DIV, KI_POW,
    KI_SEL_GT,      /* r = a > b ? c : d */
    KI_SEL_GE,      /* r = a >= b ? c : d */
    KI_COUNT_OPS
} KInstrOp;

typedef struct KInstr {
    KInstrOp op;
    int a, b, c, d;     /* operand registers (or sum / variable numbers) */
    int buf;            /* buffer slot of loads and stores */
    KAccess at;
    double imm;         /* constant, or the fixed index */
} KInstr;

/* A code section: instructions [first, first + n) of the kernel. Register r
 * is the result of instruction r of its section (sections share nothing but
 * variables and sums). */
typedef struct KSection {
    int first, n;
} KSection;

typedef struct Kernel {
    KSkel skel;
    char name[KIR_NAME];
    KInstr *code;
    int n_code;
    int n_phases;                       /* CHANNEL_REDUCE: 1 or 2; others 1 */
    KSection body[KIR_MAX_PHASES];      /* per element (MAP: the only section) */
    KSection finalize[KIR_MAX_PHASES];  /* per channel after each phase's sums (LIST_NORM: once) */
    int n_accs[KIR_MAX_PHASES];
    int n_vars;
    int n_bufs;
    DType buf_dtype[KIR_MAX_BUFS];      /* storage type per slot (CUDA; C stores fp32) */
    bool buf_written[KIR_MAX_BUFS];
    /* a view inside a wider buffer (passes/views.h): its elements of image n
     * start at n * YkArgs.bs[slot], not n * c * inner */
    bool buf_strided[KIR_MAX_BUFS];
    bool multi;                         /* a multi-tensor launch runs it: its CUDA entry takes rows (kernel_is_multi), and it is named yk_rows_<hash> */
} Kernel;

/* One step of a group: a generated kernel over given tensors and extents, or
 * the library routine of one op (convolutions, attention, the loss, ...). */
typedef struct KLaunch {
    int kernel;                 /* index in KProgram.kernels, or -1: library op op_lo */
    int op_lo, op_hi;           /* the ops it carries out */
    int n_args;
    int args[KIR_MAX_BUFS];     /* tensor id per buffer slot */
    int64_t n, c, inner;
    int64_t outer, len, src_stride, src_off, dst_stride, dst_off;
    int64_t bs[KIR_MAX_BUFS];   /* per strided slot: elements between images */
    /* LIST_NORM: list_n tensors in KProgram.list from list_first. A
     * multi-tensor MAP (kernel_lower_multi): list_n rows of n_args tensor
     * ids each, row r carrying out op op_lo + r over its own [1, 1, len]
     * extent; args[] and n, c, inner are row 0's. */
    int list_first, list_n;
    int64_t bytes;              /* device memory it moves (kernel_launch_bytes) */
} KLaunch;

typedef struct KProgram {
    Kernel *kernels;
    int n_kernels, cap_kernels;
    KLaunch *launches;
    int n_launches, cap_launches;
    int *group_first;           /* per fusion group: its first launch; [n_groups] = n_launches */
    int n_groups;
    int *list;                  /* tensor ids of LIST_NORM and multi-tensor MAP launches */
    int64_t *list_len;          /* per entry of list: the elements of its tensor (LIST_NORM) or of its row */
    int n_list, cap_list;
    Precision precision;        /* storage types of generated CUDA */
} KProgram;

/* Lowers every fusion group of the step to kernels and launches. Kernels are
 * shared between launches with the same code and storage types. */
bool kernel_lower(const Graph *g, const Fusion *f, Precision p, KProgram *kp, char *err, int errcap);
void kernel_program_free(KProgram *kp);
/* Whether generated kernels (not a library routine) carry out ops of kind
 * k. They address a tensor as [row, channel, inner] (kernel_extents) with
 * any stride between rows, so they can take channel slices of channels-last
 * tensors (views_build). */
bool kernel_op_generated(OpKind k);
/* Launch totals of groups [first, last): library calls, generated launches. */
void kernel_count_launches(const KProgram *kp, int first_group, int last_group, int *library, int *generated);
const char *kernel_skel_name(KSkel s);

/* Per register of section s of k: whether it has the same value for every
 * element of a channel (per-channel and fixed loads, constants, variables
 * and what is computed from them only). The C skeletons hoist those out of
 * the element loop; kernel_reuse.c parks only values that are not. */
void kernel_channel_invariant(const Kernel *k, KSection s, bool *inv);

/* Bytes of one element of a generated kernel's buffer stored as d (CUDA:
 * fp32 4, bf16 and fp16 2, int64 8). */
int kernel_storage_bytes(DType d);

/* The elements a CUDA MAP or CHANNEL_REDUCE kernel can take a thread at a
 * time, one load or store of at most 16 bytes per element buffer (8 for a
 * reduction): a map 8 when they are all 16-bit, 4 when one is fp32; a
 * reduction half that, V adjacent channels each with its own fp64 sums and
 * variables in registers; 1 for other skeletons or an
 * instruction that is not elementwise (a map's sums and variables,
 * per-channel stores). Where the shape, the addresses and views' row
 * strides allow it is the launch's choice (cuda_elem_vec). */
int kernel_elem_vec(const Kernel *k);

/* The device-memory bytes launch l moves in one run (kernel_traffic.c): a
 * generated kernel's loads and stores, each buffer once per section that
 * touches it (a reduction's phases each read their inputs again); a library
 * op's distinct inputs and outputs once, the least it can move. For telling a
 * launch's time from a bandwidth bound; kernel_lower fills KLaunch.bytes. */
int64_t kernel_launch_bytes(const KProgram *kp, const Graph *g, const bool *persistent, int l);

/* The argument block of launch ln without its buffer addresses (extents,
 * copy strides, per-slot image strides): each backend adds its pointers. */
YkArgs kernel_launch_args(const KLaunch *ln);

/* A multi-tensor MAP launch: one kernel, a row of tensors per op (the
 * optimizer's updates, PyTorch's foreach). Its kernel must be flat: every
 * load and store at KA_ELEM (unstrided) or KA_FIXED, and nothing per
 * channel, so a row is any [1, 1, len] extent. */
bool kernel_is_multi(const KProgram *kp, const KLaunch *ln);
/* The tensor ids of row r's slots (ln->args for any other launch), and its elements. */
const int *kernel_row_args(const KProgram *kp, const KLaunch *ln, int r);
int64_t kernel_row_len(const KProgram *kp, const KLaunch *ln, int r);
bool kernel_map_is_flat(const Kernel *k);
/* The rows of a launch a run visits: [lo, hi) of a multi-tensor MAP's
 * list_n, which a range of ops may cut; {0, 0} for every other launch. */
typedef struct KRows {
    int lo, hi;
} KRows;

/* Every row of launch ln: [0, list_n) of a multi-tensor MAP, else {0, 0}. */
KRows kernel_all_rows(const KProgram *kp, const KLaunch *ln);
/* The rows a loop over launch ln's rows visits: list_n of a multi-tensor MAP, else 1 (ln->args). */
int kernel_n_rows(const KProgram *kp, const KLaunch *ln);

/* Runs the launches that carry out ops [first, last), fusion group by group
 * in schedule order: visit(ctx, launch, its group, its rows inside the range)
 * for each, then group_done(ctx, lo, hi) (may be NULL) with the group's ops
 * inside the range. False, with err, when the range cuts a launch other than
 * a multi-tensor MAP in two, or visit fails. */
typedef bool (*KLaunchVisit)(void *ctx, int launch, int group, KRows rows, char *err, int errcap);
typedef void (*KGroupDone)(void *ctx, int op_lo, int op_hi);
bool kernel_run_range(const KProgram *kp, const Fusion *f, int first, int last, KLaunchVisit visit, KGroupDone group_done, void *ctx, char *err, int errcap);

#endif
