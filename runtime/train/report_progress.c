/* runtime/train/report_progress.c — the per-epoch progress bar (header, loss
 * columns, tqdm-style meter) and when it is drawn. Owns console formatting
 * only; must not touch files, the validation table or any training state. */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { BAR_CELLS = 10, BAR_EIGHTHS = 8 };
#define TTY_MININTERVAL 0.1    /* tqdm's default mininterval */
#define LOG_INTERVAL 30.0      /* non-tty heartbeat, seconds */

/* U+2588 is the full cell; index k in 1..7 is k eighths (U+258F down to U+2589). */
static const char *const eighths[BAR_EIGHTHS + 1] = {
    " ", "\xe2\x96\x8f", "\xe2\x96\x8e", "\xe2\x96\x8d", "\xe2\x96\x8c",
    "\xe2\x96\x8b", "\xe2\x96\x8a", "\xe2\x96\x89", "\xe2\x96\x88",
};

/* Appends to buf at *len, never past cap, always NUL-terminated. */
static void put(char *buf, size_t cap, size_t *len, const char *s) {
    size_t n = strlen(s);
    if (*len + 1 >= cap) return;
    if (n > cap - 1 - *len) n = cap - 1 - *len;
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = 0;
}

/* Python's "%11.4g" prints every NaN as "nan"; glibc would print "-nan" for
 * a NaN with the sign bit set. */
static void fmt_g4(char *buf, size_t cap, double v) {
    if (isnan(v)) snprintf(buf, cap, "%11s", "nan");
    else snprintf(buf, cap, "%11.4g", v);
}

void report_progress_header(char *buf, size_t cap, const char *mem_label) {
    snprintf(buf, cap, "%11s%11s%11s%11s%11s%11s%11s", "Epoch", mem_label ? mem_label : "GPU_mem", "box_loss",
             "cls_loss", "dfl_loss", "Instances", "Size");
}

void report_progress_desc(char *buf, size_t cap, int epoch, int epochs, double mem_gb, const double losses[3],
                          int instances, int size) {
    char ep[32], mem[48], num[5][48];
    snprintf(ep, sizeof ep, "%d/%d", epoch + 1, epochs);
    if (isnan(mem_gb)) snprintf(mem, sizeof mem, "nanG");
    else snprintf(mem, sizeof mem, "%.3gG", mem_gb);
    for (int i = 0; i < 3; i++) fmt_g4(num[i], sizeof num[i], losses[i]);
    fmt_g4(num[3], sizeof num[3], (double)instances);
    fmt_g4(num[4], sizeof num[4], (double)size);
    snprintf(buf, cap, "%11s%11s%s%s%s%s%s", ep, mem, num[0], num[1], num[2], num[3], num[4]);
}

void report_format_interval(double seconds, char *buf, size_t cap) {
    if (!(seconds >= 0)) seconds = 0;
    if (seconds > 9.0e15) seconds = 9.0e15;   /* keeps the integer conversion defined */
    long long t = (long long)seconds;          /* tqdm truncates: int(t) */
    long long h = t / 3600, m = t / 60 % 60, s = t % 60;
    if (h) snprintf(buf, cap, "%lld:%02lld:%02lld", h, m, s);
    else snprintf(buf, cap, "%02lld:%02lld", m, s);
}

void report_format_meter(char *buf, size_t cap, int n, int total, double elapsed) {
    if (cap == 0) return;
    buf[0] = 0;
    size_t len = 0;
    if (!(elapsed >= 0)) elapsed = 0;
    double frac = total > 0 ? (double)n / (double)total : 0.0;
    if (frac < 0) frac = 0;
    if (frac > 1) frac = 1;
    char tmp[96];
    snprintf(tmp, sizeof tmp, "%3.0f%%|", frac * 100.0);
    put(buf, cap, &len, tmp);
    int units = (int)(frac * BAR_CELLS * BAR_EIGHTHS);
    int full = units / BAR_EIGHTHS, part = units % BAR_EIGHTHS;
    for (int i = 0; i < full; i++) put(buf, cap, &len, eighths[BAR_EIGHTHS]);
    if (full < BAR_CELLS) {
        put(buf, cap, &len, eighths[part]);
        for (int i = full + 1; i < BAR_CELLS; i++) put(buf, cap, &len, " ");
    }
    /* a rate from a near-zero elapsed time can print ~300 digits */
    char el[32], rem[32], rate[336];
    report_format_interval(elapsed, el, sizeof el);
    double r = (elapsed > 0 && n > 0) ? n / elapsed : 0.0;
    if (r > 0) {
        report_format_interval((total - n) / r, rem, sizeof rem);
        if (1.0 / r > 1.0) snprintf(rate, sizeof rate, "%5.2fs/it", 1.0 / r);
        else snprintf(rate, sizeof rate, "%5.2fit/s", r);
    } else {
        snprintf(rem, sizeof rem, "?");
        snprintf(rate, sizeof rate, "?it/s");
    }
    snprintf(tmp, sizeof tmp, "| %d/%d [", n, total);
    put(buf, cap, &len, tmp);
    put(buf, cap, &len, el);
    put(buf, cap, &len, "<");
    put(buf, cap, &len, rem);
    put(buf, cap, &len, ", ");
    put(buf, cap, &len, rate);
    put(buf, cap, &len, "]");
}

/* Terminal columns of a UTF-8 line: every code point here is one column. */
static int display_width(const char *s) {
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80) w++;
    return w;
}

static void render(const Progress *p, char *buf, size_t cap) {
    char desc[256], meter[PROGRESS_LINE_CAP];
    report_progress_desc(desc, sizeof desc, p->epoch, p->epochs, p->mem_gb, p->losses, p->instances, p->size);
    report_format_meter(meter, sizeof meter, p->done, p->total, p->now - p->t0);
    size_t len = 0;
    buf[0] = 0;
    put(buf, cap, &len, desc);
    put(buf, cap, &len, ": ");
    put(buf, cap, &len, meter);
}

static bool flush_ok(FILE *out, int rc) {
    bool ok = rc >= 0;
    if (fflush(out) != 0) ok = false;
    return ok;
}

/* Shows the last state: in place on a tty, as a finished line otherwise. */
static bool show(Progress *p) {
    char line[PROGRESS_LINE_CAP];
    render(p, line, sizeof line);
    int rc;
    if (p->tty) {
        int w = display_width(line);
        int pad = p->last_width > w ? p->last_width - w : 0;
        rc = fprintf(p->out, "\r%s%*s", line, pad, "");
        p->last_width = w;
        p->last_draw = p->now;
    } else {
        rc = fprintf(p->out, "%s\n", line);
        p->last_log = p->now;
    }
    p->shown = true;
    return flush_ok(p->out, rc);
}

Progress progress_begin(FILE *out, bool tty, const char *mem_label, int epoch, int epochs, int total_batches,
                        double now) {
    Progress p;
    memset(&p, 0, sizeof p);
    p.out = out;
    p.tty = tty;
    p.epoch = epoch;
    p.epochs = epochs;
    p.total = total_batches;
    p.t0 = p.now = p.last_log = now;
    char head[128];
    report_progress_header(head, sizeof head, mem_label);
    /* Ultralytics logs the header with a leading newline: a blank line
     * separates each epoch from the previous validation table. */
    p.write_failed = !flush_ok(out, fprintf(out, "\n%s\n", head));
    return p;
}

bool progress_update(Progress *p, int done, double mem_gb, const double losses[3], int instances, int size,
                     double now) {
    bool first = !p->have_state;
    p->done = done;
    p->mem_gb = mem_gb;
    memcpy(p->losses, losses, sizeof p->losses);
    p->instances = instances;
    p->size = size;
    p->now = now;
    p->have_state = true;
    p->shown = false;
    bool last = done >= p->total;
    if (p->tty) {
        if (first || last || now - p->last_draw >= TTY_MININTERVAL) return show(p);
        return true;
    }
    if (last || now - p->last_log >= LOG_INTERVAL) return show(p);
    return true;
}

bool progress_end(Progress *p) {
    if (!p->have_state) return !p->write_failed;
    bool ok = true;
    if (!p->shown) ok = show(p);
    if (p->tty) {
        if (!flush_ok(p->out, fputc('\n', p->out) == EOF ? -1 : 0)) ok = false;
        p->last_width = 0;
    }
    p->have_state = false;
    return ok && !p->write_failed;
}
