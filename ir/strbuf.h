/* ir/strbuf.h — a growing text buffer for files written whole (CSV, YAML,
 * SVG): appends never fail loudly, a failed allocation sets oom and drops
 * the rest, checked once at the end. Owns the buffer only; no file format. */
#ifndef YOLOCC_STRBUF_H
#define YOLOCC_STRBUF_H
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct StrBuf {
    char *p;        /* NUL-terminated once anything was added; NULL before */
    size_t len, cap;
    bool oom;
} StrBuf;

void strbuf_add(StrBuf *b, const char *s, size_t n);
void strbuf_printf(StrBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_vprintf(StrBuf *b, const char *fmt, va_list ap);
void strbuf_free(StrBuf *b);
/* Writes the text to path through atomic_write and frees the buffer either
 * way; false (err set) on oom, naming what was being written, or a failed write. */
bool strbuf_write_atomic(StrBuf *b, const char *path, char *err, int errcap);

#endif
