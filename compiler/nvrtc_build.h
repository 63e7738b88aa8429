/* compiler/nvrtc_build.h — compiles CUDA C++ source to a cubin or PTX with
 * NVRTC, opened with dlopen so yolocc builds and runs without the toolkit.
 * Owns loading NVRTC and one compile call; must not cache, launch or load
 * modules (compiler/kcache.h and the CUDA runtime do that). */
#ifndef YOLOCC_NVRTC_BUILD_H
#define YOLOCC_NVRTC_BUILD_H
#include <stdbool.h>
#include <stddef.h>

/* Loads NVRTC once ($YOLOCC_NVRTC, libnvrtc.so.13, libnvrtc.so.12,
 * libnvrtc.so, /usr/local/cuda/lib64/libnvrtc.so); false with every name
 * tried when none loads. Not thread-safe. */
bool nvrtc_available(char *err, int errcap);

/* The loaded NVRTC's version (13.0 for CUDA 13.0). */
bool nvrtc_version(int *major, int *minor, char *err, int errcap);

/* The fixed options every compile passes, space-separated, for cache keys
 * (the architecture option is not included: it comes from the caller's
 * arch). False when cap is too small (buf then holds a truncated prefix). */
bool nvrtc_options_string(char *buf, int cap);

/* Compiles src as program_name for arch ("sm_80", "sm_90a"). ptx=false:
 * a cubin for that real architecture; ptx=true: PTX for the matching
 * virtual architecture (compute_80), which the driver JIT-compiles for newer
 * GPUs. *out is malloc'd; for PTX *out_len counts the terminating NUL, so the
 * bytes go to cuModuleLoadData as they are. On a compile error err names
 * program_name and holds NVRTC's log. */
bool nvrtc_compile(const char *program_name, const char *src, const char *arch, bool ptx, unsigned char **out, size_t *out_len, char *err,
                   int errcap);

#endif
