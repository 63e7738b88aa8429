/* runtime/dist/buckets.h — the gradient region and its all-reduce buckets:
 * gradients laid out contiguously in the order backward finishes them, cut
 * into contiguous slices of about cap bytes, each with its ready point.
 * Owns layout arithmetic only; must not touch MPI, NCCL or tensor data. */
#ifndef YOLOCC_DIST_BUCKETS_H
#define YOLOCC_DIST_BUCKETS_H
#include <stdbool.h>
#include <stdint.h>

#include "../../ir/ir.h"

/* DDP's default bucket_cap_mb = 25 (MiB), and its first bucket's cap
 * (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB): the gradients
 * backward finishes first go out early instead of waiting in a full bucket. */
#define BUCKET_CAP_DEFAULT ((int64_t)25 * 1024 * 1024)
#define BUCKET_FIRST_CAP_DEFAULT ((int64_t)1024 * 1024)

/* One gradient tensor as the layout sees it. */
typedef struct BucketGrad {
    int id;             /* the caller's name for it (a tensor id); only copied */
    int64_t bytes;      /* > 0, a multiple of elem_bytes */
    int ready_op;       /* the op after which nothing before the optimizer touches it (normally its producer) */
} BucketGrad;

/* A contiguous byte slice [offset, offset + bytes) of the gradient region. */
typedef struct Bucket {
    int64_t offset, bytes;
    int first, last;    /* region-order positions (BucketLayout.order) of the first and last gradient it touches */
    int ready_op;       /* every byte of it is final after this op: reduce it from here on */
} Bucket;

typedef struct BucketLayout {
    int n_grads;
    int *order;         /* region order: order[k] = input index of the k-th gradient */
    int64_t *offset;    /* per input index: byte offset of that gradient in the region */
    int64_t total_bytes;
    int64_t cap_bytes, first_cap_bytes;    /* after rounding to whole elements */
    int n_buckets;
    Bucket *buckets;    /* in region order, which is also ready order */
} BucketLayout;

/* Region order: ascending ready_op (the order backward finishes the
 * gradients); ties (one op producing several gradients) in reverse input
 * order, i.e. reverse-topological like DDP's reversed parameter order.
 * Buckets: walk the region in order and close the current bucket when the
 * next gradient would take it past its cap (first_cap_bytes for bucket 0,
 * cap_bytes after: DDP's small first bucket); a gradient is cut only when it
 * alone exceeds the cap of the bucket it starts in, into pieces of that
 * bucket's cap (at element boundaries; the last piece may share a bucket
 * with what follows). Buckets cover the region exactly, without gaps or
 * overlap. elem_bytes <= first_cap_bytes; a first cap above cap_bytes is
 * cap_bytes. */
bool bucket_layout_build(const BucketGrad *grads, int n, int64_t first_cap_bytes, int64_t cap_bytes, int elem_bytes, BucketLayout *out, char *err, int errcap);

/* From a graph: grads[i] are gradient tensor ids (one dtype); bytes from
 * their shape and dtype, ready_op the last op before the optimizer's clip
 * that reads or writes it (its producer unless a later op reads it); the
 * first bucket's cap DDP's (BUCKET_FIRST_CAP_DEFAULT, or cap_bytes when
 * smaller). */
bool bucket_layout_from_graph(const Graph *g, const int *grads, int n, int64_t cap_bytes, BucketLayout *out, char *err, int errcap);

void bucket_layout_free(BucketLayout *l);

/* The bucket cap from YOLOCC_BUCKET_CAP_MB (MiB, a positive number, e.g.
 * 25 or 0.5), or BUCKET_CAP_DEFAULT when unset; false with an error naming
 * the variable on a bad value. */
bool bucket_cap_from_env(const char *value, int64_t *cap_bytes, char *err, int errcap);

#endif
