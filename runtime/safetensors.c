/* runtime/safetensors.c — safetensors reader (strict validation) and atomic
 * writer. Owns the byte format and its JSON header only; callers decide what
 * the tensors mean and where they go.
 *
 * The header is read by a small schema-specific JSON reader instead of cJSON:
 * cJSON keeps numbers as doubles (it cannot tell 2 from 2.0, nor hold
 * offsets past 2^53 exactly), accepts leading zeros, raw control characters
 * and invalid UTF-8, and builds a node per value, so a 100 MiB header of
 * tiny arrays would cost gigabytes. Reading only the shape this format
 * allows gives exact integers, a byte offset for every error, and memory
 * bounded by the header's length. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes are handed out as they lie in the file, which is little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; this host is not");
_Static_assert(sizeof(size_t) >= 8, "files up to 16 GiB need a 64-bit size_t");

#define HEADER_AT 8   /* file offset of the header's first byte */

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

static bool fail(char *err, int errcap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(char *err, int errcap, const char *fmt, ...) {
    if (err && errcap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, (size_t)errcap, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* A name fit for a one-line message: at most ~60 bytes, cut at a character
 * boundary, control characters shown as '?'. Names come from untrusted files. */
typedef struct Shown {
    char s[72];
} Shown;
static Shown show(const char *name) {
    Shown out;
    size_t n = strlen(name), cut = n > 60 ? 60 : n;
    while (cut < n && cut > 0 && ((unsigned char)name[cut] & 0xC0) == 0x80) cut--;
    for (size_t i = 0; i < cut; i++) {
        unsigned char c = (unsigned char)name[i];
        out.s[i] = c < 0x20 || c == 0x7F ? '?' : (char)c;
    }
    strcpy(out.s + cut, cut < n ? "..." : "");
    return out;
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

/* overflow-checked a*b */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    if (a && b > UINT64_MAX / a) return false;
    *out = a * b;
    return true;
}

/* ------------------------------------------------------------------ reader */

typedef struct Reader {
    const unsigned char *h;   /* the JSON header */
    size_t n, pos;
    char *pool;               /* decoded strings; never longer than the header */
    size_t pool_used;
    uint64_t data_size;
    StFile *f;
    int cap_tensors, cap_meta;
    size_t *tensor_at, *meta_at;   /* header offset of each name, for duplicate messages */
    char *err;
    int errcap;
} Reader;

/* Errors name the file offset (header offset + 8), as a hex dump shows it. */
#define AT(pos) ((size_t)(pos) + HEADER_AT)

static bool peek(const Reader *r, char c) { return r->pos < r->n && r->h[r->pos] == (unsigned char)c; }

static void skip_ws(Reader *r) {
    while (r->pos < r->n && (r->h[r->pos] == ' ' || r->h[r->pos] == '\t' || r->h[r->pos] == '\n' || r->h[r->pos] == '\r'))
        r->pos++;
}

/* What stands at pos, for "expected X, found Y" messages. */
static const char *found(const Reader *r) {
    if (r->pos >= r->n) return "the end of the header";
    switch (r->h[r->pos]) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't':
    case 'f': return "a boolean";
    case 'n': return "null";
    case '-': return "a number";
    default: return r->h[r->pos] >= '0' && r->h[r->pos] <= '9' ? "a number" : "a character that cannot start a JSON value";
    }
}

static bool expect(Reader *r, char c, const char *context) {
    skip_ws(r);
    if (peek(r, c)) {
        r->pos++;
        return true;
    }
    return fail(r->err, r->errcap, "byte %zu: invalid JSON header: expected '%c' %s, found %s", AT(r->pos), c, context, found(r));
}

static int hex4(const unsigned char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes the string at pos (which must be '"') into the pool. */
static bool read_string(Reader *r, const char **out) {
    size_t start = r->pos;
    if (!peek(r, '"')) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: expected a string, found %s", AT(r->pos), found(r));
    r->pos++;
    char *dst = r->pool + r->pool_used;
    size_t len = 0;
    for (;;) {
        if (r->pos >= r->n) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: string never ends", AT(start));
        unsigned c = r->h[r->pos];
        if (c == '"') break;
        if (c < 0x20)
            return fail(r->err, r->errcap, "byte %zu: invalid JSON header: raw control character 0x%02x in a string", AT(r->pos), c);
        if (c >= 0x80) {
            size_t k = utf8_seq(r->h + r->pos, r->n - r->pos);
            if (!k) return fail(r->err, r->errcap, "byte %zu: header is not valid UTF-8", AT(r->pos));
            memcpy(dst + len, r->h + r->pos, k);
            len += k, r->pos += k;
            continue;
        }
        if (c != '\\') {
            dst[len++] = (char)c, r->pos++;
            continue;
        }
        size_t esc = r->pos;
        if (r->n - r->pos < 2) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: string never ends", AT(start));
        const char *simple = strchr("\"\\/bfnrt", r->h[r->pos + 1]);
        if (simple && *simple) {
            dst[len++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            r->pos += 2;
            continue;
        }
        int cp = r->h[r->pos + 1] == 'u' && r->n - r->pos >= 6 ? hex4(r->h + r->pos + 2) : -1;
        if (cp < 0) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: bad escape in a string", AT(esc));
        r->pos += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            int lo = r->n - r->pos >= 6 && r->h[r->pos] == '\\' && r->h[r->pos + 1] == 'u' ? hex4(r->h + r->pos + 2) : -1;
            if (lo < 0xDC00 || lo > 0xDFFF)
                return fail(r->err, r->errcap, "byte %zu: invalid JSON header: unpaired UTF-16 surrogate escape", AT(esc));
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            r->pos += 6;
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail(r->err, r->errcap, "byte %zu: invalid JSON header: unpaired UTF-16 surrogate escape", AT(esc));
        } else if (cp == 0) {
            /* names are C strings; an embedded NUL would silently cut them */
            return fail(r->err, r->errcap, "byte %zu: \\u0000 (NUL) in a string is not supported", AT(esc));
        }
        /* an escape is 6 or 12 bytes and decodes to at most 4, so the pool
         * (header length) still bounds the decoded text */
        if (cp < 0x80) dst[len++] = (char)cp;
        else if (cp < 0x800) dst[len++] = (char)(0xC0 | cp >> 6), dst[len++] = (char)(0x80 | (cp & 0x3F));
        else if (cp < 0x10000)
            dst[len++] = (char)(0xE0 | cp >> 12), dst[len++] = (char)(0x80 | ((cp >> 6) & 0x3F)), dst[len++] = (char)(0x80 | (cp & 0x3F));
        else
            dst[len++] = (char)(0xF0 | cp >> 18), dst[len++] = (char)(0x80 | ((cp >> 12) & 0x3F)),
            dst[len++] = (char)(0x80 | ((cp >> 6) & 0x3F)), dst[len++] = (char)(0x80 | (cp & 0x3F));
    }
    r->pos++;   /* closing quote */
    dst[len] = 0;
    r->pool_used += len + 1;
    *out = dst;
    return true;
}

/* A JSON number token, classified; the value is exact for plain integers. */
typedef struct Number {
    size_t at, len;
    bool negative, fraction, too_big;
    uint64_t value;
} Number;

static bool is_digit(const Reader *r) { return r->pos < r->n && r->h[r->pos] >= '0' && r->h[r->pos] <= '9'; }

static bool read_number(Reader *r, Number *num) {
    *num = (Number){.at = r->pos};
    if (peek(r, '-')) num->negative = true, r->pos++;
    if (!is_digit(r)) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: malformed number", AT(num->at));
    if (peek(r, '0')) {
        r->pos++;
        if (is_digit(r)) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: number with a leading zero", AT(num->at));
    }
    for (; is_digit(r); r->pos++) {
        unsigned d = r->h[r->pos] - '0';
        if (num->value > (UINT64_MAX - d) / 10) num->too_big = true;
        else num->value = num->value * 10 + d;
    }
    if (peek(r, '.')) {
        r->pos++, num->fraction = true;
        if (!is_digit(r)) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: malformed number", AT(num->at));
        while (is_digit(r)) r->pos++;
    }
    if (peek(r, 'e') || peek(r, 'E')) {
        r->pos++, num->fraction = true;
        if (peek(r, '+') || peek(r, '-')) r->pos++;
        if (!is_digit(r)) return fail(r->err, r->errcap, "byte %zu: invalid JSON header: malformed number", AT(num->at));
        while (is_digit(r)) r->pos++;
    }
    num->len = r->pos - num->at;
    return true;
}

/* Reads "[u, u, ...]" of at most max_count integers in [0, max_value].
 * what names the list in messages ("tensor 'w': shape"). */
static bool read_uint_list(Reader *r, const char *what, int max_count, uint64_t max_value, uint64_t *vals, int *count) {
    skip_ws(r);
    if (!peek(r, '[')) return fail(r->err, r->errcap, "byte %zu: %s must be an array of integers, found %s", AT(r->pos), what, found(r));
    r->pos++;
    *count = 0;
    skip_ws(r);
    if (peek(r, ']')) {
        r->pos++;
        return true;
    }
    for (;;) {
        skip_ws(r);
        if (!peek(r, '-') && !is_digit(r))
            return fail(r->err, r->errcap, "byte %zu: %s[%d] must be a non-negative integer, found %s", AT(r->pos), what, *count, found(r));
        Number num;
        if (!read_number(r, &num)) return false;
        int shown = num.len > 30 ? 30 : (int)num.len;
        const char *tok = (const char *)r->h + num.at;
        if (num.negative)
            return fail(r->err, r->errcap, "byte %zu: %s[%d] must be a non-negative integer, found %.*s", AT(num.at), what, *count, shown, tok);
        if (num.fraction)
            return fail(r->err, r->errcap, "byte %zu: %s[%d] must be an integer, found %.*s", AT(num.at), what, *count, shown, tok);
        if (num.too_big || num.value > max_value)
            return fail(r->err, r->errcap, "byte %zu: %s[%d] = %.*s is too large (at most %llu)", AT(num.at), what, *count, shown, tok,
                        (unsigned long long)max_value);
        if (*count == max_count)
            return fail(r->err, r->errcap, "byte %zu: %s has more than %d entries", AT(num.at), what, max_count);
        vals[(*count)++] = num.value;
        skip_ws(r);
        if (peek(r, ']')) {
            r->pos++;
            return true;
        }
        if (!expect(r, ',', "or ']' in an array")) return false;
    }
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
 * field exactly once and nothing else, so a field this reader does not know
 * (a newer format's) is an error rather than silently ignored. */
static bool read_tensor(Reader *r, StTensor *t, size_t name_at) {
    Shown name = show(t->name);
    char what[128];
    skip_ws(r);
    if (!peek(r, '{'))
        return fail(r->err, r->errcap, "byte %zu: tensor '%s': expected an object {dtype, shape, data_offsets}, found %s", AT(r->pos), name.s,
                    found(r));
    r->pos++;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    uint64_t off[2] = {0, 0};
    skip_ws(r);
    if (peek(r, '}')) r->pos++;
    else
        for (;;) {
            skip_ws(r);
            size_t field_at = r->pos;
            const char *field;
            if (!read_string(r, &field) || !expect(r, ':', "after a field name")) return false;
            skip_ws(r);
            bool *seen = strcmp(field, "dtype") == 0          ? &have_dtype
                         : strcmp(field, "shape") == 0        ? &have_shape
                         : strcmp(field, "data_offsets") == 0 ? &have_offsets
                                                              : NULL;
            if (!seen) return fail(r->err, r->errcap, "byte %zu: tensor '%s': unknown field '%s'", AT(field_at), name.s, show(field).s);
            if (*seen) return fail(r->err, r->errcap, "byte %zu: tensor '%s': duplicate field '%s'", AT(field_at), name.s, field);
            *seen = true;
            if (seen == &have_dtype) {
                size_t at = r->pos;
                const char *dt;
                if (!peek(r, '"'))
                    return fail(r->err, r->errcap, "byte %zu: tensor '%s': dtype must be a string, found %s", AT(at), name.s, found(r));
                if (!read_string(r, &dt)) return false;
                int k = dtype_lookup(dt);
                if (k < 0) return fail(r->err, r->errcap, "byte %zu: tensor '%s': unknown dtype '%s'", AT(at), name.s, show(dt).s);
                t->dtype = (StDType)k;
            } else if (seen == &have_shape) {
                uint64_t dims[ST_MAX_DIMS];
                snprintf(what, sizeof what, "tensor '%s': shape", name.s);
                if (!read_uint_list(r, what, ST_MAX_DIMS, INT64_MAX, dims, &t->nd)) return false;
                for (int i = 0; i < t->nd; i++) t->shape[i] = (int64_t)dims[i];
            } else {
                int count;
                size_t at = r->pos;
                snprintf(what, sizeof what, "tensor '%s': data_offsets", name.s);
                if (!read_uint_list(r, what, 2, UINT64_MAX, off, &count)) return false;
                if (count != 2)
                    return fail(r->err, r->errcap, "byte %zu: tensor '%s': data_offsets must be [begin, end], found %d entries", AT(at), name.s,
                                count);
            }
            skip_ws(r);
            if (peek(r, '}')) {
                r->pos++;
                break;
            }
            if (!expect(r, ',', "or '}' in a tensor entry")) return false;
        }
    const char *missing = !have_dtype ? "dtype" : !have_shape ? "shape" : !have_offsets ? "data_offsets" : NULL;
    if (missing) return fail(r->err, r->errcap, "byte %zu: tensor '%s' has no '%s'", AT(name_at), name.s, missing);

    char shape[200];
    format_shape(t, shape, sizeof shape);
    uint64_t numel = 1, nbytes;
    for (int i = 0; i < t->nd; i++)
        if (!mul_u64(numel, (uint64_t)t->shape[i], &numel))
            return fail(r->err, r->errcap, "tensor '%s': shape %s has more than 2^64 elements", name.s, shape);
    if (!mul_u64(numel, dtypes[t->dtype].size, &nbytes))
        return fail(r->err, r->errcap, "tensor '%s': shape %s of %s is more than 2^64 bytes", name.s, shape, dtypes[t->dtype].name);
    if (off[0] > off[1])
        return fail(r->err, r->errcap, "tensor '%s': data_offsets [%llu, %llu] begin after they end", name.s, (unsigned long long)off[0],
                    (unsigned long long)off[1]);
    if (off[1] > r->data_size)
        return fail(r->err, r->errcap, "tensor '%s': data_offsets [%llu, %llu] end past the %llu-byte data buffer", name.s,
                    (unsigned long long)off[0], (unsigned long long)off[1], (unsigned long long)r->data_size);
    if (off[1] - off[0] != nbytes)
        return fail(r->err, r->errcap, "tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] span %llu", name.s, shape,
                    dtypes[t->dtype].name, (unsigned long long)nbytes, (unsigned long long)off[0], (unsigned long long)off[1],
                    (unsigned long long)(off[1] - off[0]));
    t->offset = off[0];
    t->nbytes = nbytes;
    return true;
}

static bool read_metadata(Reader *r) {
    StFile *f = r->f;
    skip_ws(r);
    if (!peek(r, '{'))
        return fail(r->err, r->errcap, "byte %zu: \"__metadata__\" must be an object of strings, found %s", AT(r->pos), found(r));
    r->pos++;
    skip_ws(r);
    if (peek(r, '}')) {
        r->pos++;
        return true;
    }
    for (;;) {
        skip_ws(r);
        size_t key_at = r->pos;
        const char *key, *value;
        if (!read_string(r, &key) || !expect(r, ':', "after a metadata key")) return false;
        skip_ws(r);
        if (!peek(r, '"'))
            return fail(r->err, r->errcap, "byte %zu: metadata value for '%s' must be a string, found %s", AT(r->pos), show(key).s, found(r));
        if (!read_string(r, &value)) return false;
        if (f->n_meta == r->cap_meta) {
            int cap = r->cap_meta ? 2 * r->cap_meta : 8;
            const char **k = realloc(f->meta_keys, (size_t)cap * sizeof *k);
            if (k) f->meta_keys = k;
            const char **v = realloc(f->meta_values, (size_t)cap * sizeof *v);
            if (v) f->meta_values = v;
            size_t *a = realloc(r->meta_at, (size_t)cap * sizeof *a);
            if (a) r->meta_at = a;
            if (!k || !v || !a) return fail(r->err, r->errcap, "out of memory reading metadata");
            r->cap_meta = cap;
        }
        f->meta_keys[f->n_meta] = key;
        f->meta_values[f->n_meta] = value;
        r->meta_at[f->n_meta++] = key_at;
        skip_ws(r);
        if (peek(r, '}')) {
            r->pos++;
            return true;
        }
        if (!expect(r, ',', "or '}' in \"__metadata__\"")) return false;
    }
}

static bool read_header(Reader *r) {
    StFile *f = r->f;
    if (r->n == 0) return fail(r->err, r->errcap, "byte 0: header length is 0; the header must be a JSON object");
    /* the spec requires '{' first: no leading whitespace */
    if (!peek(r, '{')) {
        unsigned c = r->h[0];
        if (c >= 0x21 && c < 0x7F) return fail(r->err, r->errcap, "byte %d: header must be a JSON object, but it starts with '%c'", HEADER_AT, c);
        return fail(r->err, r->errcap, "byte %d: header must be a JSON object, but it starts with byte 0x%02x", HEADER_AT, c);
    }
    r->pos = 1;
    bool have_meta = false;
    size_t meta_at = 0;
    skip_ws(r);
    if (peek(r, '}')) r->pos++;
    else
        for (;;) {
            skip_ws(r);
            size_t key_at = r->pos;
            const char *key;
            if (!peek(r, '"'))
                return fail(r->err, r->errcap, "byte %zu: invalid JSON header: expected a tensor name (a string), found %s", AT(r->pos), found(r));
            if (!read_string(r, &key) || !expect(r, ':', "after a tensor name")) return false;
            if (strcmp(key, "__metadata__") == 0) {
                if (have_meta)
                    return fail(r->err, r->errcap, "byte %zu: duplicate \"__metadata__\" (first at byte %zu)", AT(key_at), AT(meta_at));
                have_meta = true, meta_at = key_at;
                if (!read_metadata(r)) return false;
            } else {
                if (f->n == r->cap_tensors) {
                    if (r->cap_tensors > (1 << 29)) return fail(r->err, r->errcap, "byte %zu: too many tensors", AT(key_at));
                    int cap = r->cap_tensors ? 2 * r->cap_tensors : 16;
                    StTensor *grown = realloc(f->tensors, (size_t)cap * sizeof *grown);
                    if (grown) f->tensors = grown;
                    size_t *a = realloc(r->tensor_at, (size_t)cap * sizeof *a);
                    if (a) r->tensor_at = a;
                    if (!grown || !a) return fail(r->err, r->errcap, "out of memory reading the header");
                    r->cap_tensors = cap;
                }
                StTensor *t = &f->tensors[f->n];
                *t = (StTensor){.name = key};
                if (!read_tensor(r, t, key_at)) return false;
                r->tensor_at[f->n++] = key_at;
            }
            skip_ws(r);
            if (peek(r, '}')) {
                r->pos++;
                break;
            }
            if (!expect(r, ',', "or '}' after a tensor entry")) return false;
        }
    /* PyTorch's writer pads with spaces to a multiple of 8 */
    skip_ws(r);
    if (r->pos < r->n)
        return fail(r->err, r->errcap, "byte %zu: only whitespace may follow the header's closing '}', found %s", AT(r->pos), found(r));
    return true;
}

/* ---- whole-file checks after the header: unique names, exact coverage ---- */

typedef struct NameAt {
    const char *name;
    size_t at;
} NameAt;

static int cmp_name_at(const void *a, const void *b) {
    const NameAt *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->at > y->at) - (x->at < y->at);
}

/* Sorted, equal neighbours are duplicates; reports the later occurrence. */
static bool check_unique(const char *const *names, const size_t *at, int n, const char *kind, char *err, int errcap) {
    if (n < 2) return true;
    NameAt *v = malloc((size_t)n * sizeof *v);
    if (!v) return fail(err, errcap, "out of memory checking %s names", kind);
    for (int i = 0; i < n; i++) v[i] = (NameAt){names[i], at[i]};
    qsort(v, (size_t)n, sizeof *v, cmp_name_at);
    for (int i = 1; i < n; i++)
        if (strcmp(v[i - 1].name, v[i].name) == 0) {
            fail(err, errcap, "byte %zu: duplicate %s '%s' (first at byte %zu)", AT(v[i].at), kind, show(v[i].name).s, AT(v[i - 1].at));
            free(v);
            return false;
        }
    free(v);
    return true;
}

static int cmp_extent(const void *a, const void *b) {
    const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    uint64_t xe = x->offset + x->nbytes, ye = y->offset + y->nbytes;
    return (xe > ye) - (xe < ye);
}

/* The spec requires the tensors to tile the data buffer: no overlap (one
 * byte, two meanings) and no hole (room for a polyglot payload). */
static bool check_coverage(const StFile *f, uint64_t data_size, char *err, int errcap) {
    if (f->n == 0)
        return data_size == 0 ||
               fail(err, errcap, "the header lists no tensors but the data buffer has %llu bytes", (unsigned long long)data_size);
    const StTensor **order = malloc((size_t)f->n * sizeof *order);
    if (!order) return fail(err, errcap, "out of memory checking tensor offsets");
    for (int i = 0; i < f->n; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_extent);
    uint64_t covered = 0;
    const StTensor *prev = NULL;
    bool ok = true;
    for (int i = 0; i < f->n && ok; i++) {
        const StTensor *t = order[i];
        if (t->offset < covered)
            ok = fail(err, errcap, "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap in the data buffer", show(prev->name).s,
                      (unsigned long long)prev->offset, (unsigned long long)(prev->offset + prev->nbytes), show(t->name).s,
                      (unsigned long long)t->offset, (unsigned long long)(t->offset + t->nbytes));
        else if (t->offset > covered)
            ok = fail(err, errcap, "bytes [%llu, %llu) of the data buffer belong to no tensor (before '%s')", (unsigned long long)covered,
                      (unsigned long long)t->offset, show(t->name).s);
        covered = t->offset + t->nbytes;
        prev = t;
    }
    if (ok && covered != data_size)
        ok = fail(err, errcap, "bytes [%llu, %llu) of the data buffer belong to no tensor (after '%s')", (unsigned long long)covered,
                  (unsigned long long)data_size, show(prev->name).s);
    free(order);
    return ok;
}

/* The 8-byte length and its limits, checked before anything is allocated. */
static bool check_prefix(const unsigned char *buf, size_t size, uint64_t *header_len, char *err, int errcap) {
    if (size < HEADER_AT)
        return fail(err, errcap, "file is %zu bytes; a safetensors file starts with an 8-byte header length", size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n > ST_MAX_HEADER)
        return fail(err, errcap, "byte 0: header length %llu is over the %llu-byte limit", (unsigned long long)n,
                    (unsigned long long)ST_MAX_HEADER);
    if (n > size - HEADER_AT)
        return fail(err, errcap, "byte 0: header length %llu runs past the end of the file (%zu bytes after the length)",
                    (unsigned long long)n, size - HEADER_AT);
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
    /* decoded strings and their NULs never outgrow the quoted text they
     * came from, so the header length bounds the pool */
    out->strings = malloc(hlen + 1);
    if (!out->strings) {
        st_free(out);
        return fail(err, errcap, "out of memory for a %llu-byte header", (unsigned long long)hlen);
    }
    Reader r = {.h = buf + HEADER_AT, .n = hlen, .pool = out->strings, .data_size = size - HEADER_AT - hlen, .f = out, .err = err, .errcap = errcap};
    bool ok = read_header(&r);
    if (ok) {
        const char **names = malloc(((size_t)out->n + 1) * sizeof *names);
        ok = names != NULL || fail(err, errcap, "out of memory checking tensor names");
        for (int i = 0; ok && i < out->n; i++) names[i] = out->tensors[i].name;
        ok = ok && check_unique(names, r.tensor_at, out->n, "tensor name", err, errcap) &&
             check_unique(out->meta_keys, r.meta_at, out->n_meta, "metadata key", err, errcap) && check_coverage(out, r.data_size, err, errcap);
        free(names);
    }
    free(r.tensor_at);
    free(r.meta_at);
    if (!ok) {
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
    if (!copy) return fail(err, errcap, "out of memory copying %zu bytes", size);
    memcpy(copy, buf, size);
    return parse_owned(copy, size, out, err, errcap);
}

bool st_read(const char *path, StFile *out, char *err, int errcap) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(err, errcap, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return fail(err, errcap, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fail(err, errcap, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > ST_MAX_FILE) {
        close(fd);
        return fail(err, errcap, "%s: file is %lld bytes, over the %llu-byte limit", path, (long long)st.st_size, (unsigned long long)ST_MAX_FILE);
    }
    size_t size = (size_t)st.st_size, got = 0;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return fail(err, errcap, "%s: out of memory for %zu bytes", path, size);
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
            if (k == 0) return fail(err, errcap, "%s: file shrank while reading (%zu of %zu bytes)", path, got, size);
            return fail(err, errcap, "%s: read failed at byte %zu: %s", path, got, strerror(e));
        }
        got += (size_t)k;
    }
    if (close(fd) != 0) {
        int e = errno;
        free(buf);
        return fail(err, errcap, "%s: close failed: %s", path, strerror(e));
    }
    char msg[512];
    if (parse_owned(buf, size, out, msg, sizeof msg)) return true;
    return fail(err, errcap, "%s: %s", path, msg);
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
        if (!v) return fail(err, errcap, "metadata key '%s' has no value (meta_kv is key, value, ..., NULL)", show(k).s);
        if (!utf8_valid(k) || !utf8_valid(v)) return fail(err, errcap, "metadata '%s' is not valid UTF-8", show(k).s);
    }
    const char **names = malloc(((size_t)(n > n_meta ? n : n_meta) + 1) * sizeof *names);
    if (!names) return fail(err, errcap, "out of memory");
    const char *dup = NULL;
    for (int i = 0; i < n_meta; i++) names[i] = meta_kv[2 * i];
    bool ok = find_duplicate(names, n_meta, &dup) || fail(err, errcap, "out of memory");
    if (ok && dup) ok = fail(err, errcap, "duplicate metadata key '%s'", show(dup).s);

    uint64_t offset = 0;
    for (int i = 0; ok && i < n; i++) {
        const StWriteItem *it = &items[i];
        names[i] = it->name;
        if (!it->name) ok = fail(err, errcap, "item %d has no name", i);
        else if (!utf8_valid(it->name)) ok = fail(err, errcap, "item %d: name '%s' is not valid UTF-8", i, show(it->name).s);
        else if (strcmp(it->name, "__metadata__") == 0) ok = fail(err, errcap, "item %d: '__metadata__' is reserved", i);
        else if (!dtype_valid(it->dtype)) ok = fail(err, errcap, "tensor '%s': invalid dtype %d", show(it->name).s, (int)it->dtype);
        else if (it->nd < 0 || it->nd > ST_MAX_DIMS || (it->nd > 0 && !it->shape))
            ok = fail(err, errcap, "tensor '%s': rank %d is not in [0, %d] or the shape is missing", show(it->name).s, it->nd, ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; ok && d < it->nd; d++)
            if (it->shape[d] < 0) ok = fail(err, errcap, "tensor '%s': shape[%d] = %lld is negative", show(it->name).s, d, (long long)it->shape[d]);
            else if (!mul_u64(numel, (uint64_t)it->shape[d], &numel)) ok = fail(err, errcap, "tensor '%s': too many elements", show(it->name).s);
        if (ok && (!mul_u64(numel, dtypes[it->dtype].size, &nbytes[i]) || nbytes[i] > UINT64_MAX - offset))
            ok = fail(err, errcap, "tensor '%s': byte size overflows", show(it->name).s);
        if (ok && nbytes[i] > 0 && !it->data) ok = fail(err, errcap, "tensor '%s': data is NULL", show(it->name).s);
        if (ok) offset += nbytes[i];
    }
    if (ok) ok = find_duplicate(names, n, &dup) || fail(err, errcap, "out of memory");
    if (ok && dup) ok = fail(err, errcap, "duplicate tensor name '%s'", show(dup).s);
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
    if (h->oom) return fail(err, errcap, "out of memory building the header");
    if (h->len > ST_MAX_HEADER)
        return fail(err, errcap, "header would be %zu bytes, over the %llu-byte limit readers accept", h->len, (unsigned long long)ST_MAX_HEADER);
    return true;
}

/* fwrite with errno kept for the message; fwrite alone may report a
 * write(2) failure without setting it */
static bool write_all(FILE *f, const void *p, uint64_t n) {
    errno = 0;
    if (n == 0 || fwrite(p, 1, (size_t)n, f) == n) return true;
    if (errno == 0) errno = EIO;
    return false;
}

static bool sync_directory(const char *path, char *err, int errcap) {
    size_t len = strlen(path);
    char *dir = malloc(len + 2);
    if (!dir) return fail(err, errcap, "'%s' was replaced, but out of memory to sync its directory", path);
    const char *slash = strrchr(path, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == path) strcpy(dir, "/");
    else memcpy(dir, path, (size_t)(slash - path)), dir[slash - path] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = fd >= 0;
    if (!ok) fail(err, errcap, "'%s' was replaced, but opening its directory '%s' failed: %s", path, dir, strerror(errno));
    /* EINVAL: the file system cannot sync directories; nothing more to do */
    if (ok && fsync(fd) != 0 && errno != EINVAL)
        ok = fail(err, errcap, "'%s' was replaced, but syncing its directory '%s' failed: %s", path, dir, strerror(errno));
    if (fd >= 0 && close(fd) != 0 && ok)
        ok = fail(err, errcap, "'%s' was replaced, but closing its directory '%s' failed: %s", path, dir, strerror(errno));
    free(dir);
    return ok;
}

bool st_write(const char *path, const StWriteItem *items, int n, const char *const *meta_kv, char *err, int errcap) {
    if (!path || n < 0 || (n > 0 && !items)) return fail(err, errcap, "st_write: bad arguments");
    uint64_t *nbytes = malloc(((size_t)n + 1) * sizeof *nbytes);
    Text h = {0};
    size_t tmp_cap = strlen(path) + 32;
    char *tmp = malloc(tmp_cap);
    if (!nbytes || !tmp) {
        free(nbytes);
        free(tmp);
        return fail(err, errcap, "out of memory");
    }
    bool ok = build_header(items, n, meta_kv, &h, nbytes, err, errcap);
    FILE *f = NULL;
    bool created = false;
    if (ok) {
        /* the pid keeps two processes writing the same PATH apart; same
         * directory so that rename() is atomic */
        snprintf(tmp, tmp_cap, "%s.tmp.%ld", path, (long)getpid());
        f = fopen(tmp, "wb");
        created = f != NULL;
        if (!f) ok = fail(err, errcap, "cannot create '%s': %s", tmp, strerror(errno));
    }
    if (ok) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
        ok = write_all(f, len8, 8) && write_all(f, h.p, h.len);
        for (int i = 0; ok && i < n; i++) ok = write_all(f, items[i].data, nbytes[i]);
        if (!ok) fail(err, errcap, "writing '%s' failed: %s", tmp, strerror(errno));
    }
    if (ok && fflush(f) != 0) ok = fail(err, errcap, "writing '%s' failed: %s", tmp, strerror(errno));
    if (ok && fsync(fileno(f)) != 0) ok = fail(err, errcap, "fsync of '%s' failed: %s", tmp, strerror(errno));
    if (f) {
        int rc = fclose(f);
        if (rc != 0 && ok) ok = fail(err, errcap, "closing '%s' failed: %s", tmp, strerror(errno));
    }
    if (ok && rename(tmp, path) != 0) ok = fail(err, errcap, "renaming '%s' to '%s' failed: %s", tmp, path, strerror(errno));
    if (ok) {
        ok = sync_directory(path, err, errcap);
    } else if (created && unlink(tmp) != 0 && err && errcap > 0) {
        size_t len = strlen(err);
        snprintf(err + len, (size_t)errcap - len, " (and removing it failed: %s)", strerror(errno));
    }
    free(h.p);
    free(tmp);
    free(nbytes);
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
