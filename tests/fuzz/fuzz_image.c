/* tests/fuzz/fuzz_image.c — libFuzzer harness for the image decoders
 * (runtime/data/image_io.c): bytes -> image_decode, and the same bytes as a
 * file -> image_probe. Owns this harness only; seeds are
 * tests/fuzz/seeds/fuzz_image/.
 * A decode either fails with one line and an empty Image, or gives a size
 * within the limits whose every pixel byte is readable; a file that decodes
 * must also probe, to the same size. Crashes, sanitizer reports, leaks and
 * aborts are findings.
 * Build and run: make build/fuzz/fuzz_image, then
 * FUZZ_SECONDS=N ./scripts/fuzz.sh build/fuzz/fuzz_image */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../runtime/data/image_io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what, const char *detail) {
    if (ok) return;
    fprintf(stderr, "fuzz_image: %s (%s)\n", what, detail ? detail : "");
    abort();
}

static volatile unsigned char sink;

/* A file in memory-backed /dev/shm when there is one, else under /tmp. */
static const char *scratch_path(void) {
    static char path[64];
    if (!path[0]) {
        struct stat st;
        const char *dir = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
        snprintf(path, sizeof path, "%s/fuzz_image.%ld", dir, (long)getpid());
    }
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Image im;
    char err[512] = "";
    bool ok = image_decode(data, size, &im, err, sizeof err);
    if (ok) {
        check(im.px && im.w >= 1 && im.h >= 1 && im.w <= IMAGE_MAX_SIDE && im.h <= IMAGE_MAX_SIDE, "bad size after a decode", NULL);
        for (size_t i = 0; i < (size_t)im.w * (size_t)im.h * 3; i++) sink ^= im.px[i];
    } else {
        check(err[0] != 0 && strchr(err, '\n') == NULL, "failed without a one-line message", err);
        check(!im.px && !im.w && !im.h, "failed decode left an image", err);
    }
    const char *path = scratch_path();
    FILE *f = fopen(path, "wb");
    check(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write the scratch file", path);
    int w = -1, h = -1;
    char perr[512] = "";
    bool pok = image_probe(path, &w, &h, perr, sizeof perr);
    unlink(path);
    if (pok) check(w >= 1 && h >= 1 && w <= IMAGE_MAX_SIDE && h <= IMAGE_MAX_SIDE, "bad probe size", NULL);
    else check(perr[0] != 0 && strchr(perr, '\n') == NULL, "probe failed without a one-line message", perr);
    if (ok) check(pok && w == im.w && h == im.h, "decodes but does not probe to the same size", perr);
    image_free(&im);
    return 0;
}
