/* tests/fuzz/fuzz_npy.c — libFuzzer harness for the .npy reader of the disk
 * cache (runtime/data/npy_image.c): the bytes as a file -> npy_image_read.
 * Owns this harness only; seeds are tests/fuzz/seeds/fuzz_npy/. A read
 * either gives an image within the limits whose every byte is readable, or
 * says why in one line and gives none; a file it reads, written back and
 * read again, is the same image. Crashes, sanitizer reports, leaks and
 * aborts are findings.
 * Build and run: make build/fuzz/fuzz_npy, then
 * FUZZ_SECONDS=N ./scripts/fuzz.sh build/fuzz/fuzz_npy */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../runtime/data/image_io.h"
#include "../../runtime/data/npy_image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what, const char *detail) {
    if (ok) return;
    fprintf(stderr, "fuzz_npy: %s (%s)\n", what, detail ? detail : "");
    abort();
}

/* A file in memory-backed /dev/shm when there is one, else under /tmp. */
static const char *scratch_path(const char *tag) {
    static char path[2][64];
    const int k = tag[0] == 'b';
    if (!path[k][0]) {
        struct stat st;
        const char *dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(path[k], sizeof path[k], "%s/fuzz_npy.%s.%ld.npy", dir, tag, (long)getpid());
    }
    return path[k];
}

static volatile unsigned char sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = scratch_path("in");
    FILE *f = fopen(path, "wb");
    check(f != NULL, "cannot create the scratch file", path);
    check(fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write the scratch file", path);
    Image im;
    char err[1024] = "";
    const NpyRead r = npy_image_read(path, &im, err, sizeof err);
    if (r == NPY_READ) {
        check(im.px && im.w >= 1 && im.h >= 1 && im.w <= IMAGE_MAX_SIDE && im.h <= IMAGE_MAX_SIDE, "bad size after a read", NULL);
        for (size_t i = 0; i < (size_t)im.w * (size_t)im.h * 3; i++) sink ^= im.px[i];
        const char *back = scratch_path("back");
        Image again;
        check(npy_image_write(back, &im, err, sizeof err), "cannot write back what was read", err);
        check(npy_image_read(back, &again, err, sizeof err) == NPY_READ, "cannot read back what was written", err);
        check(again.w == im.w && again.h == im.h && memcmp(again.px, im.px, (size_t)im.w * (size_t)im.h * 3) == 0, "the written image differs", NULL);
        image_free(&again);
        unlink(back);
        image_free(&im);
    } else {
        check(r != NPY_ABSENT, "an existing file read as absent", path);
        check(err[0] != 0 && strchr(err, '\n') == NULL, "failed without a one-line message", err);
        check(!im.px && !im.w && !im.h, "a failed read left an image", err);
    }
    unlink(path);
    return 0;
}
