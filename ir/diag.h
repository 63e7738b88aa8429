/* ir/diag.h — the one error a failing stage reports: where (file, line, column)
 * and what was expected. Stages record the first error and return; only the
 * CLI prints and chooses the exit status. */
#ifndef YOLOCC_DIAG_H
#define YOLOCC_DIAG_H
#include <stdbool.h>

typedef struct Mark {
    int line, col;   /* 1-based; 0 = unknown */
} Mark;

typedef struct Diag {
    const char *file;
    bool failed;
    Mark at;
    char msg[1024];
    char warnings[1024];    /* held back: shown only if everything succeeds */
} Diag;

void diag_init(Diag *d, const char *file);
/* Records the first error only; always returns false so callers can
 * `return diag_error(...)`. */
bool diag_error(Diag *d, Mark at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Queues "warning: MSG" lines; the CLI prints them only on success, so a
 * failing input gives exactly one line. */
void diag_warn(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* For code that reports into a caller's (err, errcap) buffer: formats MSG
 * there (err may be NULL) and returns false. */
bool errf(char *err, int errcap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "FILE:LINE:COL: error: MSG" (or "FILE: error: MSG" without a position). */
void diag_format(const Diag *d, char *buf, int n);

#endif
