/* runtime/train/bench_step.c — times a plan's training step on one synthetic batch for `yolort
 * bench`: CPU plans through TrainStep, CUDA plans through CudaStep, and prints the numbers. Must not
 * change what a step computes (train_step.c, cuda/cuda_step.c own that) nor print errors or exit. */
#include "bench_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_step.h"
#include "../dist/ranks.h"
#include "../mem_fit.h"
#include "../step_profile.h"
#include "../synthetic.h"
#include "../train_step.h"
#include "../weights.h"

BenchOptions bench_defaults(void) { return (BenchOptions){.steps = 20, .warmup = 3, .seed = 0, .lr = 0.01, .momentum = 0.937, .max_seconds = -1}; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* After step s (from 0, warm-up first): whether another runs. Counts the
 * timed steps into r->steps; a time budget ends the timed steps early, after
 * at least one. */
static bool another_step(const BenchOptions *o, const double *secs, int s, BenchResult *r) {
    if (s >= o->warmup) r->steps = s + 1 - o->warmup;
    if (s + 1 >= o->warmup + o->steps) return false;
    if (o->max_seconds < 0 || s < o->warmup) return true;
    double t = 0;
    for (int k = o->warmup; k <= s; k++) t += secs[k];
    return t < o->max_seconds;
}

/* median, min, max and images/s of the timed steps (secs[warmup..]) */
static void summarise(BenchResult *r, double *secs) {
    double *t = secs + r->warmup;
    r->median_ms = 1e3 * bench_median(t, r->steps); /* sorted from here on */
    r->min_ms = 1e3 * t[0];
    r->max_ms = 1e3 * t[r->steps - 1];
    r->images_per_s = r->median_ms > 0 ? r->batch / (r->median_ms * 1e-3) : 0;
}

/* "Intel(R) Xeon(R) ... (2 cores)" from /proc/cpuinfo, or "CPU (N cores)" */
static void cpu_name(char *buf, size_t cap) {
    char line[512], model[200] = "CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon) continue;
        colon += 1 + strspn(colon + 1, " \t");
        colon[strcspn(colon, "\n")] = 0;
        snprintf(model, sizeof model, "%s", colon);
        break;
    }
    if (f) fclose(f);
    snprintf(buf, cap, "%s (%ld cores)", model, sysconf(_SC_NPROCESSORS_ONLN));
}

static bool bench_cpu(Plan *plan, const BenchOptions *o, BenchResult *r, double *secs, char *err, int errcap) {
    TrainStep ts;
    const double t_open = now_s();
    bool ok = train_step_init(&ts, plan, err, errcap);
    r->setup_s = now_s() - t_open;
    if (ok) {
        train_step_set_fast(&ts, true); /* as `yolort train` runs: generated kernels and oneDNN convolutions */
        ok = weights_init(&plan->g, ts.it.buf, o->seed, err, errcap);
    }
    if (ok) {
        r->batch = ts.batch, r->imgsz = ts.imgsz;
        synthetic_batch(o->seed, ts.batch, ts.imgsz, ts.nc, ts.max_boxes, train_step_images(&ts), train_step_boxes(&ts), train_step_counts(&ts));
    }
    const double lr[3] = {o->lr, o->lr, o->lr};
    for (int s = 0, more = 1; ok && more; s++) {
        StepResult sr;
        double t0 = now_s();
        ok = train_step_run(&ts, lr, o->momentum, &sr, err, errcap);
        secs[s] = now_s() - t0;
        r->loss = sr.box + sr.cls + sr.dfl;
        more = another_step(o, secs, s, r);
    }
    if (ok && o->profile > 0) {
        StepProfile prof;
        StepResult sr;
        interp_profile_start(&ts.it, &prof);
        const double t0 = now_s();
        ok = train_step_run(&ts, lr, o->momentum, &sr, err, errcap);
        prof.wall_ms = 1e3 * (now_s() - t0);
        ts.it.prof = NULL;
        step_profile_sort(&prof);
        if (ok) step_profile_format(&prof, o->profile, r->profile, (int)sizeof r->profile);
        step_profile_free(&prof);
    }
    if (ok) {
        r->peak_bytes = process_peak_rss_bytes();
        r->peak_kind = "process peak resident set (getrusage ru_maxrss)";
        cpu_name(r->device, sizeof r->device);
    }
    train_step_free(&ts);
    return ok;
}

/* the device's free bytes, or false with err */
static bool free_bytes(CudaDevice *d, size_t *free_b, char *err, int errcap) {
    size_t total = 0;
    return CUDA_CALL(&d->L, cuMemGetInfo, (free_b, &total), "reading the device's free memory", err, errcap);
}

static bool bench_cuda(Plan *plan, const BenchOptions *o, BenchResult *r, double *secs, char *err, int errcap) {
    /* The probe holds the primary context of the step's device open, so free
     * memory is read before the step allocates anything but after the
     * context itself (as PyTorch's max_memory_allocated leaves the context out). */
    Ranks ranks;
    if (!ranks_from_environ(&ranks, err, errcap)) return false;
    CudaDevice probe;
    if (!cuda_device_open(&probe, ranks.local_rank, false, err, errcap)) return false;
    snprintf(r->device, sizeof r->device, "%s", probe.name);
    TrainStep ts;
    memset(&ts, 0, sizeof ts);
    size_t free0 = 0, free_min = 0, f = 0;
    bool ok = free_bytes(&probe, &free0, err, errcap);
    const double t_open = now_s();
    ok = ok && train_step_init(&ts, plan, err, errcap);
    r->setup_s = now_s() - t_open;
    ok = ok && weights_init(&plan->g, ts.it.buf, o->seed, err, errcap);
    CudaStep *cs = ts.cuda;
    if (ok) {
        train_step_host_changed(&ts);
        r->batch = ts.batch, r->imgsz = ts.imgsz;
        /* one batch for every step, uploaded once: the timed step is the
         * training step, as the PyTorch side times it on a batch already on the device */
        synthetic_batch(o->seed, ts.batch, ts.imgsz, ts.nc, ts.max_boxes, train_step_images(&ts), train_step_boxes(&ts), train_step_counts(&ts));
        ok = train_step_sync_device(&ts, err, errcap) && cuda_step_set_input(cs, ts.images, ts.it.buf[ts.images], err, errcap) &&
             cuda_step_set_input(cs, ts.boxes, ts.it.buf[ts.boxes], err, errcap) && cuda_step_set_input(cs, ts.counts, ts.it.buf[ts.counts], err, errcap) &&
             free_bytes(&probe, &free_min, err, errcap);
    }
    for (int s = 0, more = 1; ok && more; s++) {
        /* what train_step_run binds each step: learning rates, momentum, the step count (from 1) and the backward seed */
        const float lrs[3] = {(float)o->lr, (float)o->lr, (float)o->lr}, mom = (float)o->momentum, step = (float)(s + 1), seed = 1.0f;
        double t0 = now_s();
        ok = cuda_step_set_input(cs, ts.lrs, lrs, err, errcap) && cuda_step_set_input(cs, ts.momentum, &mom, err, errcap) &&
             cuda_step_set_input(cs, ts.opt_step, &step, err, errcap) && cuda_step_set_input(cs, ts.grad_seed, &seed, err, errcap);
        char why[1536];
        if (ok && !cuda_step_run(cs, 0, plan->g.n_ops, why, sizeof why)) ok = errf(err, errcap, "step %d: %s", s + 1, why);
        secs[s] = now_s() - t0;
        ok = ok && free_bytes(&probe, &f, err, errcap);
        if (ok && f < free_min) free_min = f;
        more = another_step(o, secs, s, r);
    }
    float items[3];
    if (ok && (ok = cuda_step_download(cs, ts.items, items, err, errcap))) r->loss = (double)items[0] + items[1] + items[2];
    if (ok && o->profile > 0) {
        StepProfile prof;
        ok = cuda_step_profile(cs, &prof, err, errcap);
        if (ok) step_profile_format(&prof, o->profile, r->profile, (int)sizeof r->profile);
        step_profile_free(&prof);
    }
    if (ok) {
        r->peak_bytes = free_min < free0 ? (int64_t)(free0 - free_min) : 0; /* another process freeing memory meanwhile could make it negative */
        r->peak_kind = "device used-memory increase (cuMemGetInfo) from before the step opened to the lowest free memory after any step";
        r->plan_device_bytes = cuda_step_device_bytes(cs);
        r->host_ops = cs->host_ops;
        cuda_step_describe(cs, r->host_line, sizeof r->host_line);
        size_t used = strlen(r->host_line);
        snprintf(r->host_line + used, sizeof r->host_line - used, "; %s", cs->use_graphs ? "replayed as CUDA graphs" : "launched one by one (YOLOCC_CUDA_GRAPHS=0)");
    }
    train_step_free(&ts);
    cuda_device_close(&probe);
    return ok;
}

bool bench_plan(const char *path, const BenchOptions *o, BenchResult *r, char *err, int errcap) {
    memset(r, 0, sizeof *r);
    if (errcap > 0) err[0] = 0;
    r->warmup = o->warmup;
    r->plan_device_bytes = -1, r->host_ops = -1;
    r->loss = NAN;
    if (o->steps < 1 || o->warmup < 0) return errf(err, errcap, "bench needs at least one timed step and no negative warm-up");
    Plan plan;
    char why[1536];
    if (!plan_read(path, &plan, why, sizeof why)) {
        plan_free(&plan);
        return errf(err, errcap, "%s", why);
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(plan.meta, "target");
    const char *target = cJSON_IsString(t) ? t->valuestring : "cpu";
    snprintf(r->target, sizeof r->target, "%s", target);
    snprintf(r->precision, sizeof r->precision, "%s", precision_name(plan.precision));
    double *secs = calloc((size_t)o->warmup + (size_t)o->steps, sizeof *secs);
    bool ok;
    if (!secs) ok = errf(why, sizeof why, "out of memory");
    else if (strcmp(target, "cuda") == 0) ok = bench_cuda(&plan, o, r, secs, why, sizeof why);
    else if (strcmp(target, "cpu") == 0) ok = bench_cpu(&plan, o, r, secs, why, sizeof why);
    else ok = errf(why, sizeof why, "plan META: unknown target '%s' (bench runs cpu and cuda plans)", target);
    if (ok) summarise(r, secs);
    else errf(err, errcap, "%s: %s", path, why);
    free(secs);
    plan_free(&plan);
    return ok;
}

/* s as a JSON string body: quotes, backslashes and control characters escaped */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void bench_print_json(FILE *f, const char *plan, const BenchResult *r) {
    const bool cuda = r->plan_device_bytes >= 0;
    fputs("{\"plan\": ", f);
    json_str(f, plan);
    fputs(", \"target\": ", f);
    json_str(f, r->target);
    fputs(", \"device\": ", f);
    json_str(f, r->device);
    fprintf(f, ", \"batch\": %d, \"imgsz\": %d, \"precision\": ", r->batch, r->imgsz);
    json_str(f, r->precision);
    /* %.6f of ms and %.4f of images/s: images_per_s = batch / median holds to ~1e-6 relative */
    fprintf(f, ", \"steps\": %d, \"warmup\": %d, \"median_ms\": %.6f, \"min_ms\": %.6f, \"max_ms\": %.6f, \"images_per_s\": %.4f, \"peak_bytes\": %lld, \"peak_kind\": ",
            r->steps, r->warmup, r->median_ms, r->min_ms, r->max_ms, r->images_per_s, (long long)r->peak_bytes);
    json_str(f, r->peak_kind ? r->peak_kind : "");
    if (cuda) fprintf(f, ", \"plan_device_bytes\": %lld, \"host_ops\": %d, \"host_line\": ", (long long)r->plan_device_bytes, r->host_ops);
    else fputs(", \"plan_device_bytes\": null, \"host_ops\": null, \"host_line\": ", f);
    json_str(f, r->host_line);
    if (isfinite(r->loss)) fprintf(f, ", \"loss\": %.6f", r->loss);
    else fputs(", \"loss\": null", f);
    fprintf(f, ", \"setup_s\": %.3f}\n", r->setup_s);
    fflush(f);
}

void bench_print_text(FILE *f, const char *plan, const BenchResult *r) {
    fprintf(f, "%s: %s plan, %s, batch %d, imgsz %d, on %s\n", plan, r->target, r->precision, r->batch, r->imgsz, r->device);
    fprintf(f, "training step (median of %d after %d warm-up): %.3f ms (min %.3f, max %.3f), %.2f images/s, last loss %.4f\n", r->steps, r->warmup,
            r->median_ms, r->min_ms, r->max_ms, r->images_per_s, r->loss);
    fprintf(f, "set-up before step 0: %.2f s%s\n", r->setup_s,
            r->plan_device_bytes >= 0 ? " (kernels loaded, cuDNN plans built and their engines timed, memory checked and allocated)" : " (kernels loaded)");
    if (r->plan_device_bytes >= 0) {
        fprintf(f, "timed on the host: from the step's first input upload to the end of cuda_step_run, which synchronises the device\n");
        fprintf(f, "peak memory: %.3f GB device memory used (cuMemGetInfo, context excluded); the plan allocated %.3f GB\n", 1e-9 * (double)r->peak_bytes,
                1e-9 * (double)r->plan_device_bytes);
        fprintf(f, "%s\n", r->host_line);
    } else {
        fprintf(f, "peak memory: %.3f GB process peak resident set (getrusage)\n", 1e-9 * (double)r->peak_bytes);
    }
    fflush(f);
}
