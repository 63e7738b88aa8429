/* bench/loader_bench.c — throughput of the training data pipeline: a plain
 * decode loop (image_load only) against loader.c without and with mosaic,
 * with 1 and 2 worker threads, in images per second of wall time and per
 * CPU-second ("per core"). Owns only this measurement; it writes a synthetic
 * dataset when none is given and never touches the library's behaviour. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../runtime/data/dataset.h"
#include "../runtime/data/image_io.h"
#include "../runtime/data/loader.h"

static double now(clockid_t c) {
    struct timespec t;
    if (clock_gettime(c, &t) != 0) {
        perror("clock_gettime");
        exit(1);
    }
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *msg) {
    fprintf(stderr, "loader_bench: %s\n", msg);
    exit(1);
}

static void mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) die(buf);
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) die(buf);
}

/* Textured 640x480 JPEGs (smooth gradients, stripes and noise, so the
 * decoder sees realistic entropy) with 1..6 random boxes each. */
static void generate(const char *dir, int n, int w, int h) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/images/train", dir);
    mkdirs(path);
    snprintf(path, sizeof path, "%s/labels/train", dir);
    mkdirs(path);
    uint64_t x = 88172645463325252ull;
    Image im = {w, h, malloc((size_t)w * h * 3)};
    if (!im.px) die("out of memory");
    for (int i = 0; i < n; i++) {
        int fx = 1 + i % 7, fy = 1 + i % 5;
        for (int y = 0; y < h; y++)
            for (int xx = 0; xx < w; xx++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                uint8_t *p = im.px + ((size_t)y * w + xx) * 3;
                int stripe = ((xx * fx + y * fy) / 16) % 2 ? 40 : 0;
                p[0] = (uint8_t)((xx * 255 / w + stripe + (int)(x & 31)) & 255);
                p[1] = (uint8_t)((y * 255 / h + i * 13 + (int)(x >> 8 & 31)) & 255);
                p[2] = (uint8_t)(((xx + y) * 128 / (w + h) + 64 + stripe + (int)(x >> 16 & 15)) & 255);
            }
        snprintf(path, sizeof path, "%s/images/train/%05d.jpg", dir, i);
        if (!image_write_jpeg(path, &im, 90, err, sizeof err)) die(err);
        snprintf(path, sizeof path, "%s/labels/train/%05d.txt", dir, i);
        FILE *f = fopen(path, "w");
        if (!f) die(path);
        for (int k = 0, nk = 1 + i % 6; k < nk; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            double bw = 0.05 + (double)(x % 1000) / 4000, bh = 0.05 + (double)(x / 1000 % 1000) / 4000;
            double cx = bw / 2 + (1 - bw) * (double)(x / 1000000 % 1000) / 1000, cy = bh / 2 + (1 - bh) * (double)(x / 1000000000 % 1000) / 1000;
            fprintf(f, "%d %.6f %.6f %.6f %.6f\n", k % 3, cx, cy, bw, bh);
        }
        if (fclose(f) != 0) die(path);
    }
    image_free(&im);
    snprintf(path, sizeof path, "%s/data.yaml", dir);
    FILE *f = fopen(path, "w");
    if (!f) die(path);
    fprintf(f, "train: images/train\nval: images/train\nnames: [a, b, c]\n");
    if (fclose(f) != 0) die(path);
}

typedef struct Result {
    double wall_ips, cpu_ips;   /* images per wall second, per CPU-second */
} Result;

static Result decode_loop(const DataSplit *sp, int rounds) {
    char err[512];
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    long n = 0;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < sp->n; i++, n++) {
            Image im;
            if (!image_load(sp->samples[i].image, &im, err, sizeof err)) die(err);
            image_free(&im);
        }
    double t = now(CLOCK_MONOTONIC) - t0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    return (Result){n / t, n / c};
}

/* Epochs of the training loader; with cache_ram, the first epoch fills the
 * cache and is not timed. */
static Result loader_run(const DataSplit *sp, int imgsz, int batch, int workers, bool mosaic, bool cache, int epochs) {
    char err[512];
    LoaderOptions o = {.batch = batch, .imgsz = imgsz, .max_boxes = 100, .train = true, .hyp = hyp_defaults(), .seed = 0, .workers = workers, .cache_ram = cache};
    Loader *l = loader_open(sp, &o, err, sizeof err);
    if (!l) die(err);
    Batch b;
    if (cache) {
        if (!loader_start_epoch(l, 99, mosaic, 0, err, sizeof err)) die(err);
        while (loader_next(l, &b, err, sizeof err)) continue;
        if (err[0]) die(err);
    }
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    long n = 0;
    for (int e = 0; e < epochs; e++) {
        if (!loader_start_epoch(l, e, mosaic, 0, err, sizeof err)) die(err);
        while (loader_next(l, &b, err, sizeof err)) n += b.n_valid;
        if (err[0]) die(err);
    }
    double t = now(CLOCK_MONOTONIC) - t0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    loader_close(l);
    return (Result){n / t, n / c};
}

int main(int argc, char **argv) {
    const char *data = NULL, *gen = "/tmp/yolocc-loader-bench", *md = NULL;
    int images = 200, imgsz = 640, batch = 16, epochs = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "--gen") && i + 1 < argc) gen = argv[++i];
        else if (!strcmp(argv[i], "--images") && i + 1 < argc) images = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--imgsz") && i + 1 < argc) imgsz = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--row") && i + 1 < argc) md = argv[++i];
        else {
            fprintf(stderr, "usage: loader_bench [--data DATA.yaml | --gen DIR --images N] [--imgsz N] [--batch N] [--epochs N] [--row FILE]\n");
            return 2;
        }
    }
    char yaml[4096], err[512];
    if (!data) {
        snprintf(yaml, sizeof yaml, "%s/data.yaml", gen);
        struct stat st;
        if (stat(yaml, &st) != 0) {
            fprintf(stderr, "writing %d 640x480 JPEGs to %s\n", images, gen);
            generate(gen, images, 640, 480);
        }
        data = yaml;
    }
    Dataset ds;
    if (!dataset_load(data, NULL, &ds, NULL, err, sizeof err)) die(err);
    const DataSplit *sp = &ds.train;
    printf("%s: %d training images, imgsz %d, batch %d, %d epochs per loader row\n\n", data, sp->n, imgsz, batch, epochs);
    Result base = decode_loop(sp, epochs);
    struct {
        const char *name;
        int workers;
        bool mosaic, cache;
        Result r;
    } rows[] = {{"loader, no mosaic", 1, false, false, {0, 0}}, {"loader, no mosaic", 2, false, false, {0, 0}}, {"loader, mosaic", 1, true, false, {0, 0}},
                {"loader, mosaic", 2, true, false, {0, 0}},     {"loader, mosaic, cache_ram", 1, true, true, {0, 0}}};
    int nrows = (int)(sizeof rows / sizeof *rows);
    for (int i = 0; i < nrows; i++) rows[i].r = loader_run(sp, imgsz, batch, rows[i].workers, rows[i].mosaic, rows[i].cache, epochs);
    printf("%-28s %7s %10s %14s %16s\n", "pipeline", "workers", "images/s", "images/CPU-s", "per-core ratio");
    printf("%-28s %7s %10.1f %14.1f %16s\n", "decode only (image_load)", "-", base.wall_ips, base.cpu_ips, "1.00");
    for (int i = 0; i < nrows; i++)
        printf("%-28s %7d %10.1f %14.1f %16.2f\n", rows[i].name, rows[i].workers, rows[i].r.wall_ips, rows[i].r.cpu_ips, rows[i].r.cpu_ips / base.cpu_ips);
    if (md) {
        FILE *f = fopen(md, "w");
        if (!f) die(md);
        fprintf(f, "%d | %d | %d | %.1f", sp->n, imgsz, batch, base.cpu_ips);
        for (int i = 0; i < nrows; i++) fprintf(f, " | %.1f (%.2fx) %.1f/s", rows[i].r.cpu_ips, rows[i].r.cpu_ips / base.cpu_ips, rows[i].r.wall_ips);
        fprintf(f, "\n");
        if (fclose(f) != 0) die(md);
    }
    dataset_free(&ds);
    return 0;
}
