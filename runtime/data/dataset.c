/* runtime/data/dataset.c — data YAML -> Dataset (training-semantics §2.1-2.2):
 * resolves `path`, collects the image lists, probes every image and parses
 * its label file, one warning per problem. Must not touch pixels beyond
 * image_probe, augmentation or batching. */
#include "dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../compiler/yaml_doc.h"
#include "image_io.h"

enum { MAX_WARN_PER_FILE = 20, MAX_WALK_DEPTH = 32, MIN_IMAGE_SIDE = 10, SHOWN = 256 };
#define LIST_MAX_BYTES ((size_t)256 << 20)

/* Copies s for a one-line message: control bytes become '?', long text is cut. */
static const char *shown(const char *s, size_t n, char out[SHOWN]) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 4 < SHOWN; i++) out[k++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7F ? '?' : s[i];
    if (k + 4 >= SHOWN && n > k) memcpy(out + k, "...", 3), k += 3;
    out[k] = 0;
    return out;
}

/* ---------------------------------------------------------------- labels */

typedef struct LabelCtx {
    const char *fname;
    FILE *warn;
    DataIssues *iss;
    int shown, hidden;
} LabelCtx;

__attribute__((format(printf, 4, 5))) static void lwarn(LabelCtx *c, int *counter, int line, const char *fmt, ...) {
    (*counter)++;
    if (!c->warn) return;
    if (c->shown >= MAX_WARN_PER_FILE) {
        c->hidden++;
        return;
    }
    c->shown++;
    fprintf(c->warn, "%s:%d: warning: ", c->fname, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(c->warn, fmt, ap);
    va_end(ap);
    fputc('\n', c->warn);
}

static bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' || ch == '\f'; }

/* Next whitespace-separated token of [*p, end). */
static bool next_tok(const char **p, const char *end, const char **t, size_t *tl) {
    const char *s = *p;
    while (s < end && is_space(*s)) s++;
    if (s == end) return false;
    const char *e = s;
    while (e < end && !is_space(*e)) e++;
    *t = s, *tl = (size_t)(e - s), *p = e;
    return true;
}

/* A decimal number using the whole token (no hex, inf or nan). */
static bool parse_num(const char *t, size_t n, double *v) {
    if (n == 0 || n > 63) return false;
    char buf[64];
    for (size_t i = 0; i < n; i++) {
        if (!strchr("0123456789+-.eE", t[i]) || t[i] == 0) return false;
        buf[i] = t[i];
    }
    buf[n] = 0;
    char *end;
    errno = 0;
    *v = strtod(buf, &end);
    return end == buf + n && isfinite(*v);
}

static const char *const BOX_FIELDS[4] = {"x_center", "y_center", "width", "height"};

/* One non-blank line -> *lab; false (with one warning) when it is bad. */
static bool parse_line(LabelCtx *c, const char *s, const char *end, int ln, int nc, Label *lab) {
    char sh[SHOWN];
    if (end - s > DATASET_MAX_LINE_BYTES) {
        lwarn(c, &c->iss->bad_lines, ln, "line longer than %d bytes; skipped", DATASET_MAX_LINE_BYTES);
        return false;
    }
    const char *p = s, *t = NULL;
    size_t tl = 0;
    long n = 0;
    double v;
    while (next_tok(&p, end, &t, &tl)) {
        if (!parse_num(t, tl, &v)) {
            lwarn(c, &c->iss->bad_lines, ln, "'%s' is not a number; line skipped", shown(t, tl, sh));
            return false;
        }
        n++;
    }
    if (n != 5 && (n < 7 || n % 2 == 0)) {
        if (n >= 7)
            lwarn(c, &c->iss->bad_lines, ln, "polygon with an odd number of coordinates (%ld); line skipped", n - 1);
        else
            lwarn(c, &c->iss->bad_lines, ln, "%ld values; expected 5 (class x_center y_center width height) or a polygon (class x1 y1 x2 y2 x3 y3 ...); line skipped", n);
        return false;
    }
    p = s;
    next_tok(&p, end, &t, &tl);
    parse_num(t, tl, &v);
    if (v != floor(v)) {
        lwarn(c, &c->iss->bad_classes, ln, "class %s is not an integer; line skipped", shown(t, tl, sh));
        return false;
    }
    if (v < 0 || v >= nc) {
        lwarn(c, &c->iss->bad_classes, ln, "class %s outside [0, %d); line skipped", shown(t, tl, sh), nc);
        return false;
    }
    lab->cls = (int)v;
    float lo[2] = {1, 1}, hi[2] = {0, 0}, box[4] = {0};
    for (long i = 0; i < n - 1; i++) {
        next_tok(&p, end, &t, &tl);
        parse_num(t, tl, &v);
        float f = (float)v + 0.0f;   /* -0 and 0 are the same coordinate */
        if (!(f >= 0 && f <= 1)) {
            lwarn(c, &c->iss->bad_coords, ln, "%s %s outside [0, 1]; line skipped", n == 5 ? BOX_FIELDS[i] : "coordinate", shown(t, tl, sh));
            return false;
        }
        if (n == 5) box[i] = f;
        if (f < lo[i % 2]) lo[i % 2] = f;
        if (f > hi[i % 2]) hi[i % 2] = f;
    }
    if (n == 5) {
        for (int i = 2; i < 4; i++)
            if (box[i] <= 0) {
                lwarn(c, &c->iss->bad_coords, ln, "%s is 0; line skipped", BOX_FIELDS[i]);
                return false;
            }
        *lab = (Label){lab->cls, box[0], box[1], box[2], box[3]};
        return true;
    }
    if (hi[0] <= lo[0] || hi[1] <= lo[1]) {
        lwarn(c, &c->iss->bad_coords, ln, "polygon has zero width or height; line skipped");
        return false;
    }
    *lab = (Label){lab->cls, (lo[0] + hi[0]) / 2, (lo[1] + hi[1]) / 2, hi[0] - lo[0], hi[1] - lo[1]};
    return true;
}

static uint64_t label_hash(const Label *l) {
    uint32_t w[5];
    w[0] = (uint32_t)l->cls;
    memcpy(&w[1], &l->cx, 4), memcpy(&w[2], &l->cy, 4), memcpy(&w[3], &l->w, 4), memcpy(&w[4], &l->h, 4);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 5; i++) h = (h ^ w[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Removes repeated rows (Ultralytics compares the parsed values), keeping
 * the first of each. */
static bool dedupe(LabelCtx *c, Label *labs, const int *lines, int *n) {
    size_t cap = 16;
    while (cap < 2 * (size_t)*n) cap *= 2;
    int *slot = malloc(cap * sizeof *slot);
    if (!slot) return false;
    for (size_t i = 0; i < cap; i++) slot[i] = -1;
    int kept = 0;
    int *first = malloc((size_t)*n * sizeof *first + 1);
    if (!first) return free(slot), false;
    for (int i = 0; i < *n; i++) {
        size_t at = label_hash(&labs[i]) & (cap - 1);
        bool dup = false;
        for (; slot[at] >= 0; at = (at + 1) & (cap - 1)) {
            const Label *o = &labs[slot[at]];
            if (o->cls == labs[i].cls && o->cx == labs[i].cx && o->cy == labs[i].cy && o->w == labs[i].w && o->h == labs[i].h) {
                dup = true;
                break;
            }
        }
        if (dup) {
            lwarn(c, &c->iss->duplicate_lines, lines[i], "duplicate of line %d; removed", first[slot[at]]);
            continue;
        }
        labs[kept] = labs[i];
        first[kept] = lines[i];
        slot[at] = kept++;
    }
    free(slot);
    free(first);
    *n = kept;
    return true;
}

bool dataset_parse_labels(const char *text, size_t len, const char *fname, int nc, Label **out, int *n, DataIssues *iss, FILE *warn) {
    *out = NULL;
    *n = 0;
    char name[SHOWN];
    LabelCtx c = {shown(fname, strlen(fname), name), warn, iss, 0, 0};
    const char *s = text, *end = text + len;
    if (len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;
    Label *labs = NULL;
    int *lines = NULL, cnt = 0, cap = 0;
    bool ok = true;
    for (int ln = 1; s < end; ln++) {
        const char *nl = memchr(s, '\n', (size_t)(end - s)), *le = nl ? nl : end, *p = s, *t;
        size_t tl;
        Label lab = {0};
        if (next_tok(&p, le, &t, &tl) && parse_line(&c, s, le, ln, nc, &lab)) {
            if (cnt == cap) {
                int ncap = cap ? 2 * cap : 16;
                Label *nl2 = realloc(labs, (size_t)ncap * sizeof *labs);
                if (nl2) labs = nl2;
                int *nli = nl2 ? realloc(lines, (size_t)ncap * sizeof *lines) : NULL;
                if (!nli) {
                    ok = false;
                    break;
                }
                lines = nli, cap = ncap;
            }
            labs[cnt] = lab;
            lines[cnt++] = ln;
        }
        s = nl ? nl + 1 : end;
    }
    if (ok && cnt > 1) ok = dedupe(&c, labs, lines, &cnt);
    free(lines);
    if (c.hidden && warn) fprintf(warn, "%s: warning: %d more problems in this file not shown\n", c.fname, c.hidden);
    if (!ok || cnt == 0) {
        free(labs);
        return ok;
    }
    *out = labs;
    *n = cnt;
    return true;
}

const char *dataset_file_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

char *dataset_label_path(const char *image) {
    size_t n = strlen(image);
    char *p = malloc(n + 8);
    if (!p) return NULL;
    memcpy(p, image, n + 1);
    char *at = NULL;
    for (char *q = strstr(p, "/images/"); q; q = strstr(q + 1, "/images/")) at = q;
    if (at) memcpy(at, "/labels/", 8);
    char *slash = strrchr(p, '/'), *dot = strrchr(p, '.');
    if (dot && (!slash || dot > slash)) *dot = 0;
    strcat(p, ".txt");
    return p;
}

/* ----------------------------------------------------------- image lists */

typedef struct StrList {
    char **v;
    int n, cap;
} StrList;

typedef struct Ctx {
    Diag d;
    Arena a;
    FILE *warn;
    const char *root;
    DatasetOptions o;
} Ctx;

static void sl_free(StrList *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    *l = (StrList){0};
}

/* Takes ownership of s. */
static bool sl_push(Ctx *c, StrList *l, char *s, Mark m) {
    if (!s) return diag_error(&c->d, m, "out of memory");
    if (l->n >= DATASET_MAX_IMAGES) {
        free(s);
        return diag_error(&c->d, m, "more than %d images", DATASET_MAX_IMAGES);
    }
    if (l->n == l->cap) {
        int ncap = l->cap ? 2 * l->cap : 256;
        char **nv = realloc(l->v, (size_t)ncap * sizeof *nv);
        if (!nv) {
            free(s);
            return diag_error(&c->d, m, "out of memory");
        }
        l->v = nv, l->cap = ncap;
    }
    l->v[l->n++] = s;
    return true;
}

static char *join(const char *dir, const char *rel) {
    while (rel[0] == '.' && rel[1] == '/') rel += 2;
    while (rel[0] == '/' && rel[1] == '/') rel++;
    if (rel[0] == '/') return strdup(rel);
    if (rel[0] == 0 || strcmp(rel, ".") == 0) return strdup(dir);
    size_t dl = strlen(dir), rl = strlen(rel);
    char *p = malloc(dl + rl + 2);
    if (!p) return NULL;
    memcpy(p, dir, dl);
    if (dl && dir[dl - 1] != '/') p[dl++] = '/';
    memcpy(p + dl, rel, rl + 1);
    return p;
}

static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

/* Whether path's last suffix (after its last '/') is one of suf, any case. */
static bool has_suffix(const char *path, const char *const *suf, size_t n) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash)) return false;
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(dot + 1, suf[i]) == 0) return true;
    return false;
}

bool dataset_is_image_path(const char *path) {
    static const char *const SUF[] = {"bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff", "webp", "pfm", "heic"};
    return has_suffix(path, SUF, sizeof SUF / sizeof SUF[0]);
}

bool dataset_is_video_path(const char *path) {
    static const char *const SUF[] = {"asf", "avi", "gif", "m4v", "mkv", "mov", "mp4", "mpeg", "mpg", "ts", "wmv", "webm"};
    return has_suffix(path, SUF, sizeof SUF / sizeof SUF[0]);
}

/* All image files below dir, as Python's glob("dir/ ** / *.*") sees them:
 * hidden names skipped, symlinks followed (depth-limited against loops). */
static bool walk(Ctx *c, const char *dir, int depth, StrList *out, Mark m) {
    char sh[SHOWN];
    if (depth > MAX_WALK_DEPTH)
        return diag_error(&c->d, m, "directories nested deeper than %d levels at %s (a symlink loop?)", MAX_WALK_DEPTH, shown(dir, strlen(dir), sh));
    DIR *d = opendir(dir);
    if (!d) return diag_error(&c->d, m, "cannot read directory %s: %s", shown(dir, strlen(dir), sh), strerror(errno));
    bool ok = true;
    for (struct dirent *e; ok && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char *p = join(dir, e->d_name);
        if (!p) {
            ok = diag_error(&c->d, m, "out of memory");
            break;
        }
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            ok = walk(c, p, depth + 1, out, m);
            free(p);
        } else if (dataset_is_image_path(p)) {
            ok = sl_push(c, out, p, m);
        } else {
            free(p);
        }
    }
    closedir(d);
    return ok;
}

/* A list file: one image per line; "./x" is relative to the list's folder. */
static bool read_list(Ctx *c, const char *path, off_t size, StrList *out, Mark m) {
    char sh[SHOWN];
    if ((unsigned long long)size > LIST_MAX_BYTES)
        return diag_error(&c->d, m, "image list %s is %lld bytes; the limit is %zu", shown(path, strlen(path), sh), (long long)size, LIST_MAX_BYTES);
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc((size_t)size + 1) : NULL;
    size_t n = buf ? fread(buf, 1, (size_t)size, f) : 0;
    const char *why = !f ? strerror(errno) : !buf ? "out of memory" : ferror(f) ? "read error" : NULL;
    if (f) fclose(f);
    if (why) {
        free(buf);
        return diag_error(&c->d, m, "cannot read image list %s: %s", shown(path, strlen(path), sh), why);
    }
    buf[n] = 0;
    char *parent = dir_of(path);
    bool ok = parent != NULL || diag_error(&c->d, m, "out of memory");
    for (char *s = buf; ok && s < buf + n;) {
        char *nl = memchr(s, '\n', (size_t)(buf + n - s)), *e = nl ? nl : buf + n;
        char *next = nl ? nl + 1 : buf + n;
        while (s < e && (is_space(*s) || *s == '\n')) s++;
        while (e > s && is_space(e[-1])) e--;
        bool has_nul = memchr(s, 0, (size_t)(e - s)) != NULL;
        *e = 0;
        if (s < e && !has_nul && dataset_is_image_path(s)) ok = sl_push(c, out, s[0] == '.' && s[1] == '/' ? join(parent, s) : strdup(s), m);
        s = next;
    }
    free(parent);
    free(buf);
    return ok;
}

static bool collect(Ctx *c, const YNode *entry, StrList *out) {
    char sh[SHOWN], sh2[SHOWN];
    if (entry->kind != YN_SCALAR || entry->len == 0 || memchr(entry->str, 0, entry->len))
        return diag_error(&c->d, entry->mark, "expected a directory or image-list path");
    char *p = join(c->root, entry->str);
    struct stat st;
    int r = p ? stat(p, &st) : -1;
    if (p && r != 0 && strncmp(entry->str, "../", 3) == 0) {
        char *q = join(c->root, entry->str + 3);
        if (q && stat(q, &st) == 0) free(p), p = q, r = 0;
        else free(q);
    }
    if (!p) return diag_error(&c->d, entry->mark, "out of memory");
    bool ok;
    if (r != 0)
        ok = diag_error(&c->d, entry->mark, "'%s' does not exist (looked for %s)", shown(entry->str, entry->len, sh), shown(p, strlen(p), sh2));
    else if (S_ISDIR(st.st_mode))
        ok = walk(c, p, 0, out, entry->mark);
    else if (S_ISREG(st.st_mode))
        ok = read_list(c, p, st.st_size, out, entry->mark);
    else
        ok = diag_error(&c->d, entry->mark, "%s is neither a directory nor a file", shown(p, strlen(p), sh));
    free(p);
    return ok;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* ---------------------------------------------------------------- samples */

typedef enum { KEEP, SKIP, FAIL } Verdict;

static Verdict read_labels(Ctx *c, const char *img, int nc, Sample *s, DataSplit *sp) {
    char sh[SHOWN];
    char *lp = dataset_label_path(img);
    if (!lp) return diag_error(&c->d, (Mark){0, 0}, "out of memory"), FAIL;
    Verdict v = KEEP;
    char *text = NULL;
    const char *why = NULL;
    int fd = open(lp, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        if (errno != ENOENT && errno != ENOTDIR) why = strerror(errno);
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        why = "not a regular file";
    } else if ((size_t)st.st_size > DATASET_MAX_LABEL_BYTES) {
        why = "over the 16 MiB limit";
    } else if (!(text = malloc((size_t)st.st_size + 1))) {
        v = FAIL;
        diag_error(&c->d, (Mark){0, 0}, "out of memory");
    } else {
        size_t got = 0, want = (size_t)st.st_size;
        while (got < want) {
            ssize_t r = read(fd, text + got, want - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got != want) why = "read error or file changed while being read";
        else if (!dataset_parse_labels(text, got, lp, nc, &s->labels, &s->n_labels, &sp->issues, c->warn))
            v = FAIL, diag_error(&c->d, (Mark){0, 0}, "out of memory");
    }
    if (why) {
        sp->issues.unreadable_labels++;
        if (c->warn) fprintf(c->warn, "%s: warning: cannot read label file (%s); image skipped\n", shown(lp, strlen(lp), sh), why);
        v = SKIP;
    }
    if (fd >= 0) close(fd);
    free(text);
    free(lp);
    return v;
}

/* Validates one listed image; on KEEP, *s owns path. */
static Verdict load_sample(Ctx *c, char *path, int nc, Sample *s, DataSplit *sp) {
    char sh[SHOWN], e[512];
    *s = (Sample){0};
    const char *pshown = shown(path, strlen(path), sh);
    struct stat st;
    if (stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)) {
        sp->issues.missing_images++;
        if (c->warn) fprintf(c->warn, "%s: warning: image not found; skipped\n", pshown);
        return SKIP;
    }
    if (!image_probe(path, &s->w, &s->h, e, sizeof e)) {
        size_t pl = strlen(path);
        const char *why = strncmp(e, path, pl) == 0 && e[pl] == ':' ? e + pl + 2 : e;
        sp->issues.unreadable_images++;
        if (c->warn) fprintf(c->warn, "%s: warning: unreadable image (%s); skipped\n", pshown, why);
        return SKIP;
    }
    if (s->w < MIN_IMAGE_SIDE || s->h < MIN_IMAGE_SIDE) {
        sp->issues.unreadable_images++;
        if (c->warn) fprintf(c->warn, "%s: warning: image is %dx%d, under %d pixels a side; skipped\n", pshown, s->w, s->h, MIN_IMAGE_SIDE);
        return SKIP;
    }
    /* single-class training reads any class and makes it 0 (Ultralytics checks no bound then) */
    Verdict v = read_labels(c, path, c->o.single_cls ? INT_MAX : nc, s, sp);
    for (int i = 0; v == KEEP && c->o.single_cls && i < s->n_labels; i++) s->labels[i].cls = 0;
    if (v == KEEP) s->image = path;
    return v;
}

/* Python's round(x) for the image count: halves to even, as Ultralytics' fraction rounds. */
static int round_half_even(double x) {
    double f = floor(x), d = x - f;
    if (d > 0.5 || (d == 0.5 && fmod(f, 2) != 0)) f += 1;
    return (int)f;
}

static bool load_split(Ctx *c, const char *key, const YNode *node, int nc, DataSplit *sp) {
    StrList l = {0};
    bool ok = true;
    if (node->kind == YN_SEQ) {
        if (node->n == 0) ok = diag_error(&c->d, node->mark, "'%s' is an empty list", key);
        for (int i = 0; ok && i < node->n; i++) ok = collect(c, node->items[i], &l);
    } else if (node->kind == YN_SCALAR) {
        ok = collect(c, node, &l);
        if (ok && !memchr(node->str, 0, node->len) && !(sp->source = join(c->root, node->str))) ok = diag_error(&c->d, node->mark, "out of memory");
    } else {
        ok = diag_error(&c->d, node->mark, "'%s' must be a path or a list of paths", key);
    }
    if (!ok) return sl_free(&l), false;
    if (l.n > 0) qsort(l.v, (size_t)l.n, sizeof *l.v, cmp_str); /* an empty list has no array */
    /* Ultralytics' fraction cuts the sorted list before any image is checked, and only the training one */
    if (strcmp(key, "train") == 0 && c->o.fraction < 1) {
        int keep = round_half_even(l.n * c->o.fraction);
        int listed = l.n;
        for (int i = keep; i < l.n; i++) free(l.v[i]);
        l.n = keep;
        if (keep == 0) {
            sl_free(&l);
            return diag_error(&c->d, node->mark, "'%s': a fraction of %g keeps none of its %d images", key, c->o.fraction, listed);
        }
    }
    sp->samples = calloc((size_t)l.n + 1, sizeof *sp->samples);
    if (!sp->samples) return sl_free(&l), diag_error(&c->d, node->mark, "out of memory");
    for (int i = 0; ok && i < l.n; i++) {
        Sample *s = &sp->samples[sp->n];
        Verdict v = load_sample(c, l.v[i], nc, s, sp);
        if (v == KEEP) {
            l.v[i] = NULL;
            sp->n++;
            sp->n_labels += s->n_labels;
            sp->backgrounds += s->n_labels == 0;
        } else {
            free(s->labels);
            *s = (Sample){0};
            ok = v != FAIL;
        }
    }
    int listed = l.n;
    sl_free(&l);
    if (ok && sp->n == 0)
        ok = diag_error(&c->d, node->mark, "'%s' has no usable images (%d listed, all skipped)", key, listed);
    return ok;
}

/* ---------------------------------------------------------------- names */

static bool scalar_int(const YNode *n, long long *v) {
    if (!n || n->kind != YN_SCALAR || n->len == 0 || n->len > 18) return false;
    size_t i = n->str[0] == '-' || n->str[0] == '+';
    if (i == n->len) return false;
    for (size_t k = i; k < n->len; k++)
        if (n->str[k] < '0' || n->str[k] > '9') return false;
    *v = strtoll(n->str, NULL, 10);
    return true;
}

static bool load_names(Ctx *c, const YNode *root, Dataset *ds) {
    const YNode *names = yaml_map_get(root, "names"), *ncn = yaml_map_get(root, "nc");
    long long nc = -1;
    if (ncn && (!scalar_int(ncn, &nc) || nc < 1 || nc > DATASET_MAX_CLASSES))
        return diag_error(&c->d, ncn->mark, "'nc' must be an integer in 1..%d", DATASET_MAX_CLASSES);
    if (!names && nc < 0) return diag_error(&c->d, root->mark, "needs 'names' (or 'nc')");
    int n = names ? names->n : (int)nc;
    if (names && names->kind == YN_SCALAR) return diag_error(&c->d, names->mark, "'names' must be a list or a mapping of class index to name");
    if (names && (n < 1 || n > DATASET_MAX_CLASSES)) return diag_error(&c->d, names->mark, "'names' must have 1..%d entries", DATASET_MAX_CLASSES);
    if (names && nc >= 0 && nc != n) return diag_error(&c->d, names->mark, "'names' has %d entries but 'nc' is %lld; they must match", n, nc);
    ds->names = calloc((size_t)n, sizeof *ds->names);
    if (!ds->names) return diag_error(&c->d, root->mark, "out of memory");
    ds->nc = n;
    for (int i = 0; i < n; i++) {
        if (!names) {
            char b[32];
            snprintf(b, sizeof b, "class_%d", i);
            if (!(ds->names[i] = strdup(b))) return diag_error(&c->d, root->mark, "out of memory");
            continue;
        }
        long long k = i;
        if (names->kind == YN_MAP && (!scalar_int(names->keys[i], &k) || k < 0 || k >= n))
            return diag_error(&c->d, names->keys[i]->mark, "class index must be an integer in 0..%d for %d names", n - 1, n);
        const YNode *v = names->items[i];
        if (v->kind != YN_SCALAR) return diag_error(&c->d, v->mark, "a class name must be a string");
        if (ds->names[k]) return diag_error(&c->d, names->keys[i]->mark, "class index %lld given twice", k);
        if (!(ds->names[k] = strndup(v->str, v->len))) return diag_error(&c->d, v->mark, "out of memory");
    }
    return true;
}

/* ------------------------------------------------------------------ load */

static bool load_all(Ctx *c, const char *yaml_path, const YNode *root, Dataset *ds) {
    if (root->kind != YN_MAP) return diag_error(&c->d, root->mark, "a dataset YAML must be a mapping (path, train, val, names)");
    if (!(ds->yaml_path = strdup(yaml_path))) return diag_error(&c->d, root->mark, "out of memory");
    const YNode *path = yaml_map_get(root, "path");
    if (path && path->kind != YN_SCALAR) return diag_error(&c->d, path->mark, "'path' must be a directory");
    char *ydir = dir_of(yaml_path);
    if (!ydir) return diag_error(&c->d, root->mark, "out of memory");
    /* relative to the YAML, not to Ultralytics' settings dir (dataset.h) */
    ds->root = path && path->len ? join(ydir, path->str) : strdup(ydir);
    free(ydir);
    if (!ds->root) return diag_error(&c->d, root->mark, "out of memory");
    c->root = ds->root;
    const YNode *train = yaml_map_get(root, "train"), *val = yaml_map_get(root, "val"), *test = yaml_map_get(root, "test");
    if (!val) val = yaml_map_get(root, "validation");
    if (!train) return diag_error(&c->d, root->mark, "'train:' key missing; 'train' and 'val' are required");
    if (!val) return diag_error(&c->d, root->mark, "'val:' key missing; 'train' and 'val' are required");
    /* `test:` is optional and often left empty (null) */
    if (yaml_is_null(test)) test = NULL;
    if ((c->o.splits & DATASET_TEST) && !test) return diag_error(&c->d, root->mark, "no 'test:' split in this dataset YAML (only train and val)");
    if (!load_names(c, root, ds)) return false;
    int nc = ds->nc;
    if (c->o.single_cls) {
        /* Ultralytics' single_cls: one class named "item", whatever the YAML names */
        for (int i = 0; i < ds->nc; i++) {
            free(ds->names[i]);
            ds->names[i] = NULL;
        }
        ds->nc = 1;
        if (!(ds->names[0] = strdup("item"))) return diag_error(&c->d, root->mark, "out of memory");
    }
    return (!(c->o.splits & DATASET_TRAIN) || load_split(c, "train", train, nc, &ds->train)) &&
           (!(c->o.splits & DATASET_VAL) || load_split(c, "val", val, nc, &ds->val)) && (!(c->o.splits & DATASET_TEST) || load_split(c, "test", test, nc, &ds->test));
}

bool dataset_load(const char *yaml_path, const DatasetOptions *o, Dataset *ds, FILE *warn, char *err, int errcap) {
    memset(ds, 0, sizeof *ds);
    Ctx c = {.warn = warn, .o = o ? *o : (DatasetOptions){0}};
    if (!c.o.splits) c.o.splits = DATASET_TRAIN | DATASET_VAL;
    if (!(c.o.fraction > 0 && c.o.fraction < 1)) c.o.fraction = 1;
    diag_init(&c.d, yaml_path);
    arena_init(&c.a, 0);
    size_t len = 0;
    char *buf = yaml_read_file(&c.a, yaml_path, &len, &c.d);
    const YNode *root = buf ? yaml_doc_parse(&c.a, buf, len, &c.d) : NULL;
    bool ok = root && load_all(&c, yaml_path, root, ds);
    if (!ok) {
        char sh[SHOWN];
        c.d.file = shown(yaml_path, strlen(yaml_path), sh);
        diag_format(&c.d, err, errcap);
        dataset_free(ds);
    }
    arena_free(&c.a);
    return ok;
}

static void split_free(DataSplit *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->samples[i].image);
        free(s->samples[i].labels);
    }
    free(s->samples);
    free(s->source);
    *s = (DataSplit){0};
}

void dataset_free(Dataset *ds) {
    split_free(&ds->train);
    split_free(&ds->val);
    split_free(&ds->test);
    for (int i = 0; ds->names && i < ds->nc; i++) free(ds->names[i]);
    free(ds->names);
    free(ds->yaml_path);
    free(ds->root);
    memset(ds, 0, sizeof *ds);
}

void dataset_issues_format(const char *split_name, const DataSplit *s, char *out, int cap) {
    if (cap <= 0) return;
    const DataIssues *i = &s->issues;
    const struct {
        int n;
        const char *one, *many;
    } parts[] = {
        {i->missing_images, "missing image", "missing images"},
        {i->unreadable_images, "unreadable image", "unreadable images"},
        {i->unreadable_labels, "unreadable label file", "unreadable label files"},
        {i->bad_lines, "bad label line", "bad label lines"},
        {i->bad_classes, "label with a bad class", "labels with a bad class"},
        {i->bad_coords, "label with bad coordinates", "labels with bad coordinates"},
        {i->duplicate_lines, "duplicate label", "duplicate labels"},
    };
    int used = snprintf(out, (size_t)cap, "%s: %d images (%d backgrounds), %d boxes", split_name, s->n, s->backgrounds, s->n_labels);
    const char *sep = "; skipped ";
    for (size_t k = 0; k < sizeof parts / sizeof parts[0] && used >= 0 && used < cap; k++) {
        if (!parts[k].n) continue;
        used += snprintf(out + used, (size_t)(cap - used), "%s%d %s", sep, parts[k].n, parts[k].n == 1 ? parts[k].one : parts[k].many);
        sep = ", ";
    }
}
