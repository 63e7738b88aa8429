/* runtime/safetensors.c — safetensors reader (strict validation) and atomic
 * writer. Owns the byte format and its JSON header only; callers decide what
 * the tensors mean and where they go.
 *
 * jansson parses the header (see parse_header for the flags); this file
 * checks the schema on the tree jansson builds and every offset, then copies
 * the strings it keeps and frees the tree. The writer formats the header of
 * this fixed schema itself and hands the bytes to atomic_write. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/atomic_file.h"
#include "../ir/diag.h"

/* Tensor bytes are handed out as they lie in the file, which is little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; this host is not");
_Static_assert(sizeof(size_t) >= 8, "files up to 16 GiB need a 64-bit size_t");
/* shapes and offsets are read as json_int_t; anything wider would be cut */
_Static_assert(sizeof(json_int_t) == sizeof(int64_t), "jansson must read 64-bit integers");

#define HEADER_AT 8   /* file offset of the header's first byte */
/* Errors name the file offset (header offset + 8), as a hex dump shows it. */
#define AT(pos) ((size_t)(pos) + HEADER_AT)

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8}, [ST_I64] = {"I64", 8},
    [ST_I32] = {"I32", 4}, [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1},     [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static bool dtype_valid(StDType t) { return (unsigned)t < (unsigned)N_DTYPES; }
size_t st_dtype_size(StDType t) { return dtype_valid(t) ? dtypes[t].size : 0; }
const char *st_dtype_name(StDType t) { return dtype_valid(t) ? dtypes[t].name : "?"; }

uint64_t st_numel(const StTensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->nd; i++) n *= (uint64_t)t->shape[i];
    return n;
}

/* Length of the well-formed UTF-8 sequence at s (Unicode table 3-7: no
 * overlong forms, no surrogates, nothing past U+10FFFF), 0 if ill-formed. */
static size_t utf8_seq(const unsigned char *s, size_t avail) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return 0;
    if (avail < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

static bool utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t n = strlen(s), i = 0; i < n;) {
        size_t k = utf8_seq(p + i, n - i);
        if (!k) return false;
        i += k;
    }
    return true;
}

/* Text fit for a one-line message: at most `limit` bytes, cut at a character
 * boundary, control characters and ill-formed UTF-8 shown as '?'. Names and
 * jansson's "near '...'" excerpts come from untrusted files. */
typedef struct Shown {
    char s[JSON_ERROR_TEXT_LENGTH + 8];
} Shown;
static Shown show_max(const char *text, size_t limit) {
    Shown out;
    const unsigned char *p = (const unsigned char *)text;
    size_t n = strlen(text), cut = n > limit ? limit : n, o = 0;
    while (cut < n && cut > 0 && (p[cut] & 0xC0) == 0x80) cut--;
    for (size_t i = 0; i < cut;) {
        size_t k = utf8_seq(p + i, cut - i);
        if (k > 1) memcpy(out.s + o, p + i, k), o += k, i += k;
        else out.s[o++] = k == 0 || p[i] < 0x20 || p[i] == 0x7F ? '?' : (char)p[i], i++;
    }
    strcpy(out.s + o, cut < n ? "..." : "");
    return out;
}
static Shown show(const char *name) { return show_max(name, 60); }

/* overflow-checked a*b */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a && b > UINT64_MAX / a) return false;
    *out = a * b;
    return true;
}

/* ------------------------------------------------------------------ reader */

/* What a JSON value is, for "must be X, found Y" messages. */
static const char *kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* "shape" or "data_offsets": an array of at most max JSON integers >= 0.
 * jansson keeps integers (exact, up to 2^63-1; larger ones fail to parse)
 * apart from reals, so 2.0 and 2e0 are refused here. */
static bool read_uints(const json_t *v, const char *tensor, const char *field, size_t max, uint64_t *out, size_t *count, char *err, int errcap) {
    if (!json_is_array(v)) return errf(err, errcap, "tensor '%s': %s must be an array of integers, found %s", tensor, field, kind(v));
    *count = json_array_size(v);
    if (*count > max) return errf(err, errcap, "tensor '%s': %s has more than %zu entries", tensor, field, max);
    for (size_t i = 0; i < *count; i++) {
        const json_t *x = json_array_get(v, i);
        if (json_is_real(x))
            return errf(err, errcap, "tensor '%s': %s[%zu] must be an integer, found a real number (%.17g)", tensor, field, i, json_real_value(x));
        if (!json_is_integer(x))
            return errf(err, errcap, "tensor '%s': %s[%zu] must be a non-negative integer, found %s", tensor, field, i, kind(x));
        if (json_integer_value(x) < 0)
            return errf(err, errcap, "tensor '%s': %s[%zu] must be a non-negative integer, found %lld", tensor, field, i,
                        (long long)json_integer_value(x));
        out[i] = (uint64_t)json_integer_value(x);
    }
    return true;
}

static int dtype_lookup(const char *s) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, dtypes[i].name) == 0) return i;
    return -1;
}

static void format_shape(const StTensor *t, char *buf, size_t cap) {
    size_t len = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->nd && len < cap; i++) len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* One entry {"dtype": ..., "shape": [...], "data_offsets": [b, e]}; every
 * field exactly once (jansson rejects repeats) and nothing else, so a field
 * this reader does not know (a newer format's) is an error rather than
 * silently ignored. t->name is set; the rest is filled in. */
static bool read_tensor(json_t *entry, StTensor *t, uint64_t data_size, char *err, int errcap) {
    Shown name = show(t->name);
    if (!json_is_object(entry))
        return errf(err, errcap, "tensor '%s': expected an object {dtype, shape, data_offsets}, found %s", name.s, kind(entry));
    json_t *dtype = NULL, *shape = NULL, *offsets = NULL, *v;
    const char *field;
    json_object_foreach(entry, field, v) {
        json_t **slot = strcmp(field, "dtype") == 0 ? &dtype : strcmp(field, "shape") == 0 ? &shape : strcmp(field, "data_offsets") == 0 ? &offsets : NULL;
        if (!slot) return errf(err, errcap, "tensor '%s': unknown field '%s'", name.s, show(field).s);
        *slot = v;
    }
    const char *missing = !dtype ? "dtype" : !shape ? "shape" : !offsets ? "data_offsets" : NULL;
    if (missing) return errf(err, errcap, "tensor '%s' has no '%s'", name.s, missing);
    if (!json_is_string(dtype)) return errf(err, errcap, "tensor '%s': dtype must be a string, found %s", name.s, kind(dtype));
    int k = dtype_lookup(json_string_value(dtype));
    if (k < 0) return errf(err, errcap, "tensor '%s': unknown dtype '%s'", name.s, show(json_string_value(dtype)).s);
    t->dtype = (StDType)k;
    uint64_t dims[ST_MAX_DIMS], off[2];
    size_t nd, n_off;
    if (!read_uints(shape, name.s, "shape", ST_MAX_DIMS, dims, &nd, err, errcap) ||
        !read_uints(offsets, name.s, "data_offsets", 2, off, &n_off, err, errcap))
        return false;
    if (n_off != 2) return errf(err, errcap, "tensor '%s': data_offsets must be [begin, end], found %zu entries", name.s, n_off);
    t->nd = (int)nd;
    for (size_t i = 0; i < nd; i++) t->shape[i] = (int64_t)dims[i];   /* <= 2^63-1: jansson's limit */

    char shown[200];
    format_shape(t, shown, sizeof shown);
    uint64_t numel = 1, nbytes;
    for (int i = 0; i < t->nd; i++)
        if (!mul_u64(numel, (uint64_t)t->shape[i], &numel)) return errf(err, errcap, "tensor '%s': shape %s has more than 2^64 elements", name.s, shown);
    if (!mul_u64(numel, dtypes[t->dtype].size, &nbytes))
        return errf(err, errcap, "tensor '%s': shape %s of %s is more than 2^64 bytes", name.s, shown, dtypes[t->dtype].name);
    if (off[0] > off[1])
        return errf(err, errcap, "tensor '%s': data_offsets [%llu, %llu] begin after they end", name.s, (unsigned long long)off[0],
                    (unsigned long long)off[1]);
    if (off[1] > data_size)
        return errf(err, errcap, "tensor '%s': data_offsets [%llu, %llu] end past the %llu-byte data buffer", name.s, (unsigned long long)off[0],
                    (unsigned long long)off[1], (unsigned long long)data_size);
    if (off[1] - off[0] != nbytes)
        return errf(err, errcap, "tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] span %llu", name.s, shown,
                    dtypes[t->dtype].name, (unsigned long long)nbytes, (unsigned long long)off[0], (unsigned long long)off[1],
                    (unsigned long long)(off[1] - off[0]));
    t->offset = off[0];
    t->nbytes = nbytes;
    return true;
}

/* Copies s into f->strings, sized to the header: a decoded string and its
 * NUL never outgrow the quoted text it came from, and each is copied once. */
static const char *keep(StFile *f, size_t *used, size_t cap, const char *s) {
    size_t n = strlen(s) + 1;
    if (n > cap - *used) return NULL;
    memcpy(f->strings + *used, s, n);
    *used += n;
    return f->strings + *used - n;
}

/* The spec requires the tensors to tile the data buffer: no overlap (one
 * byte, two meanings) and no hole (room for a polyglot payload). */
static int cmp_extent(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    uint64_t xe = x->offset + x->nbytes, ye = y->offset + y->nbytes;
    return (xe > ye) - (xe < ye);
}

static bool check_coverage(const StFile *f, uint64_t data_size, char *err, int errcap) {
    if (f->n == 0)
        return data_size == 0 || errf(err, errcap, "the header lists no tensors but the data buffer has %llu bytes", (unsigned long long)data_size);
    const StTensor **order = malloc((size_t)f->n * sizeof *order);
    if (!order) return errf(err, errcap, "out of memory checking tensor offsets");
    for (int i = 0; i < f->n; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_extent);
    uint64_t covered = 0;
    const StTensor *prev = NULL;
    bool ok = true;
    for (int i = 0; i < f->n && ok; i++) {
        const StTensor *t = order[i];
        if (t->offset < covered)
            ok = errf(err, errcap, "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap in the data buffer", show(prev->name).s,
                      (unsigned long long)prev->offset, (unsigned long long)(prev->offset + prev->nbytes), show(t->name).s,
                      (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes));
        else if (t->offset > covered)
            ok = errf(err, errcap, "bytes [%llu, %llu) of the data buffer belong to no tensor (before '%s')", (unsigned long long)covered,
                      (unsigned long long)t->offset, show(t->name).s);
        covered = t->offset + t->nbytes;
        prev = t;
    }
    if (ok && covered != data_size)
        ok = errf(err, errcap, "bytes [%llu, %llu) of the data buffer belong to no tensor (after '%s')", (unsigned long long)covered,
                  (unsigned long long)data_size, show(prev->name).s);
    free(order);
    return ok;
}

/* Walks the parsed header: "__metadata__" (strings only) and tensor entries,
 * in file order (jansson >= 2.8 iterates objects in insertion order). */
static bool read_entries(StFile *f, json_t *root, size_t hlen, uint64_t data_size, char *err, int errcap) {
    json_t *meta = json_object_get(root, "__metadata__");
    size_t n = json_object_size(root), n_meta = json_object_size(meta), used = 0;   /* 0 for a non-object */
    f->tensors = malloc((n + 1) * sizeof *f->tensors);
    f->meta_keys = malloc((n_meta + 1) * sizeof *f->meta_keys);
    f->meta_values = malloc((n_meta + 1) * sizeof *f->meta_values);
    f->strings = malloc(hlen + 1);
    if (!f->tensors || !f->meta_keys || !f->meta_values || !f->strings) return errf(err, errcap, "out of memory for a %zu-byte header", hlen);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(meta)) return errf(err, errcap, "\"__metadata__\" must be an object of strings, found %s", kind(meta));
            const char *mk;
            json_t *mv;
            json_object_foreach(meta, mk, mv) {
                if (!json_is_string(mv)) return errf(err, errcap, "metadata value for '%s' must be a string, found %s", show(mk).s, kind(mv));
                const char *k = keep(f, &used, hlen + 1, mk), *value = keep(f, &used, hlen + 1, json_string_value(mv));
                if (!k || !value) return errf(err, errcap, "header strings outgrew the header");
                f->meta_keys[f->n_meta] = k;
                f->meta_values[f->n_meta++] = value;
            }
            continue;
        }
        StTensor *t = &f->tensors[f->n];
        *t = (StTensor){.name = keep(f, &used, hlen + 1, key)};
        if (!t->name) return errf(err, errcap, "header strings outgrew the header");
        if (!read_tensor(v, t, data_size, err, errcap)) return false;
        f->n++;
    }
    return check_coverage(f, data_size, err, errcap);
}

/* jansson names a duplicate key only when its text is short (20 bytes) and
 * stops right after its closing quote; the key is taken from there, back to
 * the first quote not escaped by an odd run of backslashes, and *at moves to
 * that opening quote. */
static Shown duplicate_key(const char *h, size_t *at) {
    Shown out = {"?"};
    size_t end = *at;
    if (end < 2 || h[end - 1] != '"') return out;
    for (size_t i = end - 1; i-- > 0;) {
        size_t slashes = 0;
        while (h[i] == '"' && slashes < i && h[i - 1 - slashes] == '\\') slashes++;
        if (h[i] != '"' || slashes % 2) continue;
        json_t *s = json_loadb(h + i, end - i, JSON_DECODE_ANY, NULL);
        if (json_is_string(s)) out = show(json_string_value(s)), *at = i;
        json_decref(s);
        break;
    }
    return out;
}

/* Flags: JSON_REJECT_DUPLICATES, since a repeated name or field would
 * otherwise be dropped silently (last one wins). Left off: JSON_DECODE_ANY
 * (the header must be an object), JSON_DISABLE_EOF_CHECK (only whitespace
 * may follow the closing '}'), JSON_DECODE_INT_AS_REAL (integers must stay
 * exact) and JSON_ALLOW_NUL (names are C strings; "\u0000" is refused). */
static bool parse_header(StFile *f, const char *h, size_t hlen, uint64_t data_size, char *err, int errcap) {
    if (hlen == 0) return errf(err, errcap, "byte 0: header length is 0; the header must be a JSON object");
    /* the spec requires '{' first: no leading whitespace */
    unsigned c = (unsigned char)h[0];
    if (c != '{') {
        if (c >= 0x21 && c < 0x7F) return errf(err, errcap, "byte %d: header must be a JSON object, but it starts with '%c'", HEADER_AT, c);
        return errf(err, errcap, "byte %d: header must be a JSON object, but it starts with byte 0x%02x", HEADER_AT, c);
    }
    json_error_t je;
    json_t *root = json_loadb(h, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        /* position: the bytes jansson consumed; the offending token ends there */
        size_t pos = je.position > 0 ? (size_t)je.position : 0;
        if (json_error_code(&je) == json_error_duplicate_key) {
            Shown key = duplicate_key(h, &pos);
            return errf(err, errcap, "byte %zu: duplicate key '%s' (names, metadata keys and fields must be unique)", AT(pos), key.s);
        }
        return errf(err, errcap, "byte %zu: invalid JSON header: %s", AT(pos), show_max(je.text, JSON_ERROR_TEXT_LENGTH).s);
    }
    bool ok = read_entries(f, root, hlen, data_size, err, errcap);
    json_decref(root);
    return ok;
}

/* The 8-byte length and its limits, checked before anything is allocated. */
static bool check_prefix(const unsigned char *buf, size_t size, uint64_t *header_len, char *err, int errcap) {
    if (size < HEADER_AT) return errf(err, errcap, "file is %zu bytes; a safetensors file starts with an 8-byte header length", size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n > ST_MAX_HEADER)
        return errf(err, errcap, "byte 0: header length %llu is over the %llu-byte limit", (unsigned long long)n, (unsigned long long)ST_MAX_HEADER);
    if (n > size - HEADER_AT)
        return errf(err, errcap, "byte 0: header length %llu runs past the end of the file (%zu bytes after the length)", (unsigned long long)n,
                    size - HEADER_AT);
    *header_len = n;
    return true;
}

/* Validates buf (malloc'd, taken over: kept in *out or freed). */
static bool parse_owned(unsigned char *buf, size_t size, StFile *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    uint64_t hlen;
    if (!check_prefix(buf, size, &hlen, err, errcap)) {
        free(buf);
        return false;
    }
    out->buf = buf;
    out->size = size;
    if (!parse_header(out, (const char *)buf + HEADER_AT, hlen, size - HEADER_AT - hlen, err, errcap)) {
        st_free(out);
        return false;
    }
    const unsigned char *data = buf + HEADER_AT + hlen;
    for (int i = 0; i < out->n; i++) out->tensors[i].data = data + out->tensors[i].offset;
    return true;
}

bool st_parse(const unsigned char *buf, size_t size, StFile *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    uint64_t hlen;
    if (!check_prefix(buf, size, &hlen, err, errcap)) return false;
    unsigned char *copy = malloc(size);
    if (!copy) return errf(err, errcap, "out of memory copying %zu bytes", size);
    memcpy(copy, buf, size);
    return parse_owned(copy, size, out, err, errcap);
}

bool st_read(const char *path, StFile *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errf(err, errcap, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return errf(err, errcap, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return errf(err, errcap, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > ST_MAX_FILE) {
        close(fd);
        return errf(err, errcap, "%s: file is %lld bytes, over the %llu-byte limit", path, (long long)st.st_size, (unsigned long long)ST_MAX_FILE);
    }
    size_t size = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return errf(err, errcap, "%s: out of memory for %zu bytes", path, size);
    }
    while (got < size) {
        /* one read() moves at most about 2 GiB on Linux */
        size_t want = size - got < ((size_t)1 << 30) ? size - got : (size_t)1 << 30;
        ssize_t k = read(fd, buf + got, want);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            if (k == 0) return errf(err, errcap, "%s: file shrank while reading (%zu of %zu bytes)", path, got, size);
            return errf(err, errcap, "%s: read failed at byte %zu: %s", path, got, strerror(e));
        }
        got += (size_t)k;
    }
    if (close(fd) != 0) {
        int e = errno;
        free(buf);
        return errf(err, errcap, "%s: close failed: %s", path, strerror(e));
    }
    char msg[512];
    if (parse_owned(buf, size, out, msg, sizeof msg)) return true;
    return errf(err, errcap, "%s: %s", path, msg);
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

void st_free(StFile *f) {
    free(f->buf);
    free(f->tensors);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->strings);
    memset(f, 0, sizeof *f);
}

/* ------------------------------------------------------------------ writer */

typedef struct Text {
    char *p;
    size_t len, cap;
    bool oom;
} Text;

static void text_put(Text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = true;
            return;
        }
        t->p = p, t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = 0;
}

static void text_str(Text *t, const char *s) { text_put(t, s, strlen(s)); }

static void text_u64(Text *t, uint64_t v) {
    char b[24];
    text_put(t, b, (size_t)snprintf(b, sizeof b, "%llu", (unsigned long long)v));
}

/* A JSON string; s is valid UTF-8, passed through unescaped except for what
 * JSON requires. */
static void text_json_string(Text *t, const char *s) {
    text_put(t, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') esc[0] = '\\', esc[1] = (char)*p, text_put(t, esc, 2);
        else if (*p < 0x20) text_put(t, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p));
        else text_put(t, (const char *)p, 1);
    }
    text_put(t, "\"", 1);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* Sets *dup to a string occurring twice among s[0..n), or NULL; false only
 * when out of memory. */
static bool find_duplicate(const char *const *s, int n, const char **dup) {
    *dup = NULL;
    if (n < 2) return true;
    const char **v = malloc((size_t)n * sizeof *v);
    if (!v) return false;
    memcpy(v, s, (size_t)n * sizeof *v);
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    for (int i = 1; i < n && !*dup; i++)
        if (strcmp(v[i - 1], v[i]) == 0) *dup = v[i];
    free(v);
    return true;
}

/* Checks the items and builds the padded header; nbytes gets each size. */
static bool build_header(const StWriteItem *items, int n, const char *const *meta_kv, Text *h, uint64_t *nbytes, char *err, int errcap) {
    int n_meta = 0;
    for (; meta_kv && meta_kv[2 * n_meta]; n_meta++) {
        const char *k = meta_kv[2 * n_meta], *v = meta_kv[2 * n_meta + 1];
        if (!v) return errf(err, errcap, "metadata key '%s' has no value (meta_kv is key, value, ..., NULL)", show(k).s);
        if (!utf8_valid(k) || !utf8_valid(v)) return errf(err, errcap, "metadata '%s' is not valid UTF-8", show(k).s);
    }
    const char **names = malloc(((size_t)(n > n_meta ? n : n_meta) + 1) * sizeof *names);
    if (!names) return errf(err, errcap, "out of memory");
    const char *dup = NULL;
    for (int i = 0; i < n_meta; i++) names[i] = meta_kv[2 * i];
    bool ok = find_duplicate(names, n_meta, &dup) || errf(err, errcap, "out of memory");
    if (ok && dup) ok = errf(err, errcap, "duplicate metadata key '%s'", show(dup).s);

    uint64_t offset = 0;
    for (int i = 0; ok && i < n; i++) {
        const StWriteItem *it = &items[i];
        names[i] = it->name;
        if (!it->name) ok = errf(err, errcap, "item %d has no name", i);
        else if (!utf8_valid(it->name)) ok = errf(err, errcap, "item %d: name '%s' is not valid UTF-8", i, show(it->name).s);
        else if (strcmp(it->name, "__metadata__") == 0) ok = errf(err, errcap, "item %d: '__metadata__' is reserved", i);
        else if (!dtype_valid(it->dtype)) ok = errf(err, errcap, "tensor '%s': invalid dtype %d", show(it->name).s, (int)it->dtype);
        else if (it->nd < 0 || it->nd > ST_MAX_DIMS || (it->nd > 0 && !it->shape))
            ok = errf(err, errcap, "tensor '%s': rank %d is not in [0, %d] or the shape is missing", show(it->name).s, it->nd, ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; ok && d < it->nd; d++)
            if (it->shape[d] < 0) ok = errf(err, errcap, "tensor '%s': shape[%d] = %lld is negative", show(it->name).s, d, (long long)it->shape[d]);
            else if (!mul_u64(numel, (uint64_t)it->shape[d], &numel)) ok = errf(err, errcap, "tensor '%s': too many elements", show(it->name).s);
        if (ok && (!mul_u64(numel, dtypes[it->dtype].size, &nbytes[i]) || nbytes[i] > UINT64_MAX - offset))
            ok = errf(err, errcap, "tensor '%s': byte size overflows", show(it->name).s);
        if (ok && nbytes[i] > 0 && !it->data) ok = errf(err, errcap, "tensor '%s': data is NULL", show(it->name).s);
        if (ok) offset += nbytes[i];
    }
    if (ok) ok = find_duplicate(names, n, &dup) || errf(err, errcap, "out of memory");
    if (ok && dup) ok = errf(err, errcap, "duplicate tensor name '%s'", show(dup).s);
    free(names);
    if (!ok) return false;

    text_str(h, "{");
    if (n_meta > 0) {
        text_str(h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) text_str(h, ",");
            text_json_string(h, meta_kv[2 * i]);
            text_str(h, ":");
            text_json_string(h, meta_kv[2 * i + 1]);
        }
        text_str(h, n > 0 ? "}," : "}");
    }
    offset = 0;
    for (int i = 0; i < n; i++) {
        if (i) text_str(h, ",");
        text_json_string(h, items[i].name);
        text_str(h, ":{\"dtype\":\"");
        text_str(h, dtypes[items[i].dtype].name);
        text_str(h, "\",\"shape\":[");
        for (int d = 0; d < items[i].nd; d++) {
            if (d) text_str(h, ",");
            text_u64(h, (uint64_t)items[i].shape[d]);
        }
        text_str(h, "],\"data_offsets\":[");
        text_u64(h, offset);
        text_str(h, ",");
        text_u64(h, offset += nbytes[i]);
        text_str(h, "]}");
    }
    text_str(h, "}");
    while (!h->oom && h->len % 8) text_str(h, " ");
    if (h->oom) return errf(err, errcap, "out of memory building the header");
    if (h->len > ST_MAX_HEADER)
        return errf(err, errcap, "header would be %zu bytes, over the %llu-byte limit readers accept", h->len, (unsigned long long)ST_MAX_HEADER);
    return true;
}

bool st_write(const char *path, const StWriteItem *items, int n, const char *const *meta_kv, char *err, int errcap) {
    if (!path || n < 0 || n > INT_MAX - 2 || (n > 0 && !items)) return errf(err, errcap, "st_write: bad arguments");
    uint64_t *nbytes = malloc(((size_t)n + 1) * sizeof *nbytes);
    const void **chunks = malloc(((size_t)n + 2) * sizeof *chunks);
    size_t *lens = malloc(((size_t)n + 2) * sizeof *lens);
    Text h = {0};
    bool ok = nbytes && chunks && lens ? build_header(items, n, meta_kv, &h, nbytes, err, errcap) : errf(err, errcap, "out of memory");
    if (ok) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        chunks[0] = len8, lens[0] = 8;
        chunks[1] = h.p, lens[1] = h.len;
        for (int i = 0; i < n; i++) chunks[i + 2] = items[i].data, lens[i + 2] = (size_t)nbytes[i];
        char none[1];
        bool to_err = err && errcap > 0;
        ok = atomic_write(path, chunks, lens, n + 2, to_err ? err : none, to_err ? errcap : (int)sizeof none);
    }
    free(h.p);
    free(nbytes);
    free(chunks);
    free(lens);
    return ok;
}

/* ------------------------------------------------------------ float helper */

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
    if (exp == 0 && mant != 0) {
        float v = (float)mant * 0x1p-24f;   /* subnormal: exact in float */
        return sign ? -v : v;
    }
    if (exp == 0x1F) bits = sign | 0x7F800000u | mant << 13;   /* inf, NaN with its payload */
    else if (exp == 0) bits = sign;
    else bits = sign | (exp + 112) << 23 | mant << 13;   /* rebias 15 -> 127 */
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float *st_to_f32(const StTensor *t) {
    if (!t || (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16 && t->dtype != ST_F64)) return NULL;
    size_t es = dtypes[t->dtype].size;
    uint64_t numel = st_numel(t), need;
    /* a hand-made StTensor whose shape and byte count disagree is refused
     * rather than read past its data */
    if (!mul_u64(numel, es, &need) || need != t->nbytes || numel > SIZE_MAX / sizeof(float) || (numel && !t->data)) return NULL;
    float *out = malloc(numel ? (size_t)numel * sizeof(float) : 1);
    if (!out) return NULL;
    const unsigned char *src = t->data;
    for (size_t i = 0; i < numel; i++) {
        const unsigned char *p = src + i * es;
        if (t->dtype == ST_F32) {
            memcpy(&out[i], p, 4);
        } else if (t->dtype == ST_F64) {
            double d;
            memcpy(&d, p, 8);
            out[i] = (float)d;   /* IEEE 754 (C11 Annex F): rounds, overflows to +-inf */
        } else {
            uint16_t v;
            memcpy(&v, p, 2);
            if (t->dtype == ST_F16) out[i] = half_to_float(v);
            else {
                uint32_t bits = (uint32_t)v << 16;
                memcpy(&out[i], &bits, 4);
            }
        }
    }
    return out;
}
