/* runtime/dist/sock.c — non-blocking TCP sockets polled against one deadline
 * (see sock.h). Owns file descriptors and clocks only; must not know the
 * TCPStore protocol. */
#include "sock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double sock_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* rounded up, so a wait never ends early */
int sock_ms_left(double deadline) {
    double ms = ceil((deadline - sock_now_s()) * 1e3);
    return ms <= 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

void sock_close(int *fd) {
    if (*fd >= 0) (void)close(*fd); /* nothing can be retried on a failed close of a socket */
    *fd = -1;
}

bool sock_prep(int fd) {
    int fl = fcntl(fd, F_GETFL);
    int one = 1;
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) return false;
    /* small messages answered at once: no Nagle delay (failure only costs latency) */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return true;
}

void sock_where(const char *host, int port, char *out, size_t cap) {
    snprintf(out, cap, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host[0] ? host : "(no MASTER_ADDR)", port);
}

void sock_addr_text(const struct sockaddr *sa, socklen_t len, char *out, size_t cap) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, cap, "an unknown address");
        return;
    }
    snprintf(out, cap, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, serv);
}

int sock_wait(int fd, short events, double deadline) {
    for (;;) {
        struct pollfd p = {fd, events, 0};
        int k = poll(&p, 1, sock_ms_left(deadline));
        if (k > 0) return 1;
        if (k == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

int sock_send_all(int fd, const void *buf, size_t n, double deadline) {
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k > 0) {
            p += k, n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        int w = sock_wait(fd, POLLOUT, deadline);
        if (w <= 0) return w == 0 ? (errno = ETIMEDOUT, -1) : -1;
    }
    return 0;
}

int sock_recv_all(int fd, void *buf, size_t n, double deadline, size_t *got) {
    unsigned char *p = buf;
    *got = 0;
    while (*got < n) {
        ssize_t k = recv(fd, p + *got, n - *got, 0);
        if (k > 0) {
            *got += (size_t)k;
            continue;
        }
        if (k == 0) return 1;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        int w = sock_wait(fd, POLLIN, deadline);
        if (w <= 0) return w == 0 ? (errno = ETIMEDOUT, -1) : -1;
    }
    return 0;
}

int sock_connect_once(const char *host, int port, double deadline, char *why, size_t whycap) {
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints = {.ai_flags = AI_NUMERICSERV, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, serv, &hints, &res);
    if (gai != 0) {
        snprintf(why, whycap, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0 || !sock_prep(fd)) {
            snprintf(why, whycap, "socket: %s", strerror(errno));
            sock_close(&fd);
            continue;
        }
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen), e = rc == 0 ? 0 : errno;
        if (rc < 0 && (e == EINPROGRESS || e == EINTR)) {
            /* EINTR leaves the connect running in the background, like EINPROGRESS */
            int w = sock_wait(fd, POLLOUT, deadline);
            socklen_t len = sizeof e;
            if (w == 0) e = ETIMEDOUT;
            else if (w < 0) e = errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0) e = errno;
        }
        if (e != 0) {
            snprintf(why, whycap, "connect: %s", strerror(e));
            sock_close(&fd);
        }
    }
    freeaddrinfo(res);
    return fd;
}

void sock_back_off(double *nap, double deadline) {
    double left = deadline - sock_now_s(), s = *nap < left ? *nap : left;
    if (s > 0) {
        struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    }
    *nap = *nap * 2 < 1.0 ? *nap * 2 : 1.0;
}

int sock_listen_any(int port, int *fds, int cap, char *why, size_t whycap) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(NULL, service, &hints, &res);
    if (gai != 0) return snprintf(why, whycap, "cannot look up the addresses to listen on: %s", gai_strerror(gai)), -1;
    int n = 0;
    bool ok = true;
    for (struct addrinfo *ai = res; ai && ok && n < cap; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), one = 1;
        if (fd < 0) {
            /* a family this host lacks (IPv6 disabled) is skipped; the other serves */
            if (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT) continue;
            snprintf(why, whycap, "cannot create a socket: %s", strerror(errno));
            ok = false;
            break;
        }
        /* IPv6 only on the IPv6 socket, so the IPv4 wildcard can take the same port */
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            (ai->ai_family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)) {
            snprintf(why, whycap, "cannot set socket options: %s", strerror(errno));
            ok = false;
        } else if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            if (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT) {
                sock_close(&fd);
                continue;
            }
            snprintf(why, whycap, "cannot listen on port %d: bind: %s%s", port, strerror(errno),
                     errno == EADDRINUSE ? " (another job or process uses MASTER_PORT; choose another)" : "");
            ok = false;
        } else if (listen(fd, SOMAXCONN) < 0 || !sock_prep(fd)) {
            snprintf(why, whycap, "cannot listen on port %d: %s", port, strerror(errno));
            ok = false;
        }
        if (!ok) {
            sock_close(&fd);
            break;
        }
        fds[n++] = fd;
    }
    freeaddrinfo(res);
    if (ok && n == 0) snprintf(why, whycap, "found no IPv4 or IPv6 address to listen on"), ok = false;
    if (!ok)
        while (n > 0) sock_close(&fds[--n]);
    return ok ? n : -1;
}
