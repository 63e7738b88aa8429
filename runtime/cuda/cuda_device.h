/* runtime/cuda/cuda_device.h — one CUDA device for a plan: the primary
 * context, its streams, and the plan's device memory (one allocation per
 * lifetime class: step arena, persistent state with the inputs, workspace),
 * checked against free memory before anything is allocated. Owns no kernels
 * (cuda_kernels.h) and no cuDNN (cudnn_conv.h); must not include CUDA headers. */
#ifndef YOLOCC_CUDA_DEVICE_H
#define YOLOCC_CUDA_DEVICE_H
#include "../plan_read.h"
#include "dynload.h"

typedef struct CudaDevice {
    CudaLibs L;
    bool libs_open, ctx_retained;
    int ordinal;
    CuDevice dev;
    CuContext ctx;          /* the primary context, current on the opening thread */
    char name[128];
    int sm;                 /* compute capability as 10 * major + minor: 90 on H100 */
    int sm_count;
    CuStream main, side;    /* side: collectives and copies beside the step */
} CudaDevice;

/* Opens the libraries (NCCL only when with_nccl), starts the driver and
 * makes device `ordinal`'s primary context current. On failure nothing stays
 * open and err holds one line. */
bool cuda_device_open(CudaDevice *d, int ordinal, bool with_nccl, char *err, int errcap);
void cuda_device_close(CudaDevice *d);

/* The error message of a failed driver call: names the call, the error name
 * (cuGetErrorName) and what was being done. False when r is not success. */
bool cuda_ok(const CudaLibs *L, CuResult r, const char *call, const char *doing, char *err, int errcap);
#define CUDA_CALL(L, fn, args, doing, err, errcap) cuda_ok((L), (L)->fn args, #fn, (doing), (err), (errcap))

/* bytes from host memory to dst, done when this returns. The copy goes on
 * d->main and waits for it: a plain cuMemcpyHtoD from pageable memory may
 * return before its DMA lands, and the non-blocking streams do not wait for it. */
bool cuda_copy_to_device(const CudaDevice *d, CuDevicePtr dst, const void *src, size_t bytes, const char *doing, char *err, int errcap);
/* bytes of src into host memory, after everything already queued on d->main
 * (a plain cuMemcpyDtoH would not wait for the non-blocking streams). */
bool cuda_copy_to_host(const CudaDevice *d, void *dst, CuDevicePtr src, size_t bytes, const char *doing, char *err, int errcap);

/* Milliseconds per run(ctx) as a CUDA graph on d->main replays it, so host
 * work per call (a library's argument checks) is not counted: run once
 * eagerly (libraries load their kernels on first use, which a capture
 * forbids), `runs` runs captured into one graph, a replay to warm, then a
 * replay timed with events. Leaves no capture open and nothing allocated. */
bool cuda_time_replays(CudaDevice *d, bool (*run)(void *ctx, char *err, int errcap), void *ctx, int runs, const char *doing, float *ms, char *err,
                       int errcap);

/* ---- memory arithmetic (pure: no CUDA) ---- */

/* What a plan needs on the device. Activations (the arena and the inputs)
 * scale linearly with the batch; persistent state and the workspace do not. */
typedef struct CudaMemNeed {
    int64_t arena, state, inputs, workspace, reserve;   /* reserve: bytes to leave free */
    int64_t batch;
} CudaMemNeed;

int64_t cuda_mem_planned(const CudaMemNeed *n);
/* The largest batch b with state + workspace + reserve + b * (arena + inputs) / batch
 * <= free_bytes: 0 when not even batch 1 fits, INT64_MAX when nothing scales. */
int64_t cuda_mem_largest_batch(const CudaMemNeed *n, uint64_t free_bytes);
/* True when the plan fits; otherwise false with one message naming the
 * planned bytes (arena + persistent + workspace), the free bytes and the
 * largest batch that fits. */
bool cuda_mem_check(const CudaMemNeed *n, uint64_t free_bytes, char *err, int errcap);

/* Where each tensor lives, from the plan's memory plan. */
typedef enum { CUDA_REGION_NONE, CUDA_REGION_ARENA, CUDA_REGION_PERSISTENT } CudaRegion;

typedef struct CudaLayout {
    int n_tensors;
    unsigned char *region;  /* per tensor: CudaRegion (NONE: MEMPLAN_INTERNAL, no memory) */
    int64_t *off;           /* per tensor: offset in its region */
    int64_t *lowp_off;      /* per tensor: the low-precision compute copy of a
                             * parameter in a bf16/fp16 plan (persistent region), or -1 */
    int64_t arena_bytes, persistent_bytes;  /* persistent_bytes includes the inputs */
    int64_t state_bytes, input_bytes;       /* its two parts, each tensor rounded up to MEMPLAN_ALIGN */
    int64_t batch;                          /* META "batch" */
} CudaLayout;

/* Pure: lays out the persistent region (every tensor at a MEMPLAN_ALIGN
 * boundary, at its size at the plan's precision) and takes arena offsets as
 * the plan states them. */
bool cuda_layout_build(const Plan *p, CudaLayout *l, char *err, int errcap);
void cuda_layout_free(CudaLayout *l);

/* ---- device memory ---- */

typedef struct CudaMem {
    const Graph *g;         /* the plan's graph the layout is of */
    CudaLayout layout;
    CuDevicePtr arena, persistent, workspace;
    /* where the state part of the persistent region starts (its tensors at
     * state + off - layout.input_bytes): persistent + input_bytes, or
     * another CudaMem's state when lent (persistent then holds the inputs alone) */
    CuDevicePtr state;
    int64_t workspace_bytes;
    /* the region is another CudaMem's (CudaLend): neither allocated nor
     * freed nor counted here */
    bool arena_lent, workspace_lent, state_lent;
} CudaMem;

/* What other plans' memory a plan may use instead of allocating its own
 * (NULL members: nothing). arena, workspace: CudaMems whose per-run regions
 * hold nothing between their runs, used when their own one is at least as
 * large; the runs must never overlap (each run ends with the host waiting
 * for its stream): the training step lends to the validation steps. state:
 * a CudaMem of the same model whose parameters, buffers and compute copies
 * lie as this plan's do (cuda_layout_state_matches), read in place: the
 * validation graphs of other input shapes read the plan's own one's. */
typedef struct CudaLend {
    const CudaMem *arena, *workspace, *state;
} CudaLend;

/* Pure: whether a's and b's state (the persistent tensors that are not
 * inputs, with their compute copies) lie alike: the same names and sizes at
 * the same offsets from the state's start. */
bool cuda_layout_state_matches(const Graph *ga, const CudaLayout *a, const Graph *gb, const CudaLayout *b);

/* Checks free memory (cuMemGetInfo) against the layout plus workspace_bytes
 * and reserve_bytes, less what lend provides, and only then allocates the
 * rest. A state lender whose layout does not match is an error. */
bool cuda_mem_alloc(CudaMem *m, CudaDevice *d, const Plan *p, int64_t workspace_bytes, int64_t reserve_bytes, const CudaLend *lend, char *err, int errcap);
/* After the set-up settled what the workspace must hold (need bytes, at
 * most what cuda_mem_alloc was given): an own workspace larger than need is
 * replaced by lender's when that one is large enough, else by an own of the
 * smaller size (freed first, so the peak never rises). Every address
 * derived from the workspace must be taken again afterwards. */
bool cuda_mem_fit_workspace(CudaMem *m, CudaDevice *d, int64_t need, const CudaMem *lender, char *err, int errcap);
/* Bytes m allocated itself (lent regions not counted). */
int64_t cuda_mem_owned_bytes(const CudaMem *m);
void cuda_mem_free(CudaMem *m, CudaDevice *d);
/* Device address of tensor t (0 when it has no memory: MEMPLAN_INTERNAL). */
CuDevicePtr cuda_mem_ptr(const CudaMem *m, int t);
/* The compute copy of parameter t in low-precision plans, else cuda_mem_ptr. */
CuDevicePtr cuda_mem_compute_ptr(const CudaMem *m, int t);
/* ptr[t] = cuda_mem_ptr(m, t) for every tensor (n_tensors entries, malloc'd). */
CuDevicePtr *cuda_mem_pointers(const CudaMem *m);

#endif
