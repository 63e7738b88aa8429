/* runtime/dist/store_server.h — the server side of the TCPStore protocol
 * (tcpstore.h), as much of it as yolort's ranks and PyTorch's client use
 * (VALIDATE, PING, SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY,
 * CANCEL_WAIT), on the loopback address: what `yolort train --ranks N`
 * serves to the ranks it starts, as torchrun's agent does; or on every
 * address at MASTER_PORT, where rank 0 serves the others when no launcher
 * does (store_host.h). Owns its sockets
 * and keys only; must not start processes, touch MPI, NCCL or CUDA. A client
 * that sends anything else, a bad validation or a GET of a missing key is
 * disconnected (as PyTorch's servers do); the others go on. */
#ifndef YOLOCC_DIST_STORE_SERVER_H
#define YOLOCC_DIST_STORE_SERVER_H
#include <stdbool.h>

typedef struct StoreServer StoreServer;

/* Listens on 127.0.0.1 at a free port (*port says which). */
StoreServer *store_server_open(int *port, char *err, int errcap);
/* Listens at port on every local address (sock_listen_any). */
StoreServer *store_server_open_any(int port, char *err, int errcap);
/* Serves whatever arrives within timeout_ms (poll), then returns; false only
 * on the server's own failure (out of memory, the listening socket broken). */
bool store_server_serve(StoreServer *s, int timeout_ms, char *err, int errcap);
/* Watches the clients' ends: one that has ADDed to a key ending in suffix
 * has finished; a validated client that closes (or is dropped) before that
 * counts as lost. False when out of memory. */
bool store_server_watch_ends(StoreServer *s, const char *suffix);
int store_server_lost(const StoreServer *s);
void store_server_close(StoreServer *s);

#endif
