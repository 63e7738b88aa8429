/* runtime/cuda/gemm_desc.c — logical strided matrices to cuBLAS's column-major GEMM (gemm_desc.h).
 * Pure arithmetic on shapes and strides; must not call a library or touch memory. */
#include <stdarg.h>
#include <stdio.h>

#include "gemm_desc.h"

static bool fail(char *err, int errcap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, int errcap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)errcap, fmt, ap);
    va_end(ap);
    return false;
}

/* A dimension of one element has no stride that matters: give it the one that makes the matrix column-major, else row-major. */
static GemmView settle(GemmView v, int64_t rows, int64_t cols) {
    if (rows == 1) v.rs = 1;
    else if (cols == 1 && v.rs != 1) v.cs = 1;
    return v;
}

/* Logical rows x cols matrix v as cuBLAS stores it: column-major as it is, or its transpose. */
static bool store(GemmMat *m, const char *what, GemmView v, int64_t rows, int64_t cols, int64_t batch, bool may_transpose, char *err, int errcap) {
    v = settle(v, rows, cols);
    *m = (GemmMat){.type = v.type, .stride = batch > 1 ? v.bs : 0};
    if (v.rs == 1) m->rows = rows, m->cols = cols, m->ld = cols == 1 && v.cs < rows ? rows : v.cs;
    else if (v.cs == 1 && may_transpose) m->rows = cols, m->cols = rows, m->ld = v.rs, m->trans = true;
    else
        return fail(err, errcap, "%s (%lld x %lld, strides %lld, %lld) has no unit stride %s", what, (long long)rows, (long long)cols, (long long)v.rs,
                    (long long)v.cs, may_transpose ? "in either dimension" : "along its rows (cuBLAS writes D column-major)");
    if (m->ld < m->rows)
        return fail(err, errcap, "%s: leading dimension %lld is smaller than its %lld stored rows", what, (long long)m->ld, (long long)m->rows);
    /* inputs may share one matrix across the batch; D's batches must not overlap, or the writes race */
    if (!may_transpose && batch > 1 && m->stride < m->ld * (m->cols - 1) + m->rows)
        return fail(err, errcap, "%s: batches %lld apart overlap its %lld x %lld matrices (leading dimension %lld)", what, (long long)m->stride, (long long)m->rows,
                    (long long)m->cols, (long long)m->ld);
    return true;
}

bool gemm_desc_make(GemmDesc *g, int64_t m, int64_t n, int64_t k, int64_t batch, GemmView a, GemmView b, GemmView d, float alpha, float beta, char *err,
                    int errcap) {
    *g = (GemmDesc){.m = m, .n = n, .k = k, .batch = batch, .alpha = alpha, .beta = beta};
    if (m < 1 || n < 1 || k < 1 || batch < 1 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || batch > INT32_MAX)
        return fail(err, errcap, "a product of %lld x %lld by %lld x %lld over %lld batches", (long long)m, (long long)k, (long long)k, (long long)n,
                    (long long)batch);
    if (a.type != b.type) return fail(err, errcap, "A is %s and B %s: cuBLASLt multiplies one input type", dtype_name(a.type), dtype_name(b.type));
    if (a.type == DT_I64 || (d.type != a.type && d.type != DT_F32))
        return fail(err, errcap, "no cuBLASLt product of %s inputs into %s", dtype_name(a.type), dtype_name(d.type));
    d = settle(d, m, n);
    const char *na = "A", *nb = "B", *nd = "D";
    if (d.rs != 1 && d.cs == 1) {
        /* D is row-major: compute D^T (n x m) = B^T A^T, whose storage is column-major */
        GemmView at = {a.type, a.cs, a.rs, a.bs}, bt = {b.type, b.cs, b.rs, b.bs}, dt = {d.type, d.cs, d.rs, d.bs};
        g->m = n, g->n = m, g->swapped = true;
        a = bt, b = at, d = dt;
        na = "B (as A of the transposed product)", nb = "A (as B of the transposed product)", nd = "D (transposed)";
    }
    return store(&g->a, na, a, g->m, k, batch, true, err, errcap) && store(&g->b, nb, b, k, g->n, batch, true, err, errcap) &&
           store(&g->d, nd, d, g->m, g->n, batch, false, err, errcap);
}

void gemm_desc_describe(const GemmDesc *g, char *buf, int cap) {
    snprintf(buf, (size_t)cap, "[%lldx%lld] = [%lldx%lld]%s [%lldx%lld]%s x%lld %s -> %s", (long long)g->m, (long long)g->n, (long long)g->a.rows,
             (long long)g->a.cols, g->a.trans ? "^T" : "", (long long)g->b.rows, (long long)g->b.cols, g->b.trans ? "^T" : "", (long long)g->batch,
             dtype_name(g->a.type), dtype_name(g->d.type));
}
