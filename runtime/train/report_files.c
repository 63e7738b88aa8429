/* runtime/train/report_files.c — run directories, results.csv (atomic
 * append, strict reader) and args.yaml (libyaml emitter). Owns these only; must not
 * touch checkpoints, the console or the values' meaning (the trainer's). */
#include "../../ir/diag.h"
#include "report.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "../../ir/strbuf.h"

#define CSV_MAX_BYTES (64u << 20)   /* one row per epoch: anything this big is not ours */

const char *const results_csv_columns[RESULTS_NCOLS] = {
    "epoch",
    "time",
    "train/box_loss",
    "train/cls_loss",
    "train/dfl_loss",
    "metrics/precision(B)",
    "metrics/recall(B)",
    "metrics/mAP50(B)",
    "metrics/mAP50-95(B)",
    "val/box_loss",
    "val/cls_loss",
    "val/dfl_loss",
    "lr/pg0",
    "lr/pg1",
    "lr/pg2",
};


/* ---- a growable byte buffer ---------------------------------------------- */

/* Reads a whole regular file. *missing is set (and false returned) when it
 * does not exist, so callers can tell "new file" from a failure. */
static bool slurp(const char *path, StrBuf *out, bool *missing, char *err, int errcap) {
    *missing = false;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) *missing = true;
        return errf(err, errcap, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int e = errno;
        fclose(f);
        return errf(err, errcap, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fclose(f);
        return errf(err, errcap, "%s: not a regular file", path);
    }
    if ((uintmax_t)st.st_size > CSV_MAX_BYTES) {
        fclose(f);
        return errf(err, errcap, "%s: %jd bytes, more than a results file can hold (%u)", path,
                    (intmax_t)st.st_size, CSV_MAX_BYTES);
    }
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        strbuf_add(out, chunk, n);
        if (out->len > CSV_MAX_BYTES) break;
    }
    bool bad = ferror(f) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = true;
        e = errno;
    }
    if (bad) return errf(err, errcap, "cannot read %s: %s", path, strerror(e));
    if (out->oom) return errf(err, errcap, "out of memory reading %s", path);
    if (out->len > CSV_MAX_BYTES) return errf(err, errcap, "%s: grew past %u bytes while reading", path, CSV_MAX_BYTES);
    return true;
}

/* ---- results.csv ----------------------------------------------------------- */

void results_format_value(double v, char *buf, size_t cap) {
    if (isnan(v)) snprintf(buf, cap, "nan");
    else snprintf(buf, cap, "%.6g", v);
}

/* Python's round(x, nd): the exact binary value rounded half to even, which
 * is what glibc's %.*f produces; strtod brings the decimal back exactly. */
static double round_decimals(double x, int nd) {
    if (!isfinite(x) || fabs(x) >= 1e15) return x;
    char s[64];
    snprintf(s, sizeof s, "%.*f", nd, x);
    return strtod(s, NULL);
}

static void format_row(StrBuf *b, const ResultsRow *r) {
    for (int c = 0; c < RESULTS_NCOLS; c++) {
        char v[48];
        results_format_value(r->v[c], v, sizeof v);
        if (c) strbuf_add(b, ",", 1);
        strbuf_add(b, v, strlen(v));
    }
    strbuf_add(b, "\n", 1);
}

static void format_header(StrBuf *b) {
    for (int c = 0; c < RESULTS_NCOLS; c++) {
        if (c) strbuf_add(b, ",", 1);
        strbuf_add(b, results_csv_columns[c], strlen(results_csv_columns[c]));
    }
    strbuf_add(b, "\n", 1);
}

static bool is_epoch(double e) { return isfinite(e) && e >= 1 && e <= 1e9 && e == floor(e); }

void results_table_free(ResultsTable *t) {
    if (!t) return;
    free(t->rows);
    t->rows = NULL;
    t->n = 0;
}

/* A field without the spaces around it (older Ultralytics padded them). */
static void trim(const char **s, const char **e) {
    while (*s < *e && (**s == ' ' || **s == '\t')) (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t')) (*e)--;
}

static void excerpt(const char *s, const char *e, char *out, size_t cap) {
    size_t n = (size_t)(e - s), j = 0;
    for (size_t i = 0; i < n && j + 4 < cap; i++)
        out[j++] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (n > cap - 5 && cap > 4) {
        out[j - 1] = '.';
        out[j - 2] = '.';
    }
    out[j] = 0;
}

static bool parse_header(const char *s, const char *e, const char *name, char *err, int errcap) {
    int col = 0;
    const char *f = s;
    for (const char *q = s;; q++) {
        if (q == e || *q == ',') {
            const char *fs = f, *fe = q;
            trim(&fs, &fe);
            char got[64];
            excerpt(fs, fe, got, sizeof got);
            if (col >= RESULTS_NCOLS)
                return errf(err, errcap, "%s:1: header has more than %d columns (extra '%s')", name, RESULTS_NCOLS,
                            got);
            const char *want = results_csv_columns[col];
            if ((size_t)(fe - fs) != strlen(want) || memcmp(fs, want, strlen(want)) != 0)
                return errf(err, errcap, "%s:1: header column %d is '%s', expected '%s'", name, col + 1, got, want);
            col++;
            if (q == e) break;
            f = q + 1;
        }
    }
    if (col != RESULTS_NCOLS)
        return errf(err, errcap, "%s:1: header has %d columns, expected %d (next: '%s')", name, col, RESULTS_NCOLS,
                    results_csv_columns[col]);
    return true;
}

static bool parse_row(const char *s, const char *e, const char *name, int line, ResultsRow *row, char *err,
                      int errcap) {
    int col = 0;
    const char *f = s;
    for (const char *q = s;; q++) {
        if (q == e || *q == ',') {
            if (col >= RESULTS_NCOLS)
                return errf(err, errcap, "%s:%d: more than %d values", name, line, RESULTS_NCOLS);
            const char *fs = f, *fe = q;
            trim(&fs, &fe);
            char tmp[64], shown[40];
            excerpt(fs, fe, shown, sizeof shown);
            if (fs == fe)
                return errf(err, errcap, "%s:%d: %s is empty", name, line, results_csv_columns[col]);
            if ((size_t)(fe - fs) >= sizeof tmp)
                return errf(err, errcap, "%s:%d: %s: '%s' is not a number", name, line, results_csv_columns[col],
                            shown);
            memcpy(tmp, fs, (size_t)(fe - fs));
            tmp[fe - fs] = 0;
            char *end;
            errno = 0;
            double v = strtod(tmp, &end);
            /* ERANGE on underflow still gives the nearest value; only the
             * syntax decides here */
            if (end == tmp || *end)
                return errf(err, errcap, "%s:%d: %s: '%s' is not a number", name, line, results_csv_columns[col],
                            shown);
            row->v[col++] = v;
            if (q == e) break;
            f = q + 1;
        }
    }
    if (col != RESULTS_NCOLS)
        return errf(err, errcap, "%s:%d: %d values, expected %d (a cut-off row?)", name, line, col, RESULTS_NCOLS);
    return true;
}

bool results_csv_parse(const char *text, size_t len, const char *name, ResultsTable *out, char *err, int errcap) {
    out->n = 0;
    out->rows = NULL;
    if (memchr(text, 0, len)) {
        const char *z = memchr(text, 0, len);
        int line = 1;
        for (const char *q = text; q < z; q++) line += *q == '\n';
        return errf(err, errcap, "%s:%d: NUL byte (binary data?)", name, line);
    }
    const char *p = text, *end = text + len;
    int line = 0, cap = 0;
    bool have_header = false;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        line++;
        if (le > p && le[-1] == '\r') le--;
        const char *bs = p, *be = le;
        trim(&bs, &be);
        p = next;
        if (bs == be) {
            if (!have_header && line == 1) {
                results_table_free(out);
                return errf(err, errcap, "%s:1: empty first line, expected the header", name);
            }
            continue;
        }
        if (!have_header) {
            if (!parse_header(bs, be, name, err, errcap)) return false;
            have_header = true;
            continue;
        }
        ResultsRow row;
        if (!parse_row(bs, be, name, line, &row, err, errcap)) {
            results_table_free(out);
            return false;
        }
        double ep = row.v[RESULTS_EPOCH];
        if (!is_epoch(ep)) {
            results_table_free(out);
            return errf(err, errcap, "%s:%d: epoch %.17g is not an integer >= 1", name, line, ep);
        }
        if (out->n > 0 && ep <= out->rows[out->n - 1].v[RESULTS_EPOCH]) {
            double prev = out->rows[out->n - 1].v[RESULTS_EPOCH];
            results_table_free(out);
            return errf(err, errcap, "%s:%d: epoch %.0f after epoch %.0f (epochs must increase)", name, line, ep,
                        prev);
        }
        if (out->n == cap) {
            int nc = cap ? cap * 2 : 16;
            ResultsRow *nr = realloc(out->rows, (size_t)nc * sizeof *nr);
            if (!nr) {
                results_table_free(out);
                return errf(err, errcap, "out of memory reading %s", name);
            }
            out->rows = nr;
            cap = nc;
        }
        out->rows[out->n++] = row;
    }
    if (!have_header) return errf(err, errcap, "%s:1: empty file, expected the header", name);
    return true;
}

bool results_csv_read(const char *path, ResultsTable *out, char *err, int errcap) {
    out->n = 0;
    out->rows = NULL;
    StrBuf b = {0};
    bool missing;
    if (!slurp(path, &b, &missing, err, errcap)) {
        free(b.p);
        return false;
    }
    bool ok = results_csv_parse(b.p ? b.p : "", b.len, path, out, err, errcap);
    free(b.p);
    return ok;
}

bool results_csv_append(const char *path, const ResultsRow *row, char *err, int errcap) {
    double ep = row->v[RESULTS_EPOCH];
    if (!is_epoch(ep)) return errf(err, errcap, "%s: epoch %.17g is not an integer >= 1", path, ep);
    ResultsTable old = {0};
    StrBuf in = {0};
    bool missing;
    if (!slurp(path, &in, &missing, err, errcap)) {
        free(in.p);
        if (!missing) return false;
    } else {
        bool ok = results_csv_parse(in.p ? in.p : "", in.len, path, &old, err, errcap);
        free(in.p);
        if (!ok) return false;
    }
    ResultsRow r = *row;
    r.v[RESULTS_TRAIN_BOX] = round_decimals(r.v[RESULTS_TRAIN_BOX], 5);
    r.v[RESULTS_TRAIN_CLS] = round_decimals(r.v[RESULTS_TRAIN_CLS], 5);
    r.v[RESULTS_TRAIN_DFL] = round_decimals(r.v[RESULTS_TRAIN_DFL], 5);
    StrBuf out = {0};
    format_header(&out);
    for (int i = 0; i < old.n && old.rows[i].v[RESULTS_EPOCH] < ep; i++) format_row(&out, &old.rows[i]);
    format_row(&out, &r);
    results_table_free(&old);
    return strbuf_write_atomic(&out, path, err, errcap);
}

/* ---- args.yaml ------------------------------------------------------------- */

static bool is_int_text(const char *s) {
    if (*s == '-' || *s == '+') s++;
    if (!*s) return false;
    if (s[0] == '0') return s[1] == 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s)) return false;
    return true;
}

/* [-+]?(digits[.digits?]|.digits)([eE][-+]?digits)?, with a '.' or exponent
 * (plain digits are ints or, with a leading zero, strings). */
static bool is_float_text(const char *s) {
    if (*s == '-' || *s == '+') s++;
    int before = 0, after = 0;
    bool dot = false, exp = false;
    while (isdigit((unsigned char)*s)) s++, before++;
    if (*s == '.') {
        dot = true;
        s++;
        while (isdigit((unsigned char)*s)) s++, after++;
    }
    if (before + after == 0) return false;
    if (*s == 'e' || *s == 'E') {
        exp = true;
        s++;
        if (*s == '-' || *s == '+') s++;
        if (!isdigit((unsigned char)*s)) return false;
        while (isdigit((unsigned char)*s)) s++;
    }
    return !*s && (dot || exp);
}

/* "inf", "-inf", "nan" as C and Python print them (any case). */
static int special_float(const char *s) {
    int sign = 1;
    if (*s == '-' || *s == '+') sign = *s++ == '-' ? -1 : 1;
    if (!strcasecmp(s, "inf") || !strcasecmp(s, "infinity")) return sign * 2;
    if (!strcasecmp(s, "nan")) return 3;
    return 0;
}

/* The float as PyYAML writes one: a '.' before the exponent and a signed
 * exponent, which YAML 1.1's float pattern needs ("1e-05" would read back
 * as a string there). */
static void yaml_float(const char *s, char *out, size_t cap) {
    int sp = special_float(s);
    if (sp) {
        snprintf(out, cap, "%s", sp == 3 ? ".nan" : sp > 0 ? ".inf" : "-.inf");
        return;
    }
    size_t j = 0;
    bool dot = strchr(s, '.') != NULL;
    for (const char *q = s; *q && j + 4 < cap; q++) {
        if (*q == 'e' || *q == 'E') {
            if (!dot) {
                out[j++] = '.';
                out[j++] = '0';
            }
            out[j++] = 'e';
            if (q[1] != '-' && q[1] != '+') out[j++] = '+';
            continue;
        }
        out[j++] = *q;
    }
    out[j] = 0;
}

/* Would a YAML reader (1.1 as PyYAML resolves, or 1.2 core) turn this plain
 * scalar into something other than a string? A superset on purpose: quoting a
 * string that would have read back fine costs nothing. Every number,
 * timestamp and sexagesimal form starts with an optional sign and then a
 * digit or '.'. */
static bool resolves_to_non_string(const char *s) {
    static const char *const words[] = {"null", "~",  "true", "false", "yes", "no", "on",
                                        "off",  "y",  "n",    "=",     "<<"};
    if (!*s) return true;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (!strcasecmp(s, words[i])) return true;
    const char *q = s;
    if (*q == '-' || *q == '+') q++;
    return isdigit((unsigned char)*q) || *q == '.';
}

static int yaml_write_handler(void *data, unsigned char *buffer, size_t size) {
    StrBuf *b = data;
    strbuf_add(b, (const char *)buffer, size);
    return !b->oom;
}

static bool emit_scalar(yaml_emitter_t *em, const char *text, yaml_scalar_style_t style) {
    yaml_event_t ev;
    if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)text, (int)strlen(text), 1, 1, style))
        return false;
    return yaml_emitter_emit(em, &ev) != 0;
}

static bool emit_value(yaml_emitter_t *em, const char *v) {
    if (!v) return emit_scalar(em, "null", YAML_PLAIN_SCALAR_STYLE);
    if (!strcmp(v, "true") || !strcmp(v, "false") || is_int_text(v))
        return emit_scalar(em, v, YAML_PLAIN_SCALAR_STYLE);
    if (is_float_text(v) || special_float(v)) {
        char f[96];
        yaml_float(v, f, sizeof f);
        return emit_scalar(em, f, YAML_PLAIN_SCALAR_STYLE);
    }
    /* libyaml itself falls back from plain to single to double quotes when
     * the text needs it (indicators, ': ', '#', edge spaces, control bytes);
     * only the type resolution it does not know about is decided here */
    return emit_scalar(em, v, resolves_to_non_string(v) ? YAML_SINGLE_QUOTED_SCALAR_STYLE : YAML_ANY_SCALAR_STYLE);
}

bool report_write_args_yaml(const char *path, const char *const *kv, char *err, int errcap) {
    for (int i = 0; kv[i]; i += 2)
        if (!kv[i][0]) return errf(err, errcap, "%s: argument %d has an empty key", path, i / 2 + 1);
    yaml_emitter_t em;
    if (!yaml_emitter_initialize(&em)) return errf(err, errcap, "%s: cannot initialise the YAML emitter", path);
    StrBuf out = {0};
    yaml_emitter_set_output(&em, yaml_write_handler, &out);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_width(&em, -1);   /* no folding of long values */
    yaml_emitter_set_break(&em, YAML_LN_BREAK);
    yaml_event_t ev;
    bool ok = yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING) && yaml_emitter_emit(&em, &ev);
    ok = ok && yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1) && yaml_emitter_emit(&em, &ev);
    ok = ok && yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE) &&
         yaml_emitter_emit(&em, &ev);
    int i = 0;
    for (; ok && kv[i]; i += 2) {
        ok = emit_scalar(&em, kv[i], resolves_to_non_string(kv[i]) ? YAML_SINGLE_QUOTED_SCALAR_STYLE
                                                                     : YAML_ANY_SCALAR_STYLE) &&
             emit_value(&em, kv[i + 1]);
    }
    ok = ok && yaml_mapping_end_event_initialize(&ev) && yaml_emitter_emit(&em, &ev);
    ok = ok && yaml_document_end_event_initialize(&ev, 1) && yaml_emitter_emit(&em, &ev);
    ok = ok && yaml_stream_end_event_initialize(&ev) && yaml_emitter_emit(&em, &ev);
    ok = ok && yaml_emitter_flush(&em);
    if (!ok) {
        const char *why = out.oom ? "out of memory" : em.problem ? em.problem : "text is not valid UTF-8";
        errf(err, errcap, "%s: cannot write YAML near argument %d: %s", path, i / 2 + 1, why);
        yaml_emitter_delete(&em);
        free(out.p);
        return false;
    }
    yaml_emitter_delete(&em);
    return strbuf_write_atomic(&out, path, err, errcap);
}

bool report_make_dir(const char *path, char *err, int errcap) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return true;
    snprintf(err, (size_t)errcap, "cannot create %s: %s", path, strerror(errno));
    return false;
}

bool report_run_dir(const char *project, const char *name, bool exist_ok, char *dir, size_t cap, char *err, int errcap) {
    char proj[1024];
    if ((size_t)snprintf(proj, sizeof proj, "%s", project) >= sizeof proj) return errf(err, errcap, "--project is longer than %zu bytes", sizeof proj - 1);
    for (char *p = proj + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (!report_make_dir(proj, err, errcap)) return false;
            *p = '/';
        }
    if (!report_make_dir(proj, err, errcap)) return false;
    struct stat st;
    for (int k = 1; k < 100000; k++) {
        if (k == 1) snprintf(dir, cap, "%s/%s", project, name);
        else snprintf(dir, cap, "%s/%s%d", project, name, k);
        if (exist_ok || stat(dir, &st) != 0) break;
    }
    return report_make_dir(dir, err, errcap);
}
