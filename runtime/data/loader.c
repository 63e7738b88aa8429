/* runtime/data/loader.c — loader.h: a ring of batch slots filled sample by
 * sample by a pthread pool (or the caller's thread), the per-sample transform
 * chain, the RAM cache and the float CHW output. Must not touch datasets on
 * disk beyond decoding the listed images, model plans, or the step.
 *
 * Deviations from Ultralytics (also listed in bench/LOADER.md):
 * - Rect validation orders equal aspect ratios by path (numpy's argsort is
 *   not stable).
 * - Mosaic's 3 extra images are drawn uniformly (with replacement) from the
 *   whole split with the sample's own random stream, not from a buffer of
 *   recently loaded images, so batches do not depend on worker timing. It
 *   costs 3 more decodes per mosaic sample unless cache_ram is on.
 * - Training drops the last partial batch (the plan's batch is fixed).
 * - Random streams are ours (xoshiro256**), not Python's and numpy's. */
#include "loader.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "image_io.h"
#include "npy_image.h"

/* Batches being prepared or held by the caller: one held, two ahead. */
#define RING LOADER_SLOTS
#define PAGE 4096
#define MAX_WORKERS 256

/* Domain tags so the shuffle and sample streams never coincide. */
#define TAG_SHUFFLE 0x5348554646u
#define TAG_SAMPLE 0x53414d504cu

typedef struct Slot {
    Batch b;
    long batch;         /* batch index in the epoch; -1 = free */
    int n, claimed, done;
    bool failed;
    char err[512];
} Slot;

typedef struct CacheEnt {
    Image im;           /* load-resized */
    int w0, h0;         /* decoded size before the resize */
    bool ready;
} CacheEnt;

struct Loader {
    const DataSplit *split;
    LoaderOptions o;
    int nb;
    int *order;
    int *rect_order;                /* rect: the split by aspect ratio */
    int *shape;                     /* rect: per batch its h and w */
    int side;                       /* the pixel buffers' room: the largest batch side */
    int epoch;
    bool mosaic, started, failed, stop;
    char fail_err[512];
    float lut255[256];
    CacheEnt *cache;                /* NULL without cache_ram */
    bool npy_warned;                /* a .npy that cannot serve was named once (under cache_mu) */
    pthread_mutex_t cache_mu;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    Slot slot[RING];
    long next_assign, next_return, hold;
    int busy;
    unsigned gen;
    pthread_t *threads;
    int nthreads;
};

/* Lock, unlock and wait fail only on a corrupted or misused mutex: a bug,
 * not a condition to recover from. */
static void must(int rc, const char *what) {
    if (rc == 0) return;
    fprintf(stderr, "loader: %s failed: %s\n", what, strerror(rc));
    abort();
}
static void lock(pthread_mutex_t *m) { must(pthread_mutex_lock(m), "pthread_mutex_lock"); }
static void unlock(pthread_mutex_t *m) { must(pthread_mutex_unlock(m), "pthread_mutex_unlock"); }
static void wait_on(pthread_cond_t *c, pthread_mutex_t *m) { must(pthread_cond_wait(c, m), "pthread_cond_wait"); }
static void wake_all(pthread_cond_t *c) { must(pthread_cond_broadcast(c), "pthread_cond_broadcast"); }

/* ------------------------------------------------------------ images */

/* The decoded pixels of image file `path`: its IMAGE.npy when there is one
 * (Ultralytics' load_image reads it whatever the cache setting, cache='disk'
 * writes them), else the file itself. A corrupt .npy is removed, as upstream
 * removes it; one that cannot serve otherwise is kept and named once. */
static bool load_pixels(Loader *l, const char *path, Image *im, char *err, int errcap) {
    char npy[4200], why[600];
    const NpyRead r = npy_image_path(path, npy, sizeof npy) ? npy_image_read(npy, im, why, sizeof why) : NPY_ABSENT;
    if (r == NPY_READ) return true;
    if (r == NPY_CORRUPT) {
        printf("WARNING \xe2\x9a\xa0\xef\xb8\x8f Removing corrupt *.npy image file %s due to: %s\n", npy, why);
        if (unlink(npy) != 0) printf("WARNING \xe2\x9a\xa0\xef\xb8\x8f %s could not be removed: %s\n", npy, strerror(errno));
    } else if (r == NPY_SKIPPED) {
        lock(&l->cache_mu);
        const bool first = !l->npy_warned;
        l->npy_warned = true;
        unlock(&l->cache_mu);
        if (first) printf("WARNING \xe2\x9a\xa0\xef\xb8\x8f %s (decoding the images instead of such .npy files)\n", why);
    }
    return image_load(path, im, err, errcap);
}

/* The load-resized image of sample idx: borrowed from the cache, or decoded
 * into *own (then the caller frees it). */
static bool get_image(Loader *l, int idx, Image *own, const Image **out, int *w0, int *h0, char *err, int errcap) {
    *own = (Image){0};
    const Sample *s = &l->split->samples[idx];
    if (l->cache) {
        CacheEnt *c = &l->cache[idx];
        lock(&l->cache_mu);
        bool ready = c->ready;
        unlock(&l->cache_mu);
        if (ready) {
            *out = &c->im, *w0 = c->w0, *h0 = c->h0;
            return true;
        }
    }
    Image im;
    if (!load_pixels(l, s->image, &im, err, errcap)) return false;
    *w0 = im.w, *h0 = im.h;
    if (!load_resize(&im, l->o.imgsz)) {
        image_free(&im);
        return errf(err, errcap, "%s: out of memory resizing to %d", s->image, l->o.imgsz);
    }
    if (l->cache) {
        CacheEnt *c = &l->cache[idx];
        lock(&l->cache_mu);
        /* another worker may have decoded the same image meanwhile */
        if (!c->ready) c->im = im, c->w0 = *w0, c->h0 = *h0, c->ready = true;
        else image_free(&im);
        *out = &c->im, *w0 = c->w0, *h0 = c->h0;
        unlock(&l->cache_mu);
        return true;
    }
    *own = im;
    *out = own;
    return true;
}

/* Labels as pixel xyxy boxes in an image of w x h (xywhn -> xyxy, then
 * denormalised, in float as upstream's float32 arrays). */
static bool labels_to_boxes(const Sample *s, int w, int h, Boxes *bx) {
    bx->n = 0;
    for (int i = 0; i < s->n_labels; i++) {
        const Label *L = &s->labels[i];
        Box b = {L->cls, (L->cx - L->w / 2) * (float)w, (L->cy - L->h / 2) * (float)h, (L->cx + L->w / 2) * (float)w, (L->cy + L->h / 2) * (float)h};
        if (!boxes_push(bx, b)) return false;
    }
    return true;
}

/* ------------------------------------------------------------ chain */

/* Mosaic (p = hyp.mosaic while mosaic is on) or letterbox, then
 * RandomPerspective into s x s: upstream's pre_transform, shared by the
 * sample itself and by mixup's partner. */
static bool pre_transform(Loader *l, Rng *r, int idx, bool mosaic_on, Image *out, Boxes *bx, char *err, int errcap) {
    int s = l->o.imgsz, n = l->split->n;
    bool ok = false;
    Image own[4] = {{0}}, canvas = {0};
    const Image *tiles[4];
    Boxes tb[4] = {{0}};
    int w0, h0;
    *out = (Image){0};
    double u = rng_unit(r);
    if (mosaic_on && u < l->o.hyp.mosaic) {
        int pick[4] = {idx, (int)rng_below(r, (uint64_t)n), (int)rng_below(r, (uint64_t)n), (int)rng_below(r, (uint64_t)n)};
        for (int i = 0; i < 4; i++) {
            if (!get_image(l, pick[i], &own[i], &tiles[i], &w0, &h0, err, errcap)) goto done;
            if (!labels_to_boxes(&l->split->samples[pick[i]], tiles[i]->w, tiles[i]->h, &tb[i])) goto oom;
        }
        const Boxes *tbp[4] = {&tb[0], &tb[1], &tb[2], &tb[3]};
        if (!mosaic4(r, tiles, tbp, s, &canvas, bx)) goto oom;
    } else {
        if (!get_image(l, idx, &own[0], &tiles[0], &w0, &h0, err, errcap)) goto done;
        if (!labels_to_boxes(&l->split->samples[idx], tiles[0]->w, tiles[0]->h, bx)) goto oom;
        if (!letterbox(tiles[0], bx, s, s, true, &canvas, NULL)) goto oom;
    }
    if (!random_perspective(r, &l->o.hyp, &canvas, bx, s, s, out)) goto oom;
    ok = true;
    goto done;
oom:
    errf(err, errcap, "%s: out of memory in the transform chain", l->split->samples[idx].image);
done:
    for (int i = 0; i < 4; i++) image_free(&own[i]), boxes_free(&tb[i]);
    image_free(&canvas);
    return ok;
}

static bool train_sample(Loader *l, Rng *r, int idx, Image *im, Boxes *bx, char *err, int errcap) {
    const Hyp *h = &l->o.hyp;
    if (!pre_transform(l, r, idx, l->mosaic, im, bx, err, errcap)) return false;
    /* close_mosaic turns mixup off with mosaic */
    double u = rng_unit(r);
    if (l->mosaic && u < h->mixup) {
        Image im2;
        Boxes b2 = {0};
        int j = (int)rng_below(r, (uint64_t)l->split->n);
        if (!pre_transform(l, r, j, l->mosaic, &im2, &b2, err, errcap)) {
            boxes_free(&b2);
            return false;
        }
        bool ok = mixup(im, bx, &im2, &b2, rng_beta(r, 32.0, 32.0));
        image_free(&im2);
        boxes_free(&b2);
        if (!ok) return errf(err, errcap, "%s: out of memory in mixup", l->split->samples[idx].image);
    }
    random_hsv(r, h->hsv_h, h->hsv_s, h->hsv_v, im);
    if (rng_unit(r) < h->flipud) flip_ud(im, bx);
    if (rng_unit(r) < h->fliplr) flip_lr(im, bx);
    return true;
}

static bool val_sample(Loader *l, int idx, int out_h, int out_w, Image *im, Boxes *bx, ImageInfo *info, char *err, int errcap) {
    Image own;
    const Image *src;
    int w0, h0;
    if (!get_image(l, idx, &own, &src, &w0, &h0, err, errcap)) return false;
    LetterboxGeom g;
    bool ok = labels_to_boxes(&l->split->samples[idx], src->w, src->h, bx) && letterbox(src, bx, out_w, out_h, false, im, &g);
    image_free(&own);
    if (!ok) return errf(err, errcap, "%s: out of memory letterboxing", l->split->samples[idx].image);
    double r0 = (double)l->o.imgsz / (w0 > h0 ? w0 : h0);
    *info = (ImageInfo){idx, w0, h0, (float)(r0 * g.r), (float)g.left, (float)g.top};
    return true;
}

/* ------------------------------------------------------------ output */

/* Writes image j of slot s; returns kept boxes through *kept, dropped through *dropped. */
static void emit(Loader *l, Slot *s, int j, const Image *im, const Boxes *bx, const ImageInfo *info, int *kept, int *dropped) {
    const int H = s->b.h, W = s->b.w, mb = l->o.max_boxes;
    size_t plane = (size_t)H * (size_t)W;
    if (s->b.bytes) {
        uint8_t *dst = s->b.bytes + (size_t)j * 3 * plane;
        if (!im) memset(dst, 0, 3 * plane);
        for (size_t i = 0; im && i < plane; i++) {
            const uint8_t *p = im->px + 3 * i;
            dst[i] = p[0], dst[plane + i] = p[1], dst[2 * plane + i] = p[2];
        }
    } else {
        float *dst = s->b.images + (size_t)j * 3 * plane;
        if (!im) memset(dst, 0, 3 * plane * sizeof *dst);
        for (size_t i = 0; im && i < plane; i++) {
            const uint8_t *p = im->px + 3 * i;
            dst[i] = l->lut255[p[0]];
            dst[plane + i] = l->lut255[p[1]];
            dst[2 * plane + i] = l->lut255[p[2]];
        }
    }
    float *o = s->b.boxes + (size_t)j * mb * 5;
    memset(o, 0, (size_t)mb * 5 * sizeof *o);
    int n = bx ? bx->n : 0, k = n < mb ? n : mb;
    for (int i = 0; i < k; i++) {
        const Box *b = &bx->b[i];
        const float inv_w = 1.0f / (float)W, inv_h = 1.0f / (float)H;
        o[5 * i] = (float)b->cls;
        o[5 * i + 1] = (b->x1 + b->x2) * 0.5f * inv_w;
        o[5 * i + 2] = (b->y1 + b->y2) * 0.5f * inv_h;
        o[5 * i + 3] = (b->x2 - b->x1) * inv_w;
        o[5 * i + 4] = (b->y2 - b->y1) * inv_h;
    }
    s->b.counts[j] = k;
    s->b.info[j] = *info;
    *kept = k;
    *dropped = n - k;
}

/* Prepares image j of batch `batch` in slot s. Runs without the lock: it
 * writes only image j's part of the slot's buffers, and what it reads of the
 * loader (order, epoch, mosaic) changes only while no claim is in flight. */
static bool make_sample(Loader *l, Slot *s, long batch, int j, int *kept, int *dropped, char *err, int errcap) {
    long pos = (batch * l->o.batch + j) * l->o.shards + l->o.shard;
    if (pos >= l->split->n) {
        ImageInfo pad = {-1, 0, 0, 1, 0, 0};
        emit(l, s, j, NULL, NULL, &pad, kept, dropped);
        return true;
    }
    int idx = l->order[pos];
    Image im = {0};
    Boxes bx = {0};
    ImageInfo info;
    bool ok;
    if (l->o.train) {
        Rng r;
        rng_seed(&r, rng_mix(rng_mix(rng_mix(l->o.seed, TAG_SAMPLE), (uint64_t)l->epoch), (uint64_t)pos));
        ok = train_sample(l, &r, idx, &im, &bx, err, errcap);
        /* an augmented image has no map back to the original: identity */
        const Sample *sm = &l->split->samples[idx];
        info = (ImageInfo){idx, sm->w, sm->h, 1, 0, 0};
    } else {
        ok = val_sample(l, idx, s->b.h, s->b.w, &im, &bx, &info, err, errcap);
    }
    if (ok) emit(l, s, j, &im, &bx, &info, kept, dropped);
    image_free(&im);
    boxes_free(&bx);
    return ok;
}

/* ------------------------------------------------------------ scheduling */

/* Puts the next batches into free slots: at most RING batches from the
 * one the caller holds (or waits for) on. Called with mu held. */
static void assign(Loader *l) {
    long base = l->hold >= 0 ? l->hold : l->next_return;
    while (l->next_assign < l->nb && l->next_assign - base < RING) {
        Slot *s = &l->slot[l->next_assign % RING];
        s->batch = l->next_assign++;
        s->n = l->o.batch;
        s->claimed = s->done = 0;
        s->failed = false;
        s->err[0] = 0;
        s->b.instances = s->b.dropped_boxes = 0;
        loader_batch_shape(l, (int)s->batch, &s->b.h, &s->b.w);
        s->b.n_valid = (int)((l->split->n - s->batch * l->o.batch) < l->o.batch ? l->split->n - s->batch * l->o.batch : l->o.batch);
    }
}

/* The lowest assigned batch with an unclaimed image; mu held. */
static Slot *claimable(Loader *l) {
    for (long k = l->next_return; k < l->next_assign; k++) {
        Slot *s = &l->slot[k % RING];
        if (s->batch == k && s->claimed < s->n) return s;
    }
    return NULL;
}

/* Runs one claimed image and records it; called with mu held, returns
 * with mu held. */
static void run_claim(Loader *l, Slot *s, int j) {
    unsigned gen = l->gen;
    long batch = s->batch;
    char err[512] = "";
    int kept = 0, dropped = 0;
    l->busy++;
    unlock(&l->mu);
    bool ok = make_sample(l, s, batch, j, &kept, &dropped, err, sizeof err);
    lock(&l->mu);
    l->busy--;
    if (gen == l->gen) {
        s->done++;
        s->b.instances += kept;
        s->b.dropped_boxes += dropped;
        if (!ok && !s->failed) {
            s->failed = true;
            snprintf(s->err, sizeof s->err, "%s", err);
        }
    }
    wake_all(&l->done);
}

static void *worker_main(void *arg) {
    Loader *l = arg;
    lock(&l->mu);
    while (!l->stop) {
        Slot *s = claimable(l);
        if (!s) {
            wait_on(&l->work, &l->mu);
            continue;
        }
        run_claim(l, s, s->claimed++);
    }
    unlock(&l->mu);
    return NULL;
}

/* ------------------------------------------------------------ API */

static void free_slots(Loader *l) {
    for (int i = 0; i < RING; i++) {
        free(l->slot[i].b.images);
        free(l->slot[i].b.bytes);
        free(l->slot[i].b.boxes);
        free(l->slot[i].b.counts);
        free(l->slot[i].b.info);
    }
}

static void free_cache(Loader *l) {
    if (!l->cache) return;
    for (int i = 0; i < l->split->n; i++) image_free(&l->cache[i].im);
    free(l->cache);
}

/* Creates the locks and conditions, undoing the earlier ones on a failure. */
static int init_sync(Loader *l) {
    int rc = pthread_mutex_init(&l->mu, NULL);
    if (rc != 0) return rc;
    if ((rc = pthread_mutex_init(&l->cache_mu, NULL)) != 0) goto undo_mu;
    if ((rc = pthread_cond_init(&l->work, NULL)) != 0) goto undo_cache;
    if ((rc = pthread_cond_init(&l->done, NULL)) == 0) return 0;
    must(pthread_cond_destroy(&l->work), "pthread_cond_destroy");
undo_cache:
    must(pthread_mutex_destroy(&l->cache_mu), "pthread_mutex_destroy");
undo_mu:
    must(pthread_mutex_destroy(&l->mu), "pthread_mutex_destroy");
    return rc;
}

/* A sample's aspect ratio h/w and its index, sorted by both (ties by path, the split's order). */
typedef struct Aspect {
    double r;
    int i;
} Aspect;

static int by_aspect(const void *pa, const void *pb) {
    const Aspect *a = pa, *b = pb;
    return a->r < b->r ? -1 : a->r > b->r ? 1 : (a->i > b->i) - (a->i < b->i);
}

/* Ultralytics' set_rectangle: the split by aspect ratio h/w and each batch's
 * shape, ceil(shape x imgsz / stride + 0.5) x stride with shape (hi, 1) if
 * all ratios are below 1, (1, 1 / lo) if all are above, else (1, 1). */
static bool rect_batches(Loader *l) {
    const DataSplit *sp = l->split;
    const int n = sp->n, B = l->o.batch, nb = (n + B - 1) / B, S = l->o.imgsz, st = l->o.stride;
    Aspect *ar = malloc(sizeof *ar * (size_t)n);
    if (!ar || !(l->rect_order = malloc(sizeof(int) * (size_t)n)) || !(l->shape = malloc(sizeof(int) * 2 * (size_t)nb))) return free(ar), false;
    for (int i = 0; i < n; i++) ar[i] = (Aspect){(double)sp->samples[i].h / sp->samples[i].w, i};
    qsort(ar, (size_t)n, sizeof *ar, by_aspect);
    for (int i = 0; i < n; i++) l->rect_order[i] = ar[i].i;
    for (int b = 0; b < nb; b++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int k = b * B; k < n && k < (b + 1) * B; k++) lo = ar[k].r < lo ? ar[k].r : lo, hi = ar[k].r > hi ? ar[k].r : hi;
        double sh = 1, sw = 1;
        if (hi < 1) sh = hi;
        else if (lo > 1) sw = 1 / lo;
        l->shape[2 * b] = (int)ceil(sh * S / st + 0.5) * st;
        l->shape[2 * b + 1] = (int)ceil(sw * S / st + 0.5) * st;
        for (int k = 0; k < 2; k++) l->side = l->shape[2 * b + k] > l->side ? l->shape[2 * b + k] : l->side;
    }
    free(ar);
    return true;
}

Loader *loader_open(const DataSplit *split, const LoaderOptions *o, char *err, int errcap) {
    if (!split || !o) return errf(err, errcap, "loader: no split or no options"), NULL;
    if (o->batch < 1 || o->imgsz < 2 || o->imgsz > 16384 || o->max_boxes < 0 || o->workers < 0 || o->workers > MAX_WORKERS)
        return errf(err, errcap, "loader: bad options (batch %d, imgsz %d, max_boxes %d, workers %d; workers <= %d)", o->batch, o->imgsz, o->max_boxes, o->workers, MAX_WORKERS), NULL;
    if (split->n < 1) return errf(err, errcap, "loader: the split has no images"), NULL;
    if (o->rect && (o->train || o->stride < 1 || o->stride > o->imgsz))
        return errf(err, errcap, "loader: rect batches are for validation, with a stride in [1, imgsz] (got %d)", o->stride), NULL;
    if (o->shards < 0 || o->shard < 0 || (o->shards > 1 && (!o->train || o->shard >= o->shards)))
        return errf(err, errcap, "loader: bad shard %d of %d (training loaders only)", o->shard, o->shards), NULL;
    const int shards = o->shards > 1 ? o->shards : 1;
    if (o->train && split->n < o->batch * shards) {
        if (shards == 1) return errf(err, errcap, "loader: %d training images are fewer than one batch of %d", split->n, o->batch), NULL;
        return errf(err, errcap, "loader: %d training images are fewer than one batch of %d on each of %d ranks", split->n, o->batch, shards), NULL;
    }
    Loader *l = calloc(1, sizeof *l);
    if (!l) return errf(err, errcap, "loader: out of memory"), NULL;
    l->split = split;
    l->o = *o;
    l->o.shards = shards;
    l->nb = o->train ? split->n / (o->batch * shards) : (split->n + o->batch - 1) / o->batch;
    l->hold = -1;
    for (int i = 0; i < 256; i++) l->lut255[i] = (float)i / 255.0f;
    l->order = malloc((size_t)split->n * sizeof *l->order);
    l->side = o->imgsz;
    bool ok = l->order != NULL && (!o->rect || rect_batches(l));
    size_t px = (size_t)o->batch * 3 * l->side * l->side, nbox = (size_t)o->batch * (o->max_boxes ? o->max_boxes : 1) * 5;
    for (int i = 0; ok && i < RING; i++) {
        Batch *b = &l->slot[i].b;
        l->slot[i].batch = -1;
        /* whole pages, so a GPU can pin each slot on its own (pinning works page by page) */
        if (o->bytes && posix_memalign((void **)&b->bytes, PAGE, (px + PAGE - 1) / PAGE * PAGE)) b->bytes = NULL;
        if (!o->bytes) b->images = malloc(px * sizeof *b->images);
        b->boxes = calloc(nbox, sizeof *b->boxes);
        b->counts = calloc((size_t)o->batch, sizeof *b->counts);
        b->info = calloc((size_t)o->batch, sizeof *b->info);
        ok = (b->images || b->bytes) && b->boxes && b->counts && b->info;
    }
    if (ok && o->cache_ram) ok = (l->cache = calloc((size_t)split->n, sizeof *l->cache)) != NULL;
    if (!ok) {
        free_slots(l);
        free(l->cache);
        free(l->order);
        free(l->rect_order);
        free(l->shape);
        free(l);
        return errf(err, errcap, "loader: out of memory for %d batch buffers of %d x 3 x %d x %d", RING, o->batch, o->imgsz, o->imgsz), NULL;
    }
    int rc = init_sync(l);
    if (rc != 0) {
        free_slots(l);
        free(l->cache);
        free(l->order);
        free(l->rect_order);
        free(l->shape);
        free(l);
        return errf(err, errcap, "loader: cannot create its locks: %s", strerror(rc)), NULL;
    }
    if (o->workers > 0 && !(l->threads = malloc((size_t)o->workers * sizeof *l->threads))) {
        loader_close(l);
        return errf(err, errcap, "loader: out of memory"), NULL;
    }
    for (int i = 0; i < o->workers; i++) {
        if ((rc = pthread_create(&l->threads[i], NULL, worker_main, l)) != 0) {
            loader_close(l);
            return errf(err, errcap, "loader: cannot start worker thread %d of %d: %s", i + 1, o->workers, strerror(rc)), NULL;
        }
        l->nthreads++;
    }
    return l;
}

int loader_pixel_buffers(const Loader *l, void **bufs, size_t *bytes_each) {
    *bytes_each = (size_t)l->o.batch * 3 * l->side * l->side * (l->o.bytes ? 1 : sizeof(float));
    for (int i = 0; i < RING; i++) bufs[i] = l->o.bytes ? (void *)l->slot[i].b.bytes : (void *)l->slot[i].b.images;
    return RING;
}

int64_t loader_host_bytes(const Loader *l) {
    const int64_t b = l->o.batch, px = b * 3 * l->side * l->side * (l->o.bytes ? 1 : (int64_t)sizeof(float));
    const int64_t page = l->o.bytes ? (px + PAGE - 1) / PAGE * PAGE : px;
    return RING * (page + b * (l->o.max_boxes ? l->o.max_boxes : 1) * 5 * (int64_t)sizeof(float) + b * (int64_t)(sizeof(int64_t) + sizeof(ImageInfo)));
}

int64_t loader_cache_bytes(const DataSplit *split, int imgsz) {
    int64_t b = 0;
    for (int i = 0; i < split->n; i++) {
        int w, h;
        load_size(split->samples[i].w, split->samples[i].h, imgsz, &w, &h);
        b += (int64_t)w * h * 3;
    }
    return b;
}

int64_t loader_worker_bytes(const Loader *l) {
    int64_t orig = 0;
    for (int i = 0; i < l->split->n; i++) {
        const int64_t px = (int64_t)l->split->samples[i].w * l->split->samples[i].h;
        if (px > orig) orig = px;
    }
    const int64_t s2 = (int64_t)l->o.imgsz * l->o.imgsz;
    /* the decoded original and its resize steps (each at most a quarter of the last) */
    int64_t each = orig * 3 * 3 / 2;
    if (!l->o.train) each += 2 * 3 * s2;
    else each += (l->o.hyp.mixup > 0 ? 2 : 1) * (4 * 3 * s2 + 12 * s2 + 3 * s2);
    return each * (l->o.workers > 0 ? l->o.workers : 1);
}

int loader_batches_per_epoch(const Loader *l) { return l->nb; }

void loader_batch_shape(const Loader *l, int i, int *h, int *w) {
    const bool rect = l->shape && i >= 0 && i < l->nb;
    *h = rect ? l->shape[2 * i] : l->o.imgsz;
    *w = rect ? l->shape[2 * i + 1] : l->o.imgsz;
}

int (*loader_batch_shapes(const Loader *l))[2] {
    int(*hw)[2] = calloc((size_t)l->nb + 1, sizeof *hw);
    for (int i = 0; hw && i < l->nb; i++) loader_batch_shape(l, i, &hw[i][0], &hw[i][1]);
    return hw;
}

bool loader_start_epoch(Loader *l, int epoch, bool mosaic, int skip, char *err, int errcap) {
    if (epoch < 0) return errf(err, errcap, "loader: epoch %d is negative", epoch);
    if (skip < 0 || skip > l->nb) return errf(err, errcap, "loader: cannot skip %d batches of an epoch of %d", skip, l->nb);
    lock(&l->mu);
    /* stop handing out the old epoch's images, then wait for those in flight */
    l->gen++;
    for (int i = 0; i < RING; i++) l->slot[i].batch = -1;
    l->next_assign = l->next_return = 0;
    l->hold = -1;
    while (l->busy > 0) wait_on(&l->done, &l->mu);
    for (int i = 0; i < l->split->n; i++) l->order[i] = l->rect_order ? l->rect_order[i] : i;
    if (l->o.train) {
        Rng r;
        rng_seed(&r, rng_mix(rng_mix(l->o.seed, TAG_SHUFFLE), (uint64_t)epoch));
        for (int i = l->split->n - 1; i > 0; i--) {
            int j = (int)rng_below(&r, (uint64_t)i + 1);
            int t = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = t;
        }
    }
    l->epoch = epoch;
    l->mosaic = mosaic;
    l->started = true;
    l->failed = false;
    l->fail_err[0] = 0;
    l->next_assign = l->next_return = skip;
    assign(l);
    wake_all(&l->work);
    unlock(&l->mu);
    return true;
}

bool loader_next(Loader *l, Batch *b, char *err, int errcap) {
    if (err && errcap > 0) err[0] = 0;
    lock(&l->mu);
    bool ok = false;
    if (!l->started) {
        errf(err, errcap, "loader: loader_next before loader_start_epoch");
        goto out;
    }
    if (l->failed) {
        errf(err, errcap, "%s", l->fail_err);
        goto out;
    }
    l->hold = -1;
    if (l->next_return >= l->nb) goto out;
    assign(l);
    wake_all(&l->work);
    long k = l->next_return;
    Slot *s = &l->slot[k % RING];
    if (l->nthreads == 0) {
        while (s->claimed < s->n) run_claim(l, s, s->claimed++);
    }
    while (s->done < s->n) wait_on(&l->done, &l->mu);
    if (s->failed) {
        l->failed = true;
        snprintf(l->fail_err, sizeof l->fail_err, "%s", s->err);
        errf(err, errcap, "%s", s->err);
        goto out;
    }
    *b = s->b;
    l->hold = k;
    l->next_return++;
    assign(l);
    wake_all(&l->work);
    ok = true;
out:
    unlock(&l->mu);
    return ok;
}

void loader_close(Loader *l) {
    if (!l) return;
    lock(&l->mu);
    l->stop = true;
    wake_all(&l->work);
    unlock(&l->mu);
    for (int i = 0; i < l->nthreads; i++) must(pthread_join(l->threads[i], NULL), "pthread_join");
    must(pthread_cond_destroy(&l->done), "pthread_cond_destroy");
    must(pthread_cond_destroy(&l->work), "pthread_cond_destroy");
    must(pthread_mutex_destroy(&l->cache_mu), "pthread_mutex_destroy");
    must(pthread_mutex_destroy(&l->mu), "pthread_mutex_destroy");
    free(l->threads);
    free_slots(l);
    free_cache(l);
    free(l->order);
    free(l->rect_order);
    free(l->shape);
    free(l);
}
