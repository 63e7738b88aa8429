/* runtime/cuda/dynload.h — opens the NVIDIA driver, cuDNN, cuBLASLt and NCCL
 * with dlopen when a CUDA plan runs, and resolves the entry points the CUDA
 * backend calls into one struct of function pointers. Owns loading only; must
 * not include CUDA headers (the build works without them), launch work, or
 * be called for CPU plans. */
#ifndef YOLOCC_CUDA_DYNLOAD_H
#define YOLOCC_CUDA_DYNLOAD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- driver API types (cuda.h), declared here so no CUDA header is needed ---- */
typedef int CuResult;                       /* CUresult; 0 = CUDA_SUCCESS */
typedef int CuDevice;                       /* CUdevice */
typedef unsigned long long CuDevicePtr;     /* CUdeviceptr */
typedef struct CuCtxSt *CuContext;
typedef struct CuModSt *CuModule;
typedef struct CuFuncSt *CuFunction;
typedef struct CuStreamSt *CuStream;        /* also cudaStream_t */
typedef struct CuEventSt *CuEvent;
typedef struct CuGraphSt *CuGraph;
typedef struct CuGraphExecSt *CuGraphExec;

/* ---- cuDNN (cudnn_graph.h): the backend (graph) API ---- */
typedef int CudnnStatus;                    /* cudnnStatus_t; 0 = CUDNN_STATUS_SUCCESS */
typedef struct CudnnContext *CudnnHandle;
typedef void *CudnnBackendDescriptor;
typedef int CudnnBackendDescriptorType, CudnnBackendAttributeName, CudnnBackendAttributeType;

/* ---- cuBLASLt (cublasLt.h) ---- */
typedef int CublasStatus;                   /* cublasStatus_t; 0 = CUBLAS_STATUS_SUCCESS */
typedef struct CublasLtContext *CublasLtHandle;
typedef struct CublasLtMatmulDescSt *CublasLtMatmulDesc;
typedef struct CublasLtMatrixLayoutSt *CublasLtMatrixLayout;
typedef struct CublasLtMatmulPrefSt *CublasLtMatmulPreference;
typedef int CublasComputeType, CudaDataType, CublasLtMatmulDescAttr, CublasLtMatrixLayoutAttr, CublasLtMatmulPrefAttr;
typedef struct CublasLtMatmulAlgo {
    uint64_t data[8];
} CublasLtMatmulAlgo;
typedef struct CublasLtMatmulHeuristicResult {
    CublasLtMatmulAlgo algo;
    size_t workspace_size;
    CublasStatus state;
    float waves_count;
    int reserved[4];
} CublasLtMatmulHeuristicResult;

/* ---- NCCL (nccl.h) ---- */
typedef int NcclResult;                     /* ncclResult_t; 0 = ncclSuccess */
typedef struct NcclCommSt *NcclComm;
typedef int NcclDataType, NcclRedOp;
typedef struct NcclUniqueId {
    char internal[128];
} NcclUniqueId;

/* The loaded libraries. Each pointer is resolved, or the open failed. */
typedef struct CudaLibs {
    void *h_cuda, *h_cudnn, *h_cublaslt, *h_nccl;   /* dlopen handles (h_nccl NULL when not asked for) */
    const char *cublaslt_name;                      /* which cuBLASLt soname opened */

    /* driver (libcuda.so.1); versioned symbols as cuda.h maps them (_v2) */
    CuResult (*cuInit)(unsigned flags);
    CuResult (*cuDriverGetVersion)(int *version);
    CuResult (*cuGetErrorName)(CuResult e, const char **name);
    CuResult (*cuGetErrorString)(CuResult e, const char **str);
    CuResult (*cuDeviceGetCount)(int *count);
    CuResult (*cuDeviceGet)(CuDevice *dev, int ordinal);
    CuResult (*cuDeviceGetName)(char *name, int len, CuDevice dev);
    CuResult (*cuDeviceGetAttribute)(int *value, int attrib, CuDevice dev);
    CuResult (*cuDeviceTotalMem)(size_t *bytes, CuDevice dev);                          /* cuDeviceTotalMem_v2 */
    CuResult (*cuDevicePrimaryCtxRetain)(CuContext *ctx, CuDevice dev);
    CuResult (*cuDevicePrimaryCtxRelease)(CuDevice dev);                                /* _v2 */
    CuResult (*cuCtxSetCurrent)(CuContext ctx);
    CuResult (*cuCtxSynchronize)(void);
    CuResult (*cuCtxGetDevice)(CuDevice *dev);          /* the current context's device: NCCL runs on it (comm_nccl.c checks it is LOCAL_RANK's) */
    CuResult (*cuModuleLoadData)(CuModule *mod, const void *image);
    /* options: CUjit_option values (CU_JIT_ERROR_LOG_BUFFER = 5, ..._SIZE_BYTES = 6), so a PTX load names its failing line */
    CuResult (*cuModuleLoadDataEx)(CuModule *mod, const void *image, unsigned n_options, int *options, void **option_values);
    CuResult (*cuModuleUnload)(CuModule mod);
    CuResult (*cuModuleGetFunction)(CuFunction *fn, CuModule mod, const char *name);
    CuResult (*cuLaunchKernel)(CuFunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared_bytes,
                               CuStream stream, void **params, void **extra);
    CuResult (*cuMemAlloc)(CuDevicePtr *ptr, size_t bytes);                             /* _v2 */
    CuResult (*cuMemFree)(CuDevicePtr ptr);                                             /* _v2 */
    CuResult (*cuMemGetInfo)(size_t *free_bytes, size_t *total_bytes);                  /* _v2 */
    CuResult (*cuMemcpyHtoDAsync)(CuDevicePtr dst, const void *src, size_t bytes, CuStream s);   /* _v2 */
    CuResult (*cuMemcpyDtoHAsync)(void *dst, CuDevicePtr src, size_t bytes, CuStream s);         /* _v2 */
    CuResult (*cuMemsetD8Async)(CuDevicePtr dst, unsigned char value, size_t n, CuStream s);
    CuResult (*cuMemsetD16Async)(CuDevicePtr dst, unsigned short value, size_t n, CuStream s);
    CuResult (*cuMemsetD32Async)(CuDevicePtr dst, unsigned value, size_t n, CuStream s);
    CuResult (*cuMemHostRegister)(void *p, size_t bytes, unsigned flags);              /* _v2; pins pageable memory for DMA */
    CuResult (*cuMemHostUnregister)(void *p);
    CuResult (*cuStreamCreate)(CuStream *s, unsigned flags);
    CuResult (*cuStreamDestroy)(CuStream s);                                            /* _v2 */
    CuResult (*cuStreamSynchronize)(CuStream s);
    CuResult (*cuStreamWaitEvent)(CuStream s, CuEvent e, unsigned flags);
    CuResult (*cuEventCreate)(CuEvent *e, unsigned flags);
    CuResult (*cuEventRecord)(CuEvent e, CuStream s);
    CuResult (*cuEventQuery)(CuEvent e);
    CuResult (*cuEventSynchronize)(CuEvent e);
    CuResult (*cuEventElapsedTime)(float *ms, CuEvent start, CuEvent end);
    CuResult (*cuEventDestroy)(CuEvent e);                                              /* _v2 */
    CuResult (*cuStreamBeginCapture)(CuStream s, int mode);                             /* _v2 */
    CuResult (*cuStreamEndCapture)(CuStream s, CuGraph *graph);
    CuResult (*cuGraphInstantiate)(CuGraphExec *exec, CuGraph graph, unsigned long long flags); /* cuGraphInstantiateWithFlags */
    CuResult (*cuGraphLaunch)(CuGraphExec exec, CuStream s);
    CuResult (*cuGraphExecDestroy)(CuGraphExec exec);
    CuResult (*cuGraphDestroy)(CuGraph graph);

    /* cuDNN 9 (libcudnn.so.9) */
    size_t (*cudnnGetVersion)(void);
    const char *(*cudnnGetErrorString)(CudnnStatus s);
    CudnnStatus (*cudnnCreate)(CudnnHandle *h);
    CudnnStatus (*cudnnDestroy)(CudnnHandle h);
    CudnnStatus (*cudnnSetStream)(CudnnHandle h, CuStream s);
    CudnnStatus (*cudnnBackendCreateDescriptor)(CudnnBackendDescriptorType type, CudnnBackendDescriptor *d);
    CudnnStatus (*cudnnBackendDestroyDescriptor)(CudnnBackendDescriptor d);
    CudnnStatus (*cudnnBackendFinalize)(CudnnBackendDescriptor d);
    CudnnStatus (*cudnnBackendSetAttribute)(CudnnBackendDescriptor d, CudnnBackendAttributeName name, CudnnBackendAttributeType type, int64_t count,
                                            const void *elements);
    CudnnStatus (*cudnnBackendGetAttribute)(CudnnBackendDescriptor d, CudnnBackendAttributeName name, CudnnBackendAttributeType type, int64_t requested,
                                            int64_t *count, void *elements);
    CudnnStatus (*cudnnBackendExecute)(CudnnHandle h, CudnnBackendDescriptor plan, CudnnBackendDescriptor variant_pack);

    /* cuBLASLt (libcublasLt.so.13, else .so.12) */
    size_t (*cublasLtGetVersion)(void);
    CublasStatus (*cublasLtCreate)(CublasLtHandle *h);
    CublasStatus (*cublasLtDestroy)(CublasLtHandle h);
    CublasStatus (*cublasLtMatmulDescCreate)(CublasLtMatmulDesc *d, CublasComputeType compute, CudaDataType scale);
    CublasStatus (*cublasLtMatmulDescDestroy)(CublasLtMatmulDesc d);
    CublasStatus (*cublasLtMatmulDescSetAttribute)(CublasLtMatmulDesc d, CublasLtMatmulDescAttr attr, const void *buf, size_t bytes);
    CublasStatus (*cublasLtMatrixLayoutCreate)(CublasLtMatrixLayout *l, CudaDataType type, uint64_t rows, uint64_t cols, int64_t ld);
    CublasStatus (*cublasLtMatrixLayoutDestroy)(CublasLtMatrixLayout l);
    CublasStatus (*cublasLtMatrixLayoutSetAttribute)(CublasLtMatrixLayout l, CublasLtMatrixLayoutAttr attr, const void *buf, size_t bytes);
    CublasStatus (*cublasLtMatmulPreferenceCreate)(CublasLtMatmulPreference *p);
    CublasStatus (*cublasLtMatmulPreferenceDestroy)(CublasLtMatmulPreference p);
    CublasStatus (*cublasLtMatmulPreferenceSetAttribute)(CublasLtMatmulPreference p, CublasLtMatmulPrefAttr attr, const void *buf, size_t bytes);
    CublasStatus (*cublasLtMatmulAlgoGetHeuristic)(CublasLtHandle h, CublasLtMatmulDesc op, CublasLtMatrixLayout a, CublasLtMatrixLayout b,
                                                   CublasLtMatrixLayout c, CublasLtMatrixLayout d, CublasLtMatmulPreference pref, int requested,
                                                   CublasLtMatmulHeuristicResult *results, int *returned);
    CublasStatus (*cublasLtMatmul)(CublasLtHandle h, CublasLtMatmulDesc op, const void *alpha, const void *a, CublasLtMatrixLayout a_desc, const void *b,
                                   CublasLtMatrixLayout b_desc, const void *beta, const void *c, CublasLtMatrixLayout c_desc, void *d,
                                   CublasLtMatrixLayout d_desc, const CublasLtMatmulAlgo *algo, void *workspace, size_t workspace_bytes, CuStream s);

    /* NCCL 2 (libnccl.so.2), only for more than one rank */
    NcclResult (*ncclGetVersion)(int *version);
    const char *(*ncclGetErrorString)(NcclResult r);
    NcclResult (*ncclGetUniqueId)(NcclUniqueId *id);
    NcclResult (*ncclCommInitRank)(NcclComm *comm, int nranks, NcclUniqueId id, int rank);
    NcclResult (*ncclCommDestroy)(NcclComm comm);
    NcclResult (*ncclCommAbort)(NcclComm comm);
    NcclResult (*ncclCommGetAsyncError)(NcclComm comm, NcclResult *async_error);
    NcclResult (*ncclAllReduce)(const void *send, void *recv, size_t count, NcclDataType type, NcclRedOp op, NcclComm comm, CuStream s);
    NcclResult (*ncclBroadcast)(const void *send, void *recv, size_t count, NcclDataType type, int root, NcclComm comm, CuStream s);
    NcclResult (*ncclGroupStart)(void);
    NcclResult (*ncclGroupEnd)(void);
} CudaLibs;

/* Library file names to try; NULL entries take the defaults. Tests point
 * them elsewhere (a missing file, the toolkit's stub libcuda.so). */
typedef struct CudaLibNames {
    const char *cuda;           /* "libcuda.so.1" */
    const char *cudnn;          /* "libcudnn.so.9" */
    const char *cublaslt[2];    /* "libcublasLt.so.13", "libcublasLt.so.12" (first that opens) */
    const char *nccl;           /* "libnccl.so.2" */
} CudaLibNames;

/* Opens the driver, cuDNN and cuBLASLt (and NCCL when with_nccl) and
 * resolves every entry point above. On failure nothing stays open and err
 * holds one message naming the library (or library and symbol) and dlerror(). */
bool cuda_libs_open(CudaLibs *L, const CudaLibNames *names, bool with_nccl, char *err, int errcap);
void cuda_libs_close(CudaLibs *L);

/* cuInit and a device count through the loaded driver: false with a message
 * when the driver cannot start or there is no CUDA device. */
bool cuda_libs_check_device(const CudaLibs *L, int *device_count, char *err, int errcap);

/* The resolved entry points, for tests: the number of table entries, and
 * entry i's symbol and whether its pointer is set. */
int cuda_libs_symbol_count(bool with_nccl);
bool cuda_libs_symbol(const CudaLibs *L, int i, const char **symbol, bool *resolved);

#endif
