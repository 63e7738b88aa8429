/* runtime/device_select.h — Ultralytics' `device=` argument for yolort's
 * commands (--device cpu | 0 | 0,1 | cuda:0 | "[0, 1]" | -1): its parsing,
 * the choice of idle GPUs for -1 and CUDA_VISIBLE_DEVICES, set before any
 * CUDA library loads. Must not open CUDA itself, read plans or start ranks. */
#ifndef YOLOCC_DEVICE_SELECT_H
#define YOLOCC_DEVICE_SELECT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "cuda/nvml_stats.h"

#define DEVICE_MAX 64

typedef struct DeviceChoice {
    bool cpu;               /* "cpu" */
    int n;                  /* CUDA devices listed; 0 with cpu, or when -1 found none (then the default) */
    int id[DEVICE_MAX];     /* their indices; -1 for an idle one still to choose */
    int idle;               /* how many of them were -1 */
    char text[256];         /* the value as normalised, for messages: "0,1", "cpu" */
} DeviceChoice;

/* Ultralytics' normalisation (select_device): lower case; "cuda:", "none",
 * "(", ")", "[", "]", "'" and spaces removed; "cuda" is "0"; empty entries
 * dropped. Then "cpu", or a list of device indices and -1s. "mps" and
 * anything else are one-line errors. */
bool device_parse(const char *value, DeviceChoice *d, char *err, int errcap);

/* Ultralytics' select_idle_gpu: the GPUs with at least min_free_fraction of
 * their memory free, least busy first, then most free memory; up to count
 * of them into out. Returns how many. */
int device_pick_idle(const GpuStat *s, int n, int count, double min_free_fraction, int *out);

/* Replaces the -1 entries with idle GPUs (NVML; lines as Ultralytics prints
 * them to log, a warning when NVML is unavailable and the entry dropped),
 * then sets CUDA_VISIBLE_DEVICES to the list ("" for cpu) and, when idle
 * GPUs were chosen by NVML's numbering, CUDA_DEVICE_ORDER=PCI_BUS_ID
 * unless set, so CUDA numbers them the same way. log may be NULL. */
bool device_apply(DeviceChoice *d, FILE *log, char *err, int errcap);

/* The name the user knows CUDA device `ordinal` of this process by: the
 * ordinal-th entry of CUDA_VISIBLE_DEVICES when set, else the ordinal. */
void device_user_name(int ordinal, char *buf, size_t cap);

#endif
