/* tests/fuzz/fuzz_dataset.c — libFuzzer harness for the dataset YAML
 * (dataset_load in runtime/data/dataset.c): the first byte picks the
 * options (splits, single_cls, fraction), the rest is data.yaml in a scratch
 * dataset made once (two training and one validation PNG with labels, a
 * list file, an unreadable image, a label with bad lines). Owns this harness
 * only; seeds are tests/fuzz/seeds/fuzz_dataset/.
 * A load either gives a dataset that passes checks independent of the
 * parser (classes named, every asked split non-empty, every sample an image
 * of the scratch dataset with labels in range), or fails with one line
 * naming the YAML file and leaves nothing allocated. Inputs that could name
 * a path outside the scratch dataset (a '/' starting a scalar, "..", '~',
 * escapes) are skipped: walking the real file system is not what is fuzzed.
 * Crashes, sanitizer reports, leaks and aborts are findings.
 * Build and run: make build/fuzz/fuzz_dataset, then
 * FUZZ_SECONDS=N ./scripts/fuzz.sh build/fuzz/fuzz_dataset */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../runtime/data/dataset.h"
#include "../../runtime/data/image_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what, const char *detail) {
    if (ok) return;
    fprintf(stderr, "fuzz_dataset: %s (%s)\n", what, detail ? detail : "");
    abort();
}

static char root[96];

static void write_file(const char *rel, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    check(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write", p);
}

static void write_png(const char *rel, int w, int h) {
    char p[256], err[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    Image im = {.w = w, .h = h, .px = calloc((size_t)w * (size_t)h * 3, 1)};
    check(im.px && image_write_png(p, &im, err, sizeof err), "cannot write a PNG", err);
    free(im.px);
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)type, (void)ftw;
    (void)remove(path); /* what cannot be removed stays: a scratch directory, not a finding */
    return 0;
}

static void remove_root(void) { nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS); }

/* the scratch dataset, made once per process in /dev/shm when there is one, removed at exit */
static void make_root(void) {
    if (root[0]) return;
    struct stat st;
    const char *dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof root, "%s/fuzz_dataset.%ld", dir, (long)getpid());
    const char *dirs[] = {"", "/images", "/images/train", "/images/val", "/labels", "/labels/train", "/labels/val", "/sub"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s%s", root, dirs[i]);
        check(mkdir(p, 0700) == 0 || errno == EEXIST, "cannot make", p);
    }
    write_png("images/train/a.png", 16, 12);
    write_png("images/train/b.png", 12, 16);
    write_png("images/val/c.png", 20, 20);
    write_png("sub/tiny.png", 4, 4);
    write_file("images/train/broken.jpg", "not a JPEG");
    write_file("labels/train/a.txt", "0 0.5 0.5 0.2 0.2\n1 0.25 0.5 0.1 0.3\n");
    write_file("labels/train/b.txt", "2 0.5 0.5 0.5 0.5\nbad line\n7 0.5 0.5 0.1 0.1\n0 1.5 0.5 0.1 0.1\n");
    write_file("labels/val/c.txt", "1 0.5 0.5 0.4 0.4\n");
    write_file("list.txt", "./images/train/a.png\nimages/val/c.png\nmissing.png\n");
    atexit(remove_root);
}

/* A byte that may start a YAML scalar before a path in it */
static bool opens_scalar(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r' || b == ':' || b == '-' || b == '[' || b == ',' || b == '"' || b == '\'' || b == '{' || b == '?'; }

static bool stays_inside(const uint8_t *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (d[i] == '~' || d[i] == '\\' || d[i] == '%' || d[i] == 0) return false;
        if (d[i] == '.' && i + 1 < n && d[i + 1] == '.') return false;
        if (d[i] == '/' && (i == 0 || opens_scalar(d[i - 1]))) return false;
    }
    return true;
}

static bool from_scratch(const char *path) { return strncmp(path, root, strlen(root)) == 0 && path[strlen(root)] == '/'; }

static void check_split(const DataSplit *s, const Dataset *ds, bool single_cls, const char *name) {
    check(s->n >= 1 && s->samples, "an asked split loaded empty", name);
    int labels = 0, backgrounds = 0;
    for (int i = 0; i < s->n; i++) {
        const Sample *x = &s->samples[i];
        check(x->image && from_scratch(x->image), "a sample outside the scratch dataset", x->image);
        check(x->w >= 10 && x->h >= 10, "a sample under 10 px a side", x->image);
        check(i == 0 || strcmp(s->samples[i - 1].image, x->image) <= 0, "samples not in sorted order", x->image);
        for (int k = 0; k < x->n_labels; k++) {
            const Label *l = &x->labels[k];
            check(l->cls >= 0 && l->cls < ds->nc && (!single_cls || l->cls == 0), "a class out of range", x->image);
            check(l->cx >= 0 && l->cx <= 1 && l->cy >= 0 && l->cy <= 1 && l->w > 0 && l->w <= 1 && l->h > 0 && l->h <= 1, "a box out of range", x->image);
        }
        labels += x->n_labels;
        backgrounds += x->n_labels == 0;
    }
    check(labels == s->n_labels && backgrounds == s->backgrounds, "split counts disagree with its samples", name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    make_root();
    if (size < 1 || !stays_inside(data + 1, size - 1)) return 0;
    char yaml[160];
    snprintf(yaml, sizeof yaml, "%s/data.yaml", root);
    FILE *f = fopen(yaml, "wb");
    check(f && fwrite(data + 1, 1, size - 1, f) == size - 1 && fclose(f) == 0, "cannot write the YAML", yaml);
    const uint8_t o = data[0];
    DatasetOptions opt = {.splits = (o & 7) ? (o & 7) : 0, .single_cls = (o & 8) != 0, .fraction = (o & 16) ? 0.5 : 1};
    Dataset ds;
    char err[1024] = "";
    FILE *warn = getenv("FUZZ_DATASET_SHOW") ? fdopen(dup(2), "w") : fopen("/dev/null", "w");
    check(warn != NULL, "cannot open /dev/null", NULL);
    const bool ok = dataset_load(yaml, &opt, &ds, warn, err, sizeof err);
    fclose(warn);
    /* FUZZ_DATASET_SHOW=1: what each input did, to see which paths a corpus reaches */
    if (getenv("FUZZ_DATASET_SHOW")) {
        if (ok) fprintf(stderr, "loaded: train %d, val %d, test %d images, nc %d\n", ds.train.n, ds.val.n, ds.test.n, ds.nc);
        else fprintf(stderr, "%s\n", err);
    }
    if (ok) {
        check(ds.nc >= 1 && ds.nc <= DATASET_MAX_CLASSES && ds.names, "bad class count", NULL);
        check(!opt.single_cls || (ds.nc == 1 && strcmp(ds.names[0], "item") == 0), "single_cls without its one class", NULL);
        for (int i = 0; i < ds.nc; i++) check(ds.names[i] != NULL, "a class without a name", NULL);
        const unsigned splits = opt.splits ? opt.splits : (DATASET_TRAIN | DATASET_VAL);
        if (splits & DATASET_TRAIN) check_split(&ds.train, &ds, opt.single_cls, "train");
        if (splits & DATASET_VAL) check_split(&ds.val, &ds, opt.single_cls, "val");
        if (splits & DATASET_TEST) check_split(&ds.test, &ds, opt.single_cls, "test");
        dataset_free(&ds);
    } else {
        check(err[0] && strchr(err, '\n') == NULL, "failed without a one-line message", err);
        check(strstr(err, "data.yaml") != NULL, "the message does not name the YAML", err);
        check(!ds.names && !ds.train.samples && !ds.val.samples && !ds.test.samples && !ds.root, "a failed load left allocations", err);
    }
    return 0;
}
