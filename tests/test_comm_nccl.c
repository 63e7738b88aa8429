/* tests/test_comm_nccl.c — the NCCL communicator (runtime/dist/comm_nccl.h):
 * its pure parts, and its call sequence and watchdog against fake driver and
 * NCCL entry points (CI has neither); on a GPU, a one-rank NCCL sum. Owns
 * these tests only; the fakes live here and nowhere else. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

#include "../runtime/cuda/cuda_abi.h"
#include "../runtime/dist/comm_nccl.h"
#include "../runtime/dist/comm_store.h"
#include "../runtime/dist/dp_train.h"
#include "test_cuda_host.h"
#include "test_gpu.h"

/* ---- fakes: what each entry point was asked, and what it answers ---- */
static struct {
    int device_count;
    CuDevice ctx_dev;
    int not_ready;          /* cuEventQuery answers NOT_READY this many times; -1: forever */
    CuResult event_error;   /* answered after that (0: done) */
    NcclResult async, allreduce_result;
    int queries, aborts, destroys, inits, events_created, events_destroyed, stream_waits;
    int init_nranks, init_rank;
    NcclUniqueId init_id;
    char log[8192];
    struct { uintptr_t ptr, stream; size_t count; } ar[1024]; /* every ncclAllReduce */
    int n_ar;
} F;

static void logf_(const char *s) { strncat(F.log, s, sizeof F.log - strlen(F.log) - 1); }

static CuResult f_err_name(CuResult e, const char **s) { return *s = e == 999 ? "CUDA_ERROR_UNKNOWN" : "CUDA_ERROR_OTHER", 0; }
static CuResult f_err_string(CuResult e, const char **s) { return (void)e, *s = "fake driver error", 0; }
static CuResult f_count(int *n) { return *n = F.device_count, 0; }
static CuResult f_dev_get(CuDevice *d, int ordinal) { return *d = ordinal, 0; }
static CuResult f_ctx_dev(CuDevice *d) { return *d = F.ctx_dev, 0; }
static CuResult f_ev_create(CuEvent *e, unsigned flags) {
    if (flags != (unsigned)CU_EVENT_DISABLE_TIMING_FLAG) return 1; /* CUDA_ERROR_INVALID_VALUE: events must not time */
    *e = (CuEvent)(uintptr_t)(0x100 + F.events_created++);
    return 0;
}
static CuResult f_ev_destroy(CuEvent e) { return (void)e, F.events_destroyed++, 0; }
static CuResult f_ev_record(CuEvent e, CuStream s) {
    char b[64];
    snprintf(b, sizeof b, "REC(%lx,%lx) ", (unsigned long)(uintptr_t)e, (unsigned long)(uintptr_t)s);
    logf_(b);
    return 0;
}
static CuResult f_ev_query(CuEvent e) {
    (void)e;
    F.queries++;
    if (F.not_ready < 0) return CU_RESULT_NOT_READY;
    if (F.not_ready > 0) return F.not_ready--, CU_RESULT_NOT_READY;
    return F.event_error;
}
static CuResult f_stream_wait(CuStream s, CuEvent e, unsigned flags) {
    char b[64];
    snprintf(b, sizeof b, "WAIT(%lx,%lx) ", (unsigned long)(uintptr_t)s, (unsigned long)(uintptr_t)e);
    logf_(b);
    return (void)flags, F.stream_waits++, 0;
}
static const char *f_nccl_text(NcclResult r) { return r == 2 ? "fake unhandled system error" : "fake NCCL error"; }
static NcclResult f_unique_id(NcclUniqueId *id) {
    for (int i = 0; i < 128; i++) id->internal[i] = (char)(i * 7 + 3);
    return 0;
}
static NcclResult f_init(NcclComm *c, int nranks, NcclUniqueId id, int rank) {
    F.inits++, F.init_nranks = nranks, F.init_rank = rank, F.init_id = id;
    *c = (NcclComm)(uintptr_t)0xC0FFEE;
    return 0;
}
static NcclResult f_destroy(NcclComm c) { return (void)c, F.destroys++, 0; }
static NcclResult f_abort(NcclComm c) { return (void)c, F.aborts++, 0; }
static NcclResult f_async(NcclComm c, NcclResult *a) { return (void)c, *a = F.async, 0; }
static NcclResult f_allreduce(const void *s, void *r, size_t n, NcclDataType t, NcclRedOp op, NcclComm c, CuStream st) {
    char b[128];
    (void)c;
    snprintf(b, sizeof b, "AR(%lx,%zu,%s,%d,%d,%lx) ", (unsigned long)(uintptr_t)s, n, s == r ? "in-place" : "copy", t, op, (unsigned long)(uintptr_t)st);
    logf_(b);
    if (F.n_ar < (int)(sizeof F.ar / sizeof F.ar[0])) F.ar[F.n_ar].ptr = (uintptr_t)s, F.ar[F.n_ar].stream = (uintptr_t)st, F.ar[F.n_ar++].count = n;
    return F.allreduce_result;
}
static NcclResult f_broadcast(const void *s, void *r, size_t n, NcclDataType t, int root, NcclComm c, CuStream st) {
    char b[128];
    (void)c;
    snprintf(b, sizeof b, "BC(%lx,%zu,%s,%d,%d,%lx) ", (unsigned long)(uintptr_t)s, n, s == r ? "in-place" : "copy", t, root, (unsigned long)(uintptr_t)st);
    logf_(b);
    return 0;
}
static NcclResult f_group_start(void) { return logf_("GS "), 0; }
static NcclResult f_group_end(void) { return logf_("GE "), 0; }

static CudaLibs fake_libs(void) {
    CudaLibs L;
    memset(&L, 0, sizeof L);
    L.cuGetErrorName = f_err_name, L.cuGetErrorString = f_err_string, L.cuDeviceGetCount = f_count, L.cuDeviceGet = f_dev_get;
    L.cuCtxGetDevice = f_ctx_dev, L.cuEventCreate = f_ev_create, L.cuEventDestroy = f_ev_destroy, L.cuEventRecord = f_ev_record;
    L.cuEventQuery = f_ev_query, L.cuStreamWaitEvent = f_stream_wait;
    L.ncclGetErrorString = f_nccl_text, L.ncclGetUniqueId = f_unique_id, L.ncclCommInitRank = f_init, L.ncclCommDestroy = f_destroy;
    L.ncclCommAbort = f_abort, L.ncclCommGetAsyncError = f_async, L.ncclAllReduce = f_allreduce, L.ncclGroupStart = f_group_start;
    L.ncclGroupEnd = f_group_end, L.ncclBroadcast = f_broadcast;
    F.device_count = 2;
    return L;
}

static Ranks rank_of(int rank, int world, int local_rank, int local_world, int port) {
    Ranks r = {.source = RANKS_TORCHRUN, .rank = rank, .world = world, .local_rank = local_rank, .local_world = local_world, .master_port = port};
    snprintf(r.master_addr, sizeof r.master_addr, "127.0.0.1");
    return r;
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, len) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0) port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* ---- pure parts ---- */

Test(comm_nccl, device_is_local_rank) {
    char err[512] = "";
    int ord = -1;
    Ranks r = rank_of(3, 4, 1, 2, 0);
    cr_expect(dist_nccl_device(&r, 2, &ord, err, sizeof err) && ord == 1, "%s", err);
    cr_expect(dist_nccl_device(&r, 1, &ord, err, sizeof err) && ord == 0, "one visible device is this rank's whatever LOCAL_RANK says");
    r = rank_of(3, 4, 3, -1, 0);
    cr_expect(!dist_nccl_device(&r, 2, &ord, err, sizeof err) && strstr(err, "rank 3 of 4: LOCAL_RANK=3 (torchrun) but this node has 2 CUDA devices"), "%s", err);
    r = rank_of(1, 4, 1, 4, 0);
    cr_expect(!dist_nccl_device(&r, 2, &ord, err, sizeof err) && strstr(err, "4 ranks on this node (torchrun) but 2 CUDA devices"), "%s", err);
    r.source = RANKS_OMPI, r.local_rank = 2, r.local_world = -1;
    cr_expect(!dist_nccl_device(&r, 2, &ord, err, sizeof err) && strstr(err, "OMPI_COMM_WORLD_LOCAL_RANK=2 (Open MPI)"), "%s", err);
    cr_expect(!dist_nccl_device(&r, 0, &ord, err, sizeof err) && strstr(err, "no CUDA device"), "%s", err);
}

/* gradients of 16, 8 and 40 bytes finished in that order, cap 32 bytes:
 * buckets [g0 g1], [g2's first 32 bytes], [g2's last 8] */
Test(comm_nccl, bucket_runs_follow_the_device_addresses) {
    BucketGrad g[3] = {{10, 16, 1}, {11, 8, 2}, {12, 40, 3}};
    BucketLayout l;
    char err[512] = "";
    cr_assert(bucket_layout_build(g, 3, 32, 32, 4, &l, err, sizeof err), "%s", err);
    cr_assert_eq(l.n_buckets, 3);
    NcclBuf out[4];
    int n = 0;
    CuDevicePtr apart[3] = {0x1000, 0x2000, 0x3000}, packed[3] = {0x1000, 0x1010, 0x3000};
    cr_assert(dist_nccl_bucket_bufs(&l, 0, apart, out, 4, &n, err, sizeof err), "%s", err);
    cr_expect(n == 2 && out[0].ptr == 0x1000 && out[0].count == 4 && out[1].ptr == 0x2000 && out[1].count == 2);
    cr_assert(dist_nccl_bucket_bufs(&l, 0, packed, out, 4, &n, err, sizeof err), "%s", err);
    cr_expect(n == 1 && out[0].ptr == 0x1000 && out[0].count == 6, "adjacent gradients are one run: n=%d", n);
    cr_assert(dist_nccl_bucket_bufs(&l, 1, apart, out, 4, &n, err, sizeof err), "%s", err);
    cr_expect(n == 1 && out[0].ptr == 0x3000 && out[0].count == 8);
    cr_assert(dist_nccl_bucket_bufs(&l, 2, apart, out, 4, &n, err, sizeof err), "%s", err);
    cr_expect(n == 1 && out[0].ptr == 0x3000 + 32 && out[0].count == 2, "the tail of a cut gradient starts past its head");
    cr_expect(!dist_nccl_bucket_bufs(&l, 0, apart, out, 1, &n, err, sizeof err) && strstr(err, "more than 1 device runs"), "%s", err);
    CuDevicePtr odd[3] = {0x1002, 0x2000, 0x3000};
    cr_expect(!dist_nccl_bucket_bufs(&l, 0, odd, out, 4, &n, err, sizeof err) && strstr(err, "0x1002") && strstr(err, "aligned"), "%s", err);
    cr_expect(!dist_nccl_bucket_bufs(&l, 3, apart, out, 4, &n, err, sizeof err) && strstr(err, "bucket 3"), "%s", err);
    bucket_layout_free(&l);
}

/* every byte of every gradient is reduced exactly once, over many layouts */
Test(comm_nccl, bucket_runs_cover_every_gradient_once) {
    unsigned seed = 7;
    for (int round = 0; round < 50; round++) {
        int n = 1 + (int)(rand_r(&seed) % 12);
        BucketGrad g[12];
        CuDevicePtr ptr[12];
        int64_t covered[12] = {0};
        for (int i = 0; i < n; i++) {
            g[i] = (BucketGrad){i, 4 * (1 + (int64_t)(rand_r(&seed) % 40)), (int)(rand_r(&seed) % 5)};
            ptr[i] = 0x100000 * (CuDevicePtr)(i + 1);
        }
        BucketLayout l;
        char err[512] = "";
        cr_assert(bucket_layout_build(g, n, 4 * (1 + rand_r(&seed) % 30), 4 * (1 + rand_r(&seed) % 30), 4, &l, err, sizeof err), "%s", err);
        for (int b = 0; b < l.n_buckets; b++) {
            NcclBuf out[12];
            int k = 0;
            cr_assert(dist_nccl_bucket_bufs(&l, b, ptr, out, 12, &k, err, sizeof err), "%s", err);
            size_t total = 0;
            for (int j = 0; j < k; j++) {
                int i = (int)(out[j].ptr / 0x100000) - 1;
                cr_assert(i >= 0 && i < n);
                cr_expect_eq((int64_t)(out[j].ptr - ptr[i]), covered[i], "gradient %d is reduced in order, without gaps", i);
                covered[i] += 4 * (int64_t)out[j].count;
                total += out[j].count;
            }
            cr_expect_eq((int64_t)total * 4, l.buckets[b].bytes);
        }
        for (int i = 0; i < n; i++) cr_expect_eq(covered[i], g[i].bytes, "round %d gradient %d", round, i);
        bucket_layout_free(&l);
    }
}

Test(comm_nccl, watchdog_states) {
    cr_expect_eq(dist_nccl_wait_state(0, NCCL_RESULT_SUCCESS, 5, 10), NCCL_WAIT_DONE);
    cr_expect_eq(dist_nccl_wait_state(0, NCCL_RESULT_SUCCESS, 11, 10), NCCL_WAIT_DONE, "done counts even past the deadline");
    cr_expect_eq(dist_nccl_wait_state(CU_RESULT_NOT_READY, NCCL_RESULT_IN_PROGRESS, 5, 10), NCCL_WAIT_PENDING);
    cr_expect_eq(dist_nccl_wait_state(CU_RESULT_NOT_READY, NCCL_RESULT_SUCCESS, 10, 10), NCCL_WAIT_TIMEOUT);
    cr_expect_eq(dist_nccl_wait_state(0, 2, 5, 10), NCCL_WAIT_FAILED, "an NCCL error wins over a finished event");
    cr_expect_eq(dist_nccl_wait_state(999, NCCL_RESULT_SUCCESS, 5, 10), NCCL_WAIT_FAILED);
    cr_expect_eq(dist_nccl_wait_state(999, NCCL_RESULT_SUCCESS, 50, 10), NCCL_WAIT_FAILED, "a driver error is reported as itself, not as a timeout");
}

Test(comm_nccl, id_sharing_paths) {
    char err[512] = "";
    unsigned char id[128] = {0};
    Ranks r = rank_of(1, 2, 1, 2, 29500);
    cr_expect(dist_nccl_share_id(&r, RDV_NONE, NULL, id, sizeof id, err, sizeof err));
    cr_expect(!dist_nccl_share_id(&r, RDV_MPI, NULL, id, sizeof id, err, sizeof err) && strstr(err, "rank 1 of 2") && strstr(err, "dist_init"), "%s", err);
    cr_expect(!dist_nccl_share_id(&r, RDV_HOST, NULL, id, sizeof id, err, sizeof err) && strstr(err, "the ranks' store") && strstr(err, "store_comm_init"), "%s", err);
}

/* ---- the communicator against the fakes ---- */

Test(comm_nccl, one_rank_is_a_no_op) {
    CudaLibs L = fake_libs();
    DistNccl c;
    char err[512] = "";
    Ranks r = rank_of(0, 1, 0, 1, 0);
    cr_assert(dist_nccl_open(&c, &L, &r, NULL, 3, 10, err, sizeof err), "%s", err);
    NcclBuf b = {0x1000, 4};
    cr_expect(dist_nccl_allreduce_sum(&c, 0, &b, 1, NULL, err, sizeof err) && dist_nccl_stream_wait(&c, NULL, err, sizeof err) && dist_nccl_wait(&c, err, sizeof err));
    dist_nccl_close(&c);
    cr_expect(F.inits == 0 && F.events_created == 0 && F.log[0] == 0, "one rank touches neither NCCL nor the driver");
}

/* rank 1 in a child process, rank 0 here, no launcher: the id travels
 * through the store rank 0 serves at MASTER_PORT, each joins with its own
 * rank, the events are made and destroyed */
Test(comm_nccl, open_shares_the_id_through_rank_0s_store) {
    int port = free_port(), p[2];
    cr_assert(port > 0 && pipe(p) == 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        CudaLibs L = fake_libs();
        F.ctx_dev = 1;
        DistNccl c;
        DistComm d;
        char err[512] = "";
        Ranks r = rank_of(1, 2, 1, 2, port);
        NcclUniqueId want;
        f_unique_id(&want);
        int code = !store_comm_init(&d, &r, true, err, sizeof err) || !dist_nccl_open(&c, &L, &r, &d, 3, 5, err, sizeof err) ? 1
                   : F.init_rank != 1 || F.init_nranks != 2 || memcmp(&F.init_id, &want, sizeof want) != 0 || F.events_created != 3 ? 2 : 0;
        if (code == 0) dist_nccl_close(&c);
        if (code == 0 && (F.destroys != 1 || F.events_destroyed != 3)) code = 4;
        if (code == 0 && d.host) code = 6;
        store_comm_close(&d, code == 0);
        ssize_t w = write(p[1], err, strlen(err));
        _exit(w < 0 ? 5 : code);
    }
    close(p[1]);
    CudaLibs L = fake_libs();
    DistNccl c;
    DistComm d;
    char err[512] = "";
    Ranks r = rank_of(0, 2, 0, 2, port);
    bool ok = store_comm_init(&d, &r, true, err, sizeof err) && dist_nccl_open(&c, &L, &r, &d, 3, 5, err, sizeof err);
    cr_expect(d.host != NULL, "rank 0 serves the store");
    store_comm_close(&d, ok); /* waits for rank 1 to say it is done */
    char child_err[512] = "";
    ssize_t k = read(p[0], child_err, sizeof child_err - 1);
    child_err[k > 0 ? k : 0] = 0;
    close(p[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0) cr_assert(errno == EINTR);
    cr_assert(ok, "%s", err);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 1 exit %d: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, child_err);
    cr_expect(F.init_rank == 0 && F.init_nranks == 2 && F.inits == 1 && F.events_created == 3 && c.device == 0);
    dist_nccl_close(&c);
    cr_expect(F.destroys == 1 && F.aborts == 0 && F.events_destroyed == 3);
}

Test(comm_nccl, wrong_current_device_is_named) {
    CudaLibs L = fake_libs();
    F.ctx_dev = 0;
    DistNccl c;
    char err[512] = "";
    Ranks r = rank_of(1, 2, 1, 2, 29500);
    cr_expect(!dist_nccl_open(&c, &L, &r, NULL, 3, 5, err, sizeof err));
    cr_expect(strstr(err, "rank 1 of 2: the current CUDA context is on device 0, not on device 1 (LOCAL_RANK=1)"), "%s", err);
    cr_expect(F.inits == 0 && F.events_created == 0, "nothing made before the check");
}

/* a communicator of rank 1 of 2 with 3 buckets, over the fakes */
static DistNccl adopted(CudaLibs *L, double timeout_s) {
    DistNccl c;
    char err[512] = "";
    Ranks r = rank_of(1, 2, 1, 2, 0);
    cr_assert(dist_nccl_adopt(&c, L, &r, (NcclComm)(uintptr_t)0xC0FFEE, 3, timeout_s, err, sizeof err), "%s", err);
    return c;
}

Test(comm_nccl, allreduce_is_an_in_place_fp32_sum_in_one_group) {
    CudaLibs L = fake_libs();
    DistNccl c = adopted(&L, 5);
    char err[512] = "";
    NcclBuf b[2] = {{0x1000, 4}, {0x2000, 2}};
    CuStream side = (CuStream)(uintptr_t)0x5;
    cr_assert(dist_nccl_allreduce_sum(&c, 1, b, 2, side, err, sizeof err), "%s", err);
    cr_expect_str_eq(F.log, "GS AR(1000,4,in-place,7,0,5) AR(2000,2,in-place,7,0,5) GE REC(101,5) ");
    cr_assert(dist_nccl_stream_wait(&c, (CuStream)(uintptr_t)0x6, err, sizeof err), "%s", err);
    cr_expect_eq(F.stream_waits, 1, "only the bucket in flight is waited for");
    F.not_ready = 3;
    cr_assert(dist_nccl_wait(&c, err, sizeof err), "%s", err);
    cr_expect_eq(F.queries, 4);
    cr_assert(dist_nccl_wait(&c, err, sizeof err), "%s", err);
    cr_expect_eq(F.queries, 4, "nothing left in flight");
    dist_nccl_close(&c);
    cr_expect(F.destroys == 1 && F.aborts == 0 && F.events_destroyed == 3);
}

/* DDP's start-up broadcast: bytes in place from rank 0, one group, watched as bucket 0 */
Test(comm_nccl, state_broadcast_is_in_place_bytes_from_root_in_one_group) {
    CudaLibs L = fake_libs();
    DistNccl c = adopted(&L, 5);
    char err[512] = "";
    NcclBuf b[2] = {{0x1000, 12}, {0x3000, 8}};
    cr_assert(dist_nccl_broadcast_bytes(&c, b, 2, 0, (CuStream)(uintptr_t)0x7, err, sizeof err), "%s", err);
    cr_expect_str_eq(F.log, "GS BC(1000,12,in-place,1,0,7) BC(3000,8,in-place,1,0,7) GE REC(100,7) ");
    F.not_ready = 2;
    cr_assert(dist_nccl_wait(&c, err, sizeof err), "%s", err);
    cr_expect_eq(F.queries, 3, "the watchdog waited for it");
    dist_nccl_close(&c);
    cr_expect(F.destroys == 1 && F.aborts == 0);
}

/* A CUDA plan with a launcher's variables but no mpirun and no agent store:
 * the ranks meet through the store rank 0 serves at MASTER_PORT, so MPI is
 * never started; without MASTER_ADDR, or with a bad watchdog limit, one
 * error. */
Test(comm_nccl, cuda_plans_without_mpirun_start_no_mpi) {
    char port[16];
    snprintf(port, sizeof port, "%d", free_port());
    const char *vars[][2] = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port},
                             {"YOLOCC_COLLECTIVE_TIMEOUT_S", "7.5"}};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) setenv(vars[i][0], vars[i][1], 1);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) { /* rank 0 */
        setenv("RANK", "0", 1), setenv("LOCAL_RANK", "0", 1);
        DataParallel dp;
        char err[512] = "";
        bool ok = dp_init(&dp, true, err, sizeof err) && dp.comm.active && dp.comm.host && !dp.comm.mpi && dp_is_root(&dp);
        if (!ok) fprintf(stderr, "rank 0: %s\n", err);
        dp_finalize(&dp, ok ? 0 : 1);
        _exit(ok ? 0 : 1);
    }
    DataParallel dp;
    char err[512] = "";
    cr_assert(dp_init(&dp, true, err, sizeof err), "%s", err);
    cr_expect(dp.comm.active && dp.comm.store && dp.comm.hosted && !dp.comm.host && !dp.comm.mpi, "rank 1 uses rank 0's store, not MPI");
    cr_expect(dp.comm.ranks.rank == 1 && dp.comm.ranks.world == 2 && dp.comm.ranks.local_rank == 1);
    cr_expect_float_eq(dp.comm.timeout_s, 7.5, 1e-12);
    cr_expect(!dp_is_root(&dp));
    dp_finalize(&dp, 0);
    int st;
    while (waitpid(pid, &st, 0) < 0) cr_assert(errno == EINTR);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank 0 failed");
    unsetenv("MASTER_ADDR");
    cr_expect(!dp_init(&dp, true, err, sizeof err));
    cr_expect(strstr(err, "MASTER_ADDR"), "%s", err);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("YOLOCC_COLLECTIVE_TIMEOUT_S", "-1", 1);
    cr_expect(!dp_init(&dp, true, err, sizeof err));
    cr_expect(strstr(err, "YOLOCC_COLLECTIVE_TIMEOUT_S"), "%s", err);
}

Test(comm_nccl, stuck_collective_aborts_and_names_the_bucket) {
    CudaLibs L = fake_libs();
    DistNccl c = adopted(&L, 0.05);
    char err[1024] = "";
    NcclBuf b = {0x1000, 25};
    cr_assert(dist_nccl_allreduce_sum(&c, 1, &b, 1, NULL, err, sizeof err), "%s", err);
    F.not_ready = -1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert(!dist_nccl_wait(&c, err, sizeof err));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_expect(strstr(err, "rank 1 of 2: the gradient all-reduce of bucket 1 of 3 (100 bytes) did not finish within 0.05 s") && strstr(err, "a stuck collective") &&
                  strstr(err, "aborted"),
              "%s", err);
    cr_expect(s >= 0.05 && s < 1, "gave up after %.3f s", s);
    cr_expect(F.aborts == 1 && c.comm == NULL && c.failed);
    cr_expect(!dist_nccl_allreduce_sum(&c, 0, &b, 1, NULL, err, sizeof err) && strstr(err, "aborted after an earlier failure"), "%s", err);
    cr_expect(!dist_nccl_wait(&c, err, sizeof err));
    dist_nccl_close(&c);
    cr_expect(F.aborts == 1 && F.destroys == 0, "an aborted communicator is neither destroyed nor aborted twice");
}

Test(comm_nccl, async_nccl_error_aborts) {
    CudaLibs L = fake_libs();
    DistNccl c = adopted(&L, 5);
    char err[1024] = "";
    NcclBuf b = {0x1000, 4};
    cr_assert(dist_nccl_allreduce_sum(&c, 2, &b, 1, NULL, err, sizeof err), "%s", err);
    F.not_ready = -1, F.async = 2;
    cr_assert(!dist_nccl_wait(&c, err, sizeof err));
    cr_expect(strstr(err, "rank 1 of 2: the all-reduce failed: fake unhandled system error (ncclResult 2)") && strstr(err, "bucket 2 of 3"), "%s", err);
    cr_expect_eq(F.aborts, 1);
    dist_nccl_close(&c);
}

Test(comm_nccl, failed_enqueue_closes_the_group_and_aborts) {
    CudaLibs L = fake_libs();
    DistNccl c = adopted(&L, 5);
    char err[1024] = "";
    NcclBuf b[2] = {{0x1000, 4}, {0x2000, 4}};
    F.allreduce_result = 3;
    cr_assert(!dist_nccl_allreduce_sum(&c, 0, b, 2, NULL, err, sizeof err));
    cr_expect(strstr(err, "ncclAllReduce failed: fake NCCL error (ncclResult 3)"), "%s", err);
    cr_expect(strstr(F.log, "GE ") && !strstr(F.log, "REC"), "the group is closed, no event recorded: %s", F.log);
    cr_expect_eq(F.aborts, 1);
    dist_nccl_close(&c);
}

Test(comm_nccl, close_with_work_in_flight_aborts) {
    CudaLibs L = fake_libs();
    DistNccl c = adopted(&L, 5);
    char err[512] = "";
    NcclBuf b = {0x1000, 4};
    cr_assert(dist_nccl_allreduce_sum(&c, 0, &b, 1, NULL, err, sizeof err), "%s", err);
    dist_nccl_close(&c);
    cr_expect(F.aborts == 1 && F.destroys == 0, "destroying could wait on ranks that left");
}

/* ---- the data-parallel backward hook (dp_cuda.c) ---- */

/* Whether [p, p + 4n) lies inside the gradients of bucket b (one run may
 * span gradients that follow each other in device memory). */
static bool inside_bucket(const BucketLayout *l, const CudaStep *cs, const int *grads, int b, uintptr_t p, size_t n) {
    const Bucket *bk = &l->buckets[b];
    uintptr_t covered = 0, e = p + 4 * n;
    for (int k = bk->first; k <= bk->last; k++) {
        int i = l->order[k];
        uintptr_t g0 = (uintptr_t)cs->ptr[grads[i]], g1 = g0 + 4 * (uintptr_t)shape_numel(&cs->plan->g.tensors[grads[i]].shape);
        uintptr_t a = p > g0 ? p : g0, z = e < g1 ? e : g1;
        covered += z > a ? z - a : 0;
    }
    return covered == 4 * n;
}

/* The last op before the clip that reads or writes tensor t. */
static int last_touch(const Graph *g, int t, int clip) {
    int last = -1;
    for (int o = 0; o < clip; o++)
        for (int i = 0; i < g->ops[o].n_in + g->ops[o].n_out; i++)
            if ((i < g->ops[o].n_in ? g->ops[o].in[i] : g->ops[o].out[i - g->ops[o].n_in]) == t) last = o;
    return last;
}

/* The tiny plan's backward, driven launch by launch as CudaStep drives it
 * (cuda_step_ops_done): each gradient bucket is summed as soon as every op
 * touching its gradients has all its launches enqueued, and not before: an
 * event recorded on main, the side stream waiting for it, then one NCCL
 * group of in-place fp32 sums on the side stream covering exactly the
 * bucket's bytes; at the end main waits for every bucket and the watchdog
 * sees them done. Twice (the second backward starts from bucket 0 again); a
 * backward that ends early is an error. */
Test(comm_nccl, backward_hook_sums_each_bucket_once_backward_has_produced_it) {
    char err[1024] = "";
    Plan p;
    tiny_plan("--imgsz 64 --batch 2", &p);
    const Graph *g = &p.g;
    HostStep h;
    host_step_setup(&h, &p);
    CudaStep *cs = &h.cs;
    cs->dev.L = fake_libs();
    cs->dev.main = (CuStream)(uintptr_t)0xA, cs->dev.side = (CuStream)(uintptr_t)0xB;
    int clip = -1;
    for (int o = 0; o < g->n_ops && clip < 0; o++)
        if (g->ops[o].kind == OP_GRAD_CLIP) clip = o;
    cr_assert_geq(clip, 0);
    const int *grads = g->ops[clip].in, n = g->ops[clip].n_in;
    DataParallel dp;
    memset(&dp, 0, sizeof dp);
    dp.comm.ranks = rank_of(1, 2, 1, 2, 0);
    cr_assert(bucket_layout_from_graph(g, grads, n, 64 * 1024, &dp.layout, err, sizeof err), "%s", err);
    const BucketLayout *l = &dp.layout;
    cr_assert_gt(l->n_buckets, 3, "several buckets at a 64 KiB cap");
    cr_assert(dist_nccl_adopt(&dp.nccl, &cs->dev.L, &dp.comm.ranks, (NcclComm)(uintptr_t)0xC0FFEE, l->n_buckets, 5, err, sizeof err), "%s", err);
    cr_assert(dp_cuda_hook(&dp, cs, grads, n, err, sizeof err), "%s", err);
    const CudaRunHook *hk = dp.hook;
    const KProgram *kp = &cs->kern.kp;
    for (int round = 0; round < 2; round++) {
        int next = 0, prev_done = -1, points = 0;
        for (int ln = 0; ln < kp->n_launches && kp->launches[ln].op_hi < clip; ln++) {
            int done = cuda_step_ops_done(kp, ln);
            bool point = false;
            for (int o = prev_done + 1; o <= done; o++) point |= hk->at_op[o];
            if (!point) continue;
            F.log[0] = 0, F.n_ar = 0;
            cr_assert(hk->after(hk->ctx, done, err, sizeof err), "%s", err);
            /* the buckets whose gradients were last touched in (prev_done, done], in order */
            char want[8192], one[96];
            snprintf(want, sizeof want, "REC(%lx,a) WAIT(b,%lx) ", (unsigned long)(uintptr_t)dp.ready_ev, (unsigned long)(uintptr_t)dp.ready_ev);
            int ar = 0;
            for (; next < l->n_buckets && l->buckets[next].ready_op <= done; next++) {
                const Bucket *bk = &l->buckets[next];
                int last = -1;
                for (int k = bk->first; k <= bk->last; k++) {
                    int t = last_touch(g, grads[l->order[k]], clip);
                    last = t > last ? t : last;
                }
                cr_expect(last > prev_done && last <= done, "bucket %d: its gradients are last touched by op %d, summed when ops %d-%d were done", next, last,
                          prev_done + 1, done);
                strncat(want, "GS ", sizeof want - strlen(want) - 1);
                size_t elems = 0;
                for (; ar < F.n_ar && elems < (size_t)(bk->bytes / 4); ar++) {
                    cr_expect(inside_bucket(l, cs, grads, next, F.ar[ar].ptr, F.ar[ar].count), "bucket %d: a sum outside its gradients", next);
                    cr_expect_eq(F.ar[ar].stream, 0xB, "on the side stream");
                    elems += F.ar[ar].count;
                    snprintf(one, sizeof one, "AR(%lx,%zu,in-place,7,0,b) ", (unsigned long)F.ar[ar].ptr, F.ar[ar].count);
                    strncat(want, one, sizeof want - strlen(want) - 1);
                }
                cr_expect_eq(elems, (size_t)(bk->bytes / 4), "bucket %d: exactly its bytes", next);
                snprintf(one, sizeof one, "GE REC(%lx,b) ", (unsigned long)(uintptr_t)dp.nccl.done[next]);
                strncat(want, one, sizeof want - strlen(want) - 1);
            }
            cr_expect_eq(ar, F.n_ar);
            cr_expect_str_eq(F.log, want, "ops done through %d", done);
            prev_done = done, points++;
        }
        cr_expect_eq(next, l->n_buckets, "every bucket summed by the end of backward");
        F.log[0] = 0, F.stream_waits = 0, F.queries = 0;
        cr_assert(hk->before_wait(hk->ctx, err, sizeof err), "%s", err);
        cr_expect_eq(F.stream_waits, l->n_buckets, "main waits for every bucket before the clip");
        cr_expect(strncmp(F.log, "WAIT(a,", 7) == 0, "%s", F.log);
        cr_expect_eq(F.queries, l->n_buckets, "the watchdog saw each bucket done");
        cr_log_info("round %d: %d buckets summed at %d points of backward (ops 0-%d)", round, l->n_buckets, points, clip - 1);
    }
    /* a backward that stopped before its last bucket */
    cr_assert(hk->after(hk->ctx, l->buckets[0].ready_op, err, sizeof err), "%s", err);
    cr_expect(!hk->before_wait(hk->ctx, err, sizeof err) && strstr(err, "rank 1 of 2: backward ended with") && strstr(err, "gradient buckets summed"), "%s", err);
    cr_expect_eq(dp.next_bucket, 0, "the next backward starts from bucket 0");
    dist_nccl_close(&dp.nccl);
    int destroyed = F.events_destroyed;
    dp_detach(&dp);
    cr_expect_eq(F.events_destroyed, destroyed + 1, "the ready event");
    cr_expect(!dp.hook && !dp.runs && !dp.ready_at);
    bucket_layout_free(&dp.layout);
    host_step_close(&h);
    plan_free(&p);
}

/* ---- on a GPU: a real one-rank communicator sums in place (identity) ---- */

Test(comm_nccl, gpu_one_rank_sum) {
    char err[1024] = "";
    if (!have_gpu(err, sizeof err)) {
        printf("SKIP: no CUDA device\n");
        fflush(stdout);
        cr_skip_test("no CUDA device: %s", err);
    }
    CudaDevice d;
    if (!cuda_device_open(&d, 0, true, err, sizeof err)) {
        cr_assert(strstr(err, "NCCL"), "%s", err);
        printf("SKIP: no NCCL\n");
        fflush(stdout);
        cr_skip_test("%s", err);
    }
    const CudaLibs *L = &d.L;
    NcclUniqueId id;
    NcclComm comm = NULL;
    cr_assert_eq(L->ncclGetUniqueId(&id), 0);
    cr_assert_eq(L->ncclCommInitRank(&comm, 1, id, 0), 0);
    DistNccl c;
    Ranks r = rank_of(0, 1, 0, 1, 0);
    cr_assert(dist_nccl_adopt(&c, L, &r, comm, 2, 30, err, sizeof err), "%s", err);
    enum { N0 = 1000, N1 = 37 };
    float h[N0 + N1], back[N0 + N1];
    for (int i = 0; i < N0 + N1; i++) h[i] = 0.5f * (float)i - 3.0f;
    CuDevicePtr p0, p1;
    cr_assert(CUDA_CALL(L, cuMemAlloc, (&p0, N0 * 4), "test", err, sizeof err) && CUDA_CALL(L, cuMemAlloc, (&p1, N1 * 4), "test", err, sizeof err), "%s", err);
    cr_assert(cuda_copy_to_device(&d, p0, h, N0 * 4, "test", err, sizeof err) && cuda_copy_to_device(&d, p1, h + N0, N1 * 4, "test", err, sizeof err), "%s", err);
    NcclBuf b[2] = {{p0, N0}, {p1, N1}};
    cr_assert(dist_nccl_allreduce_sum(&c, 1, b, 2, d.side, err, sizeof err), "%s", err);
    cr_assert(dist_nccl_stream_wait(&c, d.main, err, sizeof err), "%s", err);
    cr_assert(dist_nccl_wait(&c, err, sizeof err), "%s", err);
    cr_assert(CUDA_CALL(L, cuStreamSynchronize, (d.main), "test", err, sizeof err), "%s", err);
    cr_assert(cuda_copy_to_host(&d, back, p0, N0 * 4, "test", err, sizeof err) && cuda_copy_to_host(&d, back + N0, p1, N1 * 4, "test", err, sizeof err), "%s", err);
    cr_expect(memcmp(h, back, sizeof h) == 0, "the sum over one rank is the input");
    dist_nccl_close(&c);
    (void)L->cuMemFree(p0);
    (void)L->cuMemFree(p1);
    cuda_device_close(&d);
}
