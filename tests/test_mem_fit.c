/* tests/test_mem_fit.c — what fits in memory: the batch arithmetic, the
 * host check's verdict and message, and a cgroup's headroom read from real
 * files laid out as /sys/fs/cgroup lays them out. Owns these tests only. */
#include <stdint.h>

#include "../runtime/data/loader.h"
#include "../runtime/mem_fit.h"
#include "../runtime/train/trainer.h"
#include "test_util.h"

Test(mem_fit, largest_batch) {
    /* fixed 1000, 600 at batch 6 (100 an image): 2000 fits 10 */
    cr_expect_eq(mem_largest_batch(1000, 600, 6, 2000), 10);
    cr_expect_eq(mem_largest_batch(1000, 600, 6, 1099), 0);
    cr_expect_eq(mem_largest_batch(1000, 600, 6, 1100), 1);
    cr_expect_eq(mem_largest_batch(3000, 600, 6, 2000), 0);
    cr_expect_eq(mem_largest_batch(10, 0, 6, 2000), INT64_MAX);
    cr_expect_eq(mem_largest_batch(0, 1, 1, UINT64_MAX), INT64_MAX, "overflow is no fit of 0");
}

Test(mem_fit, host_check_fits_or_names_the_largest_batch) {
    char out[2048];
    HostNeed n = {.total = 3000000000, .resident = 1000000000, .fixed = 1000000000, .batch = 16, .avail = 2500000000, .source = "MemAvailable", .parts = "the parts"};
    cr_assert(host_memory_check(&n, out, sizeof out), "%s", out);
    cr_expect(strstr(out, "CPU: 3.000 GB of host memory (the parts), 2.000 GB more than set-up touched, checked against 2.500 GB available (MemAvailable)"), "%s", out);
    /* 2 GB more than the 1 GB held against 1.5 GB free: 2.5 GB in all, 1 GB fixed, 2 GB at batch 16 -> 12 */
    n.avail = 1500000000;
    cr_assert(!host_memory_check(&n, out, sizeof out));
    cr_expect(strstr(out, "up to 3.000 GB of host memory (the parts)") && strstr(out, "only 1.500 GB are available (MemAvailable)") &&
                  strstr(out, "compiled for batch 16 and the largest batch that fits is 12"),
              "%s", out);
    cr_expect(!strchr(out, '\n'), "%s", out);
    /* two ranks on this node: each gets half of 5 GB, 2 GB more each fits; at 3.5 GB, 1.75 each does not: 2.75 - 1 fixed -> batch 14 */
    n.avail = 5000000000, n.procs = 2;
    cr_assert(host_memory_check(&n, out, sizeof out), "%s", out);
    cr_expect(strstr(out, "CPU: 3.000 GB of host memory for each of 2 ranks on this node (the parts)"), "%s", out);
    n.avail = 3500000000;
    cr_assert(!host_memory_check(&n, out, sizeof out));
    cr_expect(strstr(out, "for each of 2 ranks on this node") && strstr(out, "the largest batch that fits is 14"), "%s", out);
    n.procs = 1;
    n.avail = 0, n.resident = 0;
    cr_assert(!host_memory_check(&n, out, sizeof out));
    cr_expect(strstr(out, "not even batch 1 fits"), "%s", out);
}

static void put(const char *dir, const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

/* root/a/b: b without a limit ("max"), a with 3000 limit, 2500 used of
 * which 1000 is inactive page cache (1500 headroom), root with 10000 and
 * 9000 used, none of it cache (1000: the bound) */
Test(mem_fit, cgroup_headroom_takes_the_tightest_ancestor) {
    char root[] = "/tmp/yolocc-cgroup-XXXXXX", a[600], b[700];
    cr_assert(mkdtemp(root));
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", a);
    cr_assert_eq(mkdir(a, 0755), 0);
    cr_assert_eq(mkdir(b, 0755), 0);
    put(b, "memory.max", "max\n");
    put(b, "memory.current", "100\n");
    put(a, "memory.max", "3000\n");
    put(a, "memory.current", "2500\n");
    put(a, "memory.stat", "anon 1500\nfile 1000\ninactive_file 1000\n");
    char which[1200] = "";
    uint64_t room = 0;
    cr_assert(cgroup_headroom(root, "/a/b", "memory.max", "memory.current", "inactive_file", &room, which, sizeof which));
    cr_expect_eq(room, 1500);
    cr_expect(strstr(which, "/a/memory.max"), "%s", which);
    put(root, "memory.max", "10000\n");
    put(root, "memory.current", "9000\n");
    cr_assert(cgroup_headroom(root, "/a/b", "memory.max", "memory.current", "inactive_file", &room, which, sizeof which));
    cr_expect_eq(room, 1000);
    cr_expect(strstr(which, root) && !strstr(which, "/a/"), "%s", which);
    /* a group with no limit anywhere sets none; usage above the limit leaves 0 */
    put(root, "memory.max", "max\n");
    put(a, "memory.max", "max\n");
    cr_expect(!cgroup_headroom(root, "/a/b", "memory.max", "memory.current", "inactive_file", &room, which, sizeof which));
    put(b, "memory.max", "50\n");
    cr_assert(cgroup_headroom(root, "/a/b", "memory.max", "memory.current", "inactive_file", &room, which, sizeof which));
    cr_expect_eq(room, 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    cr_expect_eq(system(cmd), 0);
}

Test(mem_fit, this_machine_has_memory_available) {
    uint64_t avail = 0;
    char source[1200] = "";
    cr_assert(host_memory_available(&avail, source, sizeof source));
    cr_expect(avail > 0 && source[0], "%llu from '%s'", (unsigned long long)avail, source);
    cr_expect(process_rss_bytes() > 0 && process_peak_rss_bytes() >= process_rss_bytes() / 2);
}

/* --cache ram as Ultralytics' check_cache_ram: the split's images
 * load-resized (200x100 -> 64x32, 50x50 -> 64x64 at imgsz 64) with a 50%
 * margin, taken from the room left when they fit, else not cached */
Test(mem_fit, ram_cache_fits_with_ultralytics_margin) {
    Sample s[2] = {{.w = 200, .h = 100}, {.w = 50, .h = 50}};
    DataSplit split = {.samples = s, .n = 2};
    const int64_t bytes = (64 * 32 + 64 * 64) * 3;
    cr_expect_eq(loader_cache_bytes(&split, 64), bytes);
    Trainer *t = calloc(1, sizeof *t);
    cr_assert(t);
    t->ts.imgsz = 64;
    uint64_t room = (uint64_t)(bytes * 3 / 2);
    cr_expect(trainer_cache_fits(t, &split, "train: ", &room));
    cr_expect_eq(room, 0);
    cr_expect_eq(t->cache_bytes, bytes);
    room = (uint64_t)(bytes * 3 / 2) - 1;
    cr_expect(!trainer_cache_fits(t, &split, "val: ", &room));
    cr_expect_eq(room, (uint64_t)(bytes * 3 / 2) - 1, "a split that is not cached takes nothing");
    cr_expect_eq(t->cache_bytes, bytes);
    free(t);
}
