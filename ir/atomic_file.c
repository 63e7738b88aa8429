/* ir/atomic_file.c — temp file + fsync + rename + directory fsync. */
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool sys_fail(char *err, int errcap, const char *what, const char *path) {
    snprintf(err, (size_t)errcap, "%s %s: %s", what, path, strerror(errno));
    return false;
}

bool atomic_write(const char *path, const void *const *chunks, const size_t *lens, int n, char *err, int errcap) {
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32), *dir = malloc(plen + 2);
    if (!tmp || !dir) {
        free(tmp);
        free(dir);
        snprintf(err, (size_t)errcap, "out of memory");
        return false;
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    bool ok = false;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        sys_fail(err, errcap, "cannot create", tmp);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const unsigned char *p = chunks[i];
        size_t left = lens[i];
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                sys_fail(err, errcap, "cannot write", tmp);
                close(fd);
                unlink(tmp);
                goto out;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (fsync(fd) != 0) {
        sys_fail(err, errcap, "cannot fsync", tmp);
        close(fd);
        unlink(tmp);
        goto out;
    }
    if (close(fd) != 0) {
        sys_fail(err, errcap, "cannot close", tmp);
        unlink(tmp);
        goto out;
    }
    if (rename(tmp, path) != 0) {
        sys_fail(err, errcap, "cannot rename to", path);
        unlink(tmp);
        goto out;
    }
    /* the rename itself is durable only once the directory is synced */
    memcpy(dir, path, plen + 1);
    char *slash = strrchr(dir, '/');
    if (slash) slash == dir ? (void)(slash[1] = 0) : (void)(*slash = 0);
    else strcpy(dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        sys_fail(err, errcap, "cannot open directory", dir);
        goto out;
    }
    if (fsync(dfd) != 0 && errno != EINVAL) {
        sys_fail(err, errcap, "cannot fsync directory", dir);
        close(dfd);
        goto out;
    }
    close(dfd);
    ok = true;
out:
    free(tmp);
    free(dir);
    return ok;
}
