/* runtime/dist/store_server.c — a TCPStore server on the loopback address or
 * on every address (see store_server.h; the wire format in tcpstore.h): one poll loop, each
 * client's bytes parsed as whole queries once they have arrived. Owns its
 * sockets and keys only; must not start processes, touch MPI, NCCL or CUDA. */
#include "store_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "sock.h"

enum { Q_VALIDATE = 0, Q_SET = 1, Q_GET = 3, Q_ADD = 4, Q_CHECK = 5, Q_WAIT = 6, Q_GETNUMKEYS = 7, Q_DELETE = 8, Q_CANCEL_WAIT = 12, Q_PING = 13 };
#define VALIDATION_MAGIC 0x3C85F7CEu
#define MAX_KEY ((size_t)64 << 10)
#define MAX_VALUE ((size_t)8 << 20) /* as PyTorch's libuv server */
#define MAX_WAIT_KEYS 4096
#define MAX_CLIENTS 4096

typedef struct Buf {
    unsigned char *p;
    size_t n, cap, at; /* at: bytes already consumed (input) or sent (output) */
} Buf;

typedef struct Client {
    int fd;
    bool validated;
    bool finished;  /* it has ADDed to a key ending in the watched suffix (store_server_watch_ends) */
    Buf in, out;
    char **waiting; /* keys of a pending WAIT not yet set */
    int n_waiting;
} Client;

typedef struct Entry {
    char *key;
    unsigned char *val;
    size_t n;
} Entry;

#define MAX_LISTEN 4

struct StoreServer {
    int lfd[MAX_LISTEN], n_lfd;
    Client *c;
    int n_c;
    Entry *e;
    int n_e, cap_e;
    char *end_suffix;   /* NULL: ends not watched */
    int lost;           /* validated clients gone before they finished */
};

static bool buf_put(Buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return true;
}

static bool put_u64(Buf *b, uint64_t v) {
    unsigned char x[8];
    for (int i = 0; i < 8; i++, v >>= 8) x[i] = (unsigned char)(v & 0xff);
    return buf_put(b, x, 8);
}

static Entry *find(StoreServer *s, const char *key, size_t kn) {
    for (int i = 0; i < s->n_e; i++)
        if (strlen(s->e[i].key) == kn && memcmp(s->e[i].key, key, kn) == 0) return &s->e[i];
    return NULL;
}

/* A reader over one client's unconsumed input: each take fails (need more) without moving on a short buffer. */
typedef struct Rd {
    const unsigned char *p;
    size_t n, at;
} Rd;

static bool take(Rd *r, size_t n, const unsigned char **out) {
    if (r->n - r->at < n) return false;
    *out = r->p + r->at;
    r->at += n;
    return true;
}
static bool take_u64(Rd *r, uint64_t *v) {
    const unsigned char *p;
    if (!take(r, 8, &p)) return false;
    *v = 0;
    for (int i = 7; i >= 0; i--) *v = *v << 8 | p[i];
    return true;
}

typedef enum { MORE, DONE, DROP, NOMEM } Step;

/* a length-prefixed string of at most max bytes: MORE until it has arrived, DROP when too long */
static Step take_str(Rd *r, size_t max, const unsigned char **p, size_t *n) {
    uint64_t len;
    if (!take_u64(r, &len)) return MORE;
    if (len > max) return DROP;
    *n = (size_t)len;
    return take(r, *n, p) ? DONE : MORE;
}

static bool wake(StoreServer *s, const char *key) {
    for (int i = 0; i < s->n_c; i++) {
        Client *c = &s->c[i];
        if (!c->n_waiting) continue;
        for (int k = 0; k < c->n_waiting; k++)
            if (strcmp(c->waiting[k], key) == 0) {
                free(c->waiting[k]);
                c->waiting[k--] = c->waiting[--c->n_waiting];
            }
        if (!c->n_waiting) {
            free(c->waiting);
            c->waiting = NULL;
            const unsigned char stop = 0;
            if (!buf_put(&c->out, &stop, 1)) return false;
        }
    }
    return true;
}

static bool set_value(StoreServer *s, const unsigned char *k, size_t kn, const unsigned char *v, size_t vn) {
    Entry *e = find(s, (const char *)k, kn);
    unsigned char *val = malloc(vn ? vn : 1);
    if (!val) return false;
    memcpy(val, v, vn);
    if (!e) {
        if (s->n_e == s->cap_e) {
            int cap = s->cap_e ? s->cap_e * 2 : 64;
            Entry *q = realloc(s->e, sizeof *q * (size_t)cap);
            if (!q) return free(val), false;
            s->e = q, s->cap_e = cap;
        }
        char *key = strndup((const char *)k, kn);
        if (!key) return free(val), false;
        e = &s->e[s->n_e++];
        *e = (Entry){.key = key};
    }
    free(e->val);
    e->val = val, e->n = vn;
    return wake(s, e->key);
}

static void clear_wait(Client *c) {
    for (int k = 0; k < c->n_waiting; k++) free(c->waiting[k]);
    free(c->waiting);
    c->waiting = NULL, c->n_waiting = 0;
}

/* the keys of a WAIT or CHECK: DONE with *missing the ones not set (kept in c->waiting for a WAIT) */
static Step wait_keys(StoreServer *s, Client *c, Rd *r, bool keep, int *missing) {
    uint64_t n;
    if (!take_u64(r, &n)) return MORE;
    if (n > MAX_WAIT_KEYS) return DROP;
    *missing = 0;
    char **pending = keep && n ? calloc((size_t)n, sizeof *pending) : NULL;
    if (keep && n && !pending) return NOMEM;
    Step st = DONE;
    for (uint64_t i = 0; i < n && st == DONE; i++) {
        const unsigned char *k;
        size_t kn;
        if ((st = take_str(r, MAX_KEY, &k, &kn)) != DONE) break;
        if (find(s, (const char *)k, kn)) continue;
        if (keep && !(pending[*missing] = strndup((const char *)k, kn))) st = NOMEM;
        (*missing)++;
    }
    if (st != DONE || !keep) {
        for (int i = 0; pending && i < *missing; i++) free(pending[i]);
        free(pending);
        return st;
    }
    clear_wait(c);
    if (*missing) c->waiting = pending, c->n_waiting = *missing;
    else free(pending);
    return DONE;
}

/* one query from c's input, if it has all arrived */
static Step query(StoreServer *s, Client *c) {
    if (c->in.at == c->in.n) return MORE; /* nothing (and perhaps no buffer yet) to read */
    Rd r = {c->in.p + c->in.at, c->in.n - c->in.at, 0};
    const unsigned char *p, *k, *v;
    size_t kn, vn;
    Step st;
    if (!take(&r, 1, &p)) return MORE;
    const int type = p[0];
    if (!c->validated && type != Q_VALIDATE) return DROP;
    switch (type) {
    case Q_VALIDATE: {
        if (!take(&r, 4, &p)) return MORE;
        if ((uint32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24) != VALIDATION_MAGIC) return DROP;
        c->validated = true;
        break;
    }
    case Q_PING:
        if (!take(&r, 4, &p)) return MORE;
        if (!buf_put(&c->out, p, 4)) return NOMEM;
        break;
    case Q_SET:
        if ((st = take_str(&r, MAX_KEY, &k, &kn)) != DONE || (st = take_str(&r, MAX_VALUE, &v, &vn)) != DONE) return st;
        if (!set_value(s, k, kn, v, vn)) return NOMEM;
        break;
    case Q_GET: {
        if ((st = take_str(&r, MAX_KEY, &k, &kn)) != DONE) return st;
        const Entry *e = find(s, (const char *)k, kn);
        if (!e) return DROP;
        if (!put_u64(&c->out, e->n) || !buf_put(&c->out, e->val, e->n)) return NOMEM;
        break;
    }
    case Q_ADD: {
        uint64_t d;
        if ((st = take_str(&r, MAX_KEY, &k, &kn)) != DONE) return st;
        if (!take_u64(&r, &d)) return MORE;
        const Entry *e = find(s, (const char *)k, kn);
        char text[32] = "0";
        if (e) {
            if (e->n >= sizeof text) return DROP;
            memcpy(text, e->val, e->n);
            text[e->n] = 0;
        }
        char *end;
        errno = 0;
        long long now = strtoll(text, &end, 10);
        if (errno || *end) return DROP; /* not a number: PyTorch's server fails the same way */
        now = (long long)((uint64_t)now + d);
        const size_t sn = s->end_suffix ? strlen(s->end_suffix) : 0;
        if (sn && kn >= sn && memcmp(k + kn - sn, s->end_suffix, sn) == 0) c->finished = true;
        int len = snprintf(text, sizeof text, "%lld", now);
        if (!set_value(s, k, kn, (const unsigned char *)text, (size_t)len) || !put_u64(&c->out, (uint64_t)now)) return NOMEM;
        break;
    }
    case Q_CHECK:
    case Q_WAIT: {
        int missing;
        if ((st = wait_keys(s, c, &r, type == Q_WAIT, &missing)) != DONE) return st;
        const unsigned char answer = type == Q_CHECK ? (missing ? 1 : 0) : 0;
        if ((type == Q_CHECK || !missing) && !buf_put(&c->out, &answer, 1)) return NOMEM;
        break;
    }
    case Q_GETNUMKEYS:
        if (!put_u64(&c->out, (uint64_t)s->n_e)) return NOMEM;
        break;
    case Q_DELETE: {
        if ((st = take_str(&r, MAX_KEY, &k, &kn)) != DONE) return st;
        Entry *e = find(s, (const char *)k, kn);
        if (e) {
            free(e->key);
            free(e->val);
            *e = s->e[--s->n_e];
        }
        if (!put_u64(&c->out, e ? 1 : 0)) return NOMEM;
        break;
    }
    case Q_CANCEL_WAIT: {
        clear_wait(c);
        const unsigned char canceled = 1;
        if (!buf_put(&c->out, &canceled, 1)) return NOMEM;
        break;
    }
    default: return DROP;
    }
    c->in.at += r.at;
    return DONE;
}

static void drop(StoreServer *s, int i) {
    Client *c = &s->c[i];
    s->lost += s->end_suffix && c->validated && !c->finished;
    sock_close(&c->fd);
    clear_wait(c);
    free(c->in.p);
    free(c->out.p);
    s->c[i] = s->c[--s->n_c];
}

StoreServer *store_server_open(int *port, char *err, int errcap) {
    StoreServer *s = calloc(1, sizeof *s);
    if (!s) return errf(err, errcap, "out of memory"), NULL;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    s->lfd[s->n_lfd++] = socket(AF_INET, SOCK_STREAM, 0);
    if (s->lfd[0] < 0 || bind(s->lfd[0], (struct sockaddr *)&a, sizeof a) < 0 || listen(s->lfd[0], SOMAXCONN) < 0 ||
        getsockname(s->lfd[0], (struct sockaddr *)&a, &len) < 0 || !sock_prep(s->lfd[0])) {
        errf(err, errcap, "the ranks' store cannot listen on 127.0.0.1: %s", strerror(errno));
        store_server_close(s);
        return NULL;
    }
    *port = ntohs(a.sin_port);
    return s;
}

StoreServer *store_server_open_any(int port, char *err, int errcap) {
    StoreServer *s = calloc(1, sizeof *s);
    if (!s) return errf(err, errcap, "out of memory"), NULL;
    char why[512];
    if ((s->n_lfd = sock_listen_any(port, s->lfd, MAX_LISTEN, why, sizeof why)) < 0) {
        s->n_lfd = 0;
        store_server_close(s);
        return errf(err, errcap, "the ranks' store (rank 0) %s", why), NULL;
    }
    return s;
}

bool store_server_watch_ends(StoreServer *s, const char *suffix) {
    free(s->end_suffix);
    return (s->end_suffix = strdup(suffix)) != NULL;
}

int store_server_lost(const StoreServer *s) { return s->lost; }

/* reads what c has sent and answers every whole query; false: drop c. A
 * client that sends its last query and closes (a rank's final SET before it
 * exits) is answered before it is dropped: its queries still count. */
static bool serve_client(StoreServer *s, Client *c, bool *nomem) {
    unsigned char chunk[65536];
    bool gone = false;
    for (;;) {
        ssize_t k = recv(c->fd, chunk, sizeof chunk, 0);
        if (k > 0) {
            /* what was consumed goes before more comes, so a streaming client's buffer stays one query long */
            if (c->in.at) memmove(c->in.p, c->in.p + c->in.at, c->in.n - c->in.at), c->in.n -= c->in.at, c->in.at = 0;
            if (!buf_put(&c->in, chunk, (size_t)k)) return *nomem = true, false;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        gone = k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
        break;
    }
    Step st;
    while ((st = query(s, c)) == DONE) {}
    if (st == NOMEM) *nomem = true;
    return st == MORE && !gone;
}

static bool flush_client(Client *c) {
    while (c->out.at < c->out.n) {
        ssize_t k = send(c->fd, c->out.p + c->out.at, c->out.n - c->out.at, MSG_NOSIGNAL);
        if (k > 0) c->out.at += (size_t)k;
        else if (k < 0 && errno == EINTR) continue;
        else return k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    c->out.at = c->out.n = 0;
    return true;
}

bool store_server_serve(StoreServer *s, int timeout_ms, char *err, int errcap) {
    const int L = s->n_lfd, n = s->n_c;
    struct pollfd *pf = malloc(sizeof *pf * ((size_t)n + (size_t)L));
    if (!pf) return errf(err, errcap, "out of memory");
    for (int j = 0; j < L; j++) pf[j] = (struct pollfd){s->lfd[j], POLLIN, 0};
    for (int i = 0; i < n; i++) pf[L + i] = (struct pollfd){s->c[i].fd, (short)(POLLIN | (s->c[i].out.n > s->c[i].out.at ? POLLOUT : 0)), 0};
    int k = poll(pf, (nfds_t)(n + L), timeout_ms);
    if (k < 0 && errno != EINTR) return free(pf), errf(err, errcap, "the ranks' store: poll: %s", strerror(errno));
    bool nomem = false;
    /* clients first, from the last: a drop moves the last client into the freed slot */
    for (int i = n - 1; k > 0 && i >= 0; i--) {
        if (!pf[L + i].revents) continue;
        Client *c = &s->c[i];
        bool keep = !(pf[L + i].revents & (POLLERR | POLLNVAL)) && serve_client(s, c, &nomem);
        if (keep) keep = flush_client(c);
        if (!keep) drop(s, i);
    }
    for (int j = 0; j < L; j++) {
        if (k <= 0 || !(pf[j].revents & POLLIN)) continue;
        for (int fd; s->n_c < MAX_CLIENTS && (fd = accept(s->lfd[j], NULL, NULL)) >= 0;) {
            Client *q = realloc(s->c, sizeof *q * ((size_t)s->n_c + 1));
            if (!q || !sock_prep(fd)) {
                close(fd);
                if (!q) nomem = true;
                break;
            }
            s->c = q;
            s->c[s->n_c++] = (Client){.fd = fd};
        }
    }
    /* answers a SET or ADD gave other clients' waits */
    for (int i = s->n_c - 1; i >= 0; i--)
        if (s->c[i].out.n > s->c[i].out.at && !flush_client(&s->c[i])) drop(s, i);
    free(pf);
    return nomem ? errf(err, errcap, "the ranks' store ran out of memory") : true;
}

void store_server_close(StoreServer *s) {
    if (!s) return;
    while (s->n_c) drop(s, s->n_c - 1);
    free(s->c);
    for (int i = 0; i < s->n_e; i++) free(s->e[i].key), free(s->e[i].val);
    free(s->e);
    for (int j = 0; j < s->n_lfd; j++) sock_close(&s->lfd[j]);
    free(s->end_suffix);
    free(s);
}
