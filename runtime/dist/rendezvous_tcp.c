/* runtime/dist/rendezvous_tcp.c — rank 0 shares a blob with every rank over
 * TCP (protocol in rendezvous_tcp.h): non-blocking sockets polled against one
 * deadline. Owns these sockets only; must not touch MPI, NCCL, CUDA or signals. */
#include "rendezvous_tcp.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "sock.h"

enum { MAGIC = 0x59524456u /* "YRDV" */, VERSION = 1, HDR = 24, MAX_TEXT = 1024, MAX_LISTEN = 8 };
enum { K_HELLO = 1, K_BLOB = 2, K_ABORT = 3, K_ACK = 4, K_DONE = 5 };

typedef struct Hdr {
    uint32_t magic;
    uint16_t version, kind;
    uint32_t a, b;
    uint64_t len;
} Hdr;

typedef struct Ctx {
    const Ranks *r;
    char where[300];    /* "HOST:PORT" or "[HOST]:PORT" */
    char *err;
    int errcap;
    char why[MAX_TEXT + 1];   /* the last failure without the prefix: the text rank 0 sends to its peers */
} Ctx;

static void put_be(unsigned char *p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--, v >>= 8) p[i] = (unsigned char)(v & 0xff);
}
static uint64_t get_be(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v = v << 8 | p[i];
    return v;
}
static void put_hdr(unsigned char *p, uint16_t kind, uint32_t a, uint32_t b, uint64_t len) {
    put_be(p, MAGIC, 4), put_be(p + 4, VERSION, 2), put_be(p + 6, kind, 2);
    put_be(p + 8, a, 4), put_be(p + 12, b, 4), put_be(p + 16, len, 8);
}
static Hdr get_hdr(const unsigned char *p) {
    return (Hdr){(uint32_t)get_be(p, 4), (uint16_t)get_be(p + 4, 2), (uint16_t)get_be(p + 6, 2), (uint32_t)get_be(p + 8, 4), (uint32_t)get_be(p + 12, 4),
                 get_be(p + 16, 8)};
}

/* "rendezvous at WHERE: " + the message, one line; returns false */
static bool fail(Ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(Ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->why, sizeof c->why, fmt, ap);
    va_end(ap);
    return errf(c->err, c->errcap, "rendezvous at %s: %s", c->where, c->why);
}

/* bytes shown as text where printable, for naming what a stranger sent */
static void show_bytes(const unsigned char *p, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\' ? "%c" : "\\x%02x", p[i]);
    out[o] = 0;
}

/* ---------------------------------------------------------------- rank 0 */

typedef struct Peer {
    int fd;
    int rank;           /* -1 until its hello was accepted */
    size_t got;         /* bytes of hdr received */
    unsigned char hdr[HDR];
    char addr[NI_MAXHOST + NI_MAXSERV + 4];
} Peer;

typedef struct Root {
    Ctx *c;
    int lfd[MAX_LISTEN], n_lfd;
    Peer *peers;
    int n_peers, cap_peers;
    int *slot;          /* per rank: index into peers, or -1 */
    int arrived;
    struct pollfd *pfd;
    int *pfd_peer;      /* per pollfd: peer index, or -1 for a listening socket */
} Root;

static bool root_listen(Root *R) {
    Ctx *c = R->c;
    char port[16];
    snprintf(port, sizeof port, "%d", c->r->master_port);
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(NULL, port, &hints, &res);
    if (gai != 0) return fail(c, "rank 0 cannot look up its listening addresses: %s", gai_strerror(gai));
    bool ok = true;
    for (struct addrinfo *ai = res; ai && ok && R->n_lfd < MAX_LISTEN; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), one = 1;
        if (fd < 0) {
            /* a family this host lacks (IPv6 disabled) is skipped; the other serves */
            if (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT) continue;
            ok = fail(c, "rank 0 cannot create a socket: %s", strerror(errno));
            break;
        }
        /* IPv6 only on the IPv6 socket, so the IPv4 wildcard can take the same port */
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            (ai->ai_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)) {
            ok = fail(c, "rank 0 cannot set socket options: %s", strerror(errno));
        } else if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            if (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT) {
                sock_close(&fd);
                continue;
            }
            ok = fail(c, "rank 0 cannot listen on port %d: bind: %s%s", c->r->master_port, strerror(errno),
                      errno == EADDRINUSE ? " (another job or process uses MASTER_PORT; choose another)" : "");
        } else if (listen(fd, SOMAXCONN) < 0 || !sock_prep(fd)) {
            ok = fail(c, "rank 0 cannot listen on port %d: %s", c->r->master_port, strerror(errno));
        }
        if (!ok) {
            sock_close(&fd);
            break;
        }
        R->lfd[R->n_lfd++] = fd;
    }
    freeaddrinfo(res);
    if (ok && R->n_lfd == 0) return fail(c, "rank 0 found no IPv4 or IPv6 address to listen on");
    return ok;
}

/* ranks that are not in slot (or, acked != NULL, not yet acknowledged), as "2, 5-7" */
static void missing_ranks(const Root *R, const bool *acked, char *out, size_t cap) {
    size_t o = 0;
    int world = R->c->r->world, shown = 0, missing = 0;
    out[0] = 0;
    for (int k = 1; k < world; k++) {
        bool miss = acked ? !acked[k] : R->slot[k] < 0;
        if (!miss) continue;
        int end = k;
        while (end + 1 < world && (acked ? !acked[end + 1] : R->slot[end + 1] < 0)) end++;
        missing += end - k + 1;
        if (shown < 16 && o + 32 < cap) o += (size_t)snprintf(out + o, cap - o, end > k ? "%s%d-%d" : "%s%d", shown ? ", " : "", k, end), shown++;
        k = end;
    }
    if (shown == 16 && o + 32 < cap) snprintf(out + o, cap - o, ", ... (%d in all)", missing);
}

static bool root_accept(Root *R, int lfd) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept(lfd, (struct sockaddr *)&sa, &len);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE)
                return fail(R->c, "rank 0 ran out of file descriptors with %d of %d peers connected: raise `ulimit -n` above the world size", R->arrived,
                            R->c->r->world - 1);
            return fail(R->c, "rank 0 cannot accept a connection: %s", strerror(errno));
        }
        if (R->n_peers == R->cap_peers) {
            int cap = R->cap_peers ? 2 * R->cap_peers : 16;
            Peer *p = realloc(R->peers, (size_t)cap * sizeof *p);
            if (!p) {
                sock_close(&fd);
                return fail(R->c, "out of memory");
            }
            R->peers = p, R->cap_peers = cap;
        }
        Peer *p = &R->peers[R->n_peers++];
        *p = (Peer){.fd = fd, .rank = -1};
        sock_addr_text((struct sockaddr *)&sa, len, p->addr, sizeof p->addr);
        if (!sock_prep(fd)) return fail(R->c, "rank 0 cannot set up the connection from %s: %s", p->addr, strerror(errno));
    }
}

/* checks a complete hello; false with the reason (the caller aborts the rendezvous) */
static bool root_check_hello(Root *R, Peer *p, size_t n) {
    Ctx *c = R->c;
    Hdr h = get_hdr(p->hdr);
    if (h.version != VERSION) return fail(c, "peer %s speaks rendezvous protocol version %u, rank 0 speaks %d (mixed yolort builds?)", p->addr, h.version, VERSION);
    if (h.kind != K_HELLO) return fail(c, "peer %s sent message kind %u where a hello belongs", p->addr, h.kind);
    if (h.b != (uint32_t)c->r->world) return fail(c, "peer %s (rank %u) says the world size is %u, rank 0 has %d", p->addr, h.a, h.b, c->r->world);
    if (h.a < 1 || h.a >= (uint32_t)c->r->world) return fail(c, "peer %s says it is rank %u, outside 1..%d", p->addr, h.a, c->r->world - 1);
    if (R->slot[h.a] >= 0) return fail(c, "peer %s says it is rank %u, which peer %s already is", p->addr, h.a, R->peers[R->slot[h.a]].addr);
    if (h.len != n) return fail(c, "peer %s (rank %u) expects %llu bytes, rank 0 shares %zu", p->addr, h.a, (unsigned long long)h.len, n);
    p->rank = (int)h.a;
    R->slot[h.a] = (int)(p - R->peers);
    R->arrived++;
    return true;
}

/* reads what a not-yet-known peer sent; false on a bad hello */
static bool root_read_hello(Root *R, int i, size_t n) {
    Peer *p = &R->peers[i];
    for (;;) {
        ssize_t k = recv(p->fd, p->hdr + p->got, HDR - p->got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        if (k <= 0 && p->got == 0) {
            sock_close(&p->fd); /* closed or reset before its first byte: an abandoned attempt or a probe */
            return true;
        }
        if (k < 0) return fail(R->c, "peer %s failed after %zu bytes of its hello: %s", p->addr, p->got, strerror(errno));
        if (k == 0) return fail(R->c, "peer %s closed its connection after %zu of the %d bytes of a hello", p->addr, p->got, HDR);
        p->got += (size_t)k;
        if (p->got >= 4 && get_be(p->hdr, 4) != MAGIC) {
            char shown[64];
            show_bytes(p->hdr, p->got, shown, sizeof shown);
            return fail(R->c, "peer %s is not a yolocc rank: it sent \"%s\", not a rendezvous hello", p->addr, shown);
        }
        if (p->got == HDR) return root_check_hello(R, p, n);
    }
}

static bool root_gather(Root *R, size_t n, double deadline, double timeout_s) {
    int world = R->c->r->world;
    while (R->arrived < world - 1) {
        int np = 0;
        for (int i = 0; i < R->n_lfd; i++) R->pfd[np] = (struct pollfd){R->lfd[i], POLLIN, 0}, R->pfd_peer[np++] = -1;
        for (int i = 0; i < R->n_peers; i++)
            if (R->peers[i].fd >= 0 && R->peers[i].rank < 0) R->pfd[np] = (struct pollfd){R->peers[i].fd, POLLIN, 0}, R->pfd_peer[np++] = i;
        int k = poll(R->pfd, (nfds_t)np, sock_ms_left(deadline));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return fail(R->c, "rank 0: poll failed: %s", strerror(errno));
        if (k == 0) {
            char miss[512];
            missing_ranks(R, NULL, miss, sizeof miss);
            return fail(R->c, "rank 0 waited %g s; rank%s %s of %d never arrived (%d of %d peers did)", timeout_s, world - 1 - R->arrived > 1 ? "s" : "", miss,
                        world, R->arrived, world - 1);
        }
        for (int j = 0; j < np; j++) {
            if (!R->pfd[j].revents) continue;
            if (R->pfd_peer[j] < 0 ? !root_accept(R, R->pfd[j].fd) : !root_read_hello(R, R->pfd_peer[j], n)) return false;
        }
        /* dropped connections leave holes: compact so the arrays stay as long as the live set */
        int w = 0;
        for (int i = 0; i < R->n_peers; i++) {
            if (R->peers[i].fd < 0) continue;
            if (R->peers[i].rank >= 0) R->slot[R->peers[i].rank] = w;
            R->peers[w++] = R->peers[i];
        }
        R->n_peers = w;
        if (R->n_peers + R->n_lfd > world + 64) {
            /* room for every rank plus strays; more is a flood, not a job starting */
            return fail(R->c, "rank 0 has %d connections that have not said hello for a world of %d", R->n_peers - R->arrived, world);
        }
    }
    return true;
}

/* sends kind (+ body) to every accepted peer in rank order */
static bool root_send_all(Root *R, uint16_t kind, const void *body, size_t n, double deadline) {
    unsigned char *msg = malloc(HDR + n);
    if (!msg) return fail(R->c, "out of memory");
    put_hdr(msg, kind, 0, (uint32_t)R->c->r->world, n);
    if (n) memcpy(msg + HDR, body, n);
    bool ok = true;
    for (int k = 1; k < R->c->r->world && ok; k++) {
        const Peer *p = &R->peers[R->slot[k]];
        if (sock_send_all(p->fd, msg, HDR + n, deadline) < 0)
            ok = fail(R->c, "rank 0 cannot send %s to rank %d (%s): %s", kind == K_BLOB ? "the blob" : "the confirmation", k, p->addr, strerror(errno));
    }
    free(msg);
    return ok;
}

static bool root_collect_acks(Root *R, double deadline, double timeout_s) {
    int world = R->c->r->world, left = world - 1;
    bool *acked = calloc((size_t)world, sizeof *acked);
    if (!acked) return fail(R->c, "out of memory");
    for (int i = 0; i < R->n_peers; i++) R->peers[i].got = 0;
    bool ok = true;
    while (ok && left > 0) {
        int np = 0;
        for (int k = 1; k < world; k++)
            if (!acked[k]) R->pfd[np] = (struct pollfd){R->peers[R->slot[k]].fd, POLLIN, 0}, R->pfd_peer[np++] = R->slot[k];
        int m = poll(R->pfd, (nfds_t)np, sock_ms_left(deadline));
        if (m < 0 && errno == EINTR) continue;
        if (m < 0) {
            ok = fail(R->c, "rank 0: poll failed: %s", strerror(errno));
            break;
        }
        if (m == 0) {
            char miss[512];
            missing_ranks(R, acked, miss, sizeof miss);
            ok = fail(R->c, "rank 0 waited %g s; rank%s %s of %d received the blob but never acknowledged it", timeout_s, left > 1 ? "s" : "", miss, world);
            break;
        }
        for (int j = 0; j < np && ok; j++) {
            if (!R->pfd[j].revents) continue;
            Peer *p = &R->peers[R->pfd_peer[j]];
            ssize_t k = recv(p->fd, p->hdr + p->got, HDR - p->got, 0);
            if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
            if (k <= 0) {
                ok = fail(R->c, "rank %d (%s) %s before acknowledging the blob", p->rank, p->addr, k == 0 ? "closed its connection" : strerror(errno));
                break;
            }
            p->got += (size_t)k;
            if (p->got < HDR) continue;
            Hdr h = get_hdr(p->hdr);
            if (h.magic != MAGIC || h.kind != K_ACK || h.a != (uint32_t)p->rank)
                ok = fail(R->c, "rank %d (%s) answered the blob with something other than its acknowledgement", p->rank, p->addr);
            acked[p->rank] = true, left--;
        }
    }
    free(acked);
    return ok;
}

static bool root_share(Ctx *c, const void *blob, size_t n, double timeout_s) {
    double deadline = sock_now_s() + timeout_s;
    int world = c->r->world;
    Root R = {.c = c};
    R.slot = malloc((size_t)world * sizeof *R.slot);
    /* every listening socket, every rank's connection and the strays root_gather allows */
    R.pfd = malloc((size_t)(world + 64 + MAX_LISTEN) * sizeof *R.pfd);
    R.pfd_peer = malloc((size_t)(world + 64 + MAX_LISTEN) * sizeof *R.pfd_peer);
    bool ok = R.slot && R.pfd && R.pfd_peer ? true : fail(c, "out of memory");
    if (ok) {
        for (int k = 0; k < world; k++) R.slot[k] = -1;
        ok = root_listen(&R) && root_gather(&R, n, deadline, timeout_s) && root_send_all(&R, K_BLOB, blob, n, deadline) &&
             root_collect_acks(&R, deadline, timeout_s) && root_send_all(&R, K_DONE, NULL, 0, deadline);
    }
    if (!ok) {
        /* tell every connected peer why, so it fails with rank 0's reason (best effort: one non-blocking send) */
        size_t len = strlen(c->why);
        unsigned char msg[HDR + MAX_TEXT];
        put_hdr(msg, K_ABORT, 0, (uint32_t)world, len);
        memcpy(msg + HDR, c->why, len);
        for (int i = 0; i < R.n_peers; i++)
            if (R.peers[i].fd >= 0) (void)send(R.peers[i].fd, msg, HDR + len, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    for (int i = 0; i < R.n_peers; i++) sock_close(&R.peers[i].fd);
    for (int i = 0; i < R.n_lfd; i++) sock_close(&R.lfd[i]);
    free(R.peers);
    free(R.slot);
    free(R.pfd);
    free(R.pfd_peer);
    return ok;
}

/* ----------------------------------------------------------------- peers */

/* reads one message header; false with the failure described */
static bool peer_read_hdr(Ctx *c, int fd, double deadline, const char *waiting, Hdr *h) {
    unsigned char b[HDR];
    size_t got = 0;
    int rc = sock_recv_all(fd, b, HDR, deadline, &got);
    if (rc == 1) return fail(c, "rank %d of %d: rank 0 closed the connection while this rank waited for %s", c->r->rank, c->r->world, waiting);
    if (rc < 0)
        return fail(c, "rank %d of %d: %s while waiting for %s%s", c->r->rank, c->r->world, strerror(errno), waiting,
                    errno == ETIMEDOUT ? " (another rank has not arrived, or rank 0 is stuck)" : "");
    *h = get_hdr(b);
    if (h->magic != MAGIC || h->version != VERSION) return fail(c, "rank %d of %d: the server at MASTER_ADDR:MASTER_PORT is not a yolocc rendezvous of this version", c->r->rank, c->r->world);
    if (h->kind == K_ABORT) {
        char text[MAX_TEXT + 1];
        size_t len = h->len < MAX_TEXT ? (size_t)h->len : MAX_TEXT;
        if (sock_recv_all(fd, text, len, deadline, &got) != 0) len = got;
        text[len] = 0;
        for (size_t i = 0; i < len; i++)
            if (text[i] == '\n' || text[i] == '\r') text[i] = ' ';
        return fail(c, "rank %d of %d: rank 0 gave up: %s", c->r->rank, c->r->world, text);
    }
    return true;
}

static bool peer_exchange(Ctx *c, int fd, void *blob, size_t n, double deadline) {
    const Ranks *r = c->r;
    unsigned char msg[HDR];
    put_hdr(msg, K_HELLO, (uint32_t)r->rank, (uint32_t)r->world, n);
    if (sock_send_all(fd, msg, HDR, deadline) < 0) return fail(c, "rank %d of %d: cannot send its hello: %s", r->rank, r->world, strerror(errno));
    Hdr h;
    if (!peer_read_hdr(c, fd, deadline, "the blob", &h)) return false;
    if (h.kind != K_BLOB || h.len != n)
        return fail(c, "rank %d of %d: rank 0 sent message kind %u of %llu bytes where %zu bytes of blob belong", r->rank, r->world, h.kind, (unsigned long long)h.len, n);
    unsigned char *tmp = malloc(n);
    if (!tmp) return fail(c, "out of memory");
    size_t got;
    int rc = sock_recv_all(fd, tmp, n, deadline, &got);
    bool ok = rc == 0 ? true : fail(c, "rank %d of %d: the blob stopped after %zu of %zu bytes: %s", r->rank, r->world, got, n, rc == 1 ? "rank 0 closed the connection" : strerror(errno));
    if (ok) {
        put_hdr(msg, K_ACK, (uint32_t)r->rank, (uint32_t)r->world, 0);
        if (sock_send_all(fd, msg, HDR, deadline) < 0) ok = fail(c, "rank %d of %d: cannot acknowledge the blob: %s", r->rank, r->world, strerror(errno));
    }
    /* the blob counts only once rank 0 confirms every rank has it */
    if (ok && (ok = peer_read_hdr(c, fd, deadline, "rank 0's confirmation that every rank has the blob", &h)) && h.kind != K_DONE)
        ok = fail(c, "rank %d of %d: rank 0 sent message kind %u where its confirmation belongs", r->rank, r->world, h.kind);
    if (ok) memcpy(blob, tmp, n);
    free(tmp);
    return ok;
}

static bool peer_share(Ctx *c, void *blob, size_t n, double timeout_s) {
    double deadline = sock_now_s() + timeout_s, nap = 0.01;
    char why[512] = "no attempt was made";
    for (;;) {
        int fd = sock_connect_once(c->r->master_addr, c->r->master_port, deadline, why, sizeof why);
        if (fd >= 0) {
            bool ok = peer_exchange(c, fd, blob, n, deadline);
            sock_close(&fd);
            return ok;
        }
        if (deadline - sock_now_s() <= 0)
            return fail(c, "rank %d of %d: could not reach rank 0 within %g s: %s (is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?)", c->r->rank,
                        c->r->world, timeout_s, why);
        sock_back_off(&nap, deadline); /* rank 0 may start later */
    }
}

bool rendezvous_tcp_share(const Ranks *r, void *blob, size_t n, double timeout_s, char *err, int errcap) {
    Ctx c = {.r = r, .err = err, .errcap = errcap};
    sock_where(r->master_addr, r->master_port, c.where, sizeof c.where);
    if (r->world <= 1) return true;
    if (r->rank < 0 || r->rank >= r->world) return fail(&c, "rank %d is outside 0..%d", r->rank, r->world - 1);
    if (!r->master_addr[0] || r->master_port < 1 || r->master_port > 65535) return fail(&c, "MASTER_ADDR and MASTER_PORT (1..65535) must be set");
    if (!blob || n < 1 || n > RDV_TCP_MAX_BLOB) return fail(&c, "the blob must be 1..%zu bytes, not %zu", RDV_TCP_MAX_BLOB, n);
    if (!(timeout_s > 0) || !isfinite(timeout_s)) return fail(&c, "the timeout must be a positive number of seconds");
    return r->rank == 0 ? root_share(&c, blob, n, timeout_s) : peer_share(&c, blob, n, timeout_s);
}
