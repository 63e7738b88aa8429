/* runtime/target.h — the plan's target (META "target": "cpu" or "cuda") and
 * whether this process can run it; CUDA libraries are opened only here, only
 * for CUDA plans. Must not touch kernels, the interpreter or the plan's data. */
#ifndef YOLOCC_TARGET_H
#define YOLOCC_TARGET_H
#include <cjson/cJSON.h>
#include <stdbool.h>

/* "cpu" (or no target): true. "cuda": opens libcuda, cuDNN and cuBLASLt and
 * looks for a device (then closes them again; CudaStep opens its own);
 * without them, false with the loader's message naming the library.
 * Anything else: false. */
bool target_prepare(const cJSON *meta, char *err, int errcap);

#endif
