/* runtime/dist/tcpstore.h — a client of PyTorch's c10d TCPStore, the
 * key-value server torchrun's agent runs at MASTER_ADDR:MASTER_PORT
 * (TORCHELASTIC_USE_AGENT_STORE=True), `yolort --ranks` serves on the
 * loopback and rank 0 serves itself when no launcher does (store_host.h). Owns its socket only; must not touch MPI, NCCL or CUDA.
 *
 * The wire format (checked against PyTorch 2.5.1, 2.11.0 and 2.15.0: libuv and classic
 * servers, tests/test_tcpstore.c): after connecting, VALIDATE (one byte 0,
 * u32 0x3C85F7CE) and PING (13, u32 nonce; the server echoes the nonce).
 * Every query is one type byte, then its arguments: a string or value is a
 * u64 length and its bytes, numbers little-endian.
 *   SET 1 key value              no reply
 *   GET 3 key                    value (the key must exist: WAIT first)
 *   ADD 4 key i64                the new i64 (the value is its decimal text)
 *   WAIT 6 u64 n, n keys         u8 0 once every key exists
 *   DELETE_KEY 8 key             i64 number deleted
 *   CANCEL_WAIT 12               u8 1 (after a pending WAIT's 0, if it raced)
 * The libuv server refuses values above 8 MiB (TCPSTORE_MAX_VALUE keeps
 * below) and closes a connection on anything malformed. */
#ifndef YOLOCC_DIST_TCPSTORE_H
#define YOLOCC_DIST_TCPSTORE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TCPSTORE_MAX_VALUE ((size_t)4 << 20)
#define TCPSTORE_MAX_KEY 1024

typedef struct TcpStore {
    int fd;
    char where[300];    /* "HOST:PORT" for messages */
    char prefix[400];   /* put before every key */
    bool broken;        /* a failed exchange: the connection's state is unknown, nothing more is sent */
    bool timed_out;     /* the last failure was a wait reaching its limit */
} TcpStore;

/* Connects (retrying with back-off while the server is not up, for at most
 * timeout_s), validates and pings. Errors are one line: "TCPStore at
 * HOST:PORT: ...". */
bool tcpstore_open(TcpStore *s, const char *host, int port, const char *prefix, double timeout_s, char *err, int errcap);
bool tcpstore_set(TcpStore *s, const char *key, const void *val, size_t n, double timeout_s, char *err, int errcap);
/* Waits up to timeout_s for key (s->timed_out when it never came), then
 * reads its value, which must be exactly n bytes, into buf. */
bool tcpstore_get(TcpStore *s, const char *key, void *buf, size_t n, double timeout_s, char *err, int errcap);
bool tcpstore_add(TcpStore *s, const char *key, int64_t delta, int64_t *value, double timeout_s, char *err, int errcap);
bool tcpstore_delete(TcpStore *s, const char *key, double timeout_s, char *err, int errcap);
void tcpstore_close(TcpStore *s);

#endif
