/* runtime/target.c — checks a plan's target against this machine before a
 * step runs (CUDA libraries load on demand, DESIGN.md decision 11). Must not
 * touch kernels, the interpreter or the plan's data. */
#include "target.h"

#include <stdio.h>
#include <string.h>

#include "../ir/diag.h"
#include "cuda/dynload.h"
#include "plan_read.h"

/* "cpu" (also no target) or "cuda"; NULL with err set for anything else. */
static const char *plan_target(const cJSON *meta, char *err, int errcap) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(meta, "target");
    if (!t) return "cpu";
    if (!cJSON_IsString(t)) return errf(err, errcap, "plan META: \"target\" is not a string"), NULL;
    if (strcmp(t->valuestring, "cpu") != 0 && strcmp(t->valuestring, "cuda") != 0)
        return errf(err, errcap, "plan META: unknown target '%s' (this yolort runs cpu and cuda plans)", t->valuestring), NULL;
    return t->valuestring;
}

/* Opens the driver, cuDNN and cuBLASLt, counts the visible devices, closes them again. */
static bool cuda_devices(int *devices, char *err, int errcap) {
    CudaLibs L;
    char why[1024];
    /* NCCL is not asked for: only plans on several ranks need it, and they open it themselves */
    if (!cuda_libs_open(&L, NULL, false, why, sizeof why)) return errf(err, errcap, "this is a CUDA plan: %s", why);
    bool ok = cuda_libs_check_device(&L, devices, why, sizeof why);
    cuda_libs_close(&L);
    if (!ok) return errf(err, errcap, "this is a CUDA plan: %s", why);
    return true;
}

bool target_prepare(const cJSON *meta, char *err, int errcap) {
    const char *t = plan_target(meta, err, errcap);
    if (!t) return false;
    int devices;
    return strcmp(t, "cpu") == 0 || cuda_devices(&devices, err, errcap);
}

bool target_check_device(const char *plan_path, const DeviceChoice *d, char *err, int errcap) {
    Plan p;
    char why[1024];
    if (!plan_read(plan_path, &p, why, sizeof why)) return true; /* the command reports it, as without --device */
    const char *t = plan_target(p.meta, err, errcap);
    const bool known = t != NULL, cuda = known && strcmp(t, "cuda") == 0;
    plan_free(&p); /* t lived in it; the command reads the plan again, this check needs only its target */
    if (!known) return false;
    const char *plan = strrchr(plan_path, '/') ? strrchr(plan_path, '/') + 1 : plan_path;
    int devices = 0;
    bool ok = true;
    if (d->cpu && cuda) {
        ok = errf(err, errcap, "--device cpu, but %s is a CUDA plan (yolocc --target cuda): compile one for the CPU (yolocc MODEL.yaml --target cpu ...) to run there",
                  plan);
    } else if (d->n > 0 && !cuda) {
        char ranks[64] = "";
        if (d->n > 1) snprintf(ranks, sizeof ranks, " (on %d ranks: --ranks %d)", d->n, d->n);
        ok = errf(err, errcap, "--device %s names CUDA devices, but %s is a CPU plan: run it with --device cpu%s, or compile one with --target cuda", d->text, plan,
                  ranks);
    } else if (d->n > 0 && !cuda_devices(&devices, why, sizeof why)) {
        ok = errf(err, errcap, "--device %s (CUDA_VISIBLE_DEVICES=%s): %s", d->text, d->text, why);
    } else if (devices < d->n) {
        ok = errf(err, errcap, "invalid CUDA --device %s: the driver sees %d of them (CUDA_VISIBLE_DEVICES=%s); name devices this machine has (nvidia-smi -L lists them)",
                  d->text, devices, d->text);
    }
    return ok;
}
