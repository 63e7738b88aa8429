/* runtime/train/bench_step.c — times a plan's training step on one synthetic batch for `yolort
 * bench`: CPU plans through TrainStep, CUDA plans through CudaStep, and prints the numbers. Must not
 * change what a step computes (train_step.c, cuda/cuda_step.c own that) nor print errors or exit. */
#include "bench_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "../cuda/cuda_step.h"
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
    bool ok = train_step_init(&ts, plan, err, errcap);
    if (ok) {
        train_step_set_fast(&ts, true); /* as `yolort train` runs: generated kernels and OpenBLAS convolutions */
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
    if (ok) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        r->peak_bytes = (int64_t)ru.ru_maxrss * 1024; /* Linux reports kilobytes */
        r->peak_kind = "process peak resident set (getrusage ru_maxrss)";
        cpu_name(r->device, sizeof r->device);
    }
    train_step_free(&ts);
    return ok;
}

/* the tensor ids a CUDA step binds, by the names train_step_init uses */
typedef struct CudaIds {
    int images, boxes, counts, grad_seed, lrs, momentum, opt_step, items;
} CudaIds;

static bool cuda_ids(const Plan *p, CudaIds *id, char *err, int errcap) {
    struct { int *dst; const char *group, *key; } b[] = {
        {&id->images, "inputs", "images"}, {&id->boxes, "inputs", "boxes"}, {&id->counts, "inputs", "counts"}, {&id->grad_seed, "inputs", "grad_seed"},
        {&id->lrs, "inputs", "lr"}, {&id->momentum, "inputs", "momentum"}, {&id->opt_step, "inputs", "opt_step"}, {&id->items, "outputs", "items"},
    };
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
        if ((*b[i].dst = plan_meta_tensor(p, b[i].group, b[i].key)) < 0) return errf(err, errcap, "plan META: %s.%s names no tensor", b[i].group, b[i].key);
    const Shape *img = &p->g.tensors[id->images].shape, *bx = &p->g.tensors[id->boxes].shape;
    if (img->nd != 4 || bx->nd != 3 || bx->d[2] != 5 || bx->d[0] != img->d[0]) return errf(err, errcap, "plan META: inputs have unexpected shapes");
    return true;
}

/* Host copies of the state weights_init fills (parameters and buffers, fp32
 * or int64 as the CPU holds them), indexed by tensor id; optimizer state
 * stays NULL: CudaStep zeroes its persistent region at open, and momentum
 * buffers start at zero. */
static void **host_state(const Graph *g) {
    void **buf = calloc((size_t)g->n_tensors, sizeof *buf);
    for (int i = 0; buf && i < g->n_state; i++) {
        int t = g->state[i];
        int64_t n = shape_numel(&g->tensors[t].shape);
        if (!(buf[t] = calloc((size_t)(n ? n : 1), g->tensors[t].dtype == DT_I64 ? sizeof(int64_t) : sizeof(float)))) {
            for (int k = 0; k < g->n_tensors; k++) free(buf[k]);
            free(buf);
            return NULL;
        }
    }
    return buf;
}

static void free_state(const Graph *g, void **buf) {
    for (int t = 0; buf && t < g->n_tensors; t++) free(buf[t]);
    free(buf);
}

/* the device's free bytes, or false with err */
static bool free_bytes(CudaDevice *d, size_t *free_b, char *err, int errcap) {
    size_t total = 0;
    return CUDA_CALL(&d->L, cuMemGetInfo, (free_b, &total), "reading the device's free memory", err, errcap);
}

static bool bench_cuda(Plan *plan, const BenchOptions *o, BenchResult *r, double *secs, char *err, int errcap) {
    CudaIds id;
    if (!cuda_ids(plan, &id, err, errcap)) return false;
    const Graph *g = &plan->g;
    const int batch = (int)g->tensors[id.images].shape.d[0], imgsz = (int)g->tensors[id.images].shape.d[2],
              max_boxes = (int)g->tensors[id.boxes].shape.d[1];
    const cJSON *ncj = cJSON_GetObjectItemCaseSensitive(plan->meta, "nc");
    const int nc = cJSON_IsNumber(ncj) ? (int)ncj->valuedouble : -1;
    if (nc < 1) return errf(err, errcap, "plan META: bad nc");
    r->batch = batch, r->imgsz = imgsz;
    /* The probe holds the primary context open, so free memory is read
     * before CudaStep allocates anything but after the context itself (as
     * PyTorch's max_memory_allocated leaves the context out). */
    CudaDevice probe;
    if (!cuda_device_open(&probe, 0, false, err, errcap)) return false;
    snprintf(r->device, sizeof r->device, "%s", probe.name);
    CudaStep cs;
    bool cs_open = false, ok;
    size_t free0 = 0, free_min = 0, f = 0;
    float *images = NULL, *boxes = NULL;
    int64_t *counts = NULL;
    void **state = host_state(g);
    ok = state || errf(err, errcap, "out of memory for the host copy of the state");
    ok = ok && free_bytes(&probe, &free0, err, errcap);
    ok = ok && (cs_open = cuda_step_open(&cs, plan, 0, err, errcap)) && cuda_step_use_graphs(&cs, cuda_step_graphs_wanted(&cs), err, errcap);
    ok = ok && weights_init(g, state, o->seed, err, errcap) && cuda_step_upload_state(&cs, state, err, errcap);
    if (ok) {
        size_t ni = (size_t)batch * 3 * (size_t)imgsz * (size_t)imgsz, nb = (size_t)batch * (size_t)max_boxes * 5;
        images = malloc(ni * sizeof *images), boxes = malloc(nb * sizeof *boxes), counts = malloc((size_t)batch * sizeof *counts);
        ok = (images && boxes && counts) || errf(err, errcap, "out of memory for a %d-image synthetic batch", batch);
    }
    if (ok) {
        /* one batch for every step, uploaded once: the timed step is the
         * training step, as the PyTorch side times it on a batch already on the device */
        synthetic_batch(o->seed, batch, imgsz, nc, max_boxes, images, boxes, counts);
        ok = cuda_step_set_input(&cs, id.images, images, err, errcap) && cuda_step_set_input(&cs, id.boxes, boxes, err, errcap) &&
             cuda_step_set_input(&cs, id.counts, counts, err, errcap) && free_bytes(&probe, &free_min, err, errcap);
    }
    for (int s = 0, more = 1; ok && more; s++) {
        /* what train_step_run binds each step: learning rates, momentum, the step count (from 1) and the backward seed */
        const float lrs[3] = {(float)o->lr, (float)o->lr, (float)o->lr}, mom = (float)o->momentum, step = (float)(s + 1), seed = 1.0f;
        double t0 = now_s();
        ok = cuda_step_set_input(&cs, id.lrs, lrs, err, errcap) && cuda_step_set_input(&cs, id.momentum, &mom, err, errcap) &&
             cuda_step_set_input(&cs, id.opt_step, &step, err, errcap) && cuda_step_set_input(&cs, id.grad_seed, &seed, err, errcap);
        char why[1536];
        if (ok && !cuda_step_run(&cs, 0, g->n_ops, why, sizeof why)) ok = errf(err, errcap, "step %d: %s", s + 1, why);
        secs[s] = now_s() - t0;
        ok = ok && free_bytes(&probe, &f, err, errcap);
        if (ok && f < free_min) free_min = f;
        more = another_step(o, secs, s, r);
    }
    float items[3];
    if (ok && (ok = cuda_step_download(&cs, id.items, items, err, errcap))) r->loss = (double)items[0] + items[1] + items[2];
    if (ok) {
        r->peak_bytes = free_min < free0 ? (int64_t)(free0 - free_min) : 0; /* another process freeing memory meanwhile could make it negative */
        r->peak_kind = "device used-memory increase (cuMemGetInfo) from before cuda_step_open to the lowest free memory after any step";
        r->plan_device_bytes = cuda_step_device_bytes(&cs);
        r->host_ops = cs.host_ops;
        cuda_step_describe(&cs, r->host_line, sizeof r->host_line);
        size_t used = strlen(r->host_line);
        snprintf(r->host_line + used, sizeof r->host_line - used, "; %s", cs.use_graphs ? "replayed as CUDA graphs" : "launched one by one (YOLOCC_CUDA_GRAPHS=0)");
    }
    free(images);
    free(boxes);
    free(counts);
    free_state(g, state);
    if (cs_open) cuda_step_close(&cs);
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
    if (isfinite(r->loss)) fprintf(f, ", \"loss\": %.6f}\n", r->loss);
    else fputs(", \"loss\": null}\n", f);
    fflush(f);
}

void bench_print_text(FILE *f, const char *plan, const BenchResult *r) {
    fprintf(f, "%s: %s plan, %s, batch %d, imgsz %d, on %s\n", plan, r->target, r->precision, r->batch, r->imgsz, r->device);
    fprintf(f, "training step (median of %d after %d warm-up): %.3f ms (min %.3f, max %.3f), %.2f images/s, last loss %.4f\n", r->steps, r->warmup,
            r->median_ms, r->min_ms, r->max_ms, r->images_per_s, r->loss);
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
