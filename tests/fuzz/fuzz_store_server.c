/* tests/fuzz/fuzz_store_server.c — libFuzzer harness for the TCPStore
 * server `yolort train --ranks N` runs (runtime/dist/store_server.c): the
 * bytes arrive from one client, as a stranger on the port would send them,
 * in pieces the first byte sizes; a well-behaved client then sets and gets a
 * key, and must be answered whatever the first one did. Owns this harness
 * only; seeds are tests/fuzz/seeds/fuzz_store_server/ (queries as yolocc's
 * client sends them). Crashes, sanitizer reports, leaks and aborts are
 * findings; so is a server that stops serving.
 * Build and run: make build/fuzz/fuzz_store_server, then
 * FUZZ_SECONDS=N ./scripts/fuzz.sh build/fuzz/fuzz_store_server */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../runtime/dist/sock.h"
#include "../../runtime/dist/store_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what, const char *detail) {
    if (ok) return;
    fprintf(stderr, "fuzz_store_server: %s (%s)\n", what, detail ? detail : "");
    abort();
}

/* libFuzzer's own signals may interrupt a connect: sock_connect_once waits it out */
static int connect_to(int port) {
    char why[256] = "";
    int fd = sock_connect_once("127.0.0.1", port, sock_now_s() + 10, why, sizeof why);
    check(fd >= 0, "cannot connect", why);
    /* closed with a reset, not into TIME_WAIT: thousands of connections a
     * second would otherwise use up the loopback's ephemeral ports */
    struct linger no = {1, 0};
    check(setsockopt(fd, SOL_SOCKET, SO_LINGER, &no, sizeof no) == 0, "cannot set SO_LINGER", strerror(errno));
    return fd;
}

static void serve(StoreServer *s, int rounds) {
    char err[256];
    for (int i = 0; i < rounds; i++) check(store_server_serve(s, 0, err, sizeof err), "the server failed", err);
}

static size_t put_key(unsigned char *q, const char *key) {
    uint64_t n = strlen(key);
    for (int i = 0; i < 8; i++) q[i] = (unsigned char)(n >> (8 * i));
    memcpy(q + 8, key, n);
    return 8 + n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1 << 16)) return 0;
    int port = 0;
    char err[256];
    StoreServer *s = store_server_open(&port, err, sizeof err);
    check(s != NULL, "cannot open the server", err);
    int bad = connect_to(port);
    /* the stranger's bytes in pieces of (first byte % 64) + 1, served in between */
    const size_t piece = (size_t)(data[0] % 64) + 1;
    for (size_t at = 1; at < size;) {
        size_t n = size - at < piece ? size - at : piece;
        ssize_t k = send(bad, data + at, n, MSG_NOSIGNAL);
        if (k <= 0) break; /* dropped by the server, or its buffer full: the rest need not arrive */
        at += (size_t)k;
        serve(s, 2);
    }
    serve(s, 2);
    /* the well-behaved client: VALIDATE, PING 7, SET k v, WAIT k, GET k */
    int good = connect_to(port);
    unsigned char q[128], *p = q;
    const unsigned char hello[] = {0, 0xCE, 0xF7, 0x85, 0x3C, 13, 7, 0, 0, 0};
    memcpy(p, hello, sizeof hello), p += sizeof hello;
    *p++ = 1, p += put_key(p, "/fuzz/k"), p += put_key(p, "v!");
    *p++ = 6, memset(p, 0, 8), *p = 1, p += 8, p += put_key(p, "/fuzz/k");
    *p++ = 3, p += put_key(p, "/fuzz/k");
    check(sock_send_all(good, q, (size_t)(p - q), sock_now_s() + 10) == 0, "cannot send", strerror(errno));
    const unsigned char want[] = {7, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'v', '!'};
    unsigned char got[sizeof want];
    size_t have = 0;
    for (const double until = sock_now_s() + 10; have < sizeof got && sock_now_s() < until;) {
        char why[256];
        check(store_server_serve(s, 1, why, sizeof why), "the server failed", why);
        ssize_t k = recv(good, got + have, sizeof got - have, 0);
        if (k > 0) have += (size_t)k;
    }
    check(have == sizeof want && memcmp(got, want, sizeof want) == 0, "a well-behaved client was not answered after the stranger", NULL);
    close(bad);
    close(good);
    serve(s, 1);
    store_server_close(s);
    return 0;
}
