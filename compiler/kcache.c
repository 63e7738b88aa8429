/* compiler/kcache.c — SHA-256 keys and verified cache entries on disk.
 * Owns the cache directory and entry header; must not interpret payloads or
 * hold anything in memory between calls. */
#include "kcache.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/atomic_file.h"
#include "../ir/diag.h"

/* Entry = header + payload. The header carries the key and the payload's
 * hash so a truncated, bit-flipped or misnamed file is never returned. */
#define MAGIC "yolokc01"
enum { MAGIC_LEN = 8, MD = 32, HDR = MAGIC_LEN + 8 + MD + MD, PATH_CAP = 4096 };

static void put_le64(unsigned char *p, uint64_t v) {
    for (int b = 0; b < 8; b++) p[b] = (unsigned char)(v >> (8 * b));
}

static uint64_t get_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--) v = v << 8 | p[b];
    return v;
}

/* SHA-256 of the parts; with prefixed, each part follows its 8-byte length. */
static bool digest(const void *const *parts, const size_t *lens, int n, bool prefixed, unsigned char md[MD]) {
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c) return false;
    unsigned int mdlen = 0;
    bool ok = EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1;
    for (int i = 0; ok && i < n; i++) {
        unsigned char le[8];
        put_le64(le, lens[i]);
        if (prefixed) ok = EVP_DigestUpdate(c, le, sizeof le) == 1;
        ok = ok && EVP_DigestUpdate(c, parts[i], lens[i]) == 1;
    }
    ok = ok && EVP_DigestFinal_ex(c, md, &mdlen) == 1 && mdlen == MD;
    EVP_MD_CTX_free(c);
    return ok;
}

void kcache_key(const void *const *parts, const size_t *lens, int n, char hex[65]) {
    unsigned char md[MD];
    hex[0] = 0;
    if (n < 0 || !digest(parts, lens, n, true, md)) return;
    for (int i = 0; i < MD; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

/* Also keeps keys from naming anything outside the cache directory. */
static bool key_bytes(const char *hex, unsigned char key[MD]) {
    if (!hex || strlen(hex) != 2 * MD) return false;
    for (int i = 0; i < 2 * MD; i++) {
        char c = hex[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        if (i % 2 == 0) key[i / 2] = (unsigned char)(v << 4);
        else key[i / 2] |= (unsigned char)v;
    }
    return true;
}

static bool disabled(void) {
    const char *v = getenv("YOLOCC_NO_CACHE");
    return v && *v && strcmp(v, "0") != 0;
}

/* XDG says a relative $XDG_CACHE_HOME is invalid and must be ignored. */
static bool cache_dir(char *buf, size_t cap, char *err, int errcap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/') n = snprintf(buf, cap, "%s/yolocc", xdg);
    else if (home && *home) n = snprintf(buf, cap, "%s/.cache/yolocc", home);
    else return errf(err, errcap, "kcache: neither XDG_CACHE_HOME nor HOME is set, so there is no cache directory");
    if (n < 0 || (size_t)n >= cap) return errf(err, errcap, "kcache: cache directory path is too long");
    return true;
}

static bool mkdir_p(char *path, char *err, int errcap) {
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char saved = *p;
        *p = 0;
        struct stat st;
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            errf(err, errcap, "kcache: cannot create directory %s: %s", path, strerror(errno));
            *p = saved;
            return false;
        }
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            errf(err, errcap, "kcache: %s is not a directory", path);
            *p = saved;
            return false;
        }
        *p = saved;
        if (!saved) return true;
    }
}

static bool entry_path(const char *hex, char *buf, size_t cap, char *err, int errcap) {
    if (!cache_dir(buf, cap, err, errcap)) return false;
    size_t used = strlen(buf);
    int n = snprintf(buf + used, cap - used, "/%s", hex);
    if (n < 0 || (size_t)n >= cap - used) return errf(err, errcap, "kcache: cache entry path is too long");
    return true;
}

/* false on a short file as well as on an error */
static bool read_full(int fd, unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

bool kcache_get(const char *hex, unsigned char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    unsigned char key[MD];
    char path[PATH_CAP];
    if (disabled() || !key_bytes(hex, key) || !entry_path(hex, path, sizeof path, NULL, 0)) return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return false;
    }
    bool bad = true;
    unsigned char hdr[HDR], md[MD], *buf = NULL;
    uint64_t n = 0;
    if ((uint64_t)st.st_size < HDR || !read_full(fd, hdr, HDR)) goto done;
    n = get_le64(hdr + MAGIC_LEN);
    if (memcmp(hdr, MAGIC, MAGIC_LEN) != 0 || n != (uint64_t)st.st_size - HDR || memcmp(hdr + MAGIC_LEN + 8, key, MD) != 0) goto done;
    if (n > SIZE_MAX - 1 || !(buf = malloc(n ? (size_t)n : 1))) {
        bad = false; /* the entry may be fine; this process just cannot hold it */
        goto done;
    }
    const void *part = buf;
    size_t plen = (size_t)n;
    if (!read_full(fd, buf, plen) || !digest(&part, &plen, 1, false, md) || memcmp(md, hdr + MAGIC_LEN + 8 + MD, MD) != 0) goto done;
    bad = false;
    *out = buf;
    *len = plen;
    buf = NULL;
done:
    free(buf);
    close(fd);
    /* Remove the bad entry only if it is still the file we read: a writer may
     * have renamed a good one over it meanwhile. Failing to remove it costs
     * nothing but a recompile, and the next put replaces it. */
    struct stat now;
    if (bad && stat(path, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) (void)unlink(path);
    return *out != NULL;
}

bool kcache_put(const char *hex, const void *data, size_t len, char *err, int errcap) {
    if (disabled()) return true;
    unsigned char hdr[HDR];
    if (!key_bytes(hex, hdr + MAGIC_LEN + 8))
        return errf(err, errcap, "kcache: invalid key \"%.70s\": expected 64 lowercase hex digits from kcache_key", hex ? hex : "(null)");
    char dir[PATH_CAP], path[PATH_CAP];
    if (!cache_dir(dir, sizeof dir, err, errcap) || !mkdir_p(dir, err, errcap) || !entry_path(hex, path, sizeof path, err, errcap)) return false;
    memcpy(hdr, MAGIC, MAGIC_LEN);
    put_le64(hdr + MAGIC_LEN, len);
    if (!digest(&data, &len, 1, false, hdr + MAGIC_LEN + 8 + MD)) return errf(err, errcap, "kcache: SHA-256 of the entry failed (OpenSSL)");
    const void *chunks[] = {hdr, data};
    size_t lens[] = {HDR, len};
    char why[512];
    if (!atomic_write(path, chunks, lens, 2, why, sizeof why)) return errf(err, errcap, "kcache: cannot store entry: %s", why);
    return true;
}
