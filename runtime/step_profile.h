/* runtime/step_profile.h — where a training step's time goes (`yolort bench --profile`) for any
 * target: rows by route and by op (generated kernels by fusion pattern), the heaviest launches, and
 * their text. The CUDA step times its launches with events (cuda/cuda_profile.c), the CPU
 * interpreter with the host clock (interp.c); this file owns only the tables, never a step. */
#ifndef YOLOCC_STEP_PROFILE_H
#define YOLOCC_STEP_PROFILE_H
#include <stdbool.h>
#include <stddef.h>

#include "../compiler/kernel_ir.h"
#include "../passes/fuse.h"

typedef struct ProfileRow {
    char what[112];
    int launches;
    double ms;
    double bytes;               /* memory its launches move (KLaunch.bytes); 0: not counted */
} ProfileRow;

enum { PROFILE_ROUTES = 8, PROFILE_TOP = 8 };

typedef struct StepProfile {
    const char *how;            /* how the launches were timed, for the first line */
    ProfileRow *rows;           /* heaviest first once sorted */
    int n_rows, cap_rows;
    ProfileRow top[PROFILE_TOP]; /* the heaviest single launches */
    int n_top;
    double launch_ms;           /* the sum over launches */
    double launch_bytes;        /* the bytes they move */
    double wall_ms;             /* the profiled step on the host clock, its waits included */
    const char *route_name[PROFILE_ROUTES];
    double route_ms[PROFILE_ROUTES];
    double route_bytes[PROFILE_ROUTES];
    int route_launches[PROFILE_ROUTES];
} StepProfile;

/* Launch l of kp (fusion group gi, or -1) on route r, timed ms: its row
 * (by op kind, or a generated kernel's pattern), its place among the
 * heaviest and its route's totals. False only when out of memory. */
bool step_profile_launch(StepProfile *p, int route, const Graph *g, const Fusion *fu, const KProgram *kp, int l, int gi, double ms);
/* A row alone: a part of a launch already counted (the loss' phases). */
bool step_profile_row(StepProfile *p, const char *what, double ms, double bytes);
/* Rows heaviest first. */
void step_profile_sort(StepProfile *p);
/* The profile as text lines (at most `rows` of the by-op table) into buf. */
void step_profile_format(const StepProfile *p, int rows, char *buf, int cap);
void step_profile_free(StepProfile *p);
/* The clock both timers read around their launches: monotonic milliseconds. */
double step_profile_clock_ms(void);

#endif
