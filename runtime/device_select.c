/* runtime/device_select.c — `--device` as Ultralytics reads `device=` (see
 * device_select.h). Owns the parsing, the idle-GPU choice and the CUDA
 * environment variables; must not open CUDA, read plans or start ranks. */
#include "device_select.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/diag.h"

#define WARNING "WARNING \xe2\x9a\xa0\xef\xb8\x8f "
#define MIN_FREE_FRACTION 0.2   /* select_device asks GPUInfo for 20% free memory */

/* Each occurrence of `what` in s removed, in place. */
static void remove_all(char *s, const char *what) {
    size_t n = strlen(what);
    for (char *p; (p = strstr(s, what));) memmove(p, p + n, strlen(p + n) + 1);
}

static bool index_entry(const char *e, int *id) {
    if (strcmp(e, "-1") == 0) return *id = -1, true;
    if (!*e || strspn(e, "0123456789") != strlen(e) || strlen(e) > 6) return false;
    *id = atoi(e);
    return true;
}

static void format_text(DeviceChoice *d) {
    d->text[0] = 0;
    for (int j = 0, t = 0; j < d->n; j++) t += snprintf(d->text + t, sizeof d->text - (size_t)t, "%s%d", j ? "," : "", d->id[j]);
}

bool device_parse(const char *value, DeviceChoice *d, char *err, int errcap) {
    memset(d, 0, sizeof *d);
    char s[sizeof d->text];
    for (size_t k = 0; value[k]; k++) /* so that every message below is one line */
        if (iscntrl((unsigned char)value[k])) return errf(err, errcap, "--device: byte %zu of the value is a control character (0x%02x)", k, (unsigned char)value[k]);
    if (strlen(value) >= sizeof s) return errf(err, errcap, "--device '%.40s...' is too long", value);
    size_t k = 0;
    for (; value[k]; k++) s[k] = (char)tolower((unsigned char)value[k]);
    s[k] = 0;
    const char *strip[] = {"cuda:", "none", "(", ")", "[", "]", "'", " "};
    for (size_t i = 0; i < sizeof strip / sizeof strip[0]; i++) remove_all(s, strip[i]);
    if (strcmp(s, "cuda") == 0) strcpy(s, "0");
    if (strcmp(s, "cpu") == 0) {
        d->cpu = true;
        strcpy(d->text, s);
        return true;
    }
    if (strcmp(s, "mps") == 0 || strcmp(s, "mps:0") == 0)
        return errf(err, errcap, "--device %s is Apple's Metal: yolort runs plans on the CPU (--device cpu) or on NVIDIA GPUs (--device 0)", s);
    /* a list of indices and -1s; empty entries ("0,,1") are dropped, as Ultralytics does */
    char *save = NULL;
    for (char *e = strtok_r(s, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
        int id;
        if (!index_entry(e, &id))
            return errf(err, errcap, "--device '%s': '%s' is not a device; expected cpu, a CUDA device index (0), a list (0,1) or -1 (the most idle GPU)", value, e);
        for (int j = 0; j < d->n && id >= 0; j++)
            if (d->id[j] == id) return errf(err, errcap, "--device '%s' names CUDA device %d twice", value, id);
        if (d->n == DEVICE_MAX) return errf(err, errcap, "--device '%s' names more than %d devices", value, DEVICE_MAX);
        d->idle += id < 0;
        d->id[d->n++] = id;
    }
    format_text(d);
    return true;
}

int device_pick_idle(const GpuStat *s, int n, int count, double min_free_fraction, int *out) {
    int m = 0, order[DEVICE_MAX];
    for (int i = 0; i < n && m < DEVICE_MAX; i++)
        if (s[i].total_mib > 0 && (double)s[i].free_mib / (double)s[i].total_mib >= min_free_fraction) order[m++] = i;
    /* insertion sort, stable: least busy, then most free memory, then NVML's order */
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0; j--) {
            const GpuStat *a = &s[order[j - 1]], *b = &s[order[j]];
            if (a->util < b->util || (a->util == b->util && a->free_mib >= b->free_mib)) break;
            int t = order[j - 1];
            order[j - 1] = order[j], order[j] = t;
        }
    int k = 0;
    for (; k < count && k < m; k++) out[k] = s[order[k]].index;
    return k;
}

/* The -1 entries replaced by idle GPUs not listed already, or dropped when
 * there are too few (as Ultralytics drops them); how many NVML chose. */
static int choose_idle(DeviceChoice *d, FILE *log) {
    if (log) fprintf(log, "Searching for %d idle GPUs with free memory >= %.1f%% and free utilization >= 0.0%%...\n", d->idle, MIN_FREE_FRACTION * 100);
    GpuStat st[DEVICE_MAX], free_st[DEVICE_MAX];
    char why[512];
    int n = nvml_gpu_stats(st, DEVICE_MAX, why, sizeof why), m = 0;
    if (n < 0 && log) fprintf(log, WARNING "NVML stats unavailable: %s\n", why);
    for (int i = 0; i < n; i++) {
        bool listed = false;
        for (int j = 0; j < d->n; j++) listed |= d->id[j] == st[i].index;
        if (!listed) free_st[m++] = st[i];
    }
    int picked[DEVICE_MAX], got = n > 0 ? device_pick_idle(free_st, m, d->idle, MIN_FREE_FRACTION, picked) : 0;
    if (log && n >= 0) {
        if (got == 0) fprintf(log, WARNING "No GPUs met criteria (free memory >= %.1f%%).\n", MIN_FREE_FRACTION * 100);
        else if (got < d->idle) fprintf(log, WARNING "Requested %d GPUs but only %d met the idle criteria.\n", d->idle, got);
        if (got > 0) {
            fprintf(log, "Selected idle CUDA devices [");
            for (int i = 0; i < got; i++) fprintf(log, "%s%d", i ? ", " : "", picked[i]);
            fprintf(log, "]\n");
        }
    }
    int k = 0, used = 0;
    for (int j = 0; j < d->n; j++) {
        if (d->id[j] >= 0) d->id[k++] = d->id[j];
        else if (used < got) d->id[k++] = picked[used++];
    }
    d->n = k, d->idle = 0;
    format_text(d);
    return got;
}

bool device_apply(DeviceChoice *d, FILE *log, char *err, int errcap) {
    bool by_nvml = d->idle > 0 && choose_idle(d, log) > 0;
    if (!d->cpu && d->n == 0) return true; /* nothing chosen: the default device */
    if (by_nvml && !getenv("CUDA_DEVICE_ORDER") && setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1) != 0)
        return errf(err, errcap, "setenv CUDA_DEVICE_ORDER: %s", strerror(errno));
    if (setenv("CUDA_VISIBLE_DEVICES", d->cpu ? "" : d->text, 1) != 0) return errf(err, errcap, "setenv CUDA_VISIBLE_DEVICES: %s", strerror(errno));
    return true;
}

void device_user_name(int ordinal, char *buf, size_t cap) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    snprintf(buf, cap, "%d", ordinal);
    if (!v || !*v) return;
    const char *p = v;
    for (int i = 0; i < ordinal && p; i++)
        if ((p = strchr(p, ','))) p++;
    if (!p) return;
    size_t len = strcspn(p, ",");
    if (len > 0 && len < cap) memcpy(buf, p, len), buf[len] = 0;
}
