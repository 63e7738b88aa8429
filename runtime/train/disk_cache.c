/* runtime/train/disk_cache.c — `--cache disk`, Ultralytics' cache='disk':
 * before training, every image of a split decoded once into IMAGE.npy beside
 * it (npy_image.h; the loader reads those instead of decoding), after
 * check_cache_disk's checks (writable folders, free space with a 50%
 * margin), with its "Caching images (X GB Disk)" bar. Must not touch the
 * loaders, the step or the run directory. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "../data/image_io.h"
#include "../data/npy_image.h"
#include "report.h"
#include "trainer.h"

/* dirname of path into out ("." for a bare name) */
static void parent_of(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, cap, ".");
    else if (slash == path) snprintf(out, cap, "/");
    else snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

/* Ultralytics' check_cache_disk: false (with its warning) when a folder of
 * the images is not writable or the cache, with a 50% margin, exceeds the
 * free space where the first image lies. Sizes from every image's header
 * instead of a sample of 30. */
static bool cache_disk_fits(const DataSplit *split, const char *prefix) {
    double need = 0;
    char dir[4096], last[4096] = "";
    for (int i = 0; i < split->n; i++) {
        const Sample *s = &split->samples[i];
        need += (double)npy_image_bytes(s->w, s->h);
        parent_of(s->image, dir, sizeof dir);
        if (strcmp(dir, last) == 0) continue;
        snprintf(last, sizeof last, "%s", dir);
        if (access(dir, W_OK) != 0) {
            printf("WARNING \xe2\x9a\xa0\xef\xb8\x8f %sSkipping caching images to disk, directory not writable\n", prefix);
            return false;
        }
    }
    need *= 1.5;
    parent_of(split->samples[0].image, dir, sizeof dir);
    struct statvfs vf;
    if (statvfs(dir, &vf) != 0) {
        printf("WARNING \xe2\x9a\xa0\xef\xb8\x8f %sthe free space of %s is unknown (%s), not caching images to disk\n", prefix, dir, strerror(errno));
        return false;
    }
    const double gib = (double)(1 << 30), free_b = (double)vf.f_bavail * (double)vf.f_frsize, total = (double)vf.f_blocks * (double)vf.f_frsize;
    if (need > free_b) {
        printf("WARNING \xe2\x9a\xa0\xef\xb8\x8f %s%.1fGB disk space required, with 50%% safety margin but only %.1f/%.1fGB free, not caching images to disk\n", prefix,
               need / gib, free_b / gib, total / gib);
        return false;
    }
    return true;
}

/* "{prefix}Caching images (X.XGB Disk): {meter}" */
static void cache_bar(bool tty, const char *prefix, double bytes, int done, int total, double elapsed, bool last) {
    char meter[256];
    report_format_meter(meter, sizeof meter, done, total, elapsed);
    if (tty) printf("\r%sCaching images (%.1fGB Disk): %s%s", prefix, bytes / (double)(1 << 30), meter, last ? "\n" : "");
    else if (last) printf("%sCaching images (%.1fGB Disk): %s\n", prefix, bytes / (double)(1 << 30), meter);
    fflush(stdout);
}

bool trainer_cache_disk(const DataSplit *split, const char *prefix, char *err, int errcap) {
    if (split->n == 0 || !cache_disk_fits(split, prefix)) return true;
    const bool tty = isatty(STDOUT_FILENO);
    const double t0 = monotonic_seconds();
    double bytes = 0, last_draw = 0;
    int done = 0, failed = 0;
    char first_err[1200] = "";
    /* on the OpenMP threads (the cores; Ultralytics' pool takes up to 8) */
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < split->n; i++) {
        const Sample *s = &split->samples[i];
        char npy[4200], why[1200] = "";
        struct stat st;
        bool ok = npy_image_path(s->image, npy, sizeof npy) ? true : errf(why, sizeof why, "%s: path too long for its .npy", s->image);
        if (ok && stat(npy, &st) != 0) {
            /* np.save(imread(f)): the decoded pixels, full size */
            Image im;
            ok = image_load(s->image, &im, why, sizeof why) && npy_image_write(npy, &im, why, sizeof why);
            image_free(&im);
            ok = ok && stat(npy, &st) == 0 ? true : (why[0] ? false : errf(why, sizeof why, "%s: %s", npy, strerror(errno)));
        }
#pragma omp critical(disk_cache)
        {
            if (ok) bytes += (double)st.st_size;
            else if (!failed++) snprintf(first_err, sizeof first_err, "%s", why);
            done++;
            const double now = monotonic_seconds();
            if (tty && now - last_draw > 0.1) cache_bar(true, prefix, bytes, done, split->n, now - t0, false), last_draw = now;
        }
    }
    cache_bar(tty, prefix, bytes, done, split->n, monotonic_seconds() - t0, true);
    if (failed) return errf(err, errcap, "%scaching images to disk: %d of %d failed, the first: %s", prefix, failed, split->n, first_err);
    return true;
}
