/* runtime/target.c — checks a plan's target against this machine before a
 * step runs (CUDA libraries load on demand, DESIGN.md decision 11). Must not
 * touch kernels, the interpreter or the plan's data. */
#include "target.h"

#include <string.h>

#include "../ir/diag.h"
#include "cuda/dynload.h"

bool target_prepare(const cJSON *meta, char *err, int errcap) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(meta, "target");
    if (!t || (cJSON_IsString(t) && strcmp(t->valuestring, "cpu") == 0)) return true;
    if (!cJSON_IsString(t)) return errf(err, errcap, "plan META: \"target\" is not a string");
    if (strcmp(t->valuestring, "cuda") != 0) return errf(err, errcap, "plan META: unknown target '%s' (this yolort runs cpu and cuda plans)", t->valuestring);
    CudaLibs L;
    char why[1024];
    /* NCCL is not asked for: gradients of several ranks are summed through
     * MPI on the host until the NCCL path is wired into the step */
    if (!cuda_libs_open(&L, NULL, false, why, sizeof why)) return errf(err, errcap, "this is a CUDA plan: %s", why);
    int devices;
    bool ok = cuda_libs_check_device(&L, &devices, why, sizeof why);
    cuda_libs_close(&L);
    if (!ok) return errf(err, errcap, "this is a CUDA plan: %s", why);
    return true;
}
