/* tests/fuzz/fuzz_safetensors.c — libFuzzer harness for the safetensors
 * reader (runtime/safetensors.c): bytes -> st_parse. Owns this harness only;
 * seeds are tests/fuzz/seeds/fuzz_safetensors/.
 * Every input must either fail with a one-line message and an empty StFile,
 * or parse to a file whose every tensor byte and metadata string can be read,
 * that is self-consistent by checks independent of the parser, and that
 * survives st_write + st_read unchanged (names and metadata with arbitrary
 * escapes included). Crashes, sanitizer reports, leaks and aborts are findings.
 * Build and run: make build/fuzz/fuzz_safetensors, then
 * FUZZ_SECONDS=N ./scripts/fuzz.sh build/fuzz/fuzz_safetensors */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../runtime/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what, const char *name) {
    if (ok) return;
    fprintf(stderr, "fuzz_safetensors: %s ('%s')\n", what, name ? name : "");
    abort();
}

/* Reads every byte through a volatile sink, so ASan checks each one. */
static volatile unsigned char sink;
static void touch(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) sink ^= b[i];
}

static void check_consistent(const StFile *f) {
    check(f->buf && f->size >= 8, "no buffer", NULL);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->buf[i];
    check(hlen <= f->size - 8, "header length past the end", NULL);
    uint64_t data_size = f->size - 8 - hlen, total = 0;
    for (int i = 0; i < f->n; i++) {
        const StTensor *t = &f->tensors[i];
        touch(t->name, strlen(t->name) + 1);
        check(st_dtype_size(t->dtype) > 0 && t->nd >= 0 && t->nd <= ST_MAX_DIMS, "bad dtype or rank", t->name);
        uint64_t numel = 1, size = st_dtype_size(t->dtype);
        for (int d = 0; d < t->nd; d++) {
            uint64_t dim = (uint64_t)t->shape[d];
            check(t->shape[d] >= 0 && (dim == 0 || numel <= UINT64_MAX / dim), "bad dim", t->name);
            numel *= dim;
        }
        check(numel <= UINT64_MAX / size && numel * size == t->nbytes && st_numel(t) == numel, "nbytes is not numel * size", t->name);
        check(t->offset <= data_size && t->nbytes <= data_size - t->offset, "tensor outside the data", t->name);
        check(t->data == f->buf + 8 + hlen + t->offset, "data pointer not at its offset", t->name);
        check(st_find(f, t->name) == t, "name not unique", t->name);
        touch(t->data, t->nbytes);
        float *x = st_to_f32(t);
        bool is_float = t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16 || t->dtype == ST_F64;
        check(is_float == (x != NULL), "st_to_f32 result does not match the dtype", t->name);
        if (x) touch(x, numel * sizeof(float));
        free(x);
        total += t->nbytes;
    }
    /* no overlap (checked as sorted tiling by the parser) plus a total equal
     * to the buffer is exact coverage; the total alone catches holes */
    check(total == data_size, "tensors do not add up to the data buffer", NULL);
    for (int i = 0; i < f->n_meta; i++) {
        touch(f->meta_keys[i], strlen(f->meta_keys[i]) + 1);
        touch(f->meta_values[i], strlen(f->meta_values[i]) + 1);
    }
}

/* A file in memory-backed /dev/shm when there is one, so the writer's
 * fsync costs nothing; elsewhere the round trip is skipped. */
static const char *scratch_path(void) {
    static char path[64];
    static int state;   /* 0 unknown, 1 usable, -1 none */
    if (state == 0) {
        struct stat st;
        state = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? 1 : -1;
        snprintf(path, sizeof path, "/dev/shm/fuzz_safetensors.%ld", (long)getpid());
    }
    return state > 0 ? path : NULL;
}

static void check_round_trip(const StFile *f) {
    const char *path = scratch_path();
    if (!path) return;
    StWriteItem *items = calloc((size_t)f->n + 1, sizeof *items);
    const char **meta = calloc(2 * (size_t)f->n_meta + 1, sizeof *meta);
    check(items && meta, "out of memory", NULL);
    for (int i = 0; i < f->n; i++)
        items[i] = (StWriteItem){f->tensors[i].name, f->tensors[i].dtype, f->tensors[i].nd, f->tensors[i].shape, f->tensors[i].data};
    for (int i = 0; i < f->n_meta; i++) meta[2 * i] = f->meta_keys[i], meta[2 * i + 1] = f->meta_values[i];
    char err[512];
    StFile g;
    if (!st_write(path, items, f->n, meta, err, sizeof err)) {
        fprintf(stderr, "fuzz_safetensors: cannot rewrite a parsed file: %s\n", err);
        abort();
    }
    if (!st_read(path, &g, err, sizeof err)) {
        fprintf(stderr, "fuzz_safetensors: cannot read back a rewritten file: %s\n", err);
        abort();
    }
    unlink(path);
    check(g.n == f->n && g.n_meta == f->n_meta, "round trip changed the counts", NULL);
    for (int i = 0; i < f->n; i++) {
        const StTensor *a = &f->tensors[i], *b = &g.tensors[i];
        check(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->nd == b->nd && a->nbytes == b->nbytes, "round trip changed a tensor",
              a->name);
        check(memcmp(a->shape, b->shape, (size_t)a->nd * sizeof a->shape[0]) == 0, "round trip changed a shape", a->name);
        check(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0, "round trip changed the bytes", a->name);
    }
    for (int i = 0; i < f->n_meta; i++)
        check(strcmp(f->meta_keys[i], g.meta_keys[i]) == 0 && strcmp(f->meta_values[i], g.meta_values[i]) == 0, "round trip changed metadata",
              f->meta_keys[i]);
    st_free(&g);
    free(items);
    free(meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    StFile f;
    char err[512] = "";
    /* the buffer is passed as libFuzzer owns it (exactly size bytes), so
     * ASan sees any read past the end */
    if (st_parse(data, size, &f, err, sizeof err)) {
        check_consistent(&f);
        check_round_trip(&f);
        st_free(&f);
    } else {
        check(err[0] != 0 && strchr(err, '\n') == NULL, "failed without a one-line message", err);
        check(!f.buf && !f.tensors && !f.n && !f.strings && !f.meta_keys && !f.n_meta, "failed parse left data behind", err);
    }
    return 0;
}
