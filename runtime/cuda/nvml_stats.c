/* runtime/cuda/nvml_stats.c — NVML's view of each GPU (see nvml_stats.h):
 * dlopen, init, query, shutdown, nothing kept. Must not include NVML or
 * CUDA headers; the few entry points are declared from the NVML API. */
#include "nvml_stats.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "../../ir/diag.h"

typedef int NvmlReturn;             /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct NvmlDevice *NvmlDevice;
typedef struct {
    unsigned long long total, free, used;   /* nvmlMemory_t, bytes */
} NvmlMemory;
typedef struct {
    unsigned int gpu, memory;       /* nvmlUtilization_t, percent */
} NvmlUtilization;

typedef struct Nvml {
    NvmlReturn (*init)(void);
    NvmlReturn (*shutdown)(void);
    const char *(*error_string)(NvmlReturn);
    NvmlReturn (*count)(unsigned int *);
    NvmlReturn (*handle)(unsigned int, NvmlDevice *);
    NvmlReturn (*memory)(NvmlDevice, NvmlMemory *);
    NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization *);
} Nvml;

static bool load(void *h, Nvml *n, char *why, int whycap) {
    const char *names[] = {"nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
                           "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates"};
    void *p[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(p[i] = dlsym(h, names[i]))) return errf(why, whycap, "libnvidia-ml.so.1 has no %s", names[i]);
    memcpy(&n->init, &p[0], sizeof p[0]);
    memcpy(&n->shutdown, &p[1], sizeof p[1]);
    memcpy(&n->error_string, &p[2], sizeof p[2]);
    memcpy(&n->count, &p[3], sizeof p[3]);
    memcpy(&n->handle, &p[4], sizeof p[4]);
    memcpy(&n->memory, &p[5], sizeof p[5]);
    memcpy(&n->utilization, &p[6], sizeof p[6]);
    return true;
}

static int failed(const Nvml *n, const char *call, NvmlReturn r, char *why, int whycap) {
    const char *s = n->error_string ? n->error_string(r) : NULL;
    errf(why, whycap, "%s failed: %s (%d)", call, s ? s : "unknown error", r);
    return -1;
}

int nvml_gpu_stats(GpuStat *s, int cap, char *why, int whycap) {
    dlerror();
    /* RTLD_NODELETE, as the CUDA libraries: NVML keeps threads past shutdown */
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        errf(why, whycap, "cannot load libnvidia-ml.so.1 (NVML, part of the NVIDIA driver): %s", e ? e : "unknown dlopen error");
        return -1;
    }
    Nvml n = {0};
    if (!load(h, &n, why, whycap)) return dlclose(h), -1;
    NvmlReturn r = n.init();
    if (r != 0) return failed(&n, "nvmlInit", r, why, whycap), dlclose(h), -1;
    unsigned int count = 0;
    int got = -1;
    if ((r = n.count(&count)) != 0) {
        failed(&n, "nvmlDeviceGetCount", r, why, whycap);
        goto done;
    }
    got = 0;
    for (unsigned int i = 0; i < count && got < cap; i++) {
        NvmlDevice d;
        NvmlMemory m;
        NvmlUtilization u;
        if ((r = n.handle(i, &d)) != 0 || (r = n.memory(d, &m)) != 0 || (r = n.utilization(d, &u)) != 0) {
            char call[64];
            snprintf(call, sizeof call, "querying GPU %u", i);
            got = failed(&n, call, r, why, whycap); /* as Ultralytics: one failure and no statistics at all */
            goto done;
        }
        s[got++] = (GpuStat){.index = (int)i, .free_mib = (long long)(m.free >> 20), .total_mib = (long long)(m.total >> 20), .util = (int)u.gpu};
    }
done:
    (void)n.shutdown();
    (void)dlclose(h);
    return got;
}
