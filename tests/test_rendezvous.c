/* tests/test_rendezvous.c — the TCP rendezvous (runtime/dist/rendezvous_tcp.h)
 * between real processes on loopback: every rank gets rank 0's blob, peers
 * wait for a late rank 0, and bad peers, missing ranks and strangers give
 * one clear line on both sides. Owns these tests only; needs no GPU. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>

#include "../runtime/dist/rendezvous_tcp.h"
#include "test_util.h"

enum { BLOB = 128 };

/* what a rank's process reports back through its pipe (one write below PIPE_BUF: atomic) */
typedef struct Report {
    char ok;
    unsigned char blob[BLOB];
    char err[1024];
} Report;

typedef struct Child {
    pid_t pid;
    int fd;     /* read end of its pipe */
} Child;

/* A port nothing listens on right now: bind port 0 and read back what the
 * kernel chose. -1 when the family is not available here. */
static int free_port(int family) {
    int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_storage ss = {0};
    socklen_t len;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    }
    int port = -1;
    if (bind(fd, (struct sockaddr *)&ss, len) == 0 && getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    close(fd);
    return port;
}

static Ranks ranks_at(const char *addr, int port, int rank, int world) {
    Ranks r = {.source = RANKS_TORCHRUN, .rank = rank, .world = world, .local_rank = rank, .local_world = world, .master_port = port};
    snprintf(r.master_addr, sizeof r.master_addr, "%s", addr);
    return r;
}

/* Runs one rank in a child process after delay_ms; rank 0 shares `root_blob`,
 * the others start from zeros. The child only calls the rendezvous, writes
 * its report and _exits: no Criterion code runs there. */
static Child spawn_rank(Ranks r, const unsigned char *root_blob, double timeout_s, int delay_ms) {
    int p[2];
    cr_assert(pipe(p) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        struct timespec d = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000L};
        while (nanosleep(&d, &d) < 0 && errno == EINTR) {}
        Report rep;
        memset(&rep, 0, sizeof rep);
        if (r.rank == 0) memcpy(rep.blob, root_blob, BLOB);
        rep.ok = rendezvous_tcp_share(&r, rep.blob, BLOB, timeout_s, rep.err, sizeof rep.err);
        ssize_t w = write(p[1], &rep, sizeof rep);
        _exit(w == (ssize_t)sizeof rep ? (rep.ok ? 0 : 1) : 3);
    }
    close(p[1]);
    return (Child){pid, p[0]};
}

/* Reads the child's report and reaps it; the exit status must match the report. */
static Report reap(Child c) {
    Report rep;
    memset(&rep, 0, sizeof rep);
    size_t got = 0;
    while (got < sizeof rep) {
        ssize_t k = read(c.fd, (char *)&rep + got, sizeof rep - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(c.fd);
    int st;
    while (waitpid(c.pid, &st, 0) < 0) cr_assert(errno == EINTR, "waitpid: %s", strerror(errno));
    cr_assert(WIFEXITED(st), "rank process died (status %d)", st);
    cr_assert_eq(got, sizeof rep, "short report (%zu bytes), exit %d", got, WEXITSTATUS(st));
    cr_assert_eq(WEXITSTATUS(st), rep.ok ? 0 : 1, "exit %d but ok=%d: %s", WEXITSTATUS(st), rep.ok, rep.err);
    rep.err[sizeof rep.err - 1] = 0;
    return rep;
}

static void random_blob(unsigned char *b) {
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    for (int i = 0; i < BLOB; i++) b[i] = (unsigned char)(rand_r(&seed) >> 7);
}

static bool all_zero(const unsigned char *b) {
    for (int i = 0; i < BLOB; i++)
        if (b[i]) return false;
    return true;
}

/* world ranks on addr; rank 0 started root_delay_ms after the peers */
static void share_among(const char *addr, int family, int world, int root_delay_ms) {
    int port = free_port(family);
    cr_assert(port > 0);
    unsigned char blob[BLOB];
    random_blob(blob);
    Child c[8];
    for (int k = 1; k < world; k++) c[k] = spawn_rank(ranks_at(addr, port, k, world), blob, 5, 0);
    c[0] = spawn_rank(ranks_at(addr, port, 0, world), blob, 5, root_delay_ms);
    for (int k = 0; k < world; k++) {
        Report rep = reap(c[k]);
        cr_expect(rep.ok, "rank %d of %d: %s", k, world, rep.err);
        cr_expect(memcmp(rep.blob, blob, BLOB) == 0, "rank %d of %d holds other bytes than rank 0's", k, world);
    }
}

Test(rendezvous, world_2_gets_the_root_blob) { share_among("127.0.0.1", AF_INET, 2, 0); }

Test(rendezvous, world_4_gets_the_root_blob) { share_among("127.0.0.1", AF_INET, 4, 0); }

/* peers come first and retry until rank 0 listens */
Test(rendezvous, peers_wait_for_a_late_root) { share_among("127.0.0.1", AF_INET, 3, 300); }

Test(rendezvous, ipv6_loopback) {
    if (free_port(AF_INET6) < 0) cr_skip_test("no IPv6 loopback (::1) on this machine");
    share_among("::1", AF_INET6, 2, 0);
}

Test(rendezvous, wrong_world_size_fails_root_and_peer) {
    int port = free_port(AF_INET);
    unsigned char blob[BLOB];
    random_blob(blob);
    Child peer = spawn_rank(ranks_at("127.0.0.1", port, 1, 3), blob, 5, 0);
    Child root = spawn_rank(ranks_at("127.0.0.1", port, 0, 2), blob, 5, 0);
    Report r0 = reap(root), r1 = reap(peer);
    char where[64];
    snprintf(where, sizeof where, "rendezvous at 127.0.0.1:%d: ", port);
    cr_expect(!r0.ok && strstr(r0.err, where) == r0.err, "%s", r0.err);
    cr_expect(strstr(r0.err, "peer 127.0.0.1:") && strstr(r0.err, "(rank 1) says the world size is 3, rank 0 has 2"), "%s", r0.err);
    cr_expect(!r1.ok && strstr(r1.err, where) == r1.err, "%s", r1.err);
    cr_expect(strstr(r1.err, "rank 1 of 3: rank 0 gave up: ") && strstr(r1.err, "says the world size is 3, rank 0 has 2"), "%s", r1.err);
    cr_expect(all_zero(r1.blob), "a failed peer keeps its buffer untouched");
    cr_expect(!strchr(r0.err, '\n') && !strchr(r1.err, '\n'), "one line each");
}

Test(rendezvous, duplicate_rank_is_named) {
    int port = free_port(AF_INET);
    unsigned char blob[BLOB];
    random_blob(blob);
    Child a = spawn_rank(ranks_at("127.0.0.1", port, 1, 3), blob, 5, 0);
    Child b = spawn_rank(ranks_at("127.0.0.1", port, 1, 3), blob, 5, 0);
    Child root = spawn_rank(ranks_at("127.0.0.1", port, 0, 3), blob, 5, 100);
    Report r0 = reap(root), ra = reap(a), rb = reap(b);
    cr_expect(!r0.ok && strstr(r0.err, "says it is rank 1, which peer 127.0.0.1:") && strstr(r0.err, "already is"), "%s", r0.err);
    cr_expect(!ra.ok && !rb.ok && strstr(ra.err, "rank 0 gave up") && strstr(rb.err, "rank 0 gave up"), "%s | %s", ra.err, rb.err);
}

/* world 3 with rank 2 absent: rank 0 times out naming it, rank 1 hears why */
Test(rendezvous, missing_rank_is_named_on_timeout) {
    int port = free_port(AF_INET);
    unsigned char blob[BLOB];
    random_blob(blob);
    Child peer = spawn_rank(ranks_at("127.0.0.1", port, 1, 3), blob, 5, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    Child root = spawn_rank(ranks_at("127.0.0.1", port, 0, 3), blob, 1.0, 0);
    Report r0 = reap(root);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    Report r1 = reap(peer);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    cr_expect(!r0.ok && strstr(r0.err, "rank 0 waited 1 s; rank 2 of 3 never arrived (1 of 2 peers did)"), "%s", r0.err);
    cr_expect(s >= 0.9 && s < 3.0, "rank 0 gave up after %.2f s, timeout 1 s", s);
    cr_expect(!r1.ok && strstr(r1.err, "rank 0 gave up: rank 0 waited 1 s; rank 2 of 3 never arrived"), "%s", r1.err);
}

/* no rank 0 at all: the peer stops retrying at its timeout */
Test(rendezvous, peer_without_root_times_out) {
    int port = free_port(AF_INET);
    unsigned char blob[BLOB] = {0};
    Report r1 = reap(spawn_rank(ranks_at("127.0.0.1", port, 1, 2), blob, 0.3, 0));
    cr_expect(!r1.ok && strstr(r1.err, "rank 1 of 2: could not reach rank 0 within 0.3 s: connect: Connection refused"), "%s", r1.err);
}

/* something that is not a rank connects and sends text */
Test(rendezvous, garbage_client_is_named) {
    int port = free_port(AF_INET);
    unsigned char blob[BLOB];
    random_blob(blob);
    Child root = spawn_rank(ranks_at("127.0.0.1", port, 0, 2), blob, 5, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = -1;
    for (int tries = 0; tries < 400 && fd < 0; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert(fd >= 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            fd = -1;
            struct timespec nap = {0, 5 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
    }
    cr_assert(fd >= 0, "rank 0 never listened on port %d", port);
    const char junk[] = "GET / HTTP/1.0\r\n\r\n";
    cr_assert_eq(send(fd, junk, sizeof junk - 1, MSG_NOSIGNAL), (ssize_t)(sizeof junk - 1));
    Report r0 = reap(root);
    close(fd);
    cr_expect(!r0.ok && strstr(r0.err, "peer 127.0.0.1:") && strstr(r0.err, "is not a yolocc rank: it sent \"GET ") && strstr(r0.err, "not a rendezvous hello"),
              "%s", r0.err);
    cr_expect(!strchr(r0.err, '\n'), "one line: %s", r0.err);
}

Test(rendezvous, one_rank_and_bad_arguments) {
    unsigned char blob[BLOB] = {1};
    char err[512] = "";
    Ranks one = ranks_at("", 0, 0, 1);
    cr_expect(rendezvous_tcp_share(&one, blob, BLOB, 1, err, sizeof err), "world 1 needs no rendezvous: %s", err);
    Ranks r = ranks_at("127.0.0.1", 29500, 1, 2);
    cr_expect(!rendezvous_tcp_share(&r, blob, 0, 1, err, sizeof err) && strstr(err, "rendezvous at 127.0.0.1:29500: the blob must be"), "%s", err);
    cr_expect(!rendezvous_tcp_share(&r, blob, BLOB, 0, err, sizeof err) && strstr(err, "timeout"), "%s", err);
    Ranks none = ranks_at("", 0, 1, 2);
    cr_expect(!rendezvous_tcp_share(&none, blob, BLOB, 1, err, sizeof err) && strstr(err, "MASTER_ADDR and MASTER_PORT"), "%s", err);
}
