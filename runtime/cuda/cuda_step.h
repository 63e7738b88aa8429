/* runtime/cuda/cuda_step.h — a training plan's step on one GPU: device, memory, kernels (generated
 * and library), cuDNN plans, host <-> device transfers, and op ranges run group by group (a counted
 * host fallback for library ops without a GPU route). Knows no datasets, schedules or loss scaling; no CUDA headers. */
#ifndef YOLOCC_CUDA_STEP_H
#define YOLOCC_CUDA_STEP_H
#include "cuda_device.h"
#include "cuda_kernels.h"
#include "cudnn_conv.h"

/* Where a launch of the plan runs: its generated kernel, a library kernel
 * (compiler/lib_kernels.h), cuDNN, or the reference kernel on the host. */
typedef enum { CUDA_ROUTE_KERNEL, CUDA_ROUTE_LIBRARY, CUDA_ROUTE_CUDNN, CUDA_ROUTE_HOST } CudaRoute;

typedef struct CudaStep {
    const Plan *plan;
    CudaDevice dev;
    CudaKernels kern;
    CudnnConv conv;
    CudaMem mem;
    bool dev_open, kern_open, conv_open, mem_open;
    CuDevicePtr *ptr;           /* per tensor: its device address (0: internal to a fusion group) */
    unsigned char *stype;       /* per tensor: DType of its device storage (bf16/fp16 activations in low-precision plans) */
    bool *dirty;                /* per tensor: a parameter whose compute copy is older than its master */
    bool sync_each;             /* YOLOCC_CUDA_SYNC=1: synchronise after every launch, so a fault names its launch */
    /* YOLOCC_CUDA_LIB_HOST=1: ops with a library kernel run on the host
     * instead (the reference), to bisect a suspect library kernel */
    bool lib_host;
    /* the plan's launches by route, per step (cuda_step_census) */
    int kernel_launches, lib_launches, cudnn_ops, host_ops;
    int host_op_kinds[OP_COUNT];
    /* since open */
    long host_ops_run;          /* library ops run on the host */
    long copy_refreshes;        /* parameter compute copies converted from their masters */
} CudaStep;

/* Opens device `ordinal` for training plan p (compiled with --target cuda):
 * loads the kernels for the device, builds every convolution's cuDNN plan,
 * checks arena + persistent + workspace against free memory, and only then
 * allocates them. p must outlive cs. On failure nothing stays open and err
 * holds one line. */
bool cuda_step_open(CudaStep *cs, const Plan *p, int ordinal, char *err, int errcap);
void cuda_step_close(CudaStep *cs);

/* Uploads every parameter, buffer and optimizer-state tensor t with
 * host[t] != NULL (host[t]: fp32, or int64 for DT_I64 tensors, as the CPU
 * interpreter holds them; indexed like Interp.buf) and refreshes the
 * parameters' low-precision compute copies. */
bool cuda_step_upload_state(CudaStep *cs, void *const *host, char *err, int errcap);
/* Uploads one plan input (images, boxes, counts, grad_seed, lr, momentum,
 * opt_step: see plan_meta_tensor) from fp32 / int64 host memory. */
bool cuda_step_set_input(CudaStep *cs, int tensor, const void *host, char *err, int errcap);
/* Copies tensor t to host (fp32, or int64 for DT_I64), converting bf16/fp16
 * storage and packing a zero-copy view. Waits for the main stream first. */
bool cuda_step_download(CudaStep *cs, int tensor, void *host, char *err, int errcap);
/* Runs ops [first_op, last_op) of the step on the main stream and waits for
 * them; the range must not cut a launch in two (as interp_run). Compute
 * copies of parameters the range updated are refreshed before it returns. */
bool cuda_step_run(CudaStep *cs, int first_op, int last_op, char *err, int errcap);
/* Converts every dirty parameter's fp32 master into its compute copy with the
 * plan's cast library kernel (a no-op in fp32 plans). cuda_step_upload_state and cuda_step_run call it. */
bool cuda_step_refresh_copies(CudaStep *cs, char *err, int errcap);
/* Bytes CudaStep allocated for the plan: arena + persistent + workspace. */
int64_t cuda_step_device_bytes(const CudaStep *cs);

/* ---- pure: no GPU ---- */

/* The route of launch ln of graph g. */
CudaRoute cuda_step_route(const Graph *g, const KLaunch *ln);
/* Fills cs's route counts (kernel_launches, lib_launches, cudnn_ops,
 * host_ops, host_op_kinds) from a lowered program, library ops counted on
 * the host when cs->lib_host; nothing else of cs is touched. */
void cuda_step_census(CudaStep *cs, const Graph *g, const KProgram *kp);
/* One line for yolort: "12 library ops run on the host each step:
 * maxpool2d x3, resize_nearest x3, ..." (kinds by count, then op order), or
 * that none does. */
void cuda_step_describe(const CudaStep *cs, char *buf, int cap);
/* The device storage type of tensor t (DT_F32, DT_BF16, DT_F16 or DT_I64),
 * by the rule kernel_lower and cudnn_conv use (memplan_tensor_bytes). */
DType cuda_step_storage_type(const Graph *g, const bool *persistent, Precision p, int t);
/* Elements a view of `images` images of `row` elements each, `stride`
 * elements apart (0: packed), spans from its first element. */
int64_t cuda_view_span(int64_t images, int64_t row, int64_t stride);
/* Packs a strided view (its span, as downloaded) into images * row
 * contiguous elements of esize bytes each. */
void cuda_view_gather(const void *strided, void *packed, int64_t images, int64_t row, int64_t stride, size_t esize);
/* Between fp32 and a storage type (DT_F32: copy; DT_BF16/DT_F16: round to
 * nearest even, NaN stays NaN, fp16 overflow goes to infinity). */
void cuda_f32_to_storage(DType t, const float *src, void *dst, int64_t n);
void cuda_storage_to_f32(DType t, const void *src, float *dst, int64_t n);

#endif
