/* runtime/cuda/cuda_kernels.h — a CUDA plan's kernels on a device: picks the
 * cubin (or PTX) for the device, loads the modules, and launches one KLaunch
 * with the geometry the templates/cuda skeletons expect, or a library op
 * through its library kernel (compiler/lib_kernels.h). Owns no device memory
 * of the plan (cuda_device.h) and no cuDNN or host routes (cuda_step.c). */
#ifndef YOLOCC_CUDA_KERNELS_H
#define YOLOCC_CUDA_KERNELS_H
#include "../../compiler/kernel_ir.h"
#include "../../compiler/lib_kernels.h"
#include "../../templates/kernel_abi.h"
#include "cuda_device.h"

enum { CUDA_BLOCK = 256 };  /* YK_BLOCK of templates/cuda/prelude.cu: reductions need exactly this many threads */

/* Pure: which image of a kernel runs on a device of compute capability
 * device_sm (10 * major + minor). cubin_archs: "sm_80", ...; ptx_arch: the
 * PTX's architecture ("sm_90"), or NULL. An exact cubin first; else the
 * newest cubin of the same major version and a lower minor (binary
 * compatible); else the PTX when its architecture is not newer than the
 * device (the driver JIT-compiles it); else an error naming the plan's
 * architectures and the device's. *cubin: the chosen index, or -1 for PTX. */
bool cuda_choose_image(const char *const *cubin_archs, int n_cubins, const char *ptx_arch, int device_sm, int *cubin, char *err, int errcap);

typedef struct CudaGeom {
    unsigned grid, grid_y, block;
} CudaGeom;

/* Pure: grid and block of a launch. MAP and COPY are grid-stride loops over
 * n*c*inner (outer*len) elements in units of vec (YkArgs.vec: cuda_elem_vec,
 * cuda_copy_vec; 1 for LIST_NORM): one thread per unit up to 32 blocks per
 * multiprocessor. CHANNEL_REDUCE: a row of blocks per group of
 * cuda_reduce_lanes x vec channels (grid_y: cuda_reduce_split). LIST_NORM: a
 * row of CUDA_LIST_SPLIT blocks per tensor. Always CUDA_BLOCK threads. */
CudaGeom cuda_launch_geometry(KSkel skel, const KLaunch *ln, int64_t vec, int sm_count);

/* Pure: the elements a COPY launch of kernel k moves as one unit from
 * address src to dst (its slots 0 and 1): between buffers of one storage
 * type, the largest power of two up to 16 bytes that divides the run, both
 * strides, both offsets and both addresses in units; else 1. A channel run
 * of a channels-last concat (16 bf16 channels) then moves in two 16-byte
 * loads instead of sixteen 2-byte ones. */
int64_t cuda_copy_vec(const Kernel *k, const KLaunch *ln, CuDevicePtr src, CuDevicePtr dst);
/* Pure: whether every element index that MAP or CHANNEL_REDUCE launch ln
 * of kernel k forms, a view's rows (n * bs) included, stays below 2^31 with
 * CUDA_IDX32_SLACK to spare for a grid-stride loop's last step past the end
 * (at most 32 blocks a multiprocessor x CUDA_BLOCK x 8 elements: 2^26 on
 * 1024 multiprocessors): YkArgs.idx32, the kernels' 32-bit path. 64-bit
 * integer arithmetic was a third of the instructions of their loops. */
enum { CUDA_IDX32_SLACK = 1 << 26 };
bool cuda_launch_idx32(const Kernel *k, const KLaunch *ln);
/* Pure: the elements each thread of MAP or CHANNEL_REDUCE launch ln of
 * kernel k takes at a time: kernel_elem_vec(k) when it divides the launch's
 * inner extent (its channels when inner is 1; a reduction's channels only,
 * channels last) and every element buffer's address (ptr[t]: tensor t's)
 * is aligned to that many elements, and the launch counts in 32 bits
 * (cuda_launch_idx32); else 1. */
enum { CUDA_REDUCE_MAX_VEC = 4 }; /* kernel_elem_vec's widest reduction: 8 bytes of 16-bit elements */
int64_t cuda_elem_vec(const Kernel *k, const KLaunch *ln, const CuDevicePtr *ptr);

/* Pure: the threads of each row of a CHANNEL_REDUCE block, side by side,
 * each reducing vec adjacent channels (YkArgs.vec). Channels last (inner ==
 * 1) keeps a pixel's channels adjacent, so a block reading one channel
 * would use 2 bytes of every 32-byte sector it loads: the largest power of
 * two whose lanes x vec channels divide c, at most CUDA_REDUCE_MAX_LANES (a
 * warp's width). NCHW: 1, each channel's plane already contiguous. */
enum { CUDA_REDUCE_MAX_LANES = 32 };
int64_t cuda_reduce_lanes(const KLaunch *ln, int64_t vec);
/* Pure: the blocks each channel group of a CHANNEL_REDUCE launch is split
 * over, from its shape and vec alone (so the sums' order is the same on
 * every device): one per CUDA_REDUCE_CHUNK elements of the group, at most
 * CUDA_REDUCE_MAX_SPLIT. A channel of a 64-image 320x320 map is 6.5M
 * elements: one block for it alone would leave the GPU idle. */
enum { CUDA_REDUCE_CHUNK = 16384, CUDA_REDUCE_MAX_SPLIT = 1024 };
int64_t cuda_reduce_split(const KLaunch *ln, int64_t vec);
/* The blocks each tensor of a LIST_NORM launch (the gradient norm) is split
 * over: the largest gradients (2.4M elements in YOLOv8s) get 74K each, the
 * smallest an empty block or more, which costs little. */
enum { CUDA_LIST_SPLIT = 32 };
/* Pure: the bytes of YkArgs.part a CHANNEL_REDUCE or LIST_NORM launch needs
 * (partial sums, variables), and the counters of YkArgs.arrived. */
int64_t cuda_reduce_part_bytes(const KLaunch *ln);
int64_t cuda_reduce_counters(const KLaunch *ln);

/* Fills the argument block of launch ln of kernel k: ptr[t] is tensor t's
 * device address; list/list_len: the device tables of the program's
 * LIST_NORM tensors. */
YkArgs cuda_launch_args(const Kernel *k, const KLaunch *ln, const CuDevicePtr *ptr, CuDevicePtr list, CuDevicePtr list_len);

/* Pure: a multi-tensor MAP launch's rows [rows.lo, rows.hi) (kernel_is_multi):
 * the argument block with a.list / a.list_len at row lo of the tables
 * (list, list_len: the program's, as bound), list_n the rows, and one vec
 * that every row's length and addresses allow (else 1); and its grid, a
 * row of blocks each (grid_y) enough for the longest row. */
YkArgs cuda_multi_args(const KProgram *kp, const KLaunch *ln, KRows rows, const CuDevicePtr *ptr, CuDevicePtr list, CuDevicePtr list_len);
CudaGeom cuda_multi_geometry(const KProgram *kp, const KLaunch *ln, KRows rows, int64_t vec, int sm_count);

typedef struct CudaKernels {
    KProgram kp;            /* the plan's program, lowered again here */
    CuModule *mod;          /* per kernel */
    CuFunction *fn;
    char (*image)[24];      /* per kernel: what was loaded ("cubin sm_90", "ptx sm_90") */
    CuDevicePtr list, list_len;     /* KProgram.list as device pointers, and KProgram.list_len */
    CuDevicePtr part;               /* CHANNEL_REDUCE, LIST_NORM: YkArgs.arrived (the counters, at its start) and YkArgs.part */
    int64_t part_counters;          /* bytes of the counters before YkArgs.part (they run in order on one stream) */
    LibProgram lp;          /* the library kernels of the program's library launches, derived again here */
    CuModule *lib_mod;      /* per library kernel */
    CuFunction *lib_fn;
    char (*lib_image)[24];
    int sm_count;
    /* the library launches' scratch (YlArgs.ws: attention_bwd's row
     * statistics), one for all as they run in order on one stream: the
     * caller binds it (CudaStep: its workspace, so the memory check counts it) */
    CuDevicePtr scratch;
    int64_t scratch_bytes;  /* the largest lib_scratch_bytes of the program's library launches, set by open */
} CudaKernels;

/* Pure: the arguments of library op op, with ptr[t] each operand's device
 * address (a view's first element) and its image stride. */
YlArgs cuda_lib_args(const Graph *g, const Views *v, const Op *op, const CuDevicePtr *ptr);

/* Lowers the plan, derives its library kernels, checks both lists of names
 * against the KERNELS index, chooses and loads an image per kernel and
 * resolves each function; sizes (scratch_bytes) the library scratch the
 * caller must bind to scratch before a launch that needs it. */
bool cuda_kernels_open(CudaKernels *ck, const CudaDevice *d, const Plan *p, char *err, int errcap);
void cuda_kernels_close(CudaKernels *ck, const CudaDevice *d);
/* Pure: the checks of cuda_kernels_open that need no device: p's graph
 * lowers to exactly the generated and library kernels its KERNELS index
 * names (a graph rebuilt at another input shape must, to run on them). */
bool cuda_kernels_cover(const Plan *p, char *err, int errcap);
/* Once, before any launch: uploads the tensor-list tables (ptr[t] for each
 * KProgram.list entry, the gradients and optimizer tensors, and its
 * KProgram.list_len) and
 * allocates the CHANNEL_REDUCE and LIST_NORM launches' part, its counters zeroed. Both
 * live outside the step's memory (a few hundred KB at most). */
bool cuda_kernels_bind_tables(CudaKernels *ck, const CudaDevice *d, const CuDevicePtr *ptr, char *err, int errcap);
/* Launches generated launch ln on stream s: of a multi-tensor launch the
 * rows given (kernel_run_range's), of any other all of it. */
bool cuda_kernels_launch(const CudaKernels *ck, const CudaDevice *d, const KLaunch *ln, KRows rows, const CuDevicePtr *ptr, CuStream s, char *err, int errcap);
/* Launches library launch l of the program (ck->lp.launch_kernel[l] >= 0:
 * its op of graph g, whose views are v) on stream s: attention_bwd as its
 * statistics kernel, then its own, both on ck->scratch. */
bool cuda_kernels_launch_lib(const CudaKernels *ck, const CudaDevice *d, const Graph *g, const Views *v, int l, const CuDevicePtr *ptr, CuStream s, char *err,
                             int errcap);
/* Rounds n fp32 elements at src into the compute-copy type of the plan at
 * dst, on stream s (the cast library kernel; none in fp32 plans). */
bool cuda_kernels_cast(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr src, CuDevicePtr dst, int64_t n, CuStream s, char *err, int errcap);
/* The n elements of a weight gradient cuDNN computed in the plan's bf16 / fp16
 * at src, widened into its fp32 storage at dst, on stream s (the widen library
 * kernel; none in fp32 plans). */
bool cuda_kernels_widen(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr src, CuDevicePtr dst, int64_t n, CuStream s, char *err, int errcap);
/* n bytes at device address bytes (a batch's pixels) / 255 into the images
 * input's storage type at dst, on stream s (the images_u8 library kernel). */
bool cuda_kernels_images_u8(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr dst, CuDevicePtr bytes, int64_t n, CuStream s, char *err, int errcap);
/* Divides n fp32 elements at grad in place by the fp32 scale at device
 * address scale, on stream s (the unscale library kernel of fp16 plans). */
/* ModelEMA on the device: ema[i] = ema[i] * decay_d + decay_e * model[i]
 * over n fp32 elements on stream s (the plan's EMA library kernel). */
bool cuda_kernels_ema(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr ema, CuDevicePtr model, int64_t n, float decay_d, float decay_e, CuStream s, char *err,
                      int errcap);
bool cuda_kernels_unscale(const CudaKernels *ck, const CudaDevice *d, CuDevicePtr grad, int64_t n, CuDevicePtr scale, CuStream s, char *err, int errcap);

#endif
