/* runtime/dist/rendezvous_tcp.h — the rendezvous without MPI: rank 0 hands
 * one blob (the NCCL unique id) to every other rank over TCP at
 * MASTER_ADDR:MASTER_PORT, like torch's TCPStore but for this one exchange.
 * Owns its sockets only; must not touch MPI, NCCL, CUDA or signal handlers. */
#ifndef YOLOCC_DIST_RENDEZVOUS_TCP_H
#define YOLOCC_DIST_RENDEZVOUS_TCP_H
#include <stdbool.h>
#include <stddef.h>

#include "ranks.h"

/* The largest blob: the NCCL id is 128 bytes; the limit keeps a hostile
 * hello from making rank 0 promise (or a peer accept) a huge transfer. */
#define RDV_TCP_MAX_BLOB ((size_t)1 << 20)

/* Protocol (version 1). Every message starts with a 24-byte header, all
 * fields big-endian: u32 magic 'YRDV', u16 version, u16 kind, u32 a, u32 b,
 * u64 len, then len bytes.
 *   peer -> rank 0  HELLO  a = rank, b = world, len = blob size (no body)
 *   rank 0 -> peer  BLOB   b = world, len = n, then the blob
 *   rank 0 -> peer  ABORT  len = text length, then why rank 0 gave up
 *   peer -> rank 0  ACK    a = rank, b = world (no body)
 *
 * Rank 0 (r->rank == 0) listens on MASTER_PORT on every local address
 * (IPv4 and IPv6 wildcards, SO_REUSEADDR): MASTER_ADDR names rank 0 for the
 * peers, but a host often resolves its own name to a loopback alias
 * (/etc/hosts' 127.0.1.1), where remote peers could not reach it. It waits
 * for a valid HELLO from each of ranks 1..world-1, and only when all have
 * arrived sends the blob to every one, then waits for every ACK: on success
 * all ranks hold the blob, on failure rank 0 sends ABORT with its reason to
 * the peers it has, so they fail with the same reason instead of timing out.
 * A connection that closes without sending a byte is dropped quietly (a
 * peer's abandoned connect attempt, a port probe); anything else malformed
 * (bad magic, other version, world-size or blob-size mismatch, rank out of
 * range, duplicate rank, a partial hello) fails the rendezvous naming the
 * peer's address and what was wrong.
 *
 * A peer connects to MASTER_ADDR:MASTER_PORT (every address getaddrinfo
 * gives, IPv4 and IPv6), retrying with backoff (10 ms doubling to 1 s) while
 * rank 0 is not up yet, sends HELLO, receives the blob into blob (exactly n
 * bytes) and sends ACK.
 *
 * timeout_s bounds the whole call (resolving, connecting, waiting for the
 * other ranks). Rank 0's timeout names the ranks that never arrived (or never
 * acknowledged). Errors are one line: "rendezvous at HOST:PORT: ...". Every
 * socket is closed on every path; SIGPIPE is never raised (MSG_NOSIGNAL);
 * EINTR is retried. Rank 0 holds world - 1 connections at once, so a large
 * job needs `ulimit -n` above the world size (said in the error if not).
 *
 * world 1: returns true at once. n must be 1..RDV_TCP_MAX_BLOB. */
bool rendezvous_tcp_share(const Ranks *r, void *blob, size_t n, double timeout_s, char *err, int errcap);

#endif
