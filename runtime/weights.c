/* runtime/weights.c — initialises, loads and saves a graph's parameters and
 * buffers (see weights.h). Owns the init streams (keyed by tensor name, drawn
 * from rng.h) and the name/shape matching; must not touch the graph, the
 * storage's allocation, or the safetensors byte format (runtime/safetensors.h). */
#include "weights.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/diag.h"
#include "rng.h"
#include "safetensors.h"

/* Checks what all three calls rely on before any of them writes a byte. */
static bool check_state(const Graph *g, void *const *buf, char *err, int errcap) {
    if (!g || !buf) return errf(err, errcap, "no graph or no storage table");
    for (int i = 0; i < g->n_state; i++) {
        int id = g->state[i];
        if (id < 0 || id >= g->n_tensors) return errf(err, errcap, "state entry %d names tensor %d, outside the graph", i, id);
        const Tensor *t = &g->tensors[id];
        const char *name = t->name ? t->name : "(unnamed)";
        if (t->kind != TK_PARAM && t->kind != TK_BUFFER) return errf(err, errcap, "state tensor %s is neither a parameter nor a buffer", name);
        if (!t->name) return errf(err, errcap, "state tensor %%%d has no name", id);
        if (t->dtype != DT_F32 && t->dtype != DT_I64)
            return errf(err, errcap, "state tensor %s is %s; only f32 and i64 state is supported", name, dtype_name(t->dtype));
        if (shape_numel(&t->shape) < 0) return errf(err, errcap, "state tensor %s has a negative dimension", name);
        if (!buf[id]) return errf(err, errcap, "state tensor %s has no storage", name);
    }
    return true;
}

static size_t numel_of(const Tensor *t) { return (size_t)shape_numel(&t->shape); }   /* 1 for a scalar */
static size_t bytes_of(const Tensor *t) { return numel_of(t) * (t->dtype == DT_I64 ? 8 : 4); }

/* -------------------------------------------------------------- init */

/* The stream of a tensor depends only on the seed and its name, so adding a
 * layer does not reshuffle every later tensor. A path component starting
 * with "one2one_" is skipped: v10Detect's one2one branches are deep copies of
 * cv2/cv3 upstream and must start with the same values. */
static Rng rng_for(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (const char *p = name; *p;) {
        if ((p == name || p[-1] == '.') && strncmp(p, "one2one_", 8) == 0) {
            p += 8;
            continue;
        }
        h = (h ^ (unsigned char)*p++) * 0x100000001b3ull;
    }
    Rng r;
    rng_seed(&r, seed ^ rng_splitmix64(&h));
    return r;
}

/* Validates a tensor's hint before anything is written. */
static bool check_init(const Tensor *t, char *err, int errcap) {
    double a = t->init_arg;
    switch (t->init) {
    case INIT_NONE:
    case INIT_ARANGE:
        return true;
    case INIT_KAIMING_UNIFORM:
        if (t->dtype != DT_F32 || t->shape.nd < 2) return errf(err, errcap, "%s: kaiming-uniform needs an f32 tensor of at least 2 dimensions", t->name);
        return true;
    case INIT_BIAS_UNIFORM:
        if (t->dtype != DT_F32 || !isfinite(a)) return errf(err, errcap, "%s: bias-uniform needs an f32 tensor and a finite fan-in", t->name);
        return true;
    case INIT_CONST:
        if (!isfinite(a)) return errf(err, errcap, "%s: constant %g is not finite", t->name, a);
        if (t->dtype == DT_I64 && (a != floor(a) || fabs(a) > 0x1p53))
            return errf(err, errcap, "%s: constant %g is not an integer for an int64 buffer", t->name, a);
        return true;
    case INIT_TRUNC_NORMAL:
        /* by rejection: with std <= 100 at least 1.6% of draws land in [-2, 2] */
        if (t->dtype != DT_F32 || !(a >= 0 && a <= 100)) return errf(err, errcap, "%s: truncated normal needs an f32 tensor and 0 <= std <= 100, not %g", t->name, a);
        return true;
    }
    return errf(err, errcap, "%s: unknown init kind %d", t->name, (int)t->init);
}

static void init_one(const Tensor *t, void *dst, uint64_t seed) {
    size_t n = numel_of(t);
    if (t->dtype == DT_I64) {
        int64_t *v = dst;
        for (size_t i = 0; i < n; i++)
            v[i] = t->init == INIT_ARANGE ? (int64_t)i : t->init == INIT_CONST ? (int64_t)t->init_arg : 0;
        return;
    }
    float *v = dst;
    Rng r = rng_for(seed, t->name);
    double b = 0;
    if (t->init == INIT_KAIMING_UNIFORM) {
        /* kaiming_uniform_(a=sqrt(5)): gain sqrt(2/(1+5)), bound gain*sqrt(3/fan_in) = 1/sqrt(fan_in) */
        double fan_in = 1;
        for (int d = 1; d < t->shape.nd; d++) fan_in *= (double)t->shape.d[d];
        b = fan_in > 0 ? 1.0 / sqrt(fan_in) : 0;
    } else if (t->init == INIT_BIAS_UNIFORM) {
        b = t->init_arg > 0 ? 1.0 / sqrt(t->init_arg) : 0;   /* PyTorch: bound 0 when fan_in is 0 */
    }
    for (size_t i = 0; i < n; i++) {
        double x = 0;
        switch (t->init) {
        case INIT_KAIMING_UNIFORM:
        case INIT_BIAS_UNIFORM:
            x = b * (2.0 * rng_unit(&r) - 1.0);
            break;
        case INIT_CONST:
            x = t->init_arg;
            break;
        case INIT_ARANGE:
            x = (double)i;
            break;
        case INIT_TRUNC_NORMAL:
            /* trunc_normal_(std=s) keeps its default bounds a=-2, b=2, absolute values */
            do x = t->init_arg * rng_normal(&r);
            while (x < -2.0 || x > 2.0);
            break;
        case INIT_NONE:
            break;
        }
        v[i] = (float)x;
    }
}

bool weights_init(const Graph *g, void **buf, uint64_t seed, char *err, int errcap) {
    if (!check_state(g, buf, err, errcap)) return false;
    for (int i = 0; i < g->n_state; i++)
        if (!check_init(&g->tensors[g->state[i]], err, errcap)) return false;
    for (int i = 0; i < g->n_state; i++) init_one(&g->tensors[g->state[i]], buf[g->state[i]], seed);
    return true;
}

/* -------------------------------------------------------------- save */

bool weights_save(const Graph *g, void *const *buf, const char *path, const char *const *meta_kv, char *err, int errcap) {
    if (!check_state(g, buf, err, errcap)) return false;
    StWriteItem *items = malloc(((size_t)g->n_state + 1) * sizeof *items);
    if (!items) return errf(err, errcap, "%s: out of memory", path);
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        items[i] = (StWriteItem){.name = t->name, .dtype = t->dtype == DT_I64 ? ST_I64 : ST_F32, .nd = t->shape.nd, .shape = t->shape.d, .data = buf[t->id]};
    }
    bool ok = st_write(path, items, g->n_state, meta_kv, err, errcap);
    free(items);
    return ok;
}

/* -------------------------------------------------------------- load */

typedef struct NameIdx {
    const char *name;
    int id;
} NameIdx;

static int by_name(const void *a, const void *b) { return strcmp(((const NameIdx *)a)->name, ((const NameIdx *)b)->name); }

static bool same_shape(const Tensor *t, const StTensor *f) {
    if (t->shape.nd != f->nd) return false;
    for (int d = 0; d < f->nd; d++)
        if (t->shape.d[d] != f->shape[d]) return false;
    return true;
}

static bool is_float(StDType d) { return d == ST_F32 || d == ST_F16 || d == ST_BF16 || d == ST_F64; }

/* Element i of an integer-typed tensor, read through memcpy: file data is
 * only as aligned as the file makes it. */
static int64_t int_elem(const StTensor *f, uint64_t i) {
    const unsigned char *p = (const unsigned char *)f->data + i * st_dtype_size(f->dtype);
    switch (f->dtype) {
    case ST_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    case ST_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case ST_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case ST_I8:
        return (int8_t)*p;
    case ST_U8:
        return *p;
    case ST_BOOL:
        return *p != 0;
    default:
        return 0;
    }
}

/* The file's values in the state tensor's dtype, in a malloc'd block; NULL
 * with err when out of memory or a value does not fit. */
static void *convert(const StTensor *f, const Tensor *t, const char *path, char *err, int errcap) {
    uint64_t n = st_numel(f);
    if (t->dtype == DT_F32) {
        if (is_float(f->dtype)) {
            float *v = st_to_f32(f);
            if (!v) errf(err, errcap, "%s: %s: out of memory", path, t->name);
            return v;
        }
        float *v = malloc(n ? (size_t)n * sizeof *v : 1);
        if (!v) return errf(err, errcap, "%s: %s: out of memory", path, t->name), NULL;
        for (uint64_t i = 0; i < n; i++) v[i] = (float)int_elem(f, i);
        return v;
    }
    int64_t *v = malloc(n ? (size_t)n * sizeof *v : 1);
    if (!v) return errf(err, errcap, "%s: %s: out of memory", path, t->name), NULL;
    if (!is_float(f->dtype)) {
        for (uint64_t i = 0; i < n; i++) v[i] = int_elem(f, i);
        return v;
    }
    /* float -> int64 truncates toward zero like torch's copy_; F64 is read
     * directly so integers up to 2^53 survive exactly */
    float *fl = f->dtype == ST_F64 ? NULL : st_to_f32(f);
    if (f->dtype != ST_F64 && !fl) return free(v), errf(err, errcap, "%s: %s: out of memory", path, t->name), NULL;
    for (uint64_t i = 0; i < n; i++) {
        double x;
        if (fl) x = fl[i];
        else memcpy(&x, (const unsigned char *)f->data + i * 8, 8);
        if (!(x >= -0x1p63 && x < 0x1p63)) {   /* NaN fails too */
            errf(err, errcap, "%s: %s: value %g does not fit the int64 buffer", path, t->name, x);
            free(fl);
            free(v);
            return NULL;
        }
        v[i] = (int64_t)x;
    }
    free(fl);
    return v;
}

/* A file name fit for the report: cut to the field, control bytes as '?'. */
static void keep_name(char *dst, const char *src) {
    int i = 0;
    for (; src[i] && i < WEIGHTS_NAME_CAP - 1; i++) dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
    dst[i] = 0;
}

bool weights_load(const Graph *g, void **buf, const char *path, const char *prefix, WeightsLoadReport *rep, char *err, int errcap) {
    StFile f;
    if (!st_read(path, &f, err, errcap)) return false;
    bool ok = weights_load_parsed(g, buf, &f, path, prefix, rep, err, errcap);
    st_free(&f);
    return ok;
}

bool weights_load_parsed(const Graph *g, void **buf, const StFile *fp, const char *path, const char *prefix, WeightsLoadReport *rep, char *err, int errcap) {
    if (!check_state(g, buf, err, errcap)) return false;
    if (!prefix) prefix = "";
    size_t plen = strlen(prefix);
    WeightsLoadReport r = {.total = g->n_state};
    bool ok = false;
    NameIdx *idx = malloc(((size_t)g->n_state + 1) * sizeof *idx);
    /* per state position: the file tensor to copy and, if converted, its values */
    const StTensor **src = calloc((size_t)g->n_state + 1, sizeof *src);
    void **tmp = calloc((size_t)g->n_state + 1, sizeof *tmp);
    if (!idx || !src || !tmp) {
        errf(err, errcap, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < g->n_state; i++) idx[i] = (NameIdx){g->tensors[g->state[i]].name, i};
    /* sorted once, so matching is n log n even for big checkpoints */
    qsort(idx, (size_t)g->n_state, sizeof *idx, by_name);
    for (int k = 0; k < fp->n; k++) {
        const StTensor *ft = &fp->tensors[k];
        if (strncmp(ft->name, prefix, plen) != 0) continue;
        r.file_tensors++;
        NameIdx key = {ft->name + plen, 0};
        const NameIdx *hit = bsearch(&key, idx, (size_t)g->n_state, sizeof *idx, by_name);
        if (!hit) {
            if (r.unknown < WEIGHTS_REPORT_NAMES) keep_name(r.unknown_names[r.unknown], key.name);
            r.unknown++;
        } else if (!same_shape(&g->tensors[g->state[hit->id]], ft)) {
            if (r.mismatched < WEIGHTS_REPORT_NAMES) keep_name(r.mismatched_names[r.mismatched], key.name);
            r.mismatched++;
        } else {
            src[hit->id] = ft;   /* names are unique in a parsed file: at most one hit each */
        }
    }
    /* convert everything first, copy afterwards: a failure leaves buf untouched */
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        if (!src[i]) continue;
        bool direct = (t->dtype == DT_F32 && src[i]->dtype == ST_F32) || (t->dtype == DT_I64 && src[i]->dtype == ST_I64);
        if (!direct && !(tmp[i] = convert(src[i], t, path, err, errcap))) goto done;
    }
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        if (!src[i]) continue;
        size_t nb = bytes_of(t);
        if (nb) memcpy(buf[t->id], tmp[i] ? tmp[i] : src[i]->data, nb);
        r.matched++;
    }
    ok = true;
done:
    if (tmp)
        for (int i = 0; i < g->n_state; i++) free(tmp[i]);
    free(tmp);
    free(src);
    free(idx);
    if (ok && rep) *rep = r;
    return ok;
}

static void append(char *out, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *out, size_t cap, size_t *n, const char *fmt, ...) {
    if (*n >= cap) return;   /* already cut: vsnprintf has NUL-terminated it */
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(out + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (w > 0) *n += (size_t)w;
}

void weights_report_format(const WeightsLoadReport *rep, char *out, int cap) {
    if (!out || cap <= 0) return;
    size_t n = 0, c = (size_t)cap;
    out[0] = 0;
    append(out, c, &n, "Transferred %d/%d items from pretrained weights", rep->matched, rep->total);
    const int counts[2] = {rep->unknown, rep->mismatched};
    const char (*names[2])[WEIGHTS_NAME_CAP] = {rep->unknown_names, rep->mismatched_names};
    const char *what[2] = {"not in the model", "with another shape"};
    for (int k = 0; k < 2; k++) {
        if (!counts[k]) continue;
        append(out, c, &n, "; ignored %d %s (", counts[k], what[k]);
        for (int i = 0; i < counts[k] && i < WEIGHTS_REPORT_NAMES; i++) append(out, c, &n, "%s%s", i ? ", " : "", names[k][i]);
        append(out, c, &n, "%s)", counts[k] > WEIGHTS_REPORT_NAMES ? ", ..." : "");
    }
}
