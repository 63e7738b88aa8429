/* runtime/dist/buckets.c — gradient region layout and bucket cutting (see
 * buckets.h for the rules). Pure arithmetic over sizes and op indices; must
 * not touch MPI, NCCL or gradient data. */
#include "buckets.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/diag.h"

enum { BUCKETS_MAX = 1 << 22 };

typedef struct OrderKey {
    int ready_op, index;
} OrderKey;

static int order_cmp(const void *pa, const void *pb) {
    const OrderKey *a = pa, *b = pb;
    if (a->ready_op != b->ready_op) return a->ready_op < b->ready_op ? -1 : 1;
    return a->index > b->index ? -1 : a->index < b->index; /* ties: reverse input order */
}

static bool push(BucketLayout *l, int *cap, Bucket b, char *err, int errcap) {
    if (l->n_buckets == *cap) {
        if (*cap >= BUCKETS_MAX) return errf(err, errcap, "more than %d gradient buckets: the bucket cap of %lld bytes is too small", BUCKETS_MAX, (long long)l->cap_bytes);
        int ncap = *cap ? 2 * *cap : 16;
        Bucket *nb = realloc(l->buckets, (size_t)ncap * sizeof *nb);
        if (!nb) return errf(err, errcap, "out of memory");
        l->buckets = nb;
        *cap = ncap;
    }
    l->buckets[l->n_buckets++] = b;
    return true;
}

/* The cap of the bucket being filled: DDP's first one is smaller. */
static int64_t filling_cap(const BucketLayout *l) { return l->n_buckets == 0 ? l->first_cap_bytes : l->cap_bytes; }

bool bucket_layout_build(const BucketGrad *grads, int n, int64_t first_cap_bytes, int64_t cap_bytes, int elem_bytes, BucketLayout *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    if (n < 0 || (n > 0 && !grads)) return errf(err, errcap, "bucket layout: bad gradient list");
    if (elem_bytes <= 0) return errf(err, errcap, "bucket layout: element size %d", elem_bytes);
    cap_bytes -= cap_bytes % elem_bytes;
    if (first_cap_bytes > cap_bytes) first_cap_bytes = cap_bytes;
    first_cap_bytes -= first_cap_bytes % elem_bytes;
    if (first_cap_bytes < elem_bytes) return errf(err, errcap, "bucket layout: the cap must hold at least one %d-byte element", elem_bytes);
    out->cap_bytes = cap_bytes, out->first_cap_bytes = first_cap_bytes;
    out->n_grads = n;
    if (n == 0) return true;
    OrderKey *keys = malloc((size_t)n * sizeof *keys);
    out->order = malloc((size_t)n * sizeof *out->order);
    out->offset = malloc((size_t)n * sizeof *out->offset);
    if (!keys || !out->order || !out->offset) {
        free(keys);
        bucket_layout_free(out);
        return errf(err, errcap, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        if (grads[i].bytes <= 0 || grads[i].bytes % elem_bytes) {
            free(keys);
            bucket_layout_free(out);
            return errf(err, errcap, "bucket layout: gradient %d has %lld bytes, not a positive multiple of %d", grads[i].id, (long long)grads[i].bytes, elem_bytes);
        }
        keys[i] = (OrderKey){grads[i].ready_op, i};
    }
    qsort(keys, (size_t)n, sizeof *keys, order_cmp);
    int64_t pos = 0;
    for (int k = 0; k < n; k++) {
        int i = keys[k].index;
        out->order[k] = i;
        out->offset[i] = pos;
        if (grads[i].bytes > INT64_MAX - pos) {
            free(keys);
            bucket_layout_free(out);
            return errf(err, errcap, "bucket layout: the gradient region overflows");
        }
        pos += grads[i].bytes;
    }
    free(keys);
    out->total_bytes = pos;

    int cap = 0;
    Bucket cur = {0, 0, -1, -1, -1};
    for (int k = 0; k < n; k++) {
        const BucketGrad *g = &grads[out->order[k]];
        int64_t at = out->offset[out->order[k]], left = g->bytes;
        if (cur.bytes > 0 && (left > filling_cap(out) || cur.bytes + left > filling_cap(out))) {
            if (!push(out, &cap, cur, err, errcap)) return bucket_layout_free(out), false;
            cur.bytes = 0;
        }
        /* a gradient larger than the cap: full cap-sized pieces of its own */
        while (left > filling_cap(out)) {
            int64_t piece = filling_cap(out);
            if (!push(out, &cap, (Bucket){at, piece, k, k, g->ready_op}, err, errcap)) return bucket_layout_free(out), false;
            at += piece;
            left -= piece;
        }
        if (cur.bytes == 0) cur = (Bucket){at, 0, k, k, g->ready_op};
        cur.bytes += left;
        cur.last = k;
        if (g->ready_op > cur.ready_op) cur.ready_op = g->ready_op;
    }
    if (cur.bytes > 0 && !push(out, &cap, cur, err, errcap)) return bucket_layout_free(out), false;
    return true;
}

static int dtype_bytes(DType dt) {
    switch (dt) {
    case DT_F32: return 4;
    case DT_F16:
    case DT_BF16: return 2;
    case DT_I64: break;
    }
    return 0;
}

/* The last op before the optimizer's clip that reads or writes tensor t:
 * from there on nothing but the all-reduce touches it, which sums in place
 * (on a side stream, beside the rest of backward). Normally its producer. */
static int last_use_before_clip(const Graph *g, int t) {
    int last = g->tensors[t].producer;
    for (int o = last + 1; o < g->n_ops && g->ops[o].kind != OP_GRAD_CLIP; o++) {
        const Op *op = &g->ops[o];
        for (int i = 0; i < op->n_in + op->n_out; i++)
            if ((i < op->n_in ? op->in[i] : op->out[i - op->n_in]) == t) last = o;
    }
    return last;
}

bool bucket_layout_from_graph(const Graph *g, const int *grads, int n, int64_t cap_bytes, BucketLayout *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    if (n < 0) return errf(err, errcap, "bucket layout: bad gradient count %d", n);
    BucketGrad *bg = malloc((size_t)(n > 0 ? n : 1) * sizeof *bg);
    if (!bg) return errf(err, errcap, "out of memory");
    int elem = 0;
    for (int i = 0; i < n; i++) {
        int t = grads[i];
        if (t < 0 || t >= g->n_tensors) return free(bg), errf(err, errcap, "bucket layout: gradient %d is not a tensor id", t);
        const Tensor *ten = &g->tensors[t];
        int eb = dtype_bytes(ten->dtype);
        if (!eb) return free(bg), errf(err, errcap, "bucket layout: gradient tensor %d has dtype %s", t, dtype_name(ten->dtype));
        if (elem && eb != elem) return free(bg), errf(err, errcap, "bucket layout: gradients mix %d- and %d-byte dtypes", elem, eb);
        elem = eb;
        if (ten->producer < 0 || ten->producer >= g->n_ops) return free(bg), errf(err, errcap, "bucket layout: gradient tensor %d has no producing op", t);
        int64_t numel = shape_numel(&ten->shape);
        if (numel <= 0 || numel > INT64_MAX / eb) return free(bg), errf(err, errcap, "bucket layout: gradient tensor %d has a bad size", t);
        bg[i] = (BucketGrad){t, numel * eb, last_use_before_clip(g, t)};
    }
    bool ok = bucket_layout_build(bg, n, BUCKET_FIRST_CAP_DEFAULT, cap_bytes, elem ? elem : 4, out, err, errcap);
    free(bg);
    return ok;
}

void bucket_layout_free(BucketLayout *l) {
    free(l->order);
    free(l->offset);
    free(l->buckets);
    memset(l, 0, sizeof *l);
}

bool bucket_cap_from_env(const char *value, int64_t *cap_bytes, char *err, int errcap) {
    if (!value) return *cap_bytes = BUCKET_CAP_DEFAULT, true;
    char *end;
    errno = 0;
    double mb = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(mb) || mb <= 0 || mb > 1048576.0)
        return errf(err, errcap, "YOLOCC_BUCKET_CAP_MB='%s' must be a number of MiB in (0, 1048576]", value);
    int64_t b = (int64_t)(mb * 1048576.0);
    if (b < 4) return errf(err, errcap, "YOLOCC_BUCKET_CAP_MB='%s' is less than 4 bytes", value);
    *cap_bytes = b;
    return true;
}
