/* tests/test_tcpstore.c — the TCPStore client and the store collectives
 * (runtime/dist/tcpstore.c, comm_store.c) against PyTorch's own TCPStore
 * servers (libuv and classic, started by tu_tu_torch_python(); those tests skip
 * without a PyTorch 2), and, everywhere, what the client does with a port
 * nobody serves and with peers that are no TCPStore. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../runtime/dist/comm_store.h"
#include "../runtime/dist/sock.h"
#include "../runtime/dist/store_server.h"
#include "../runtime/dist/tcpstore.h"
#include "../runtime/dist/comm_mpi.h"
#include "test_util.h"

/* ------------------------------------------------------- peers that are no store */

/* A listening socket on a free loopback port; *port says which. */
static int listen_any(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 4) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

typedef struct Peer {
    int lfd;
    const void *reply; /* sent after the first 10 bytes (the handshake) arrive; NULL: close at once */
    size_t n;
} Peer;

static void *peer_main(void *arg) {
    Peer *p = arg;
    int fd = accept(p->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    unsigned char hs[10];
    size_t got = 0;
    while (p->reply && got < sizeof hs) {
        ssize_t k = recv(fd, hs + got, sizeof hs - got, 0);
        if (k <= 0) break;
        got += (size_t)k;
    }
    if (p->reply && send(fd, p->reply, p->n, MSG_NOSIGNAL) < 0) got = 0;
    close(fd);
    return NULL;
}

Test(tcpstore, nobody_at_the_port_is_one_error_after_the_timeout) {
    int port, fd = listen_any(&port);
    close(fd); /* the port is free again: connecting is refused */
    TcpStore s;
    char err[700];
    cr_assert_not(tcpstore_open(&s, "127.0.0.1", port, "/t/", 0.3, err, sizeof err));
    char want[64];
    snprintf(want, sizeof want, "TCPStore at 127.0.0.1:%d: could not connect within 0.3 s", port);
    cr_expect(strstr(err, want) && strstr(err, "refused") && !strchr(err, '\n'), "%s", err);
    tcpstore_close(&s);
}

Test(tcpstore, peers_that_are_no_store_are_named) {
    const char *need[] = {"closed the connection instead of sending the answer to its ping", "not a TCPStore"};
    const unsigned char wrong[4] = {1, 2, 3, 4};
    for (int k = 0; k < 2; k++) {
        int port;
        Peer p = {.lfd = listen_any(&port), .reply = k ? wrong : NULL, .n = k ? sizeof wrong : 0};
        pthread_t th;
        cr_assert(pthread_create(&th, NULL, peer_main, &p) == 0);
        TcpStore s;
        char err[700];
        cr_expect_not(tcpstore_open(&s, "127.0.0.1", port, "/t/", 5, err, sizeof err));
        cr_expect(strstr(err, need[k]) && strstr(err, "TCPStore at 127.0.0.1:") && !strchr(err, '\n'), "%s", err);
        tcpstore_close(&s);
        pthread_join(th, NULL);
        close(p.lfd);
    }
}

Test(tcpstore, bad_arguments_are_refused_before_any_connection) {
    TcpStore s;
    char err[700];
    cr_expect(!tcpstore_open(&s, "", 29500, "/t/", 1, err, sizeof err) && strstr(err, "MASTER_ADDR and MASTER_PORT"), "%s", err);
    cr_expect(!tcpstore_open(&s, "127.0.0.1", 0, "/t/", 1, err, sizeof err) && strstr(err, "MASTER_ADDR and MASTER_PORT"), "%s", err);
    cr_expect(!tcpstore_open(&s, "127.0.0.1", 1, "/t/", 0, err, sizeof err) && strstr(err, "timeout"), "%s", err);
}

/* ------------------------------------------------------- PyTorch's own servers */

typedef struct Server {
    pid_t pid;
    int to_child, from_child;
    int port;
} Server;

/* A PyTorch TCPStore server (libuv or classic) in a child Python, which
 * answers each line "get KEY" / "set KEY VALUE" on its stdin with a line,
 * using its own client; it ends when its stdin closes. */
static Server server_start(bool libuv) {
    static const char script[] =
        "import sys\n"
        "from datetime import timedelta\n"
        "from torch.distributed import TCPStore\n"
        "s = TCPStore('127.0.0.1', 0, None, True, timedelta(seconds=20), use_libuv=(sys.argv[1] == '1'))\n"
        "print(s.port, flush=True)\n"
        "for line in sys.stdin:\n"
        "    w = line.split()\n"
        "    if w[0] == 'get': print(s.get(w[1]).decode(), flush=True)\n"
        "    elif w[0] == 'num': print(s.num_keys(), flush=True)\n"
        "    else: s.set(w[1], w[2]); print('ok', flush=True)\n";
    int in[2], out[2];
    cr_assert(pipe(in) == 0 && pipe(out) == 0);
    Server sv = {.pid = fork()};
    cr_assert(sv.pid >= 0);
    if (sv.pid == 0) {
        dup2(in[0], 0), dup2(out[1], 1);
        close(in[0]), close(in[1]), close(out[0]), close(out[1]);
        execl(tu_torch_python(), tu_torch_python(), "-c", script, libuv ? "1" : "0", (char *)NULL);
        _exit(127);
    }
    close(in[0]), close(out[1]);
    sv.to_child = in[1], sv.from_child = out[0];
    char line[64];
    FILE *f = fdopen(dup(sv.from_child), "r");
    cr_assert(f && fgets(line, sizeof line, f), "the TCPStore server did not start");
    fclose(f);
    sv.port = atoi(line);
    cr_assert(sv.port > 0, "server said '%s'", line);
    return sv;
}

/* one request line to the server's own client, its answer line back */
static void server_ask(Server *sv, const char *req, char *ans, size_t cap) {
    cr_assert(write(sv->to_child, req, strlen(req)) == (ssize_t)strlen(req));
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t k = read(sv->from_child, ans + n, 1);
        cr_assert(k == 1, "the server went away");
        if (ans[n] == '\n') break;
        n++;
    }
    ans[n] = 0;
}

static void server_stop(Server *sv) {
    close(sv->to_child);
    close(sv->from_child);
    int st;
    waitpid(sv->pid, &st, 0);
}

Test(tcpstore, speaks_pytorchs_servers_both_ways) {
    if (!tu_have_torch()) return;
    for (int libuv = 1; libuv >= 0; libuv--) {
        Server sv = server_start(libuv);
        TcpStore s;
        char err[700], ans[256];
        cr_assert(tcpstore_open(&s, "127.0.0.1", sv.port, "/yolocc/test/", 10, err, sizeof err), "%s", err);
        /* ours read by PyTorch's client (whose keys start with '/'), and the other way */
        cr_assert(tcpstore_set(&s, "a", "hello", 5, 10, err, sizeof err), "%s", err);
        server_ask(&sv, "get yolocc/test/a\n", ans, sizeof ans);
        cr_expect_str_eq(ans, "hello");
        server_ask(&sv, "set yolocc/test/b world\n", ans, sizeof ans);
        char got[5];
        cr_assert(tcpstore_get(&s, "b", got, 5, 10, err, sizeof err), "%s", err);
        cr_expect(memcmp(got, "world", 5) == 0);
        /* ADD keeps decimal text, as PyTorch's add does */
        int64_t v = 0;
        cr_assert(tcpstore_add(&s, "n", 40, &v, 10, err, sizeof err) && v == 40, "%s", err);
        cr_assert(tcpstore_add(&s, "n", 2, &v, 10, err, sizeof err) && v == 42, "%s", err);
        server_ask(&sv, "get yolocc/test/n\n", ans, sizeof ans);
        cr_expect_str_eq(ans, "42");
        /* the largest value goes whole */
        unsigned char *big = malloc(TCPSTORE_MAX_VALUE), *back = malloc(TCPSTORE_MAX_VALUE);
        for (size_t i = 0; i < TCPSTORE_MAX_VALUE; i++) big[i] = (unsigned char)(i * 2654435761u >> 13);
        cr_assert(tcpstore_set(&s, "big", big, TCPSTORE_MAX_VALUE, 10, err, sizeof err), "%s", err);
        cr_assert(tcpstore_get(&s, "big", back, TCPSTORE_MAX_VALUE, 10, err, sizeof err), "%s", err);
        cr_expect(memcmp(big, back, TCPSTORE_MAX_VALUE) == 0);
        cr_expect(!tcpstore_set(&s, "bigger", big, TCPSTORE_MAX_VALUE + 1, 10, err, sizeof err) && strstr(err, "at most"), "%s", err);
        free(big);
        free(back);
        tcpstore_close(&s);
        /* a value of another size than expected is an error, not a short read */
        cr_assert(tcpstore_open(&s, "127.0.0.1", sv.port, "/yolocc/test/", 10, err, sizeof err), "%s", err);
        cr_expect(!tcpstore_get(&s, "a", got, 4, 10, err, sizeof err) && strstr(err, "holds 5 bytes where 4 belong"), "%s", err);
        tcpstore_close(&s);
        /* a key that never comes: the wait ends at its limit, cancelled, and says so */
        cr_assert(tcpstore_open(&s, "127.0.0.1", sv.port, "/yolocc/test/", 10, err, sizeof err), "%s", err);
        double t0 = sock_now_s();
        cr_expect(!tcpstore_get(&s, "never", got, 5, 0.5, err, sizeof err) && s.timed_out, "%s", err);
        cr_expect(strstr(err, "'/yolocc/test/never' did not appear within 0.5 s") && !strchr(err, '\n'), "%s", err);
        cr_expect_lt(sock_now_s() - t0, 5.0);
        /* deleted keys are gone for PyTorch's client too */
        TcpStore d;
        cr_assert(tcpstore_open(&d, "127.0.0.1", sv.port, "/yolocc/test/", 10, err, sizeof err), "%s", err);
        cr_assert(tcpstore_delete(&d, "a", 10, err, sizeof err), "%s", err);
        cr_expect(!tcpstore_get(&d, "a", got, 5, 0.3, err, sizeof err) && d.timed_out, "%s", err);
        tcpstore_close(&d);
        tcpstore_close(&s);
        server_stop(&sv);
    }
}

/* ------------------------------------------------------- the collectives */

enum { RANKS = 3, FLOATS = (5 << 20) / 4 + 7 }; /* 5 MiB and a bit: two chunks, the second short */

typedef struct RankRun {
    int rank, port;
    bool ok;
    char err[1024], agree_err[1024];
    unsigned char *bcast;   /* 9 MiB from rank 1 */
    float *region;
} RankRun;

static unsigned char bcast_byte(size_t i) { return (unsigned char)(i * 40503u >> 7); }
static float grad_of(int r, size_t i) { return (float)(r + 1) * 0.37f + (float)(i % 1000) * 1e-3f * (float)(r * 2 - 1); }

static void *rank_main(void *arg) {
    RankRun *m = arg;
    Ranks r = {.source = RANKS_TORCHRUN, .rank = m->rank, .world = RANKS, .local_rank = m->rank, .local_world = RANKS, .master_port = m->port, .agent_store = true};
    snprintf(r.master_addr, sizeof r.master_addr, "127.0.0.1");
    snprintf(r.run_id, sizeof r.run_id, "test");
    DistComm d;
    const size_t nb = (size_t)9 << 20;
    m->bcast = malloc(nb);
    m->region = malloc(sizeof(float) * FLOATS);
    for (size_t i = 0; i < nb; i++) m->bcast[i] = m->rank == 1 ? bcast_byte(i) : 0;
    for (size_t i = 0; i < FLOATS; i++) m->region[i] = grad_of(m->rank, i);
    BucketLayout l = {.total_bytes = (int64_t)sizeof(float) * FLOATS, .n_buckets = 1};
    m->ok = store_comm_init(&d, &r, false, m->err, sizeof m->err) && dist_broadcast(&d, m->bcast, nb, 1, "a test blob", m->err, sizeof m->err) &&
            dist_agree_u64(&d, 77, "seventy-seven", m->err, sizeof m->err) && dist_allreduce_sum(&d, m->region, &l, m->err, sizeof m->err);
    /* a disagreement is an error on every rank, naming the range */
    if (m->ok && dist_agree_u64(&d, 100 + (uint64_t)m->rank, "the rank's number", m->agree_err, sizeof m->agree_err)) snprintf(m->agree_err, sizeof m->agree_err, "agreed");
    dist_finalize(&d, 0);
    return NULL;
}

/* 3 ranks' collectives through the store at port; their results checked */
static void run_collectives(int port) {
    RankRun m[RANKS];
    pthread_t th[RANKS];
    for (int r = 0; r < RANKS; r++) {
        m[r] = (RankRun){.rank = r, .port = port};
        cr_assert(pthread_create(&th[r], NULL, rank_main, &m[r]) == 0);
    }
    for (int r = 0; r < RANKS; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < RANKS; r++) {
        cr_assert(m[r].ok, "rank %d: %s", r, m[r].err);
        size_t bad = 0;
        for (size_t i = 0; i < ((size_t)9 << 20); i++) bad += m[r].bcast[i] != bcast_byte(i);
        cr_expect_eq(bad, 0, "rank %d: %zu bytes of the broadcast differ", r, bad);
        /* rank 0's values, then rank 1's, then rank 2's added: the same bits on every rank */
        bad = 0;
        for (size_t i = 0; i < FLOATS; i++) {
            float want = grad_of(0, i);
            want += grad_of(1, i);
            want += grad_of(2, i);
            bad += memcmp(&want, &m[r].region[i], 4) != 0;
        }
        cr_expect_eq(bad, 0, "rank %d: %zu sums differ", r, bad);
        cr_expect(strstr(m[r].agree_err, "the ranks disagree on the rank's number (values from 0x64 to 0x66"), "rank %d: %s", r, m[r].agree_err);
        free(m[r].bcast);
        free(m[r].region);
    }
}

Test(tcpstore, collectives_through_pytorchs_store) {
    if (!tu_have_torch()) return;
    Server sv = server_start(true);
    char before[64], after[64];
    server_ask(&sv, "num\n", before, sizeof before);
    run_collectives(sv.port);
    /* every key a collective wrote was deleted by its last reader */
    server_ask(&sv, "num\n", after, sizeof after);
    cr_expect_str_eq(after, before, "the store held %s keys before and %s after", before, after);
    server_stop(&sv);
}

/* ------------------------------------------------------- yolort's own server */

typedef struct Serving {
    StoreServer *s;
    volatile int stop;
    bool ok;
    char err[512];
} Serving;

static void *serve_main(void *arg) {
    Serving *v = arg;
    v->ok = true;
    while (!v->stop && v->ok) v->ok = store_server_serve(v->s, 20, v->err, sizeof v->err);
    return NULL;
}

/* The same collectives through the server `yolort train --ranks N` runs. */
Test(tcpstore, collectives_through_yolorts_server) {
    int port = 0;
    char err[512];
    Serving v = {.s = store_server_open(&port, err, sizeof err)};
    cr_assert(v.s, "%s", err);
    pthread_t th;
    cr_assert(pthread_create(&th, NULL, serve_main, &v) == 0);
    run_collectives(port);
    v.stop = 1;
    pthread_join(th, NULL);
    cr_expect(v.ok, "%s", v.err);
    store_server_close(v.s);
}

/* PyTorch's own client against yolort's server: what it sets, adds, checks,
 * waits for, counts and deletes (the server speaks the protocol, not only
 * to yolocc's client). */
Test(tcpstore, pytorchs_client_against_yolorts_server) {
    if (!tu_have_torch()) return;
    int port = 0;
    char err[512], cmd[2048];
    Serving v = {.s = store_server_open(&port, err, sizeof err)};
    cr_assert(v.s, "%s", err);
    pthread_t th;
    cr_assert(pthread_create(&th, NULL, serve_main, &v) == 0);
    snprintf(cmd, sizeof cmd,
             "%s -c \"\n"
             "from datetime import timedelta\n"
             "from torch.distributed import TCPStore\n"
             "s = TCPStore('127.0.0.1', %d, None, False, timedelta(seconds=10))\n"
             "s.set('a', 'hello'); assert s.get('a') == b'hello'\n"
             "assert s.add('n', 40) == 40 and s.add('n', 2) == 42 and s.get('n') == b'42'\n"
             "s.wait(['a', 'n']); assert s.check(['a']) and not s.check(['a', 'missing'])\n"
             "assert s.num_keys() == 2, s.num_keys()\n"
             "assert s.delete_key('a') and not s.delete_key('a') and not s.check(['a'])\n"
             "s.set('big', b'x' * (4 << 20)); assert s.get('big') == b'x' * (4 << 20)\n"
             "print('all answered')\n"
             "\" 2>&1",
             tu_torch_python(), port);
    char out[4096];
    int st = tu_popen_read(cmd, out, sizeof out);
    cr_expect(st == 0 && strstr(out, "all answered"), "exit %d:\n%s", st, out);
    v.stop = 1;
    pthread_join(th, NULL);
    cr_expect(v.ok, "%s", v.err);
    store_server_close(v.s);
}
