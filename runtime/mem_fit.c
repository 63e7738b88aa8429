/* runtime/mem_fit.c — whether a plan's memory fits: the batch arithmetic the
 * device and the host checks share, and the host memory this process may
 * still take. Reads /proc and /sys/fs/cgroup only; allocates nothing. */
#include "mem_fit.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

int64_t mem_largest_batch(int64_t fixed, int64_t scaled, int64_t batch, uint64_t avail) {
    if (fixed < 0) fixed = 0;
    if ((uint64_t)fixed > avail) return 0;
    const uint64_t room = avail - (uint64_t)fixed, b0 = batch > 0 ? (uint64_t)batch : 1;
    if (scaled <= 0) return INT64_MAX;
    /* b * scaled / batch <= room  <=>  b <= room * batch / scaled (exact in integers) */
    uint64_t prod;
    if (__builtin_mul_overflow(room, b0, &prod)) return INT64_MAX;
    const uint64_t b = prod / (uint64_t)scaled;
    return b > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)b;
}

int64_t process_rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
    fclose(f);
    return (int64_t)rss * sysconf(_SC_PAGESIZE);
}

int64_t process_peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0; /* Linux counts kilobytes */
}

/* The first unsigned number in a small file; false when absent or not a number ("max"). */
static bool read_u64(const char *path, uint64_t *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[64];
    const bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!got) return false;
    char *end;
    unsigned long long x = strtoull(line, &end, 10);
    if (end == line || (*end && *end != '\n')) return false;
    *v = x;
    return true;
}

/* The value of key in a cgroup's memory.stat ("key value" lines), else 0. */
static uint64_t stat_value(const char *dir, const char *key) {
    char p[1100], line[256];
    snprintf(p, sizeof p, "%s/memory.stat", dir);
    FILE *f = fopen(p, "r");
    unsigned long long v = 0;
    const size_t kl = strlen(key);
    bool got = false;
    while (f && !got && fgets(line, sizeof line, f)) got = strncmp(line, key, kl) == 0 && line[kl] == ' ' && sscanf(line + kl, "%llu", &v) == 1;
    if (f) fclose(f);
    return got ? (uint64_t)v : 0;
}

bool cgroup_headroom(const char *root, const char *group, const char *limit, const char *usage, const char *reclaimable, uint64_t *bytes, char *which, size_t cap) {
    char dir[1024];
    int n = snprintf(dir, sizeof dir, "%s%s%s", root, group[0] == '/' ? "" : "/", group);
    if (n < 0 || (size_t)n >= sizeof dir) return false;
    const size_t root_len = strlen(root);
    bool found = false;
    for (;;) {
        char lp[1100], up[1100];
        uint64_t lim, use;
        snprintf(lp, sizeof lp, "%s/%s", dir, limit);
        snprintf(up, sizeof up, "%s/%s", dir, usage);
        /* cgroup v1 writes "no limit" as a page-rounded INT64_MAX */
        if (read_u64(lp, &lim) && lim < ((uint64_t)1 << 62) && read_u64(up, &use)) {
            /* usage counts the page cache; its inactive part is given back before an OOM kill */
            const uint64_t cache = stat_value(dir, reclaimable);
            use = use > cache ? use - cache : 0;
            const uint64_t room = lim > use ? lim - use : 0;
            if (!found || room < *bytes) {
                *bytes = room;
                snprintf(which, cap, "%s", lp);
            }
            found = true;
        }
        size_t len = strlen(dir);
        while (len > root_len && dir[len - 1] == '/') dir[--len] = 0;
        if (len <= root_len) break;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < root_len) break;
        *slash = 0;
        if (strlen(dir) < root_len) snprintf(dir, sizeof dir, "%s", root);
    }
    return found;
}

bool host_memory_check(const HostNeed *n, char *out, size_t cap) {
    /* what set-up touched is resident already; the rest is taken as the run
     * first touches it, by each of the processes on this node alike */
    const int64_t more = n->total > n->resident ? n->total - n->resident : 0;
    const int procs = n->procs > 1 ? n->procs : 1;
    char each[64] = "";
    if (procs > 1) snprintf(each, sizeof each, " for each of %d ranks on this node", procs);
    if ((uint64_t)more <= n->avail / (uint64_t)procs) {
        snprintf(out, cap, "CPU: %.3f GB of host memory%s (%s), %.3f GB more than set-up touched, checked against %.3f GB available (%s) before step 0",
                 (double)n->total / 1e9, each, n->parts, (double)more / 1e9, (double)n->avail / 1e9, n->source);
        return true;
    }
    const int64_t b = mem_largest_batch(n->fixed, n->total - n->fixed, n->batch, n->avail / (uint64_t)procs + (uint64_t)(n->resident > 0 ? n->resident : 0));
    char fit[96];
    if (b == 0) snprintf(fit, sizeof fit, "not even batch 1 fits");
    else snprintf(fit, sizeof fit, "the largest batch that fits is %lld", (long long)b);
    snprintf(out, cap,
             "the run takes up to %.3f GB of host memory%s (%s), %.3f GB more than set-up touched, but only %.3f GB are available (%s); the plan is compiled for "
             "batch %d and %s (recompile with a smaller --batch, or a --recompute budget)",
             (double)n->total / 1e9, each, n->parts, (double)more / 1e9, (double)n->avail / 1e9, n->source, n->batch, fit);
    return false;
}

/* A "Key: N kB" line of /proc/meminfo in bytes; false when absent. */
static bool meminfo(const char *key, uint64_t *bytes) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return false;
    char line[256], fmt[64];
    snprintf(fmt, sizeof fmt, "%s: %%llu kB", key);
    bool got = false;
    unsigned long long kb = 0;
    while (!got && fgets(line, sizeof line, f)) got = sscanf(line, fmt, &kb) == 1;
    fclose(f);
    if (got) *bytes = (uint64_t)kb * 1024;
    return got;
}

uint64_t host_memory_total(void) {
    uint64_t b = 0;
    return meminfo("MemTotal", &b) ? b : 0;
}

bool host_memory_available(uint64_t *bytes, char *source, size_t cap) {
    char line[256];
    if (!meminfo("MemAvailable", bytes)) return false;
    snprintf(source, cap, "MemAvailable");
    /* the process's cgroups: "0::PATH" (v2) and "N:...memory...:PATH" (v1) */
    FILE *cg = fopen("/proc/self/cgroup", "r");
    while (cg && fgets(line, sizeof line, cg)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *controllers = c1 + 1, *path = c2 + 1;
        uint64_t room;
        char which[1200];
        if (!controllers[0]) {
            const char *roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
            for (int i = 0; i < 2; i++)
                if (cgroup_headroom(roots[i], path, "memory.max", "memory.current", "inactive_file", &room, which, sizeof which) && room < *bytes)
                    *bytes = room, snprintf(source, cap, "%s", which);
        } else {
            bool mem = false;
            for (const char *p = controllers; *p;) {
                size_t l = strcspn(p, ",");
                mem |= l == 6 && strncmp(p, "memory", 6) == 0;
                p += l + (p[l] == ',');
            }
            if (mem && cgroup_headroom("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file", &room, which, sizeof which) &&
                room < *bytes)
                *bytes = room, snprintf(source, cap, "%s", which);
        }
    }
    if (cg) fclose(cg);
    return true;
}
