/* ir/diag.c — first-error recording and formatting. */
#include "diag.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void diag_init(Diag *d, const char *file) {
    memset(d, 0, sizeof *d);
    d->file = file;
}

bool diag_error(Diag *d, Mark at, const char *fmt, ...) {
    if (d->failed) return false;
    d->failed = true;
    d->at = at;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    return false;
}

bool errf(char *err, int errcap, const char *fmt, ...) {
    if (err && errcap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, (size_t)errcap, fmt, ap);
        va_end(ap);
    }
    return false;
}

void diag_warn(Diag *d, const char *fmt, ...) {
    size_t used = strlen(d->warnings);
    if (used + 16 >= sizeof d->warnings) return;
    memcpy(d->warnings + used, "warning: ", 9);
    used += 9;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->warnings + used, sizeof d->warnings - used - 1, fmt, ap);
    va_end(ap);
    used = strlen(d->warnings);
    d->warnings[used] = '\n';
    d->warnings[used + 1] = 0;
}

void diag_format(const Diag *d, char *buf, int n) {
    const char *f = d->file ? d->file : "<input>";
    if (d->at.line > 0)
        snprintf(buf, (size_t)n, "%s:%d:%d: error: %s", f, d->at.line, d->at.col, d->msg);
    else
        snprintf(buf, (size_t)n, "%s: error: %s", f, d->msg);
}
