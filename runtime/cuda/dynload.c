/* runtime/cuda/dynload.c — dlopen/dlsym of the CUDA driver, cuDNN, cuBLASLt
 * and NCCL into CudaLibs. Owns loading and the symbol table only; must not
 * include CUDA headers or call into the libraries beyond cuInit/device count. */
#include "dynload.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../../ir/diag.h"

_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "function pointers must be object-pointer sized (POSIX dlsym)");

typedef enum { LIB_CUDA, LIB_CUDNN, LIB_CUBLASLT, LIB_NCCL } LibId;

static const char *const LIB_WHAT[] = {"the NVIDIA driver library", "cuDNN 9", "cuBLASLt", "NCCL 2"};

typedef struct Sym {
    LibId lib;
    const char *name;   /* the exported symbol (versioned as cuda.h maps it) */
    size_t off;         /* the CudaLibs field */
} Sym;

#define S(lib, field, sym) {lib, sym, offsetof(CudaLibs, field)}
#define D(field) S(LIB_CUDA, field, #field)
static const Sym SYMS[] = {
    D(cuInit), D(cuDriverGetVersion), D(cuGetErrorName), D(cuGetErrorString), D(cuDeviceGetCount), D(cuDeviceGet), D(cuDeviceGetName),
    D(cuDeviceGetAttribute), S(LIB_CUDA, cuDeviceTotalMem, "cuDeviceTotalMem_v2"), D(cuDevicePrimaryCtxRetain),
    S(LIB_CUDA, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"), D(cuCtxSetCurrent), D(cuCtxSynchronize), D(cuCtxGetDevice), D(cuModuleLoadData), D(cuModuleLoadDataEx),
    D(cuModuleUnload), D(cuModuleGetFunction), D(cuLaunchKernel), S(LIB_CUDA, cuMemAlloc, "cuMemAlloc_v2"), S(LIB_CUDA, cuMemFree, "cuMemFree_v2"),
    S(LIB_CUDA, cuMemGetInfo, "cuMemGetInfo_v2"),
    S(LIB_CUDA, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"), S(LIB_CUDA, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"), D(cuMemsetD8Async),
    D(cuMemsetD16Async), D(cuMemsetD32Async), S(LIB_CUDA, cuMemHostRegister, "cuMemHostRegister_v2"), D(cuMemHostUnregister), D(cuStreamCreate), S(LIB_CUDA, cuStreamDestroy, "cuStreamDestroy_v2"), D(cuStreamSynchronize),
    D(cuStreamWaitEvent), D(cuEventCreate),
    D(cuEventRecord), D(cuEventQuery), D(cuEventSynchronize), D(cuEventElapsedTime), S(LIB_CUDA, cuEventDestroy, "cuEventDestroy_v2"),
    S(LIB_CUDA, cuStreamBeginCapture, "cuStreamBeginCapture_v2"), D(cuStreamEndCapture), S(LIB_CUDA, cuGraphInstantiate, "cuGraphInstantiateWithFlags"),
    D(cuGraphLaunch), D(cuGraphExecDestroy), D(cuGraphDestroy),
#undef D
#define D(field) S(LIB_CUDNN, field, #field)
    D(cudnnGetVersion), D(cudnnGetErrorString), D(cudnnCreate), D(cudnnDestroy), D(cudnnSetStream), D(cudnnBackendCreateDescriptor),
    D(cudnnBackendDestroyDescriptor), D(cudnnBackendFinalize), D(cudnnBackendSetAttribute), D(cudnnBackendGetAttribute), D(cudnnBackendExecute),
#undef D
#define D(field) S(LIB_CUBLASLT, field, #field)
    D(cublasLtGetVersion), D(cublasLtCreate), D(cublasLtDestroy), D(cublasLtMatmulDescCreate), D(cublasLtMatmulDescDestroy),
    D(cublasLtMatmulDescSetAttribute), D(cublasLtMatrixLayoutCreate), D(cublasLtMatrixLayoutDestroy), D(cublasLtMatrixLayoutSetAttribute),
    D(cublasLtMatmulPreferenceCreate), D(cublasLtMatmulPreferenceDestroy), D(cublasLtMatmulPreferenceSetAttribute), D(cublasLtMatmulAlgoGetHeuristic),
    D(cublasLtMatmul),
#undef D
    /* NCCL last: cuda_libs_symbol_count(false) stops before it */
#define D(field) S(LIB_NCCL, field, #field)
    D(ncclGetVersion), D(ncclGetErrorString), D(ncclGetUniqueId), D(ncclCommInitRank), D(ncclCommDestroy), D(ncclCommAbort), D(ncclCommGetAsyncError),
    D(ncclAllReduce), D(ncclBroadcast), D(ncclGroupStart), D(ncclGroupEnd),
#undef D
};
#undef S
enum { N_SYMS = sizeof SYMS / sizeof SYMS[0] };

int cuda_libs_symbol_count(bool with_nccl) {
    int n = 0;
    for (int i = 0; i < N_SYMS; i++) n += with_nccl || SYMS[i].lib != LIB_NCCL;
    return n;
}

bool cuda_libs_symbol(const CudaLibs *L, int i, const char **symbol, bool *resolved) {
    if (i < 0 || i >= N_SYMS) return false;
    void *p;
    memcpy(&p, (const char *)L + SYMS[i].off, sizeof p);
    *symbol = SYMS[i].name;
    *resolved = p != NULL;
    return true;
}

/* dlopen of one name; on failure the dlerror() text goes to why. The CUDA
 * libraries are never unloaded (RTLD_NODELETE): they keep threads and
 * exit handlers, and unmapping them would orphan their static allocations. */
static void *open_lib(const char *name, char *why, size_t whycap) {
    dlerror();
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, whycap, "%s", e ? e : "unknown dlopen error");
    }
    return h;
}

void cuda_libs_close(CudaLibs *L) {
    void *h[] = {L->h_nccl, L->h_cublaslt, L->h_cudnn, L->h_cuda};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        if (h[i]) (void)dlclose(h[i]); /* opened RTLD_NODELETE: nothing is unmapped, and a failure leaves nothing to undo */
    memset(L, 0, sizeof *L);
}

/* Resolves every table entry of library lib from handle h; false with the
 * library and symbol named. */
static bool resolve(CudaLibs *L, LibId lib, void *h, const char *libname, char *err, int errcap) {
    for (int i = 0; i < N_SYMS; i++) {
        const Sym *s = &SYMS[i];
        if (s->lib != lib) continue;
        dlerror();
        void *p = dlsym(h, s->name);
        if (!p) {
            const char *e = dlerror();
            return errf(err, errcap, "%s (%s) has no %s: %s; the library is too old or not the one CUDA plans need", libname, LIB_WHAT[lib], s->name,
                        e ? e : "the symbol is NULL");
        }
        memcpy((char *)L + s->off, &p, sizeof p); /* the field is a function pointer of the same size */
    }
    return true;
}

bool cuda_libs_open(CudaLibs *L, const CudaLibNames *names, bool with_nccl, char *err, int errcap) {
    memset(L, 0, sizeof *L);
    CudaLibNames n = names ? *names : (CudaLibNames){0};
    if (!n.cuda) n.cuda = "libcuda.so.1";
    if (!n.cudnn) n.cudnn = "libcudnn.so.9";
    if (!n.cublaslt[0]) n.cublaslt[0] = "libcublasLt.so.13", n.cublaslt[1] = n.cublaslt[1] ? n.cublaslt[1] : "libcublasLt.so.12";
    if (!n.nccl) n.nccl = "libnccl.so.2";
    char why[512];
    /* each library is opened and resolved before the next, so the first problem is the one reported */
    if (!(L->h_cuda = open_lib(n.cuda, why, sizeof why)))
        return errf(err, errcap, "cannot load %s (%s), which CUDA plans need: %s; is the NVIDIA driver installed? CPU plans run without it", n.cuda, LIB_WHAT[LIB_CUDA], why);
    if (!resolve(L, LIB_CUDA, L->h_cuda, n.cuda, err, errcap)) goto fail;
    if (!(L->h_cudnn = open_lib(n.cudnn, why, sizeof why))) {
        errf(err, errcap, "cannot load %s (%s), which CUDA plans need: %s", n.cudnn, LIB_WHAT[LIB_CUDNN], why);
        goto fail;
    }
    if (!resolve(L, LIB_CUDNN, L->h_cudnn, n.cudnn, err, errcap)) goto fail;
    for (int i = 0; i < 2 && !L->h_cublaslt && n.cublaslt[i]; i++)
        if ((L->h_cublaslt = open_lib(n.cublaslt[i], why, sizeof why))) L->cublaslt_name = n.cublaslt[i];
    if (!L->h_cublaslt) {
        errf(err, errcap, "cannot load %s (tried %s%s%s), which CUDA plans need: %s", LIB_WHAT[LIB_CUBLASLT], n.cublaslt[0], n.cublaslt[1] ? ", " : "",
             n.cublaslt[1] ? n.cublaslt[1] : "", why);
        goto fail;
    }
    if (!resolve(L, LIB_CUBLASLT, L->h_cublaslt, L->cublaslt_name, err, errcap)) goto fail;
    if (with_nccl) {
        if (!(L->h_nccl = open_lib(n.nccl, why, sizeof why))) {
            errf(err, errcap, "cannot load %s (%s), which CUDA plans on more than one rank need: %s", n.nccl, LIB_WHAT[LIB_NCCL], why);
            goto fail;
        }
        if (!resolve(L, LIB_NCCL, L->h_nccl, n.nccl, err, errcap)) goto fail;
    }
    return true;
fail:
    cuda_libs_close(L);
    return false;
}

static const char *cu_error_name(const CudaLibs *L, CuResult r) {
    const char *name = NULL;
    if (L->cuGetErrorName && L->cuGetErrorName(r, &name) == 0 && name) return name;
    return "unknown CUresult";
}

bool cuda_libs_check_device(const CudaLibs *L, int *device_count, char *err, int errcap) {
    *device_count = 0;
    if (!L->cuInit) return errf(err, errcap, "the CUDA driver library is not loaded");
    CuResult r = L->cuInit(0);
    if (r != 0) return errf(err, errcap, "cuInit failed: %s (%d): the NVIDIA driver cannot start (no GPU, or a stub libcuda)", cu_error_name(L, r), r);
    int n = 0;
    r = L->cuDeviceGetCount(&n);
    if (r != 0) return errf(err, errcap, "cuDeviceGetCount failed: %s (%d)", cu_error_name(L, r), r);
    if (n < 1) return errf(err, errcap, "no CUDA device: the driver loaded but reports 0 devices");
    *device_count = n;
    return true;
}
