/* runtime/target.h — the plan's target (META "target": "cpu" or "cuda") and
 * whether this process can run it; CUDA libraries are opened only here, only
 * for CUDA plans. Must not touch kernels, the interpreter or the plan's data. */
#ifndef YOLOCC_TARGET_H
#define YOLOCC_TARGET_H
#include <cjson/cJSON.h>
#include <stdbool.h>

#include "device_select.h"

/* "cpu" (or no target): true. "cuda": opens libcuda, cuDNN and cuBLASLt and
 * looks for a device (then closes them again; CudaStep opens its own);
 * without them, false with the loader's message naming the library.
 * Anything else: false. */
bool target_prepare(const cJSON *meta, char *err, int errcap);

/* The plan at plan_path against --device (after device_apply has set
 * CUDA_VISIBLE_DEVICES): cpu needs a CPU plan; device indices a CUDA plan,
 * its libraries and as many visible devices. True
 * when the plan cannot be read: the command reports that itself. */
bool target_check_device(const char *plan_path, const DeviceChoice *d, char *err, int errcap);

#endif
