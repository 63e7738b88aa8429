/* runtime/dist/tcpstore.c — the TCPStore client (wire format in tcpstore.h):
 * each query sent whole, each reply read against one deadline. Owns its
 * socket only; must not touch MPI, NCCL or CUDA. */
#include "tcpstore.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "sock.h"

enum { Q_VALIDATE = 0, Q_SET = 1, Q_GET = 3, Q_ADD = 4, Q_WAIT = 6, Q_DELETE = 8, Q_CANCEL_WAIT = 12, Q_PING = 13 };
enum { STOP_WAITING = 0, WAIT_CANCELED = 1 };
#define VALIDATION_MAGIC 0x3C85F7CEu
/* how long a server that answered before gets to answer a cancelled wait */
#define CANCEL_S 10.0

static void put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++, v >>= 8) p[i] = (unsigned char)(v & 0xff);
}
static uint64_t get_le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static bool fail(TcpStore *s, char *err, int errcap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static bool fail(TcpStore *s, char *err, int errcap, const char *fmt, ...) {
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    s->broken = true;
    s->timed_out = false;
    return errf(err, errcap, "TCPStore at %s: %s", s->where, why);
}

/* a key as the server reads it: its length, the prefix, the key; returns the bytes written */
static size_t put_key(const TcpStore *s, unsigned char *buf, const char *key) {
    size_t lp = strlen(s->prefix), lk = strlen(key);
    put_le(buf, lp + lk, 8);
    memcpy(buf + 8, s->prefix, lp);
    memcpy(buf + 8 + lp, key, lk);
    return 8 + lp + lk;
}

static bool key_ok(TcpStore *s, const char *key, char *err, int errcap) {
    if (s->broken) return errf(err, errcap, "TCPStore at %s: an earlier exchange failed", s->where);
    if (strlen(s->prefix) + strlen(key) > TCPSTORE_MAX_KEY) return fail(s, err, errcap, "key '%s%s' is longer than %d bytes", s->prefix, key, TCPSTORE_MAX_KEY);
    return true;
}

static bool send_bytes(TcpStore *s, const void *p, size_t n, double deadline, const char *what, char *err, int errcap) {
    if (sock_send_all(s->fd, p, n, deadline) == 0) return true;
    return fail(s, err, errcap, "cannot send %s: %s", what, errno == EPIPE || errno == ECONNRESET ? "the server closed the connection" : strerror(errno));
}

static bool recv_bytes(TcpStore *s, void *p, size_t n, double deadline, const char *what, char *err, int errcap) {
    size_t got;
    int rc = sock_recv_all(s->fd, p, n, deadline, &got);
    if (rc == 0) return true;
    if (rc == 1 || errno == ECONNRESET) return fail(s, err, errcap, "the server closed the connection instead of sending %s", what);
    return fail(s, err, errcap, "%s did not come: %s", what, strerror(errno));
}

bool tcpstore_open(TcpStore *s, const char *host, int port, const char *prefix, double timeout_s, char *err, int errcap) {
    *s = (TcpStore){.fd = -1};
    sock_where(host, port, s->where, sizeof s->where);
    if (strlen(prefix) >= sizeof s->prefix) return fail(s, err, errcap, "key prefix too long");
    snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
    if (!host[0] || port < 1 || port > 65535) return fail(s, err, errcap, "MASTER_ADDR and MASTER_PORT (1..65535) must be set");
    if (!(timeout_s > 0) || !isfinite(timeout_s)) return fail(s, err, errcap, "the timeout must be a positive number of seconds");
    double deadline = sock_now_s() + timeout_s, nap = 0.01;
    char why[512] = "no attempt was made";
    while ((s->fd = sock_connect_once(host, port, deadline, why, sizeof why)) < 0) {
        if (deadline - sock_now_s() <= 0) return fail(s, err, errcap, "could not connect within %g s: %s (is the store's server, torchrun's agent or rank 0, running there?)", timeout_s, why);
        sock_back_off(&nap, deadline);
    }
    unsigned char q[10];
    q[0] = Q_VALIDATE;
    put_le(q + 1, VALIDATION_MAGIC, 4);
    q[5] = Q_PING;
    const uint32_t nonce = (uint32_t)getpid();
    put_le(q + 6, nonce, 4);
    unsigned char echo[4];
    if (!send_bytes(s, q, sizeof q, deadline, "the handshake", err, errcap)) return false;
    if (!recv_bytes(s, echo, 4, deadline, "the answer to its ping (is this torchrun's TCPStore, of PyTorch 2.5 or a protocol like it?)", err, errcap)) return false;
    if (get_le(echo, 4) != nonce) return fail(s, err, errcap, "the ping came back as %u, not %u: not a TCPStore", (unsigned)get_le(echo, 4), (unsigned)nonce);
    return true;
}

bool tcpstore_set(TcpStore *s, const char *key, const void *val, size_t n, double timeout_s, char *err, int errcap) {
    if (!key_ok(s, key, err, errcap)) return false;
    if (n > TCPSTORE_MAX_VALUE) return fail(s, err, errcap, "a %zu-byte value for '%s' (at most %zu)", n, key, TCPSTORE_MAX_VALUE);
    unsigned char q[1 + 8 + TCPSTORE_MAX_KEY + 8];
    q[0] = Q_SET;
    size_t k = 1 + put_key(s, q + 1, key);
    put_le(q + k, n, 8);
    double deadline = sock_now_s() + timeout_s;
    return send_bytes(s, q, k + 8, deadline, "a set", err, errcap) && send_bytes(s, val, n, deadline, "a value", err, errcap);
}

/* WAIT for key until timeout_s, then CANCEL_WAIT (s->timed_out) */
static bool wait_key(TcpStore *s, const char *key, double timeout_s, char *err, int errcap) {
    unsigned char q[1 + 8 + 8 + TCPSTORE_MAX_KEY], r;
    q[0] = Q_WAIT;
    put_le(q + 1, 1, 8);
    size_t k = 9 + put_key(s, q + 9, key);
    double deadline = sock_now_s() + timeout_s;
    if (!send_bytes(s, q, k, deadline, "a wait", err, errcap)) return false;
    size_t got;
    int rc = sock_recv_all(s->fd, &r, 1, deadline, &got);
    if (rc == 1) return fail(s, err, errcap, "the server closed the connection during a wait");
    if (rc < 0 && errno != ETIMEDOUT) return fail(s, err, errcap, "no answer to a wait: %s", strerror(errno));
    if (rc == 0) {
        if (r != STOP_WAITING) return fail(s, err, errcap, "answered a wait with %u", r);
        return true;
    }
    q[0] = Q_CANCEL_WAIT;
    deadline = sock_now_s() + CANCEL_S;
    if (!send_bytes(s, q, 1, deadline, "a cancel", err, errcap) || !recv_bytes(s, &r, 1, deadline, "the answer to a cancel", err, errcap)) return false;
    bool came = r == STOP_WAITING; /* the key arrived as the wait was cancelled: the cancel's own answer follows */
    if (came && !recv_bytes(s, &r, 1, deadline, "the answer to a cancel", err, errcap)) return false;
    if (r != WAIT_CANCELED) return fail(s, err, errcap, "answered a cancelled wait with %u", r);
    if (came) return true;
    fail(s, err, errcap, "'%s%s' did not appear within %g s", s->prefix, key, timeout_s);
    s->timed_out = true;
    return false;
}

bool tcpstore_get(TcpStore *s, const char *key, void *buf, size_t n, double timeout_s, char *err, int errcap) {
    s->timed_out = false;
    if (!key_ok(s, key, err, errcap) || !wait_key(s, key, timeout_s, err, errcap)) return false;
    unsigned char q[1 + 8 + TCPSTORE_MAX_KEY], len[8];
    q[0] = Q_GET;
    size_t k = 1 + put_key(s, q + 1, key);
    double deadline = sock_now_s() + timeout_s;
    if (!send_bytes(s, q, k, deadline, "a get", err, errcap) || !recv_bytes(s, len, 8, deadline, "a value's length", err, errcap)) return false;
    if (get_le(len, 8) != n) return fail(s, err, errcap, "'%s%s' holds %llu bytes where %zu belong", s->prefix, key, (unsigned long long)get_le(len, 8), n);
    return recv_bytes(s, buf, n, deadline, "a value", err, errcap);
}

/* a query answered by one i64 */
static bool query_i64(TcpStore *s, int type, const char *key, const int64_t *arg, int64_t *out, double timeout_s, const char *what, char *err, int errcap) {
    if (!key_ok(s, key, err, errcap)) return false;
    unsigned char q[1 + 8 + TCPSTORE_MAX_KEY + 8], r[8];
    q[0] = (unsigned char)type;
    size_t k = 1 + put_key(s, q + 1, key);
    if (arg) put_le(q + k, (uint64_t)*arg, 8), k += 8;
    double deadline = sock_now_s() + timeout_s;
    if (!send_bytes(s, q, k, deadline, what, err, errcap) || !recv_bytes(s, r, 8, deadline, what, err, errcap)) return false;
    *out = (int64_t)get_le(r, 8);
    return true;
}

bool tcpstore_add(TcpStore *s, const char *key, int64_t delta, int64_t *value, double timeout_s, char *err, int errcap) {
    return query_i64(s, Q_ADD, key, &delta, value, timeout_s, "an add", err, errcap);
}

bool tcpstore_delete(TcpStore *s, const char *key, double timeout_s, char *err, int errcap) {
    int64_t n;
    return query_i64(s, Q_DELETE, key, NULL, &n, timeout_s, "a delete", err, errcap);
}

void tcpstore_close(TcpStore *s) { sock_close(&s->fd); }
