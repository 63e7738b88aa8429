/* runtime/dist/sock.h — the TCP plumbing the TCPStore client (tcpstore.c)
 * and server (store_server.c) share: non-blocking sockets polled against one
 * deadline, connecting with back-off, listening on every address. Owns file
 * descriptors and clocks only; must not know the protocol. */
#ifndef YOLOCC_DIST_SOCK_H
#define YOLOCC_DIST_SOCK_H
#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

double sock_now_s(void);                    /* CLOCK_MONOTONIC seconds */
int sock_ms_left(double deadline);          /* for poll(): rounded up, 0 when past */
void sock_close(int *fd);                   /* closes a socket once; *fd = -1 */
bool sock_prep(int fd);                     /* non-blocking, close-on-exec, no Nagle delay */
void sock_where(const char *host, int port, char *out, size_t cap);  /* "HOST:PORT" or "[HOST]:PORT" */
void sock_addr_text(const struct sockaddr *sa, socklen_t len, char *out, size_t cap);

/* Waits until fd is ready for events: 1 ready, 0 deadline passed, -1 error (errno). */
int sock_wait(int fd, short events, double deadline);
/* 0 sent; -1 failed (errno; ETIMEDOUT when the deadline passed). Never raises SIGPIPE. */
int sock_send_all(int fd, const void *buf, size_t n, double deadline);
/* 0 received n bytes; 1 the other side closed first (*got bytes came); -1 failed (errno). */
int sock_recv_all(int fd, void *buf, size_t n, double deadline, size_t *got);

/* One connect attempt to each address host:port resolves to (IPv4, IPv6):
 * the connected, prepared socket, or -1 with why describing the last failure. */
int sock_connect_once(const char *host, int port, double deadline, char *why, size_t whycap);
/* Sleeps *nap seconds (at most until deadline), then doubles *nap up to 1 s:
 * the back-off between connect attempts while the server is not up yet. */
void sock_back_off(double *nap, double deadline);

/* Listening, prepared sockets on port at every local address (the IPv4 and
 * IPv6 wildcards, SO_REUSEADDR; a family the host lacks is skipped): how
 * many went into fds (at most cap), or -1 with why ("... bind: Address
 * already in use (another job ... uses MASTER_PORT ...)"). Every address,
 * not MASTER_ADDR's: a host often resolves its own name to a loopback alias
 * (/etc/hosts' 127.0.1.1), where other machines could not reach it. */
int sock_listen_any(int port, int *fds, int cap, char *why, size_t whycap);

#endif
