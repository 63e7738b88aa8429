/* runtime/kernel_so.c — dlopen of an in-memory shared object via memfd
 * (/proc/self/fd/N) or a private, immediately unlinked temp file. Owns only
 * the handle; must not keep files or descriptors once kernel_so_open returns. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create and mkostemp; the Makefile's feature macros do not expose them */
#endif
#include "kernel_so.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/diag.h"

typedef enum { LOAD_OK, LOAD_FAILED, LOAD_NAME_TAKEN } LoadResult;

/* The ELF header says "shared object" (ET_DYN) in the file's own byte order. */
static bool check_elf(const unsigned char *b, size_t len, char *err, int errcap) {
    if (len < EI_NIDENT + 2 || memcmp(b, ELFMAG, SELFMAG) != 0)
        return errf(err, errcap, "kernel_so: not a shared object (%zu bytes without an ELF header)", len);
    unsigned type = b[EI_DATA] == ELFDATA2MSB ? (unsigned)b[EI_NIDENT] << 8 | b[EI_NIDENT + 1] : (unsigned)b[EI_NIDENT + 1] << 8 | b[EI_NIDENT];
    if (type != ET_DYN) return errf(err, errcap, "kernel_so: not a shared object (ELF type %u, expected ET_DYN = %d)", type, ET_DYN);
    return true;
}

static bool write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* glibc hands back an already loaded object whose name matches, and fd
 * numbers (and, rarely, temp names) come back after close: loading under a
 * name that is still loaded would return the previous kernel. */
static bool name_taken(const char *path, char *why, int whycap) {
    void *old = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!old) return false;
    (void)dlclose(old); /* drops only the reference RTLD_NOLOAD just took */
    errf(why, whycap, "%s is already loaded as another object", path);
    return true;
}

static LoadResult load(KernelSo *k, int fd, const char *path, const unsigned char *bytes, size_t len, char *why, int whycap) {
    if (name_taken(path, why, whycap)) return LOAD_NAME_TAKEN;
    if (!write_all(fd, bytes, len)) {
        errf(why, whycap, "cannot write %zu bytes to %s: %s", len, path, strerror(errno));
        return LOAD_FAILED;
    }
    dlerror();
    k->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (k->handle) return LOAD_OK;
    const char *e = dlerror();
    errf(why, whycap, "%s", e ? e : "dlopen failed");
    return LOAD_FAILED;
}

/* The memfd route; LOAD_NAME_TAKEN when memfds or /proc are missing, which
 * sends the caller to the temp-file route. A /proc/self/fd/N name still
 * held by a loaded kernel is skipped by keeping that memfd open, so the next
 * one gets another number. */
static LoadResult via_memfd(KernelSo *k, const unsigned char *bytes, size_t len, char *why, int whycap) {
    enum { TRIES = 64 };
    int fds[TRIES], nfd = 0;
    LoadResult r = LOAD_NAME_TAKEN;
    while (r == LOAD_NAME_TAKEN && nfd < TRIES) {
        int fd = memfd_create("yolocc-kernel", MFD_CLOEXEC);
        if (fd < 0) {
            errf(why, whycap, "memfd_create: %s", strerror(errno));
            break;
        }
        fds[nfd++] = fd;
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (access(path, F_OK) != 0) {
            errf(why, whycap, "%s: %s (is /proc mounted?)", path, strerror(errno));
            break;
        }
        r = load(k, fd, path, bytes, len, why, whycap);
    }
    for (int i = 0; i < nfd; i++) close(fds[i]); /* a loaded object's mapping keeps its file alive */
    return r;
}

static LoadResult via_tempfile(KernelSo *k, const unsigned char *bytes, size_t len, char *why, int whycap) {
    const char *tmp = getenv("TMPDIR");
    char path[4096];
    int n = snprintf(path, sizeof path, "%s/yolocc-so-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (n < 0 || (size_t)n >= sizeof path) {
        errf(why, whycap, "TMPDIR is too long");
        return LOAD_FAILED;
    }
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        errf(why, whycap, "cannot create a temporary file %s: %s", path, strerror(errno));
        return LOAD_FAILED;
    }
    LoadResult r;
    if (fchmod(fd, 0700) != 0) {
        errf(why, whycap, "cannot chmod %s: %s", path, strerror(errno));
        r = LOAD_FAILED;
    } else {
        r = load(k, fd, path, bytes, len, why, whycap);
    }
    if (unlink(path) != 0 && r == LOAD_OK) {
        errf(why, whycap, "cannot remove %s: %s", path, strerror(errno));
        (void)dlclose(k->handle);
        k->handle = NULL;
        r = LOAD_FAILED;
    }
    close(fd);
    return r;
}

bool kernel_so_open(KernelSo *k, const unsigned char *bytes, size_t len, char *err, int errcap) {
    k->handle = NULL;
    if (!check_elf(bytes, len, err, errcap)) return false;
    char why[1024], why_memfd[512];
    LoadResult r = via_memfd(k, bytes, len, why_memfd, sizeof why_memfd);
    if (r == LOAD_OK) return true;
    if (r == LOAD_FAILED) return errf(err, errcap, "kernel_so: cannot load the shared object: %s", why_memfd);
    r = via_tempfile(k, bytes, len, why, sizeof why);
    if (r == LOAD_OK) return true;
    return errf(err, errcap, "kernel_so: cannot load the shared object: %s (after %s)", why, why_memfd);
}

void *kernel_so_sym(const KernelSo *k, const char *name) {
    if (!k->handle) return NULL;
    dlerror();
    return dlsym(k->handle, name);
}

void kernel_so_close(KernelSo *k) {
    /* a failing dlclose leaves the object mapped; the handle is dead either way */
    if (k->handle) (void)dlclose(k->handle);
    k->handle = NULL;
}
