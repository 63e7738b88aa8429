/* tests/test_datagen.c — suite `datagen`: a small synthetic dataset loads
 * cleanly through dataset_load with sane labels, the same seed gives the same
 * bytes and another seed does not, a rerun replaces the previous output, and
 * a folder with other files is refused untouched. Owns these tests only. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/data/datagen.h"
#include "../runtime/data/dataset.h"
#include "../runtime/data/image_io.h"

static char dir[64];

static void setup(void) {
    strcpy(dir, "/tmp/yolocc-dg-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void teardown(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert(system(cmd) == 0);
}

static const char *at(const char *rel) {
    static char p[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, rel);
    return p[k];
}

static DatagenOptions small(uint64_t seed) {
    DatagenOptions o = datagen_defaults();
    o.images = 20, o.size = 64, o.seed = seed;
    return o;
}

static void gen(const char *rel, DatagenOptions o) {
    char err[1024] = "";
    cr_assert(datagen_write(at(rel), &o, NULL, err, sizeof err), "%s", err);
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    unsigned char *b = malloc(1 << 20);
    cr_assert(b);
    *len = fread(b, 1, 1 << 20, f);
    cr_assert(!ferror(f));
    fclose(f);
    return b;
}

static bool same_bytes(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    bool same = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int count(const char *rel) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", at(rel));
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    int n = -1;
    cr_assert(fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

Test(datagen, loads_cleanly_with_sane_labels, .init = setup, .fini = teardown) {
    DatagenOptions o = small(7);
    char err[1024] = "", *progress = NULL;
    size_t plen = 0;
    FILE *pf = open_memstream(&progress, &plen);
    cr_assert(pf);
    cr_assert(datagen_write(at("d"), &o, pf, err, sizeof err), "%s", err);
    cr_assert(fclose(pf) == 0);
    cr_expect(strstr(progress, "datagen: 20/20 images") && strstr(progress, "wrote 20 images (16 train, 4 val)"), "%s", progress);
    free(progress);
    Dataset ds;
    char *warn = NULL;
    size_t wlen = 0;
    FILE *wf = open_memstream(&warn, &wlen);
    cr_assert(wf);
    cr_assert(dataset_load(at("d/data.yaml"), NULL, &ds, wf, err, sizeof err), "%s", err);
    cr_assert(fclose(wf) == 0);
    cr_expect(warn[0] == 0, "warnings: %s", warn);
    free(warn);
    cr_expect(ds.train.n == 16 && ds.val.n == 4 && ds.nc == 3);
    cr_expect(strcmp(ds.names[0], "rectangle") == 0 && strcmp(ds.names[2], "triangle") == 0);
    const DataIssues none = {0};
    cr_expect(memcmp(&ds.train.issues, &none, sizeof none) == 0 && memcmp(&ds.val.issues, &none, sizeof none) == 0);
    for (int s = 0; s < 2; s++) {
        const DataSplit *sp = s ? &ds.val : &ds.train;
        for (int i = 0; i < sp->n; i++) {
            const Sample *sm = &sp->samples[i];
            cr_expect(sm->w == 64 && sm->h == 64);
            cr_expect(sm->n_labels >= 1 && sm->n_labels <= 5, "%s: %d boxes", sm->image, sm->n_labels);
            for (int k = 0; k < sm->n_labels; k++) {
                const Label *l = &sm->labels[k];
                cr_expect(l->cls >= 0 && l->cls < 3);
                cr_expect(l->w > 0.03f && l->w <= 0.46f && l->h > 0.03f && l->h <= 0.46f, "%s: size %g x %g", sm->image, l->w, l->h);
                cr_expect(l->cx - l->w / 2 >= -1e-5f && l->cx + l->w / 2 <= 1 + 1e-5f && l->cy - l->h / 2 >= -1e-5f && l->cy + l->h / 2 <= 1 + 1e-5f,
                          "%s: box leaves the image", sm->image);
            }
        }
    }
    dataset_free(&ds);
}

/* Mean colour over the ring of pixels at distance d outside (d > 0) or
 * inside (d < 0) the box border [x0, x1] x [y0, y1], clipped to the image. */
static void ring_mean(const Image *im, int x0, int y0, int x1, int y1, int d, double m[3]) {
    int n = 0;
    m[0] = m[1] = m[2] = 0;
    int a0 = d > 0 ? x0 - d : x0 - d - 1, a1 = d > 0 ? x1 + d : x1 + d + 1, b0 = d > 0 ? y0 - d : y0 - d - 1, b1 = d > 0 ? y1 + d : y1 + d + 1;
    for (int y = b0; y <= b1; y++)
        for (int x = a0; x <= a1; x++) {
            if ((x != a0 && x != a1 && y != b0 && y != b1) || x < 0 || y < 0 || x >= im->w || y >= im->h) continue;
            for (int c = 0; c < 3; c++) m[c] += im->px[((size_t)y * (size_t)im->w + (size_t)x) * 3 + (size_t)c];
            n++;
        }
    for (int c = 0; c < 3; c++) m[c] /= n ? n : 1;
}

static double dist(const double a[3], const double b[3]) { return fabs(a[0] - b[0]) + fabs(a[1] - b[1]) + fabs(a[2] - b[2]); }

Test(datagen, boxes_are_tight_around_the_drawn_shape, .init = setup, .fini = teardown) {
    DatagenOptions o = small(3);
    o.images = 12, o.size = 128, o.classes = 1;   /* rectangles fill their box */
    gen("d", o);
    Dataset ds;
    char err[1024];
    cr_assert(dataset_load(at("d/data.yaml"), NULL, &ds, NULL, err, sizeof err), "%s", err);
    int checked = 0;
    for (int i = 0; i < ds.train.n; i++) {
        const Sample *s = &ds.train.samples[i];
        if (s->n_labels != 1) continue;   /* no overlaps to confuse the check */
        const Label *l = &s->labels[0];
        int x0 = (int)lroundf((l->cx - l->w / 2) * 128), x1 = (int)lroundf((l->cx + l->w / 2) * 128) - 1;
        int y0 = (int)lroundf((l->cy - l->h / 2) * 128), y1 = (int)lroundf((l->cy + l->h / 2) * 128) - 1;
        Image im;
        cr_assert(image_load(s->image, &im, err, sizeof err), "%s", err);
        double edge[3], inner[3], outside[3];
        ring_mean(&im, x0, y0, x1, y1, -1, edge);      /* the box's own border pixels */
        ring_mean(&im, x0, y0, x1, y1, -4, inner);
        ring_mean(&im, x0, y0, x1, y1, 2, outside);
        cr_expect(dist(edge, inner) < 45, "%s: border pixels are not the shape (%.0f)", s->image, dist(edge, inner));
        cr_expect(dist(outside, inner) > 90, "%s: outside the box looks like the shape (%.0f)", s->image, dist(outside, inner));
        image_free(&im);
        checked++;
    }
    cr_expect(checked >= 1, "no single-box image to check");
    dataset_free(&ds);
}

Test(datagen, same_seed_same_bytes_other_seed_differs, .init = setup, .fini = teardown) {
    gen("a", small(7));
    gen("b", small(7));
    gen("c", small(8));
    cr_expect(same_bytes(at("a/labels/train/000003.txt"), at("b/labels/train/000003.txt")));
    cr_expect(same_bytes(at("a/images/train/000003.jpg"), at("b/images/train/000003.jpg")));
    cr_expect(same_bytes(at("a/images/val/000019.jpg"), at("b/images/val/000019.jpg")));
    cr_expect(same_bytes(at("a/data.yaml"), at("b/data.yaml")));
    cr_expect(!same_bytes(at("a/labels/train/000003.txt"), at("c/labels/train/000003.txt")));
    cr_expect(!same_bytes(at("a/images/train/000003.jpg"), at("c/images/train/000003.jpg")));
}

Test(datagen, rerun_replaces_previous_output, .init = setup, .fini = teardown) {
    gen("d", small(1));
    cr_assert(count("d/images/train") == 16);
    FILE *f = fopen(at("d/labels/train.cache"), "w");   /* as Ultralytics leaves it */
    cr_assert(f && fclose(f) == 0);
    DatagenOptions o = small(2);
    o.images = 5;
    gen("d", o);
    cr_expect(count("d/images/train") == 4 && count("d/labels/train") == 4 && count("d/images/val") == 1, "stale files were kept");
    cr_expect(count("d/labels") == 2, "the cache was kept");
}

Test(datagen, refuses_a_folder_with_other_files, .init = setup, .fini = teardown) {
    cr_assert(mkdir(at("d"), 0777) == 0);
    FILE *f = fopen(at("d/notes.txt"), "w");
    cr_assert(f && fclose(f) == 0);
    DatagenOptions o = small(1);
    char err[1024] = "";
    cr_expect(!datagen_write(at("d"), &o, NULL, err, sizeof err));
    cr_expect(strstr(err, "is not empty and not a yolort datagen output"), "%s", err);
    gen("e", o);
    f = fopen(at("e/images/train/mine.jpg"), "w");
    cr_assert(f && fclose(f) == 0);
    cr_expect(!datagen_write(at("e"), &o, NULL, err, sizeof err));
    cr_expect(strstr(err, "found images/train/mine.jpg"), "%s", err);
    cr_expect(count("e/images/train") == 17, "a refused run deleted files");
}

Test(datagen, bad_options_are_one_line_errors) {
    DatagenOptions o = datagen_defaults();
    char err[256] = "";
    o.classes = 9;
    cr_expect(!datagen_write("/nonexistent/x", &o, NULL, err, sizeof err) && strstr(err, "--classes must be in 1..8"), "%s", err);
    o = datagen_defaults();
    o.images = 1;
    cr_expect(!datagen_write("/nonexistent/x", &o, NULL, err, sizeof err) && strstr(err, "--images"), "%s", err);
    o = datagen_defaults();
    o.val_fraction = 1.0;
    cr_expect(!datagen_write("/nonexistent/x", &o, NULL, err, sizeof err) && strstr(err, "val fraction"), "%s", err);
    cr_expect(datagen_class_name(7) && strcmp(datagen_class_name(7), "star") == 0 && !datagen_class_name(8));
}
