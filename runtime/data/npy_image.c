/* runtime/data/npy_image.c — the .npy files of Ultralytics' disk cache
 * (npy_image.h): the NumPy format's magic, version, header dictionary and
 * raw C-order bytes, with the B, G, R channels swapped to and from the
 * Image's R, G, B. Owns no other file. */
#include "npy_image.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../ir/atomic_file.h"
#include "../../ir/diag.h"
#include "image_io.h"

static const char MAGIC[6] = {(char)0x93, 'N', 'U', 'M', 'P', 'Y'};
enum { NPY_MAX_HEADER = 1 << 16 };

bool npy_image_path(const char *image, char *out, size_t cap) {
    const char *base = strrchr(image, '/');
    base = base ? base + 1 : image;
    const char *dot = strrchr(base, '.');
    /* pathlib's suffix: a dot that is neither the name's first nor its last character */
    size_t keep = dot && dot > base && dot[1] ? (size_t)(dot - image) : strlen(image);
    if (keep + 5 > cap) return false;
    memcpy(out, image, keep);
    memcpy(out + keep, ".npy", 5);
    return true;
}

/* The value after 'key': in a header dictionary, or NULL. */
static const char *dict_value(const char *h, const char *key) {
    char k[32];
    snprintf(k, sizeof k, "'%s'", key);
    const char *p = strstr(h, k);
    if (!p) return NULL;
    p += strlen(k);
    while (isspace((unsigned char)*p)) p++;
    if (*p++ != ':') return NULL;
    while (isspace((unsigned char)*p)) p++;
    return p;
}

/* Parses "{'descr': '|u1', 'fortran_order': False, 'shape': (h, w, 3), }":
 * 1 a uint8 C-order (h, w, 3) array; 0 another array (why); -1 not a header. */
static int parse_header(const char *h, int *rows, int *cols, char *why, int whycap) {
    const char *d = dict_value(h, "descr"), *f = dict_value(h, "fortran_order"), *s = dict_value(h, "shape");
    if (!d || !f || !s || *d != '\'' || *s != '(') return errf(why, whycap, "its header is not a NumPy array header"), -1;
    const char *de = strchr(d + 1, '\'');
    if (!de) return errf(why, whycap, "its header is not a NumPy array header"), -1;
    const int dlen = (int)(de - d - 1);
    long long dims[8];
    int nd = 0;
    const char *p = s + 1;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (*p == ')') break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || nd == 8) return errf(why, whycap, "its header's shape is malformed"), -1;
        dims[nd++] = v;
        p = end;
        while (isspace((unsigned char)*p)) p++;
        if (*p == ',') p++;
        else if (*p != ')') return errf(why, whycap, "its header's shape is malformed"), -1;
    }
    const bool u8 = (dlen == 3 && (strncmp(d + 1, "|u1", 3) == 0 || strncmp(d + 1, "<u1", 3) == 0 || strncmp(d + 1, ">u1", 3) == 0)) ||
                    (dlen == 2 && strncmp(d + 1, "u1", 2) == 0);
    if (!u8) {
        char type[17];
        int n = dlen > 16 ? 16 : dlen;
        /* the header's own bytes, printable only: the message stays one line */
        for (int i = 0; i < n; i++) type[i] = isprint((unsigned char)d[1 + i]) ? d[1 + i] : '?';
        type[n] = 0;
        return errf(why, whycap, "its array holds '%s', not uint8", type), 0;
    }
    if (strncmp(f, "False", 5) != 0) return errf(why, whycap, "its array is in Fortran order"), 0;
    if (nd != 3 || dims[2] != 3) return errf(why, whycap, "its array is not height x width x 3"), 0;
    if (dims[0] < 1 || dims[1] < 1 || dims[0] > IMAGE_MAX_SIDE || dims[1] > IMAGE_MAX_SIDE)
        return errf(why, whycap, "its image is %lldx%lld, outside 1..%d a side", dims[1], dims[0], IMAGE_MAX_SIDE), 0;
    *rows = (int)dims[0], *cols = (int)dims[1];
    return 1;
}

static NpyRead fail(FILE *f, NpyRead r) {
    if (f) fclose(f);
    return r;
}

NpyRead npy_image_read(const char *path, Image *out, char *err, int errcap) {
    *out = (Image){0};
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? NPY_ABSENT : (errf(err, errcap, "%s: cannot open: %s", path, strerror(errno)), NPY_SKIPPED);
    unsigned char pre[12];
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, MAGIC, 6) != 0) return errf(err, errcap, "%s: not a NumPy file (no magic string)", path), fail(f, NPY_CORRUPT);
    const int major = pre[6];
    if (major < 1 || major > 3) return errf(err, errcap, "%s: NumPy format version %d.%d is not 1, 2 or 3", path, major, pre[7]), fail(f, NPY_CORRUPT);
    size_t hlen = (size_t)pre[8] | (size_t)pre[9] << 8, off = 10;
    if (major >= 2) {
        if (fread(pre + 10, 1, 2, f) != 2) return errf(err, errcap, "%s: cut short in its header", path), fail(f, NPY_CORRUPT);
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        off = 12;
    }
    if (hlen == 0 || hlen > NPY_MAX_HEADER) return errf(err, errcap, "%s: header of %zu bytes", path, hlen), fail(f, NPY_CORRUPT);
    char *h = malloc(hlen + 1);
    if (!h) return errf(err, errcap, "out of memory"), fail(f, NPY_SKIPPED);
    if (fread(h, 1, hlen, f) != hlen) {
        free(h);
        return errf(err, errcap, "%s: cut short in its header", path), fail(f, NPY_CORRUPT);
    }
    h[hlen] = 0;
    char why[160];
    int rows = 0, cols = 0;
    const int kind = strlen(h) == hlen ? parse_header(h, &rows, &cols, why, sizeof why) : (errf(why, sizeof why, "its header holds a NUL byte"), -1);
    free(h);
    if (kind <= 0) return errf(err, errcap, "%s: %s", path, why), fail(f, kind < 0 ? NPY_CORRUPT : NPY_SKIPPED);
    const size_t n = (size_t)rows * (size_t)cols * 3;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (uint64_t)st.st_size < off + hlen + n)
        return errf(err, errcap, "%s: cut short: %zu bytes of pixels expected after its header", path, n), fail(f, NPY_CORRUPT);
    uint8_t *px = malloc(n);
    if (!px) return errf(err, errcap, "out of memory for a %dx%d image", cols, rows), fail(f, NPY_SKIPPED);
    if (fread(px, 1, n, f) != n) {
        free(px);
        return errf(err, errcap, "%s: cut short in its pixels", path), fail(f, NPY_CORRUPT);
    }
    fclose(f);
    for (size_t i = 0; i < n; i += 3) {
        const uint8_t b = px[i];
        px[i] = px[i + 2], px[i + 2] = b;
    }
    *out = (Image){.w = cols, .h = rows, .px = px};
    return NPY_READ;
}

/* Format 1.0's header for a w x h x 3 uint8 array, padded with spaces to a
 * 64-byte boundary and ended by a newline, as NumPy writes it; its length. */
static size_t header(char *buf, size_t cap, int w, int h) {
    int n = snprintf(buf + 10, cap - 10, "{'descr': '|u1', 'fortran_order': False, 'shape': (%d, %d, 3), }", h, w);
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    memcpy(buf, MAGIC, 6);
    buf[6] = 1, buf[7] = 0;
    buf[8] = (char)((total - 10) & 0xff), buf[9] = (char)((total - 10) >> 8);
    memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
    buf[total - 1] = '\n';
    return total;
}

size_t npy_image_bytes(int w, int h) {
    char buf[192];
    return header(buf, sizeof buf, w, h) + (size_t)w * (size_t)h * 3;
}

bool npy_image_write(const char *path, const Image *im, char *err, int errcap) {
    char head[192];
    const size_t hl = header(head, sizeof head, im->w, im->h), n = (size_t)im->w * (size_t)im->h * 3;
    uint8_t *bgr = malloc(n ? n : 1);
    if (!bgr) return errf(err, errcap, "out of memory writing %s", path);
    for (size_t i = 0; i < n; i += 3) bgr[i] = im->px[i + 2], bgr[i + 1] = im->px[i + 1], bgr[i + 2] = im->px[i];
    const void *chunks[] = {head, bgr};
    const size_t lens[] = {hl, n};
    const bool ok = atomic_write(path, chunks, lens, 2, err, errcap);
    free(bgr);
    return ok;
}
