/* runtime/cuda/nvml_stats.h — each GPU's free memory and utilisation from
 * NVML (libnvidia-ml.so.1, opened only here, only when asked), for
 * `--device -1`. Must not touch CUDA contexts or choose devices. */
#ifndef YOLOCC_NVML_STATS_H
#define YOLOCC_NVML_STATS_H

/* One GPU as NVML reports it (MiB, as Ultralytics' GPUInfo keeps them). */
typedef struct GpuStat {
    int index;                      /* NVML's (PCI bus order) */
    long long free_mib, total_mib;
    int util;                       /* percent busy */
} GpuStat;

/* Up to cap GPUs into s; their number, or -1 with why set when NVML cannot
 * be loaded, started or asked. */
int nvml_gpu_stats(GpuStat *s, int cap, char *why, int whycap);

#endif
