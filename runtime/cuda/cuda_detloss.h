/* runtime/cuda/cuda_detloss.h — the detection loss (detect_loss, detect_loss_bwd) on the device:
 * its scratch size, its argument block (templates/detloss_abi.h) and the launch sequence of its
 * phase kernels (templates/cuda/lib/detloss.cu). Owns no device memory and no routing: the
 * caller (cuda_step.c) gives it the scratch slice and decides when the loss runs here. */
#ifndef YOLOCC_CUDA_DETLOSS_H
#define YOLOCC_CUDA_DETLOSS_H
#include "../../templates/detloss_abi.h"
#include "cuda_kernels.h"

/* The loss' phase kernels, decode to finish and, for the backward, grad. */
enum { CUDA_DETLOSS_PHASES = LK_DETLOSS_GRAD - LK_DETLOSS_DECODE + 1 };
/* The phases' events while cuda_step_profile times them: ev[0] before the
 * first, ev[i + 1] after phase i; kernel[i] its library kernel; n phases ran. */
typedef struct CudaLossTiming {
    struct CuEventSt *ev[CUDA_DETLOSS_PHASES + 1];
    int kernel[CUDA_DETLOSS_PHASES];
    int n;
} CudaLossTiming;

/* Pure: bytes of scratch one loss op needs (parts 256-byte aligned; a
 * multiple of 256): batch images of `anchors` anchors, max_boxes GT rows
 * each, top-k of topk. Independent of levels, classes and reg_max. */
int64_t cuda_detloss_scratch_bytes(int64_t batch, int64_t anchors, int64_t max_boxes, int topk);
/* Pure: the same for op (detect_loss or detect_loss_bwd) of g; 0 for other
 * ops. The step's workspace must hold the largest over its loss ops (they
 * run one at a time on one stream, so they may share it). */
int64_t cuda_detloss_op_scratch_bytes(const Graph *g, const Op *op);

/* Pure: the argument block of op (detect_loss or detect_loss_bwd) of g with
 * views v. ptr[t]: tensor t's device address (a view's first element), as
 * cuda_lib_args takes it; levels and gradients may be views (their base's
 * image stride is used), boxes and counts must be packed. scratch: at least
 * cuda_detloss_op_scratch_bytes(g, op) bytes, 256-byte aligned. The forward
 * sets total and items (its outputs 0 and 1), the backward grad[] (its
 * outputs) and d_total (its input 0). Checks the attributes (nc >= 1,
 * 1 <= reg_max <= 64, 1 <= topk <= min(64, anchors), levels <= 8). */
bool cuda_detloss_args(const Graph *g, const Views *v, const Op *op, const CuDevicePtr *ptr, CuDevicePtr scratch, YlDetLossArgs *a, char *err,
                       int errcap);

/* Pure: lp's kernel of every phase op runs (LK_DETLOSS_DECODE + i at idx[i];
 * -1 past the last: the forward has no gradient phase), for operand storage
 * types stype[t] (CudaStep's stype). Fails naming the phase when lp lacks
 * one (a plan compiled before the loss had kernels) or when a storage type
 * is not what the kernels read: boxes and total / items fp32, counts int64. */
bool cuda_detloss_kernels(const LibProgram *lp, const Graph *g, const Op *op, const unsigned char *stype, int idx[CUDA_DETLOSS_PHASES], char *err,
                          int errcap);

/* Threads that share one GT row in the per-row phases (assign, normalise). */
enum { CUDA_DETLOSS_ROW_BLOCK = 64 };

/* Pure: the work items of phase e with arguments a (anchors, GT rows,
 * chunks, or 1), and its launch geometry: the per-GT-row phases one block
 * of CUDA_DETLOSS_ROW_BLOCK threads per row (a row may cover thousands of
 * cells, each a CIoU and two powers), up to 32 blocks per multiprocessor;
 * finish one block of LIB_BLOCK; the others one item a thread, up to 32
 * blocks per multiprocessor, in blocks of LIB_BLOCK threads, or of one warp
 * where that many would leave multiprocessors idle. */
long long cuda_detloss_items(const YlDetLossArgs *a, LibEntry e);
CudaGeom cuda_detloss_geometry(const YlDetLossArgs *a, LibEntry e, int sm_count);

/* Queues op (detect_loss or detect_loss_bwd of g, views v) on stream s:
 * decode, assign, resolve, normalise, terms, reduce, finish and, for the
 * backward, grad, each a launch of ck's library kernel with the block of
 * cuda_detloss_args. The caller passes ptr (every operand's device address,
 * CudaStep's ptr), stype (CudaStep's stype) and a scratch slice of
 * scratch_bytes >= cuda_detloss_op_scratch_bytes(g, op), 256-byte aligned,
 * not used by anything else until the launches have run (the workspace,
 * after the convolutions that share it have finished on the same stream).
 * The backward recomputes the assignment from its own inputs: it relies on
 * nothing the forward left behind. No synchronisation, no allocation, no
 * host copies: it may be captured in a CUDA graph. Bad targets (a class id
 * out of range, a field not finite, a count outside 0..max_boxes), which the
 * host oracle refuses, are skipped and counted in the scratch's sum part
 * (double at byte off_sum + 6 * 8) for the caller to check if it wants.
 * timing: NULL, or where to record the phases' events (profile only). */
bool cuda_detloss_launch(const CudaKernels *ck, const CudaDevice *d, const Graph *g, const Views *v, const Op *op, const CuDevicePtr *ptr,
                         const unsigned char *stype, CuDevicePtr scratch, int64_t scratch_bytes, CuStream s, CudaLossTiming *timing, char *err, int errcap);

#endif
