/* tests/test_loader.c — suite `loader`: runtime/data/loader.c on a small
 * dataset of PNGs written to a mkdtemp folder with a DataSplit built by hand:
 * shapes and ranges, bit-identical batches for any worker count, epochs,
 * resume by skip, validation order/padding/ImageInfo, max_boxes, the RAM
 * cache and a vanished file. Owns these tests only. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/data/dataset.h"
#include "../runtime/data/image_io.h"
#include "../runtime/data/loader.h"

#define NIMG 10
#define S 64

typedef struct Fixture {
    char dir[64];
    DataSplit split;
} Fixture;

/* Textured image with a class-coloured block where each label is. */
static Image make_image(int w, int h, uint32_t seed) {
    Image im = {w, h, malloc((size_t)w * h * 3)};
    cr_assert(im.px);
    uint32_t x = seed * 2654435761u + 7;
    for (int i = 0; i < w * h * 3; i++) {
        x = x * 1664525u + 1013904223u;
        im.px[i] = (uint8_t)((x >> 26) + (uint32_t)(i % (w * 3)) / 3 % 200);
    }
    return im;
}

/* Sizes cover landscape, portrait, up- and down-scaling to S = 64. */
static const int SIZES[NIMG][2] = {{100, 50}, {50, 100}, {64, 48}, {40, 30}, {128, 96}, {90, 90}, {33, 77}, {120, 40}, {64, 64}, {70, 52}};

static void fixture_open(Fixture *f) {
    snprintf(f->dir, sizeof f->dir, "/tmp/yolocc-loader-XXXXXX");
    cr_assert(mkdtemp(f->dir));
    f->split = (DataSplit){.samples = calloc(NIMG, sizeof(Sample)), .n = NIMG};
    cr_assert(f->split.samples);
    for (int i = 0; i < NIMG; i++) {
        Sample *s = &f->split.samples[i];
        char path[128], err[256];
        snprintf(path, sizeof path, "%s/%02d.png", f->dir, i);
        Image im = make_image(SIZES[i][0], SIZES[i][1], (uint32_t)i);
        cr_assert(image_write_png(path, &im, err, sizeof err), "%s", err);
        image_free(&im);
        s->image = strdup(path);
        s->w = SIZES[i][0], s->h = SIZES[i][1];
        /* image i has i % 4 + 1 boxes, sample 3 none; classes 0..2 */
        s->n_labels = i == 3 ? 0 : i % 4 + 1;
        s->labels = calloc((size_t)(s->n_labels ? s->n_labels : 1), sizeof(Label));
        for (int k = 0; k < s->n_labels; k++) s->labels[k] = (Label){k % 3, 0.2f + 0.15f * k, 0.3f + 0.1f * k, 0.3f, 0.4f};
        f->split.n_labels += s->n_labels;
    }
}

static void fixture_close(Fixture *f) {
    for (int i = 0; i < f->split.n; i++) {
        unlink(f->split.samples[i].image);
        free(f->split.samples[i].image);
        free(f->split.samples[i].labels);
    }
    free(f->split.samples);
    rmdir(f->dir);
}

static LoaderOptions opts(bool train, int workers) {
    return (LoaderOptions){.batch = 4, .imgsz = S, .max_boxes = 8, .train = train, .hyp = hyp_defaults(), .seed = 1234, .workers = workers, .cache_ram = false};
}

/* A copy of one batch that outlives the loader's buffer. */
typedef struct Snap {
    float *images, *boxes;
    int64_t counts[4];
    ImageInfo info[4];
    int n_valid, instances, dropped;
} Snap;

static const size_t IMG_FLOATS = 4 * 3 * S * S;

static void snap(Snap *d, const Batch *b, int max_boxes) {
    d->images = malloc(IMG_FLOATS * sizeof(float));
    d->boxes = malloc((size_t)4 * (max_boxes ? max_boxes : 1) * 5 * sizeof(float));
    cr_assert(d->images && d->boxes);
    /* a batch of bytes as a GPU divides it: value / 255 in fp32 */
    cr_assert((b->images == NULL) != (b->bytes == NULL), "a batch holds its pixels one way");
    if (b->bytes)
        for (size_t i = 0; i < IMG_FLOATS; i++) d->images[i] = (float)b->bytes[i] / 255.0f;
    else memcpy(d->images, b->images, IMG_FLOATS * sizeof(float));
    memcpy(d->boxes, b->boxes, (size_t)4 * max_boxes * 5 * sizeof(float));
    memcpy(d->counts, b->counts, sizeof d->counts);
    memcpy(d->info, b->info, sizeof d->info);
    d->n_valid = b->n_valid, d->instances = b->instances, d->dropped = b->dropped_boxes;
}

static void snap_free(Snap *d) {
    free(d->images);
    free(d->boxes);
}

static bool snap_eq(const Snap *a, const Snap *b, int max_boxes) {
    return memcmp(a->images, b->images, IMG_FLOATS * sizeof(float)) == 0 && memcmp(a->boxes, b->boxes, (size_t)4 * max_boxes * 5 * sizeof(float)) == 0 &&
           memcmp(a->counts, b->counts, sizeof a->counts) == 0 && memcmp(a->info, b->info, sizeof a->info) == 0 && a->n_valid == b->n_valid &&
           a->instances == b->instances && a->dropped == b->dropped;
}

/* All batches of one epoch; returns how many. */
static int run_epoch(const DataSplit *split, const LoaderOptions *o, int epoch, bool mosaic, int skip, Snap *out, int cap) {
    char err[512];
    Loader *l = loader_open(split, o, err, sizeof err);
    cr_assert(l, "%s", err);
    cr_assert(loader_start_epoch(l, epoch, mosaic, skip, err, sizeof err), "%s", err);
    Batch b;
    int n = 0;
    while (loader_next(l, &b, err, sizeof err)) {
        cr_assert(n < cap);
        snap(&out[n++], &b, o->max_boxes);
    }
    cr_assert_str_empty(err, "%s", err);
    loader_close(l);
    return n;
}

/* ---- tests ---- */

Test(loader, train_batches_shapes_and_ranges) {
    Fixture f;
    fixture_open(&f);
    LoaderOptions o = opts(true, 2);
    char err[512];
    Loader *l = loader_open(&f.split, &o, err, sizeof err);
    cr_assert(l, "%s", err);
    cr_assert_eq(loader_batches_per_epoch(l), NIMG / 4, "the partial batch is dropped");
    Batch b;
    cr_assert(!loader_next(l, &b, err, sizeof err) && strstr(err, "loader_start_epoch"));
    cr_assert(loader_start_epoch(l, 0, true, 0, err, sizeof err), "%s", err);
    int batches = 0, seen[NIMG] = {0};
    while (loader_next(l, &b, err, sizeof err)) {
        batches++;
        cr_assert_eq(b.n_valid, 4);
        int inst = 0;
        for (size_t i = 0; i < IMG_FLOATS; i++) cr_assert(b.images[i] >= 0 && b.images[i] <= 1);
        for (int j = 0; j < 4; j++) {
            cr_assert(b.info[j].index >= 0 && b.info[j].index < NIMG);
            seen[b.info[j].index]++;
            cr_assert(b.counts[j] >= 0 && b.counts[j] <= o.max_boxes);
            inst += (int)b.counts[j];
            for (int k = 0; k < o.max_boxes; k++) {
                const float *x = b.boxes + ((size_t)j * o.max_boxes + k) * 5;
                if (k >= b.counts[j]) {
                    cr_assert(x[0] == 0 && x[1] == 0 && x[2] == 0 && x[3] == 0 && x[4] == 0, "unused rows are zero");
                    continue;
                }
                cr_assert(x[0] >= 0 && x[0] <= 2 && x[0] == floorf(x[0]));
                cr_assert(x[3] > 0 && x[4] > 0 && x[1] - x[3] / 2 >= -1e-5f && x[1] + x[3] / 2 <= 1 + 1e-5f && x[2] - x[4] / 2 >= -1e-5f && x[2] + x[4] / 2 <= 1 + 1e-5f,
                          "box %g %g %g %g inside the image", x[1], x[2], x[3], x[4]);
            }
        }
        cr_assert_eq(b.instances, inst);
    }
    cr_assert_str_empty(err, "%s", err);
    cr_assert_eq(batches, 2);
    int distinct = 0;
    for (int i = 0; i < NIMG; i++) {
        cr_assert(seen[i] <= 1, "a sample appears twice in one epoch");
        distinct += seen[i];
    }
    cr_assert_eq(distinct, 8);
    cr_assert(!loader_next(l, &b, err, sizeof err) && err[0] == 0, "stays at the end");
    loader_close(l);
    fixture_close(&f);
}

Test(loader, identical_for_any_worker_count) {
    Fixture f;
    fixture_open(&f);
    Snap ref[2][3], got[2][3];
    for (int e = 0; e < 2; e++) {
        LoaderOptions o = opts(true, 0);
        o.hyp.mixup = 0.5f;   /* exercise the mixup branch too */
        cr_assert_eq(run_epoch(&f.split, &o, e, true, 0, ref[e], 3), 2);
        for (int w = 1; w <= 3; w += 2) {
            o.workers = w;
            cr_assert_eq(run_epoch(&f.split, &o, e, true, 0, got[e], 3), 2);
            for (int k = 0; k < 2; k++) {
                cr_assert(snap_eq(&ref[e][k], &got[e][k], o.max_boxes), "epoch %d batch %d differs with %d workers", e, k, w);
                snap_free(&got[e][k]);
            }
        }
    }
    /* another epoch reshuffles and redraws */
    cr_assert(!snap_eq(&ref[0][0], &ref[1][0], 8) || !snap_eq(&ref[0][1], &ref[1][1], 8));
    cr_assert(memcmp(ref[0][0].images, ref[1][0].images, IMG_FLOATS * sizeof(float)) != 0);
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < 2; k++) snap_free(&ref[e][k]);
    fixture_close(&f);
}

/* Batches of bytes (a CUDA plan's training) are the float batches' pixels
 * before the division: value / 255 of each equals them bit for bit, with the
 * same boxes, counts and info, mosaic and augmentation included. */
Test(loader, bytes_are_the_same_pixels) {
    Fixture f;
    fixture_open(&f);
    Snap a[NIMG], b[NIMG];
    LoaderOptions o = opts(true, 2);
    int na = run_epoch(&f.split, &o, 1, true, 0, a, NIMG);
    o.bytes = true;
    int nb = run_epoch(&f.split, &o, 1, true, 0, b, NIMG);
    cr_assert_eq(na, nb);
    cr_assert_gt(na, 0);
    for (int i = 0; i < na; i++) cr_expect(snap_eq(&a[i], &b[i], o.max_boxes), "batch %d", i);
    for (int i = 0; i < na; i++) snap_free(&a[i]), snap_free(&b[i]);
    fixture_close(&f);
}

/* The slots a GPU pins: LOADER_SLOTS distinct buffers of a batch's pixels
 * (page-aligned bytes in bytes mode), and every batch lies in one of them. */
Test(loader, batches_lie_in_the_pixel_slots) {
    Fixture f;
    fixture_open(&f);
    for (int bytes = 0; bytes < 2; bytes++) {
        LoaderOptions o = opts(true, 2);
        o.bytes = bytes;
        char err[512];
        Loader *l = loader_open(&f.split, &o, err, sizeof err);
        cr_assert(l, "%s", err);
        void *bufs[LOADER_SLOTS];
        size_t each = 0;
        cr_assert_eq(loader_pixel_buffers(l, bufs, &each), LOADER_SLOTS);
        cr_expect_eq(each, IMG_FLOATS * (bytes ? 1 : sizeof(float)));
        for (int i = 0; i < LOADER_SLOTS; i++) {
            cr_expect(bufs[i] != NULL && (i == 0 || bufs[i] != bufs[i - 1]));
            if (bytes) cr_expect_eq((uintptr_t)bufs[i] % 4096, 0, "slot %d starts a page", i);
        }
        cr_assert(loader_start_epoch(l, 0, true, 0, err, sizeof err), "%s", err);
        Batch b;
        int seen = 0;
        while (loader_next(l, &b, err, sizeof err)) {
            void *px = bytes ? (void *)b.bytes : (void *)b.images;
            bool in = false;
            for (int i = 0; i < LOADER_SLOTS; i++) in |= px == bufs[i];
            cr_expect(in, "batch %d's pixels are a slot", seen);
            seen++;
        }
        cr_expect_gt(seen, 0);
        loader_close(l);
    }
    fixture_close(&f);
}

Test(loader, skip_resumes_at_the_same_batch) {
    Fixture f;
    fixture_open(&f);
    LoaderOptions o = opts(true, 2);
    Snap all[3], tail[3];
    cr_assert_eq(run_epoch(&f.split, &o, 5, true, 0, all, 3), 2);
    cr_assert_eq(run_epoch(&f.split, &o, 5, true, 1, tail, 3), 1);
    cr_assert(snap_eq(&all[1], &tail[0], o.max_boxes));
    cr_assert_eq(run_epoch(&f.split, &o, 5, true, 2, tail + 1, 2), 0);
    char err[512];
    Loader *l = loader_open(&f.split, &o, err, sizeof err);
    cr_assert(l);
    cr_assert(!loader_start_epoch(l, 0, true, 3, err, sizeof err) && strstr(err, "skip"));
    loader_close(l);
    snap_free(&all[0]);
    snap_free(&all[1]);
    snap_free(&tail[0]);
    fixture_close(&f);
}

Test(loader, close_mosaic_and_restart_mid_epoch) {
    Fixture f;
    fixture_open(&f);
    LoaderOptions o = opts(true, 3);
    char err[512];
    Loader *l = loader_open(&f.split, &o, err, sizeof err);
    cr_assert(l, "%s", err);
    Batch b;
    cr_assert(loader_start_epoch(l, 0, true, 0, err, sizeof err));
    cr_assert(loader_next(l, &b, err, sizeof err), "%s", err);
    /* restart while batches are still being prepared, now without mosaic */
    cr_assert(loader_start_epoch(l, 1, false, 0, err, sizeof err));
    Snap first;
    cr_assert(loader_next(l, &b, err, sizeof err), "%s", err);
    snap(&first, &b, o.max_boxes);
    cr_assert(loader_start_epoch(l, 1, false, 0, err, sizeof err));
    cr_assert(loader_next(l, &b, err, sizeof err), "%s", err);
    Snap again;
    snap(&again, &b, o.max_boxes);
    cr_assert(snap_eq(&first, &again, o.max_boxes), "restarting an epoch repeats it");
    snap_free(&first);
    snap_free(&again);
    loader_close(l);   /* closes with work in flight */
    fixture_close(&f);
}

Test(loader, val_order_padding_and_info) {
    Fixture f;
    fixture_open(&f);
    LoaderOptions o = opts(false, 2);
    Snap v[3];
    cr_assert_eq(run_epoch(&f.split, &o, 0, false, 0, v, 3), 3, "ceil(10 / 4) batches");
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 4; j++) {
            int pos = 4 * k + j;
            if (pos < NIMG) {
                cr_assert_eq(v[k].info[j].index, pos, "validation keeps the split's order");
                cr_assert_eq(v[k].counts[j], f.split.samples[pos].n_labels);
                cr_assert(v[k].info[j].orig_w == SIZES[pos][0] && v[k].info[j].orig_h == SIZES[pos][1]);
            } else {
                cr_assert_eq(v[k].info[j].index, -1);
                cr_assert_eq(v[k].counts[j], 0);
                for (size_t i = 0; i < 3 * S * S; i++) cr_assert(v[k].images[(size_t)j * 3 * S * S + i] == 0);
            }
        }
    cr_assert(v[0].n_valid == 4 && v[1].n_valid == 4 && v[2].n_valid == 2);
    /* image 0 is 100x50: resized to 64x32, letterboxed with 16 rows on top */
    const ImageInfo *i0 = &v[0].info[0];
    cr_assert(fabsf(i0->ratio - 0.64f) < 1e-6f && i0->pad_x == 0 && i0->pad_y == 16, "ratio %g pads %g %g", i0->ratio, i0->pad_x, i0->pad_y);
    cr_assert(fabsf(v[0].images[0] - 114.0f / 255) < 1e-7f, "padding is 114");
    /* image 1 is 50x100: pads left */
    const ImageInfo *i1 = &v[0].info[1];
    cr_assert(fabsf(i1->ratio - 0.64f) < 1e-6f && i1->pad_x == 16 && i1->pad_y == 0);
    /* every box maps back to its label in original pixels within 1 px */
    for (int pos = 0; pos < NIMG; pos++) {
        const Snap *sn = &v[pos / 4];
        int j = pos % 4;
        const ImageInfo *in = &sn->info[j];
        const Sample *sm = &f.split.samples[pos];
        for (int k = 0; k < sm->n_labels; k++) {
            const float *x = sn->boxes + ((size_t)j * o.max_boxes + k) * 5;
            float x1 = ((x[1] - x[3] / 2) * S - in->pad_x) / in->ratio, y1 = ((x[2] - x[4] / 2) * S - in->pad_y) / in->ratio;
            float x2 = ((x[1] + x[3] / 2) * S - in->pad_x) / in->ratio, y2 = ((x[2] + x[4] / 2) * S - in->pad_y) / in->ratio;
            const Label *L = &sm->labels[k];
            float w0 = (float)sm->w, h0 = (float)sm->h;
            cr_assert(x[0] == (float)L->cls);
            cr_assert(fabsf(x1 - (L->cx - L->w / 2) * w0) <= 1 && fabsf(x2 - (L->cx + L->w / 2) * w0) <= 1 && fabsf(y1 - (L->cy - L->h / 2) * h0) <= 1 &&
                          fabsf(y2 - (L->cy + L->h / 2) * h0) <= 1,
                      "image %d box %d maps back to (%g %g %g %g)", pos, k, x1, y1, x2, y2);
        }
    }
    for (int k = 0; k < 3; k++) snap_free(&v[k]);
    fixture_close(&f);
}

Test(loader, max_boxes_drops_and_counts) {
    Fixture f;
    fixture_open(&f);
    LoaderOptions o = opts(false, 1);
    o.max_boxes = 2;
    Snap v[3];
    cr_assert_eq(run_epoch(&f.split, &o, 0, false, 0, v, 3), 3);
    int dropped = 0, instances = 0;
    for (int k = 0; k < 3; k++) {
        dropped += v[k].dropped;
        instances += v[k].instances;
        for (int j = 0; j < 4; j++) cr_assert(v[k].counts[j] <= 2);
    }
    /* labels per image: 1 2 3 0 1 2 3 4 1 2 = 19; kept min(n, 2) = 15 */
    cr_assert_eq(instances, 15);
    cr_assert_eq(dropped, 4);
    cr_assert_eq(v[0].dropped, 1);
    for (int k = 0; k < 3; k++) snap_free(&v[k]);
    fixture_close(&f);
}

Test(loader, cache_ram_gives_identical_batches) {
    Fixture f;
    fixture_open(&f);
    for (int train = 0; train < 2; train++) {
        LoaderOptions o = opts(train, 2);
        Snap a[3], b[3];
        int n = run_epoch(&f.split, &o, 3, true, 0, a, 3);
        o.cache_ram = true;
        char err[512];
        Loader *l = loader_open(&f.split, &o, err, sizeof err);
        cr_assert(l, "%s", err);
        /* two passes: the first fills the cache, the second reads only it */
        for (int pass = 0; pass < 2; pass++) {
            cr_assert(loader_start_epoch(l, 3, true, 0, err, sizeof err));
            Batch bt;
            int k = 0;
            while (loader_next(l, &bt, err, sizeof err)) snap(&b[k++], &bt, o.max_boxes);
            cr_assert_eq(k, n);
            for (int i = 0; i < n; i++) {
                cr_assert(snap_eq(&a[i], &b[i], o.max_boxes), "train %d pass %d batch %d", train, pass, i);
                snap_free(&b[i]);
            }
            if (pass == 0)
                for (int i = 0; i < NIMG; i++) cr_assert_eq(unlink(f.split.samples[i].image), 0);
        }
        loader_close(l);
        for (int i = 0; i < n; i++) snap_free(&a[i]);
        if (!train) {
            fixture_close(&f);
            fixture_open(&f);
        }
    }
    fixture_close(&f);
}

Test(loader, vanished_image_is_one_error_naming_it) {
    Fixture f;
    fixture_open(&f);
    for (int workers = 0; workers <= 2; workers += 2) {
        LoaderOptions o = opts(false, workers);
        char err[512];
        Loader *l = loader_open(&f.split, &o, err, sizeof err);
        cr_assert(l, "%s", err);
        if (workers == 0) cr_assert_eq(unlink(f.split.samples[5].image), 0);
        cr_assert(loader_start_epoch(l, 0, false, 0, err, sizeof err));
        Batch b;
        cr_assert(loader_next(l, &b, err, sizeof err), "%s", err);
        cr_assert(!loader_next(l, &b, err, sizeof err), "batch 1 holds image 5");
        cr_assert(strstr(err, "05.png") && !strchr(err, '\n'), "error: %s", err);
        cr_assert(!loader_next(l, &b, err, sizeof err) && strstr(err, "05.png"), "the failure sticks until the next epoch");
        loader_close(l);
    }
    fixture_close(&f);
}

/* Data parallelism: rank r of 2, batch 2, takes image for image the images
 * 2j + r of one process's batch of 4 (DistributedSampler's every other
 * sample of the shuffled order), augmentation and mosaic included, so the
 * ranks' batches i together are that batch; an epoch deals each image once. */
Test(loader, shards_deal_every_other_image_of_the_whole_batch) {
    Fixture f;
    fixture_open(&f);
    char err[512];
    const size_t img = 3 * S * S;
    for (int e = 0; e < 2; e++) {
        LoaderOptions o = opts(true, 2);
        Loader *whole = loader_open(&f.split, &o, err, sizeof err), *rank[2];
        cr_assert(whole, "%s", err);
        cr_assert(loader_start_epoch(whole, e, true, 0, err, sizeof err), "%s", err);
        for (int r = 0; r < 2; r++) {
            LoaderOptions ro = o;
            ro.batch = 2, ro.shard = r, ro.shards = 2, ro.workers = r;   /* worker counts differ too */
            cr_assert((rank[r] = loader_open(&f.split, &ro, err, sizeof err)), "%s", err);
            cr_assert_eq(loader_batches_per_epoch(rank[r]), 10 / 4);
            cr_assert(loader_start_epoch(rank[r], e, true, 0, err, sizeof err), "%s", err);
        }
        bool seen[NIMG] = {0};
        for (int i = 0; i < 2; i++) {
            Batch w, b;
            cr_assert(loader_next(whole, &w, err, sizeof err), "%s", err);
            for (int r = 0; r < 2; r++) {
                cr_assert(loader_next(rank[r], &b, err, sizeof err), "%s", err);
                for (int j = 0; j < 2; j++) {
                    int k = 2 * j + r;
                    cr_expect(memcmp(b.images + j * img, w.images + k * img, img * sizeof(float)) == 0, "epoch %d batch %d rank %d image %d: pixels differ", e, i, r, j);
                    cr_expect(memcmp(b.boxes + j * 8 * 5, w.boxes + k * 8 * 5, 8 * 5 * sizeof(float)) == 0 && b.counts[j] == w.counts[k], "boxes of image %d", j);
                    cr_expect_eq(b.info[j].index, w.info[k].index);
                    int idx = b.info[j].index;
                    cr_assert(idx >= 0 && idx < NIMG && !seen[idx], "image %d dealt twice in epoch %d", idx, e);
                    seen[idx] = true;
                }
            }
        }
        for (int r = 0; r < 2; r++) {
            Batch b;
            cr_expect(!loader_next(rank[r], &b, err, sizeof err) && !err[0], "the epoch has 2 batches");
            loader_close(rank[r]);
        }
        loader_close(whole);
    }
    fixture_close(&f);
}

Test(loader, open_rejects_bad_options) {
    Fixture f;
    fixture_open(&f);
    char err[512];
    LoaderOptions o = opts(true, 0);
    o.batch = 11;
    cr_assert(!loader_open(&f.split, &o, err, sizeof err) && strstr(err, "fewer than one batch"), "%s", err);
    o = opts(true, -1);
    cr_assert(!loader_open(&f.split, &o, err, sizeof err) && strstr(err, "workers"));
    o = opts(false, 0);
    o.imgsz = 0;
    cr_assert(!loader_open(&f.split, &o, err, sizeof err));
    /* shards: training only, the rank below the count, a batch on every rank */
    o = opts(true, 0);
    o.shard = 2, o.shards = 2;
    cr_assert(!loader_open(&f.split, &o, err, sizeof err) && strstr(err, "shard 2 of 2"), "%s", err);
    o = opts(false, 0);
    o.shard = 0, o.shards = 2;
    cr_assert(!loader_open(&f.split, &o, err, sizeof err) && strstr(err, "training loaders only"), "%s", err);
    o = opts(true, 0);
    o.shard = 0, o.shards = 3;
    cr_assert(!loader_open(&f.split, &o, err, sizeof err) && strstr(err, "one batch of 4 on each of 3 ranks"), "%s", err);
    o = opts(false, 0);
    o.max_boxes = 0;   /* allowed: every box is dropped and counted */
    Snap v[3];
    cr_assert_eq(run_epoch(&f.split, &o, 0, false, 0, v, 3), 3);
    cr_assert_eq(v[0].dropped, 1 + 2 + 3);
    for (int k = 0; k < 3; k++) snap_free(&v[k]);
    fixture_close(&f);
}

/* Rect validation batches (LoaderOptions.rect) on tests/parity/val_rect: the
 * images in the order, and the batches in the shapes, Ultralytics' dataset
 * gave them (its batch_shapes and im_files, in the fixture's metrics.json,
 * tools/make_val_rect_fixture.py); each image letterboxed unscaled and
 * centred (its info maps back to the original), boxes normalised to the
 * batch's own width and height; rect is refused for training. */
Test(loader, rect_batches_follow_ultralytics_shapes_and_order) {
    Dataset ds;
    char err[512];
    cr_assert(dataset_load("tests/parity/val_rect/data.yaml", &(DatasetOptions){.splits = DATASET_VAL}, &ds, NULL, err, sizeof err), "%s", err);
    FILE *f = fopen("tests/parity/val_rect/v8tiny/metrics.json", "rb");
    cr_assert(f);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    cJSON *m = cJSON_Parse(text);
    const cJSON *shapes = cJSON_GetObjectItem(m, "batch_shapes"), *files = cJSON_GetObjectItem(m, "im_files");
    cr_assert(cJSON_GetArraySize(shapes) == 3 && cJSON_GetArraySize(files) == 6);
    LoaderOptions o = {.batch = 2, .imgsz = 128, .max_boxes = 8, .train = false, .workers = 2, .rect = true, .stride = 32};
    Loader *l = loader_open(&ds.val, &o, err, sizeof err);
    cr_assert(l, "%s", err);
    void *bufs[LOADER_SLOTS];
    size_t each;
    loader_pixel_buffers(l, bufs, &each);
    cr_expect_eq(each, (size_t)2 * 3 * 160 * 160 * sizeof(float), "room for the largest batch side, 160: %zu bytes", each);
    cr_assert(loader_start_epoch(l, 0, false, 0, err, sizeof err), "%s", err);
    Batch b;
    int k = 0;
    for (int bi = 0; loader_next(l, &b, err, sizeof err); bi++) {
        const cJSON *sh = cJSON_GetArrayItem(shapes, bi);
        cr_expect(b.h == cJSON_GetArrayItem(sh, 0)->valueint && b.w == cJSON_GetArrayItem(sh, 1)->valueint, "batch %d: %dx%d, Ultralytics %dx%d", bi, b.h, b.w,
                  cJSON_GetArrayItem(sh, 0)->valueint, cJSON_GetArrayItem(sh, 1)->valueint);
        for (int j = 0; j < b.n_valid; j++, k++) {
            const Sample *s = &ds.val.samples[b.info[j].index];
            cr_expect_str_eq(dataset_file_name(s->image), cJSON_GetArrayItem(files, k)->valuestring, "image %d", k);
            /* unscaled (the long side was resized to 128 already) and centred */
            const double r = 128.0 / (s->w > s->h ? s->w : s->h);
            cr_expect(fabs(b.info[j].ratio - r) < 1e-6, "%s: ratio %g, want %g", s->image, b.info[j].ratio, r);
            cr_expect(fabs(b.info[j].pad_x - nearbyint((b.w - s->w * r) / 2 - 0.1)) < 1e-6 && fabs(b.info[j].pad_y - nearbyint((b.h - s->h * r) / 2 - 0.1)) < 1e-6,
                      "%s: pad %g, %g in %dx%d", s->image, b.info[j].pad_x, b.info[j].pad_y, b.h, b.w);
            /* the first label's centre, normalised to the batch's w and h, maps back to the file's */
            const float *bx = b.boxes + (size_t)j * 8 * 5;
            cr_assert_gt(b.counts[j], 0);
            const double cx = (bx[1] * b.w - b.info[j].pad_x) / b.info[j].ratio, cy = (bx[2] * b.h - b.info[j].pad_y) / b.info[j].ratio;
            cr_expect(fabs(cx - s->labels[0].cx * s->w) < 0.05 && fabs(cy - s->labels[0].cy * s->h) < 0.05, "%s: label centre (%g, %g), file (%g, %g)", s->image, cx, cy,
                      s->labels[0].cx * s->w, s->labels[0].cy * s->h);
        }
    }
    cr_expect_eq(err[0], 0, "%s", err);
    cr_expect_eq(k, 6);
    loader_close(l);
    o.train = true;
    cr_expect_null(loader_open(&ds.val, &o, err, sizeof err));
    cr_expect(strstr(err, "rect batches are for validation"), "%s", err);
    cJSON_Delete(m);
    dataset_free(&ds);
}
