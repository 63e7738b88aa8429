/* compiler/lib_kernels.h — the CUDA library kernels of a plan (templates/cuda/lib: pooling,
 * nearest resize, zero pad / crop and their gradients, attention and its gradient, the
 * layout changes, the compute-copy cast, the detection loss' phases): which library op
 * runs which kernel, each kernel's name and NVRTC source, and its launch arguments. Shared by
 * codegen (compiles them) and runtime/cuda (loads and launches them); knows no compiler or driver. */
#ifndef YOLOCC_LIB_KERNELS_H
#define YOLOCC_LIB_KERNELS_H
#include "../templates/lib_abi.h"
#include "kernel_ir.h"

typedef enum {
    LK_MAXPOOL2D, LK_MAXPOOL2D_BWD, LK_AVGPOOL2D, LK_AVGPOOL2D_BWD,
    LK_RESIZE_NEAREST, LK_RESIZE_NEAREST_BWD, LK_ZEROPAD2D, LK_CROP2D,
    LK_ATTENTION, LK_ATTENTION_BWD,
    LK_DFL, LK_DIST2BBOX, /* the validation graph's box decode */
    LK_RELAYOUT,          /* reshape / detach between layouts (--layout nhwc); carries out both op kinds */
    LK_CAST,    /* fp32 master -> bf16 / fp16 compute copy; also bf16 / fp16 -> fp32 (a weight gradient cuDNN computed in the inputs' type) */
    LK_UNSCALE, /* fp16 loss scaling: an fp32 gradient divided in place by the scale in device memory */
    /* attention_bwd's first launch (per query row: the softmax statistics into
     * YlArgs.ws), same operands and arguments as LK_ATTENTION_BWD's */
    LK_ATTENTION_STATS,
    /* attention through cuBLASLt (runtime/cuda/attention_gemm.h), around its products: a
     * softmax row's partial statistics per chunk of columns, each element from its row's
     * chunks, v between qkv's layout and the op's v (d_v) */
    LK_ATT_PARTIALS, LK_ATT_ROWS, LK_ATT_VCOPY,
    LK_EMA,     /* training plans: ModelEMA's update of one fp32 state tensor on the device */
    /* plans with an images input: a batch's pixels uploaded as bytes, value / 255 into the
     * images' storage type (what the loader computes on the host, a quarter of the traffic) */
    LK_IMAGES_U8,
    /* the detection loss (templates/cuda/lib/detloss.cu, launched by runtime/cuda/cuda_detloss.c),
     * in launch order; their argument block is YlDetLossArgs, not YlArgs */
    LK_DETLOSS_DECODE, LK_DETLOSS_ASSIGN, LK_DETLOSS_RESOLVE, LK_DETLOSS_NORMALISE,
    LK_DETLOSS_TERMS, LK_DETLOSS_REDUCE, LK_DETLOSS_FINISH,
    LK_DETLOSS_GRAD, /* detect_loss_bwd only */
    LK_COUNT
} LibEntry;

/* Operands of a library kernel: attention_bwd's three inputs and its output
 * (the fourth is YlArgs.t3 / bs3, see lib_operand). */
#define LIB_MAX_OPERANDS 4

/* A kernel is specialised by its entry and its operands' storage types
 * only; shapes and attributes travel in YlArgs. */
typedef struct LibKernel {
    LibEntry entry;
    int n_operands;                 /* inputs, then the outputs */
    DType dt[LIB_MAX_OPERANDS];
    char name[KIR_NAME];            /* "yl_maxpool2d_bf16_bf16" */
} LibKernel;

typedef struct LibProgram {
    LibKernel *kernels;
    int n_kernels;
    int *launch_kernel;             /* per launch of the KProgram: its library kernel, or -1 */
    int n_launches;
    int cast;                       /* the compute-copy cast, or -1 (fp32 plans have no copies) */
    int unscale;                    /* the loss-scale unscale, or -1 (only fp16 plans scale their loss) */
    int ema;                        /* the EMA update, or -1 (a plan without an optimizer) */
    int images_u8;                  /* bytes -> the images input's storage type, or -1 (no images input) */
    /* a weight gradient from bf16 / fp16 inputs widened into its fp32 storage, where cuDNN
     * has no engine that writes fp32 from them (runtime/cuda/cudnn_conv.h), or -1 (fp32
     * plans, plans without weight gradients) */
    int widen;
} LibProgram;

/* The entry that carries out ops of kind k when they are library launches, or -1 (cuDNN, the host fallback;
 * the cast, the unscale and the detection-loss phases carry out no op by
 * themselves: detect_loss and detect_loss_bwd keep -1 here, and their phases
 * are found with lib_detloss_types and lib_program_find). */
int lib_entry_of(OpKind k);
/* Whether the kernels of op kind k, generated or library, address a channel
 * slice of a channels-last tensor, whose pixels sit its base's channels
 * apart; views_build's by_rows, and kernel_lower refuses such a slice to
 * any other op. */
bool kernel_op_strided_rows(OpKind k);
/* The library kernels of a lowered program's library launches and of its
 * detect_loss / detect_loss_bwd launches (their phases, in order of first
 * use; attention_bwd's statistics kernel just before its own), then the
 * EMA update (training plans), the images' byte conversion (graphs with an
 * "images" input), the unscale (fp16 plans), the widening cast (bf16 / fp16 plans
 * with weight gradients), the cast last. */
bool lib_program_build(const Graph *g, Precision p, const KProgram *kp, LibProgram *lp, char *err, int errcap);
/* The operand storage types of detection-loss phase e (LK_DETLOSS_*) into dt:
 * the levels' type (decode, assign, resolve, terms), nothing (normalise,
 * reduce, finish), or the levels', the gradients' and d_total's (grad).
 * Returns their number; -1 when e is no loss phase. */
int lib_detloss_types(LibEntry e, DType level, DType grad, DType d_total, DType dt[YL_MAX_OPERANDS]);
/* The two operand types of kernel e (LK_ATT_PARTIALS, LK_ATT_ROWS, LK_ATT_VCOPY) around
 * the cuBLASLt products of an attention (k: OP_ATTENTION or OP_ATTENTION_BWD) whose operands
 * are stored as dt (inputs, then outputs): partials and rows {fp32 scores, qkv's type};
 * vcopy {source, destination}. */
void lib_att_gemm_types(OpKind k, const DType *dt, LibEntry e, DType out[2]);
/* The index in lp of kernel (e, dt[0..n)), or -1. */
int lib_program_find(const LibProgram *lp, LibEntry e, int n, const DType *dt);
void lib_program_free(LibProgram *lp);
/* The kernel's NVRTC source (malloc'd), or NULL when a template is missing. */
char *lib_kernel_render(const LibKernel *k);
/* The arguments of library op op without the operand addresses (and, for
 * attention_bwd, without the scratch YlArgs.ws). */
YlArgs lib_launch_args(const Graph *g, const Views *v, const Op *op);
/* Operand i (inputs, then outputs) of op: its tensor; and its address and
 * image-stride slots in a YlArgs (the fourth sits at the end of the block). */
static inline int lib_operand_tensor(const Op *op, int i) { return i < op->n_in ? op->in[i] : op->out[i - op->n_in]; }
static inline void **lib_operand(YlArgs *a, int i) { return i < YL_MAX_OPERANDS ? &a->t[i] : &a->t3; }
static inline long long *lib_operand_bs(YlArgs *a, int i) { return i < YL_MAX_OPERANDS ? &a->bs[i] : &a->bs3; }
/* Bytes of device scratch (YlArgs.ws) op's library launches need: 3 doubles
 * per (image, head, token) for attention_bwd, else 0. */
int64_t lib_scratch_bytes(const Graph *g, const Op *op);
enum { LIB_BLOCK = 256 };  /* YK_BLOCK of templates/cuda/prelude.cu */
enum { LIB_ATT_GROUP = 8 }; /* YL_ATT_G of templates/cuda/lib/attention.cu: channels per attention thread */

/* Blocks of LIB_BLOCK threads for a.total elements: one thread each, at most
 * 32 blocks per multiprocessor (the loops are grid-stride). */
unsigned lib_launch_grid(const YlArgs *a, int sm_count);

#endif
