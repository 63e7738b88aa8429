/* tests/test_safetensors.c — suite `safetensors`: round trips through
 * st_write/st_read, the atomic-write guarantees, one test per class of
 * corrupt file, and a file written by Python's safetensors package. Owns
 * these tests only; the seed files it reads live in
 * tests/fuzz/seeds/fuzz_safetensors/ and are shared with the fuzzer. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/safetensors.h"

#define SEEDS "tests/fuzz/seeds/fuzz_safetensors"

/* ------------------------------------------------------------ helpers */

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            unsigned char *grown = realloc(buf, cap);
            if (!grown) break;
            buf = grown;
        }
        size_t k = fread(buf + n, 1, cap - n, f);
        n += k;
        if (k == 0) break;
    }
    bool ok = !ferror(f);
    fclose(f);
    if (!ok) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static bool same_file(const char *path, const unsigned char *want, size_t want_len) {
    size_t len = 0;
    unsigned char *got = slurp(path, &len);
    bool same = got && len == want_len && memcmp(got, want, len) == 0;
    free(got);
    return same;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A fresh directory per test; tests may run in parallel processes. */
static void make_dir(char *dir) {
    strcpy(dir, "/tmp/yolocc-st-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

/* Removes dir with its files and empty subdirectories (what tests leave). */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) != 0) rmdir(p);
    }
    closedir(d);
    rmdir(dir);
}

static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* A file made of a header text and data_len data bytes (byte i = 7i+1, so a
 * misplaced read shows). */
typedef struct Bytes {
    unsigned char *p;
    size_t n;
} Bytes;

static Bytes make_file(const char *header, size_t data_len) {
    size_t h = strlen(header);
    Bytes b = {malloc(8 + h + data_len + 1), 8 + h + data_len};
    cr_assert(b.p);
    for (int i = 0; i < 8; i++) b.p[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b.p + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b.p[8 + h + i] = (unsigned char)(7 * i + 1);
    return b;
}

static bool is_empty(const StFile *f) {
    return !f->buf && !f->size && !f->tensors && !f->n && !f->meta_keys && !f->meta_values && !f->n_meta && !f->strings;
}

/* st_parse must fail with one line containing substr and leave *out empty. */
static void expect_bad_bytes(const unsigned char *p, size_t n, const char *what, const char *substr) {
    StFile f;
    char err[512] = "";
    bool ok = st_parse(p, n, &f, err, sizeof err);
    cr_expect(!ok, "%s: parsed, expected an error containing \"%s\"", what, substr);
    cr_expect(strstr(err, substr), "%s: error \"%s\" lacks \"%s\"", what, err, substr);
    cr_expect(!strchr(err, '\n'), "%s: error is not one line: \"%s\"", what, err);
    cr_expect(is_empty(&f), "%s: a failed parse left data in the StFile", what);
    if (ok) st_free(&f);
}

static void expect_bad(const char *header, size_t data_len, const char *substr) {
    Bytes b = make_file(header, data_len);
    expect_bad_bytes(b.p, b.n, header, substr);
    free(b.p);
}

static void expect_good(const char *header, size_t data_len, int n_tensors) {
    Bytes b = make_file(header, data_len);
    StFile f;
    char err[512] = "";
    bool ok = st_parse(b.p, b.n, &f, err, sizeof err);
    cr_expect(ok, "%s: %s", header, err);
    cr_expect_eq(f.n, n_tensors, "%s: %d tensors, expected %d", header, f.n, n_tensors);
    st_free(&f);
    free(b.p);
}

/* Everything a successful parse promises, checked independently of the
 * parser: sane dtype and rank, nbytes = numel * size, data inside the copy at
 * its offset, unique names, and tensors tiling the data buffer exactly. */
static void expect_consistent(const StFile *f, const char *what) {
    uint64_t hlen = 0;
    cr_assert(f->size >= 8 && f->buf, "%s: no buffer", what);
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->buf[i];
    cr_assert(hlen <= f->size - 8, "%s: header length past the end", what);
    uint64_t data_size = f->size - 8 - hlen, total = 0;
    for (int i = 0; i < f->n; i++) {
        const StTensor *t = &f->tensors[i];
        cr_assert(t->name && st_dtype_size(t->dtype) > 0 && t->nd >= 0 && t->nd <= 8, "%s: tensor %d malformed", what, i);
        uint64_t numel = 1, size = st_dtype_size(t->dtype);
        for (int d = 0; d < t->nd; d++) {
            uint64_t dim = (uint64_t)t->shape[d];
            cr_assert(t->shape[d] >= 0 && (dim == 0 || numel <= UINT64_MAX / dim), "%s: '%s' bad dim or numel overflow", what, t->name);
            numel *= dim;
        }
        cr_assert(numel <= UINT64_MAX / size && numel * size == t->nbytes, "%s: '%s' nbytes mismatch", what, t->name);
        cr_assert(t->offset <= data_size && t->nbytes <= data_size - t->offset, "%s: '%s' outside the data", what, t->name);
        cr_assert(t->data == f->buf + 8 + hlen + t->offset, "%s: '%s' data pointer wrong", what, t->name);
        cr_assert(st_find(f, t->name) == t, "%s: '%s' not unique", what, t->name);
        total += t->nbytes;
    }
    cr_assert_eq(total, data_size, "%s: tensors cover %llu of %llu data bytes", what, (unsigned long long)total, (unsigned long long)data_size);
    /* equal total plus pairwise disjointness gives exact tiling */
    for (int i = 0; i < f->n; i++)
        for (int j = i + 1; j < f->n; j++) {
            const StTensor *a = &f->tensors[i], *b = &f->tensors[j];
            bool disjoint = a->offset + a->nbytes <= b->offset || b->offset + b->nbytes <= a->offset || !a->nbytes || !b->nbytes;
            cr_assert(disjoint, "%s: '%s' and '%s' overlap", what, a->name, b->name);
        }
    for (int i = 0; i < f->n_meta; i++) cr_assert(f->meta_keys[i] && f->meta_values[i], "%s: metadata %d missing", what, i);
}

static uint64_t header_len(const unsigned char *p) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | p[i];
    return n;
}

/* -------------------------------------------------------- round trips */

Test(safetensors, round_trip_every_dtype_scalar_and_empty) {
    char dir[64], path[128], err[512];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float f32[6] = {0.5f, -1.25f, 2.0f, 3.75f, -8.0f, 1e-30f};
    uint16_t f16[4] = {0x3C00, 0xC000, 0x0001, 0x7C00}, bf16[2] = {0x3F80, 0xC040};
    double f64[2] = {0.1, -1e300};
    int64_t i64[2] = {INT64_MIN, INT64_MAX};
    int32_t i32 = -123456;
    int16_t i16[3] = {-32768, 0, 32767};
    int8_t i8[4] = {-128, -1, 1, 127};
    uint8_t u8[5] = {0, 1, 128, 254, 255}, flags[3] = {1, 0, 1};
    float scalar = 3.5f;
    int64_t s23[] = {2, 3}, s4[] = {4}, s2[] = {2}, s112[] = {1, 1, 2}, s3[] = {3}, s22[] = {2, 2}, s5[] = {5}, s03[] = {0, 3},
            s8[] = {1, 2, 1, 1, 1, 1, 1, 1};
    const StWriteItem items[] = {
        {"model.0.conv.weight", ST_F32, 2, s23, f32}, {"half", ST_F16, 1, s4, f16},   {"brain", ST_BF16, 1, s2, bf16},
        {"double", ST_F64, 3, s112, f64},             {"i64", ST_I64, 1, s2, i64},    {"i32.scalar", ST_I32, 0, NULL, &i32},
        {"i16", ST_I16, 1, s3, i16},                  {"i8", ST_I8, 2, s22, i8},      {"u8", ST_U8, 1, s5, u8},
        {"mask", ST_BOOL, 1, s3, flags},              {"empty", ST_F32, 2, s03, NULL}, {"scalar", ST_F32, 0, NULL, &scalar},
        {"rank8", ST_U8, 8, s8, u8},
    };
    int n = (int)(sizeof items / sizeof items[0]);
    cr_assert(st_write(path, items, n, NULL, err, sizeof err), "%s", err);
    cr_expect_eq(count_entries(dir), 1, "the temp file was left behind");

    StFile f;
    cr_assert(st_read(path, &f, err, sizeof err), "%s", err);
    expect_consistent(&f, path);
    cr_expect_eq(f.n, n);
    cr_expect_eq(f.n_meta, 0);
    uint64_t hlen = header_len(f.buf), offset = 0;
    cr_expect_eq(hlen % 8, 0, "header length %llu is not padded to 8", (unsigned long long)hlen);
    for (int i = 0; i < n && i < f.n; i++) {
        const StTensor *t = &f.tensors[i];
        const StWriteItem *w = &items[i];
        cr_expect_str_eq(t->name, w->name, "tensor %d is not in the order written", i);
        cr_expect_eq(t->dtype, w->dtype, "%s: dtype", w->name);
        cr_expect_eq(t->nd, w->nd, "%s: rank", w->name);
        uint64_t numel = 1;
        for (int d = 0; d < w->nd; d++) {
            cr_expect_eq(t->shape[d], w->shape[d], "%s: shape[%d]", w->name, d);
            numel *= (uint64_t)w->shape[d];
        }
        cr_expect_eq(t->nbytes, numel * st_dtype_size(w->dtype), "%s: nbytes", w->name);
        cr_expect_eq(t->offset, offset, "%s: offset %llu, expected %llu (increasing, contiguous)", w->name, (unsigned long long)t->offset,
                     (unsigned long long)offset);
        cr_expect(t->nbytes == 0 || memcmp(t->data, w->data, t->nbytes) == 0, "%s: bytes differ", w->name);
        offset += t->nbytes;
    }
    cr_expect_eq(f.size, 8 + hlen + offset, "file size");
    const StTensor *e = st_find(&f, "empty");
    cr_expect(e && e->nbytes == 0 && e->nd == 2 && e->shape[0] == 0 && e->shape[1] == 3);
    const StTensor *s = st_find(&f, "scalar");
    cr_expect(s && s->nd == 0 && s->nbytes == 4);
    cr_expect_null(st_find(&f, "missing"));
    cr_expect_null(st_find(&f, "Scalar"), "lookup must be case-sensitive");
    st_free(&f);
    cr_expect(is_empty(&f), "st_free must leave the StFile empty");
    st_free(&f);   /* and a second st_free is harmless */
    remove_dir(dir);
}

Test(safetensors, to_f32_converts_float_dtypes) {
    char dir[64], path[128], err[512];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/f.safetensors", dir);
    float f32[3] = {0.5f, -1.25f, 3e38f};
    /* 1, -2, smallest subnormal 2^-24, 65504 (max), -inf, 0x3555 ~ 1/3, -0 */
    uint16_t f16[7] = {0x3C00, 0xC000, 0x0001, 0x7BFF, 0xFC00, 0x3555, 0x8000};
    uint16_t bf16[3] = {0x3F80, 0xC040, 0x7F80};
    double f64[3] = {0.1, 1e300, -2.5};
    int32_t i32[1] = {1};
    int64_t s3[] = {3}, s7[] = {7}, s1[] = {1}, s0[] = {0};
    const StWriteItem items[] = {{"f32", ST_F32, 1, s3, f32}, {"f16", ST_F16, 1, s7, f16}, {"bf16", ST_BF16, 1, s3, bf16},
                                 {"f64", ST_F64, 1, s3, f64}, {"i32", ST_I32, 1, s1, i32}, {"none", ST_F16, 1, s0, NULL}};
    cr_assert(st_write(path, items, 6, NULL, err, sizeof err), "%s", err);
    StFile f;
    cr_assert(st_read(path, &f, err, sizeof err), "%s", err);

    float *a = st_to_f32(st_find(&f, "f32"));
    cr_expect(a && a[0] == 0.5f && a[1] == -1.25f && a[2] == 3e38f);
    free(a);
    float *h = st_to_f32(st_find(&f, "f16"));
    cr_expect(h && h[0] == 1.0f && h[1] == -2.0f && h[2] == 0x1p-24f && h[3] == 65504.0f && isinf(h[4]) && h[4] < 0);
    cr_expect(h && h[5] == 0x1.554p-2f && h[6] == 0 && signbit(h[6]), "f16 1/3 or -0 converted wrongly");
    free(h);
    float *b = st_to_f32(st_find(&f, "bf16"));
    cr_expect(b && b[0] == 1.0f && b[1] == -3.0f && isinf(b[2]) && b[2] > 0, "bf16 1, -3, +inf");
    free(b);
    float *d = st_to_f32(st_find(&f, "f64"));
    cr_expect(d && d[0] == 0.1f && isinf(d[1]) && d[1] > 0 && d[2] == -2.5f, "f64 rounds, overflows to inf");
    free(d);
    cr_expect_null(st_to_f32(st_find(&f, "i32")), "integers are not converted");
    float *none = st_to_f32(st_find(&f, "none"));
    cr_expect_not_null(none, "a 0-element tensor gives a pointer to free");
    free(none);
    cr_expect_null(st_to_f32(NULL));
    st_free(&f);
    remove_dir(dir);
}

/* Metadata with every character JSON must escape, non-ASCII text and a
 * name with escapes survive the trip; cJSON, an independent reader, sees
 * the header we promise: "__metadata__" first, then tensors in order. */
Test(safetensors, metadata_round_trip_and_header_layout) {
    char dir[64], path[128], err[512];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    const char *meta[] = {"format",   "pt", "odd \"quoted\" \\ key", "line\nbreak\ttab\x01\x1f end", "caf\xc3\xa9", "\xf0\x9f\x98\x80 emoji",
                          "empty", "", NULL};
    int32_t v[2] = {5, -5};
    int64_t s2[] = {2};
    const StWriteItem items[] = {{"b/\"x\"\\y\n", ST_I32, 1, s2, v}, {"a", ST_I32, 0, NULL, v}};
    cr_assert(st_write(path, items, 2, meta, err, sizeof err), "%s", err);

    StFile f;
    cr_assert(st_read(path, &f, err, sizeof err), "%s", err);
    cr_expect_eq(f.n_meta, 4);
    for (int i = 0; i < f.n_meta && i < 4; i++) {
        cr_expect_str_eq(f.meta_keys[i], meta[2 * i]);
        cr_expect_str_eq(f.meta_values[i], meta[2 * i + 1]);
    }
    cr_expect_eq(f.n, 2);
    cr_expect(f.n == 2 && strcmp(f.tensors[0].name, items[0].name) == 0 && strcmp(f.tensors[1].name, "a") == 0);

    uint64_t hlen = header_len(f.buf);
    cJSON *root = cJSON_ParseWithLength((const char *)f.buf + 8, hlen);
    cr_assert(cJSON_IsObject(root), "cJSON cannot read the header");
    const cJSON *m = root->child;
    cr_expect(m && strcmp(m->string, "__metadata__") == 0 && cJSON_IsObject(m), "__metadata__ is not first");
    cr_expect_eq(cJSON_GetArraySize(m), 4);
    const cJSON *t0 = m ? m->next : NULL, *t1 = t0 ? t0->next : NULL;
    cr_expect(t0 && strcmp(t0->string, items[0].name) == 0 && t1 && strcmp(t1->string, "a") == 0 && !t1->next);
    if (t0 && t1) {
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t0, "dtype"), *shape = cJSON_GetObjectItemCaseSensitive(t0, "shape"),
                    *off = cJSON_GetObjectItemCaseSensitive(t1, "data_offsets");
        cr_expect(cJSON_IsString(dt) && strcmp(dt->valuestring, "I32") == 0);
        cr_expect(cJSON_GetArraySize(shape) == 1 && cJSON_GetArrayItem(shape, 0)->valuedouble == 2);
        cr_expect(cJSON_GetArraySize(off) == 2 && cJSON_GetArrayItem(off, 0)->valuedouble == 8 && cJSON_GetArrayItem(off, 1)->valuedouble == 12);
        cr_expect_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(t1, "shape")), 0, "a scalar's shape is []");
    }
    cJSON_Delete(root);
    st_free(&f);
    remove_dir(dir);
}

/* Every seed (four from st_write, one from Python) parses, is consistent,
 * and rewriting it in header order reproduces it byte for byte: our writer's
 * layout is the Rust/Python writer's. */
Test(safetensors, seeds_parse_and_rewrite_identically) {
    DIR *d = opendir(SEEDS);
    cr_assert(d, "cannot open " SEEDS " (run from the repository root)");
    char dir[64], out[128], err[512];
    make_dir(dir);
    snprintf(out, sizeof out, "%s/re.safetensors", dir);
    int seen = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", SEEDS, e->d_name);
        StFile f;
        if (!st_read(path, &f, err, sizeof err)) {
            cr_expect(false, "%s", err);
            continue;
        }
        expect_consistent(&f, path);
        StWriteItem *items = calloc((size_t)f.n + 1, sizeof *items);
        const char **meta = calloc(2 * (size_t)f.n_meta + 1, sizeof *meta);
        cr_assert(items && meta);
        for (int i = 0; i < f.n; i++)
            items[i] = (StWriteItem){f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].nd, f.tensors[i].shape, f.tensors[i].data};
        for (int i = 0; i < f.n_meta; i++) meta[2 * i] = f.meta_keys[i], meta[2 * i + 1] = f.meta_values[i];
        cr_expect(st_write(out, items, f.n, meta, err, sizeof err), "%s: %s", path, err);
        cr_expect(same_file(out, f.buf, f.size), "%s: rewriting it gives different bytes", path);
        free(items);
        free(meta);
        st_free(&f);
        seen++;
    }
    closedir(d);
    cr_expect_geq(seen, 5, "expected at least 5 seed files, found %d", seen);
    remove_dir(dir);
}

/* tests/fuzz/seeds/fuzz_safetensors/python_written.safetensors was made by
 * safetensors 0.8.0 (Python, numpy backend), which orders tensors by dtype
 * alignment and name and pads the header to 8:
 *   save_file({"model.0.conv.weight": f32 [[0.5,-1.25,2],[3.75,-8,100.5]],
 *     "model.0.conv.bias": f16 [1,-2.5,65504], "model.0.bn.num_batches_tracked": i64 7 (0-d),
 *     "model.22.dfl.mask": bool [T,F,T], "model.22.empty": f32 zeros (0,4),
 *     "stats.i32": [[1,-2],[3,-2147483648]], "stats.u8": [0,127,255], "stats.i8": [-128,5],
 *     "stats.i16": [-300], "stats.f64": [3.141592653589793,-1e300]},
 *     metadata={"format": "pt", "producer": "safetensors-python"}) */
Test(safetensors, reads_file_written_by_python_safetensors) {
    StFile f;
    char err[512];
    cr_assert(st_read(SEEDS "/python_written.safetensors", &f, err, sizeof err), "%s", err);
    expect_consistent(&f, "python_written");
    cr_expect_eq(f.n, 10);
    cr_expect_eq(f.n_meta, 2);
    bool fmt = false, producer = false;
    for (int i = 0; i < f.n_meta; i++) {
        fmt |= strcmp(f.meta_keys[i], "format") == 0 && strcmp(f.meta_values[i], "pt") == 0;
        producer |= strcmp(f.meta_keys[i], "producer") == 0 && strcmp(f.meta_values[i], "safetensors-python") == 0;
    }
    cr_expect(fmt && producer, "metadata differs");
    cr_expect_eq(header_len(f.buf) % 8, 0);

    const StTensor *w = st_find(&f, "model.0.conv.weight");
    cr_assert(w && w->dtype == ST_F32 && w->nd == 2 && w->shape[0] == 2 && w->shape[1] == 3 && w->nbytes == 24);
    float wv[6], want_w[6] = {0.5f, -1.25f, 2.0f, 3.75f, -8.0f, 100.5f};
    memcpy(wv, w->data, sizeof wv);
    cr_expect_arr_eq(wv, want_w, sizeof wv);

    const StTensor *b = st_find(&f, "model.0.conv.bias");
    cr_assert(b && b->dtype == ST_F16 && b->nd == 1 && b->shape[0] == 3);
    float *bv = st_to_f32(b);
    cr_expect(bv && bv[0] == 1.0f && bv[1] == -2.5f && bv[2] == 65504.0f);
    free(bv);

    const StTensor *nb = st_find(&f, "model.0.bn.num_batches_tracked");
    cr_assert(nb && nb->dtype == ST_I64 && nb->nd == 0 && nb->nbytes == 8);
    int64_t count;
    memcpy(&count, nb->data, 8);
    cr_expect_eq(count, 7);

    const StTensor *mask = st_find(&f, "model.22.dfl.mask");
    cr_assert(mask && mask->dtype == ST_BOOL && mask->nd == 1 && mask->shape[0] == 3);
    cr_expect(memcmp(mask->data, "\1\0\1", 3) == 0);

    const StTensor *empty = st_find(&f, "model.22.empty");
    cr_assert(empty && empty->dtype == ST_F32 && empty->nd == 2 && empty->shape[0] == 0 && empty->shape[1] == 4 && empty->nbytes == 0);

    const StTensor *i32 = st_find(&f, "stats.i32");
    cr_assert(i32 && i32->dtype == ST_I32 && i32->nd == 2 && i32->shape[0] == 2 && i32->shape[1] == 2);
    int32_t iv[4], want_i[4] = {1, -2, 3, INT32_MIN};
    memcpy(iv, i32->data, sizeof iv);
    cr_expect_arr_eq(iv, want_i, sizeof iv);

    const StTensor *u8 = st_find(&f, "stats.u8"), *i8 = st_find(&f, "stats.i8"), *i16 = st_find(&f, "stats.i16");
    cr_assert(u8 && u8->dtype == ST_U8 && u8->shape[0] == 3 && memcmp(u8->data, "\0\x7f\xff", 3) == 0);
    cr_assert(i8 && i8->dtype == ST_I8 && i8->shape[0] == 2 && memcmp(i8->data, "\x80\x05", 2) == 0);
    int16_t hv;
    cr_assert(i16 && i16->dtype == ST_I16 && i16->nd == 1 && i16->shape[0] == 1);
    memcpy(&hv, i16->data, 2);
    cr_expect_eq(hv, -300);

    const StTensor *f64 = st_find(&f, "stats.f64");
    cr_assert(f64 && f64->dtype == ST_F64 && f64->shape[0] == 2);
    double dv[2];
    memcpy(dv, f64->data, sizeof dv);
    cr_expect(dv[0] == 3.141592653589793 && dv[1] == -1e300);
    st_free(&f);
}

Test(safetensors, dtype_helpers) {
    const char *names[] = {"F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"};
    const size_t sizes[] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 1};
    for (int t = ST_F32; t <= ST_BOOL; t++) {
        cr_expect_str_eq(st_dtype_name((StDType)t), names[t]);
        cr_expect_eq(st_dtype_size((StDType)t), sizes[t]);
    }
    cr_expect_eq(st_dtype_size((StDType)99), 0);
    cr_expect_str_eq(st_dtype_name((StDType)-1), "?");
}

/* ------------------------------------------------------------ writer */

Test(safetensors, write_into_missing_directory_fails) {
    char dir[64], path[160], err[512] = "";
    make_dir(dir);
    snprintf(path, sizeof path, "%s/no/such/dir/w.safetensors", dir);
    float x = 1;
    const StWriteItem item = {"x", ST_F32, 0, NULL, &x};
    cr_expect(!st_write(path, &item, 1, NULL, err, sizeof err));
    cr_expect(strstr(err, "No such file or directory"), "error: %s", err);
    cr_expect(strstr(err, dir), "the error names the path: %s", err);
    cr_expect_eq(count_entries(dir), 0, "something was created");
    remove_dir(dir);
}

/* Writes the file an overwrite must not damage; returns its bytes. */
static unsigned char *write_original(const char *path, size_t *len) {
    char err[512];
    int32_t v[3] = {1, 2, 3};
    int64_t s3[] = {3};
    const StWriteItem item = {"orig", ST_I32, 1, s3, v};
    const char *meta[] = {"version", "1", NULL};
    cr_assert(st_write(path, &item, 1, meta, err, sizeof err), "%s", err);
    unsigned char *bytes = slurp(path, len);
    cr_assert(bytes && *len > 8);
    return bytes;
}

static const float big_data[1024];
static const int64_t big_shape[] = {32, 32};
static const StWriteItem big_item = {"replacement", ST_F32, 2, big_shape, big_data};

/* The temp name is taken by a directory, so the overwrite fails before a
 * byte is written; the old file stays, and the directory is not removed. */
Test(safetensors, failed_overwrite_keeps_old_file_temp_name_taken) {
    char dir[64], path[128], tmp[192], err[512] = "";
    make_dir(dir);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    size_t len;
    unsigned char *orig = write_original(path, &len);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    cr_assert(mkdir(tmp, 0700) == 0, "mkdir %s: %s", tmp, strerror(errno));
    cr_expect(!st_write(path, &big_item, 1, NULL, err, sizeof err), "overwrite succeeded through a directory");
    cr_expect(strstr(err, "Is a directory") && strstr(err, tmp), "error: %s", err);
    cr_expect(same_file(path, orig, len), "the old file changed");
    struct stat st;
    cr_expect(stat(tmp, &st) == 0 && S_ISDIR(st.st_mode), "the colliding directory was touched");
    free(orig);
    remove_dir(dir);
}

/* A write that fails midway (file size limit: write() gives EFBIG) leaves
 * the old file byte-identical and removes the partial temp file. */
Test(safetensors, failed_overwrite_keeps_old_file_write_error) {
    char dir[64], path[128], err[512] = "";
    make_dir(dir);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    size_t len;
    unsigned char *orig = write_original(path, &len);
    struct rlimit old;
    cr_assert(getrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_IGN);   /* get EFBIG instead of being killed */
    struct rlimit small = {1000, old.rlim_max};
    cr_assert(setrlimit(RLIMIT_FSIZE, &small) == 0, "setrlimit: %s", strerror(errno));
    bool ok = st_write(path, &big_item, 1, NULL, err, sizeof err);
    cr_assert(setrlimit(RLIMIT_FSIZE, &old) == 0);
    cr_expect(!ok, "a 4 KiB write under a 1000-byte limit succeeded");
    cr_expect(strstr(err, "File too large"), "error: %s", err);
    cr_expect(same_file(path, orig, len), "the old file changed");
    char tmp[192];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    cr_expect(!exists(tmp) && count_entries(dir) == 1, "the partial temp file was left behind");
    free(orig);
    remove_dir(dir);
}

/* An unwritable directory: the old file stays. Root ignores permission
 * bits, so as root the write runs with the effective uid of nobody. */
Test(safetensors, failed_overwrite_keeps_old_file_unwritable_directory) {
    char dir[64], path[128], err[512] = "";
    make_dir(dir);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    size_t len;
    unsigned char *orig = write_original(path, &len);
    bool root = geteuid() == 0, ok;
    if (root) {
        if (seteuid(65534) != 0) {
            free(orig);
            remove_dir(dir);
            cr_skip_test("running as root and cannot drop to uid 65534: %s", strerror(errno));
        }
        ok = st_write(path, &big_item, 1, NULL, err, sizeof err);
        cr_assert(seteuid(0) == 0, "cannot regain root: %s", strerror(errno));
    } else {
        cr_assert(chmod(dir, 0500) == 0);
        ok = st_write(path, &big_item, 1, NULL, err, sizeof err);
        cr_assert(chmod(dir, 0700) == 0);
    }
    cr_expect(!ok, "wrote into an unwritable directory");
    cr_expect(strstr(err, "Permission denied"), "error: %s", err);
    cr_expect(same_file(path, orig, len), "the old file changed");
    cr_expect_eq(count_entries(dir), 1, "a temp file was left behind");
    free(orig);
    remove_dir(dir);
}

Test(safetensors, write_rejects_bad_items) {
    char dir[64], path[128];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    float x[4] = {0};
    int64_t s2[] = {2}, neg[] = {-1}, huge[] = {INT64_MAX, INT64_MAX}, s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const char *dup_meta[] = {"k", "1", "k", "2", NULL}, *odd_meta[] = {"k", NULL, NULL}, *bad_utf8_meta[] = {"k", "\xc3(", NULL};
    struct {
        StWriteItem items[2];
        int n;
        const char *const *meta;
        const char *substr;
    } cases[] = {
        {{{"a", ST_F32, 1, s2, x}, {"a", ST_F32, 1, s2, x}}, 2, NULL, "duplicate tensor name 'a'"},
        {{{"__metadata__", ST_F32, 1, s2, x}}, 1, NULL, "reserved"},
        {{{"bad\xff", ST_F32, 1, s2, x}}, 1, NULL, "not valid UTF-8"},
        {{{"overlong\xc0\xaf", ST_F32, 1, s2, x}}, 1, NULL, "not valid UTF-8"},
        {{{NULL, ST_F32, 1, s2, x}}, 1, NULL, "no name"},
        {{{"neg", ST_F32, 1, neg, x}}, 1, NULL, "negative"},
        {{{"rank9", ST_F32, 9, s9, x}}, 1, NULL, "rank 9"},
        {{{"noshape", ST_F32, 1, NULL, x}}, 1, NULL, "shape is missing"},
        {{{"huge", ST_F32, 2, huge, x}}, 1, NULL, "too many elements"},
        {{{"bytes", ST_F32, 1, huge, x}}, 1, NULL, "byte size overflows"},
        {{{"nodata", ST_F32, 1, s2, NULL}}, 1, NULL, "data is NULL"},
        {{{"dtype", (StDType)42, 1, s2, x}}, 1, NULL, "invalid dtype"},
        {{{"a", ST_F32, 1, s2, x}}, 1, dup_meta, "duplicate metadata key 'k'"},
        {{{"a", ST_F32, 1, s2, x}}, 1, odd_meta, "has no value"},
        {{{"a", ST_F32, 1, s2, x}}, 1, bad_utf8_meta, "not valid UTF-8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        cr_expect(!st_write(path, cases[i].items, cases[i].n, cases[i].meta, err, sizeof err), "case %zu was written", i);
        cr_expect(strstr(err, cases[i].substr), "case %zu: error \"%s\" lacks \"%s\"", i, err, cases[i].substr);
        cr_expect_eq(count_entries(dir), 0, "case %zu left a file", i);
    }
    remove_dir(dir);
}

/* ---------------------------------------------------- reader: accepted */

Test(safetensors, accepts_whitespace_padding_and_empty_tensors) {
    expect_good("{}", 0, 0);
    expect_good("{}      ", 0, 0);
    expect_good("{ \"__metadata__\" : { } }", 0, 0);
    expect_good("{\n\t\"a\" : {\"data_offsets\": [ 0 , 4 ], \"shape\" : [ ], \"dtype\":\"F32\" } \r\n}  \t\n", 4, 1);
    /* a 0-byte tensor may share its offset with the next one (Python writes this) */
    expect_good("{\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[0,0]},\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                "\"z\":{\"dtype\":\"I64\",\"shape\":[3,0],\"data_offsets\":[2,2]}}",
                2, 3);
    /* "-0" is the integer 0 to jansson, as to serde_json (the Rust reader) */
    expect_good("{\"w\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0, 1);
    /* offsets up to 2^63-1 are exact integers (then checked against the data) */
    expect_good("{\"w\":{\"dtype\":\"U8\",\"shape\":[0,9223372036854775807],\"data_offsets\":[1,1]},\"v\":{\"dtype\":\"U8\",\"shape\":[1],"
                "\"data_offsets\":[0,1]}}",
                1, 2);
    /* header order need not be offset order; escapes decode */
    expect_good("{\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]},\"\\u0061\\n\\ud83d\\ude00\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_"
                "offsets\":[0,1]}}",
                2, 2);
    Bytes b = make_file("{\"\\u00e9\\/\\u20ac\":{\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);
    StFile f;
    char err[256];
    cr_assert(st_parse(b.p, b.n, &f, err, sizeof err), "%s", err);
    cr_expect(st_find(&f, "\xc3\xa9/\xe2\x82\xac"), "escaped name not decoded");
    cr_expect_neq((const void *)f.buf, (const void *)b.p, "st_parse must copy the buffer");
    st_free(&f);
    free(b.p);
}

/* Tensors come back in header order, whatever order jansson's hash table
 * would give: 500 names, written in reverse, data laid out forwards. */
Test(safetensors, keeps_header_order) {
    enum { N = 500 };
    char *header = malloc(N * 80 + 16);
    cr_assert(header);
    size_t len = (size_t)sprintf(header, "{");
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(header + len, "%s\"t%03d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[%d,%d]}", i ? "," : "", N - 1 - i, i, i + 1);
    strcpy(header + len, "}");
    Bytes b = make_file(header, N);
    StFile f;
    char err[512] = "";
    cr_assert(st_parse(b.p, b.n, &f, err, sizeof err), "%s", err);
    cr_assert_eq(f.n, N);
    for (int i = 0; i < N; i++) {
        char want[16];
        snprintf(want, sizeof want, "t%03d", N - 1 - i);
        cr_expect_str_eq(f.tensors[i].name, want, "tensor %d out of header order", i);
        cr_expect_eq(f.tensors[i].offset, (uint64_t)i);
    }
    st_free(&f);
    free(b.p);
    free(header);
}

/* ------------------------------------------ reader: one test per corruption */

Test(safetensors, truncated_at_every_length) {
    size_t len;
    unsigned char *file = slurp(SEEDS "/all_dtypes.safetensors", &len);
    cr_assert(file, "missing seed");
    for (size_t n = 0; n < len; n++) {
        /* an exact-size heap copy, so ASan sees any read past the end */
        unsigned char *cut = malloc(n ? n : 1);
        cr_assert(cut);
        memcpy(cut, file, n);
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu bytes", n);
        expect_bad_bytes(cut, n, what, n < 8 ? "8-byte header length" : n < 8 + header_len(file) ? "runs past the end" : "end past the");
        free(cut);
    }
    free(file);
}

Test(safetensors, header_length_larger_than_file) {
    Bytes b = make_file("{}", 0);
    b.p[0] = 3;   /* claims 3 header bytes, 2 follow */
    expect_bad_bytes(b.p, b.n, "length 3", "byte 0: header length 3 runs past the end of the file (2 bytes after the length)");
    memset(b.p, 0xFF, 8);
    expect_bad_bytes(b.p, b.n, "length 2^64-1", "over the 16777216-byte limit");
    /* over the limit is refused before anything is allocated for it */
    memset(b.p, 0, 8);
    b.p[3] = 0x01, b.p[0] = 0x01;   /* 16 MiB + 1 */
    expect_bad_bytes(b.p, b.n, "length 16 MiB + 1", "header length 16777217 is over");
    free(b.p);
    static const unsigned char tiny[5] = {2, 0, 0, 0, 0};
    expect_bad_bytes(tiny, sizeof tiny, "5 bytes", "file is 5 bytes");
}

/* Syntax errors carry jansson's message; the byte is where it stopped
 * reading (the end of the offending token). */
Test(safetensors, header_not_json) {
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1, "byte 60: invalid JSON header: '}' expected near end of file");
    expect_bad("{\"a\" {}}", 0, "byte 14: invalid JSON header: ':' expected near '{'");
    expect_bad("{\"a\":{\"dtype\":\"U8\",,}}", 0, "invalid JSON header: string or '}' expected near ','");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},}", 1, "string or '}' expected near '}'");
    expect_bad("{\"abc", 0, "byte 13: invalid JSON header: premature end of input");
    expect_bad("{\"a\\q\":1}", 0, "byte 13: invalid JSON header: invalid escape");
    expect_bad("{\"a\x01\":1}", 0, "byte 11: invalid JSON header: control character 0x1");
    expect_bad("{\"a\n\":1}", 0, "unexpected newline");
    expect_bad("{\"a\xff\":1}", 0, "byte 11: invalid JSON header: unable to decode byte 0xff");
    expect_bad("{\"\xed\xa0\x80\":1}", 0, "unable to decode byte 0xed");   /* UTF-8-encoded surrogate */
    expect_bad("{\"\xc0\xaf\":1}", 0, "unable to decode byte 0xc0");       /* overlong '/' */
    expect_bad("{\"\xf4\x90\x80\x80\":1}", 0, "unable to decode byte 0xf4"); /* past U+10FFFF */
    expect_bad("{\"\\ud800x\":1}", 0, "invalid Unicode '\\uD800'");             /* unpaired surrogates */
    expect_bad("{\"\\udc00\":1}", 0, "invalid Unicode '\\uDC00'");
    expect_bad("{\"a\\u0000b\":1}", 0, "NUL byte in object key not supported");
    expect_bad("{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0, "\\u0000 is not allowed");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1, "byte 37: invalid JSON header: invalid token near '0'");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.],\"data_offsets\":[0,1]}}", 1, "invalid token near '1.'");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[+1],\"data_offsets\":[0,1]}}", 1, "invalid token near '+'");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[NaN],\"data_offsets\":[0,1]}}", 1, "invalid token");
    expect_bad("{} x", 0, "byte 12: invalid JSON header: end of file expected near 'x'");
    expect_bad("{}{}", 0, "end of file expected near '{'");
    expect_bad("{}\f", 0, "end of file expected");   /* form feed is not JSON whitespace */
    /* a NUL byte after the object is not padding */
    static const unsigned char nul_pad[] = {3, 0, 0, 0, 0, 0, 0, 0, '{', '}', 0};
    expect_bad_bytes(nul_pad, sizeof nul_pad, "{}\\0", "byte 11: invalid JSON header: end of file expected");
    /* jansson's "near" excerpt is raw file text: shown on one line, valid UTF-8 */
    expect_bad("{\"\xc3\xa9\x7f\\x\":1}", 0, "invalid escape near '\"\xc3\xa9?\\x'");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]} \"b\":1}", 1, "'}' expected near '\"b\"'");
}

Test(safetensors, header_not_an_object) {
    expect_bad("[1,2]", 0, "byte 8: header must be a JSON object, but it starts with '['");
    expect_bad("\"str\"", 0, "starts with '\"'");
    expect_bad("42", 0, "starts with '4'");
    expect_bad(" {}", 0, "starts with byte 0x20");
    expect_bad("", 0, "header length is 0");
    expect_bad("{\"a\":[1]}", 0, "tensor 'a': expected an object {dtype, shape, data_offsets}, found an array");
    expect_bad("{\"a\":null}", 0, "tensor 'a': expected an object");
}

/* jansson (JSON_REJECT_DUPLICATES) refuses a key repeated in one object; the
 * byte is the repeat's opening quote, and the key is named even when long. */
Test(safetensors, duplicate_names) {
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
               "byte 61: duplicate key 'w'");
    expect_bad("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "byte 33: duplicate key 'k'");
    expect_bad("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "byte 27: duplicate key '__metadata__'");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "byte 27: duplicate key 'dtype'");
    /* the same name spelled differently is still the same name */
    expect_bad("{\"model.0.conv.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"model.0.conv.\\u0077eight\\\\\\\"\":{},\"model.0.conv.\\u0077eight\\\\\\\"\":{}}",
               1, "duplicate key 'model.0.conv.weight\\\"'");
    expect_bad("{\"model.0.conv.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"model.0.conv.\\u0077eight\":{}}", 1,
               "byte 79: duplicate key 'model.0.conv.weight'");
}

Test(safetensors, unknown_dtype) {
    expect_bad("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "tensor 'w': unknown dtype 'F8_E4M3'");
    expect_bad("{\"w\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype 'f32'");
    expect_bad("{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w': dtype must be a string, found an integer");
}

Test(safetensors, bad_shapes) {
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, "tensor 'w': shape[0] must be a non-negative integer, found -1");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,2.0],\"data_offsets\":[0,2]}}", 2, "tensor 'w': shape[1] must be an integer, found a real number (2)");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[2e0],\"data_offsets\":[0,2]}}", 2, "shape[0] must be an integer, found a real number (2)");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[\"2\"],\"data_offsets\":[0,2]}}", 2, "shape[0] must be a non-negative integer, found a string");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":2,\"data_offsets\":[0,2]}}", 2, "tensor 'w': shape must be an array of integers, found an integer");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "tensor 'w': shape has more than 8 entries");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[9223372036854775808],\"data_offsets\":[0,1]}}", 1,
               "byte 55: invalid JSON header: too big integer near '9223372036854775808'");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1e400],\"data_offsets\":[0,1]}}", 1, "real number overflow");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "tensor 'w' has no 'shape'");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"quant\":1}}", 1, "tensor 'w': unknown field 'quant'");
}

Test(safetensors, numel_overflow) {
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,1]}}", 1,
               "tensor 'w': shape [4294967296, 4294967296, 4294967296] has more than 2^64 elements");
    /* 2^62 elements fit, their 2^65 bytes do not */
    expect_bad("{\"w\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8,
               "shape [4611686018427387904] of F64 is more than 2^64 bytes");
    /* numel * size wraps to exactly 0 in 64 bits: must not pass as empty */
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0, "more than 2^64 bytes");
}

Test(safetensors, offsets_out_of_range) {
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 3, "tensor 'w': data_offsets [0, 4] end past the 3-byte data buffer");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, "tensor 'w': data_offsets [4, 0] begin after they end");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[9223372036854775807,9223372036854775807]}}", 0, "end past the 0-byte");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,18446744073709551616]}}", 0, "too big integer near '18446744073709551616'");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 2, "data_offsets has more than 2 entries");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}", 1, "data_offsets must be [begin, end], found 1 entries");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1, "data_offsets[0] must be a non-negative integer, found -1");
}

Test(safetensors, overlapping_tensors) {
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 12,
               "tensors 'a' [0, 8) and 'b' [4, 12) overlap in the data buffer");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
               "tensors 'a' [0, 4) and 'b' [0, 4) overlap");
    /* an empty tensor strictly inside another one */
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}", 4,
               "tensors 'a' [0, 4) and 'e' [2, 2) overlap");
}

Test(safetensors, gap_in_data_buffer) {
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 12,
               "bytes [4, 8) of the data buffer belong to no tensor (before 'b')");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8, "bytes [0, 4) of the data buffer belong to no tensor (before 'a')");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 6, "bytes [4, 6) of the data buffer belong to no tensor (after 'a')");
    expect_bad("{}", 3, "the header lists no tensors but the data buffer has 3 bytes");
    expect_bad("{\"__metadata__\":{\"k\":\"v\"}}", 1, "lists no tensors");
}

Test(safetensors, nbytes_mismatch) {
    expect_bad("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
               "tensor 'w': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8");
    expect_bad("{\"w\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,4]}}", 4, "shape [] of BF16 needs 2 bytes");
    expect_bad("{\"w\":{\"dtype\":\"U8\",\"shape\":[2,0],\"data_offsets\":[0,1]}}", 1, "needs 0 bytes but data_offsets [0, 1] span 1");
}

Test(safetensors, metadata_not_strings) {
    expect_bad("{\"__metadata__\":{\"epoch\":3}}", 0, "metadata value for 'epoch' must be a string, found an integer");
    expect_bad("{\"__metadata__\":{\"k\":null}}", 0, "metadata value for 'k' must be a string, found null");
    expect_bad("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "must be a string, found an object");
    expect_bad("{\"__metadata__\":{\"k\":[\"x\"]}}", 0, "must be a string, found an array");
    expect_bad("{\"__metadata__\":[\"k\",\"v\"]}", 0, "\"__metadata__\" must be an object of strings, found an array");
    expect_bad("{\"__metadata__\":{\"k\":\"v\" \"x\":\"y\"}}", 0, "byte 36: invalid JSON header: '}' expected near '\"x\"'");
}

/* Every single-bit flip, and every byte inverted, at every position of a
 * small valid file: each result either fails with a message or parses to
 * a file that is consistent by an independent check. */
Test(safetensors, flipped_bits_at_every_position) {
    size_t len;
    unsigned char *file = slurp(SEEDS "/scalar_and_empty.safetensors", &len);
    cr_assert(file, "missing seed");
    static const unsigned char masks[] = {1, 2, 4, 8, 16, 32, 64, 128, 0xFF};
    int accepted = 0, rejected = 0;
    for (size_t pos = 0; pos < len; pos++)
        for (size_t m = 0; m < sizeof masks; m++) {
            unsigned char *copy = malloc(len);
            cr_assert(copy);
            memcpy(copy, file, len);
            copy[pos] ^= masks[m];
            StFile f;
            char err[512] = "";
            if (st_parse(copy, len, &f, err, sizeof err)) {
                char what[64];
                snprintf(what, sizeof what, "byte %zu ^ 0x%02x", pos, masks[m]);
                expect_consistent(&f, what);
                st_free(&f);
                accepted++;
            } else {
                cr_expect(err[0] && !strchr(err, '\n'), "byte %zu ^ 0x%02x: failed without a one-line message", pos, masks[m]);
                cr_expect(is_empty(&f));
                rejected++;
            }
            free(copy);
        }
    /* flips in the 5 data bytes and some in names still parse */
    cr_expect_geq(accepted, 45, "only %d flips parsed", accepted);
    cr_expect_gt(rejected, 0);
    free(file);
}

Test(safetensors, read_errors_name_the_path) {
    StFile f;
    char err[512] = "";
    cr_expect(!st_read("tests/fuzz/seeds/no-such.safetensors", &f, err, sizeof err));
    cr_expect(strstr(err, "tests/fuzz/seeds/no-such.safetensors: cannot open: No such file or directory"), "%s", err);
    cr_expect(is_empty(&f));
    cr_expect(!st_read(SEEDS, &f, err, sizeof err));
    cr_expect(strstr(err, SEEDS ": not a regular file"), "%s", err);

    char dir[64], path[128];
    make_dir(dir);
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    Bytes b = make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
    FILE *out = fopen(path, "wb");
    cr_assert(out && fwrite(b.p, 1, b.n, out) == b.n && fclose(out) == 0);
    cr_expect(!st_read(path, &f, err, sizeof err));
    cr_expect(strncmp(err, path, strlen(path)) == 0 && strstr(err, ": tensor 'w': shape [3] of F32 needs 12 bytes"), "%s", err);
    cr_expect(is_empty(&f));
    /* over 16 GiB is refused from its size alone (a sparse file: no disk used) */
    snprintf(path, sizeof path, "%s/huge.safetensors", dir);
    FILE *huge = fopen(path, "wb");
    cr_assert(huge && fclose(huge) == 0 && truncate(path, (off_t)ST_MAX_FILE + 1) == 0, "cannot make a sparse file: %s", strerror(errno));
    cr_expect(!st_read(path, &f, err, sizeof err));
    cr_expect(strstr(err, ": file is 17179869185 bytes, over the 17179869184-byte limit"), "%s", err);
    unlink(path);
    snprintf(path, sizeof path, "%s/bad.safetensors", dir);
    /* a tiny err buffer truncates, NULL is allowed */
    char small[8];
    cr_expect(!st_read(path, &f, small, sizeof small));
    cr_expect_eq(strlen(small), 7);
    cr_expect(!st_read(path, &f, NULL, 0));
    free(b.p);
    remove_dir(dir);
}
