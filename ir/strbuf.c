/* ir/strbuf.c — the growing text buffer of strbuf.h. Must not know what the
 * text is. */
#include "strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"

static bool reserve(StrBuf *b, size_t n) {
    if (b->oom) return false;
    if (b->len + n + 1 <= b->cap) return true;
    size_t nc = b->cap ? b->cap * 2 : 256;
    while (nc < b->len + n + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) {
        b->oom = true;
        return false;
    }
    b->p = np;
    b->cap = nc;
    return true;
}

void strbuf_add(StrBuf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void strbuf_vprintf(StrBuf *b, const char *fmt, va_list ap) {
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    if (n < 0) b->oom = true;
    if (n >= 0 && reserve(b, (size_t)n)) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, again);
        b->len += (size_t)n;
    }
    va_end(again);
}

void strbuf_printf(StrBuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void strbuf_free(StrBuf *b) {
    free(b->p);
    *b = (StrBuf){0};
}

bool strbuf_write_atomic(StrBuf *b, const char *path, char *err, int errcap) {
    bool ok = !b->oom;
    if (!ok) snprintf(err, (size_t)errcap, "out of memory writing %s", path);
    if (ok) {
        const void *chunks[1] = {b->p ? b->p : ""};
        size_t lens[1] = {b->len};
        ok = atomic_write(path, chunks, lens, 1, err, errcap);
    }
    strbuf_free(b);
    return ok;
}
