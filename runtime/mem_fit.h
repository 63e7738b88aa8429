/* runtime/mem_fit.h — whether a plan's memory fits: the batch arithmetic the
 * device and the host checks share, and the host memory this process may
 * still take (MemAvailable, and its cgroup's limit). Allocates nothing. */
#ifndef YOLOCC_MEM_FIT_H
#define YOLOCC_MEM_FIT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The largest batch b with fixed + b * scaled / batch <= avail (scaled: the
 * bytes at the plan's batch that grow with it): 0 when not even batch 1
 * fits, INT64_MAX when nothing scales. */
int64_t mem_largest_batch(int64_t fixed, int64_t scaled, int64_t batch, uint64_t avail);

/* What a run takes of the host's memory, set against what it may take. */
typedef struct HostNeed {
    int64_t total;          /* the most the run holds, the program included */
    int64_t resident;       /* what it holds now (set-up touched) */
    int64_t fixed;          /* the part of total that does not grow with the batch */
    int batch;              /* the plan's */
    int procs;              /* processes on this node taking as much (data-parallel ranks; 0 or 1: this one) */
    uint64_t avail;         /* what the process may still take (host_memory_available) */
    const char *source;     /* and where that bound comes from */
    const char *parts;      /* total's parts, in words */
} HostNeed;
/* True with the line the run prints ("CPU: X GB of host memory ... before
 * step 0") when procs x (total - resident) fits in avail; otherwise false
 * with one error naming the need, the available bytes and the largest
 * batch that fits. */
bool host_memory_check(const HostNeed *n, char *out, size_t cap);

/* The host memory this process can still take: /proc/meminfo's MemAvailable,
 * or less where a cgroup (v2 memory.max, v1 memory.limit_in_bytes, of the
 * process's group or one above it) leaves less under its limit. source
 * names the bound ("MemAvailable" or the cgroup file). False only when
 * /proc/meminfo cannot be read. */
bool host_memory_available(uint64_t *bytes, char *source, size_t cap);
/* /proc/meminfo's MemTotal, 0 when unreadable. */
uint64_t host_memory_total(void);

/* This process's resident memory now (/proc/self/statm), 0 when unreadable,
 * and the most it has had (getrusage). */
int64_t process_rss_bytes(void);
int64_t process_peak_rss_bytes(void);

/* The lowest limit - (usage - reclaimable) over a cgroup directory and its
 * parents up to root (both included), from the files named limit and usage
 * in each and the reclaimable key of its memory.stat (the inactive page
 * cache); a directory without them, or "max", sets none. False when none is
 * set; which names the limit file that binds. host_memory_available's
 * cgroup part; root is a parameter for tests. */
bool cgroup_headroom(const char *root, const char *group, const char *limit, const char *usage, const char *reclaimable, uint64_t *bytes, char *which, size_t cap);

#endif
