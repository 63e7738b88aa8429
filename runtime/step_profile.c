/* runtime/step_profile.c — a step profile's tables and text (step_profile.h). Knows launches,
 * routes and fusion patterns by name only; never runs or times anything. */
#include "step_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int by_ms_desc(const void *a, const void *b) {
    double x = ((const ProfileRow *)a)->ms, y = ((const ProfileRow *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

bool step_profile_row(StepProfile *p, const char *what, double ms, double bytes) {
    for (int i = 0; i < p->n_rows; i++)
        if (strcmp(p->rows[i].what, what) == 0) {
            p->rows[i].launches++, p->rows[i].ms += ms, p->rows[i].bytes += bytes;
            return true;
        }
    if (p->n_rows == p->cap_rows) {
        int cap = p->cap_rows ? 2 * p->cap_rows : 64;
        ProfileRow *nr = realloc(p->rows, (size_t)cap * sizeof *nr);
        if (!nr) return false;
        p->rows = nr, p->cap_rows = cap;
    }
    ProfileRow *row = &p->rows[p->n_rows++];
    snprintf(row->what, sizeof row->what, "%s", what);
    row->launches = 1, row->ms = ms, row->bytes = bytes;
    return true;
}

static void keep_top(StepProfile *p, const char *what, double ms, double bytes) {
    if (p->n_top == PROFILE_TOP && ms <= p->top[PROFILE_TOP - 1].ms) return;
    int at = p->n_top < PROFILE_TOP ? p->n_top++ : PROFILE_TOP - 1;
    while (at > 0 && p->top[at - 1].ms < ms) p->top[at] = p->top[at - 1], at--;
    snprintf(p->top[at].what, sizeof p->top[at].what, "%s", what);
    p->top[at].launches = 1, p->top[at].ms = ms, p->top[at].bytes = bytes;
}

bool step_profile_launch(StepProfile *p, int route, const Graph *g, const Fusion *fu, const KProgram *kp, int l, int gi, double ms) {
    const KLaunch *ln = &kp->launches[l];
    const char *op = op_def(g->ops[ln->op_lo].kind)->name, *rn = (unsigned)route < PROFILE_ROUTES && p->route_name[route] ? p->route_name[route] : "?";
    const double bytes = (double)ln->bytes;
    char what[112], one[112];
    if (ln->kernel >= 0 && gi >= 0 && fu) snprintf(what, sizeof what, "%s: %s (%s ...)", rn, group_pattern_name(fu->groups[gi].pattern), op);
    else snprintf(what, sizeof what, "%s: %s", rn, op);
    snprintf(one, sizeof one, "launch %d, ops %d-%d %s", l, ln->op_lo, ln->op_hi, g->ops[ln->op_lo].scope ? g->ops[ln->op_lo].scope : "");
    keep_top(p, one, ms, bytes);
    p->launch_ms += ms, p->launch_bytes += bytes;
    if ((unsigned)route < PROFILE_ROUTES) p->route_ms[route] += ms, p->route_bytes[route] += bytes, p->route_launches[route]++;
    return step_profile_row(p, what, ms, bytes);
}

void step_profile_sort(StepProfile *p) {
    if (p->n_rows) qsort(p->rows, (size_t)p->n_rows, sizeof *p->rows, by_ms_desc);
}

/* "1234 GB/s", or a blank of the same width when nothing was counted or timed */
static const char *rate(char *buf, size_t cap, double bytes, double ms) {
    if (bytes > 0 && ms > 0) snprintf(buf, cap, "%5.0f GB/s", bytes / ms / 1e6);
    else snprintf(buf, cap, "%10s", "");
    return buf;
}

void step_profile_format(const StepProfile *p, int rows, char *buf, int cap) {
    int at = 0;
    /* a line that does not fit is cut and the rest dropped: at never passes cap */
#define PUT(...)                                                   \
    do {                                                           \
        if (at < cap) at += snprintf(buf + at, (size_t)(cap - at), __VA_ARGS__); \
        if (at > cap) at = cap;                                    \
    } while (0)
    char bw[32];
    PUT("profile (%s): %.3f ms in launches, %.3f ms on the host clock; %.3f GB moved, %s\n", p->how ? p->how : "one step", p->launch_ms, p->wall_ms,
        p->launch_bytes / 1e9, rate(bw, sizeof bw, p->launch_bytes, p->launch_ms));
    PUT("  (GB/s: the bytes a launch must move, kernel_launch_bytes, over its time; library ops count their inputs and outputs once, a lower bound)\n");
    for (int r = 0; r < PROFILE_ROUTES; r++)
        if (p->route_launches[r])
            PUT("  %-18s %8.3f ms %5.1f%%  %5d launches %s\n", p->route_name[r] ? p->route_name[r] : "?", p->route_ms[r],
                100 * p->route_ms[r] / (p->launch_ms > 0 ? p->launch_ms : 1), p->route_launches[r], rate(bw, sizeof bw, p->route_bytes[r], p->route_ms[r]));
    PUT("  by op:\n");
    for (int i = 0; i < p->n_rows && i < rows; i++)
        PUT("  %8.3f ms %5.1f%% %5d x %s  %s\n", p->rows[i].ms, 100 * p->rows[i].ms / (p->launch_ms > 0 ? p->launch_ms : 1), p->rows[i].launches,
            rate(bw, sizeof bw, p->rows[i].bytes, p->rows[i].ms), p->rows[i].what);
    PUT("  heaviest launches:\n");
    for (int i = 0; i < p->n_top; i++) PUT("  %8.3f ms %s  %s\n", p->top[i].ms, rate(bw, sizeof bw, p->top[i].bytes, p->top[i].ms), p->top[i].what);
#undef PUT
}

void step_profile_free(StepProfile *p) {
    free(p->rows);
    memset(p, 0, sizeof *p);
}

double step_profile_clock_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}
