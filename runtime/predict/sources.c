/* runtime/predict/sources.c — Ultralytics' LoadImagesAndVideos listing: each
 * entry made absolute (pathlib's absolute(): "." and empty components
 * dropped, ".." kept), a pattern with '*' globbed, a directory's "*.*"
 * globbed, each list sorted as Python's sorted() sorts (code points, which
 * strcmp gives for UTF-8), then the files whose suffix is an image format
 * followed by those whose suffix is a video format. Must not decode or
 * write anything. */
#include "sources.h"

#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../ir/diag.h"
#include "../data/dataset.h"

void sources_free(Sources *s) {
    for (int i = 0; i < s->n; i++) free(s->path[i]);
    free(s->path);
    *s = (Sources){0};
}

static bool push(Sources *s, char *p) {
    char **q = p ? realloc(s->path, sizeof *q * ((size_t)s->n + 1)) : NULL;
    if (!q) {
        free(p);
        return false;
    }
    s->path = q;
    s->path[s->n++] = p;
    return true;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* pathlib's Path(p).absolute(): the working directory in front of a relative
 * path, then "." and empty components dropped */
static char *absolute(const char *p) {
    char cwd[4096] = "";
    if (p[0] != '/' && !getcwd(cwd, sizeof cwd)) return NULL;
    size_t cap = strlen(cwd) + strlen(p) + 3;
    char *joined = malloc(cap), *out = malloc(cap);
    if (!joined || !out) {
        free(joined);
        free(out);
        return NULL;
    }
    snprintf(joined, cap, "%s/%s", cwd, p);
    size_t n = 0;
    for (char *save, *c = strtok_r(joined, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (strcmp(c, ".") == 0) continue;
        n += (size_t)sprintf(out + n, "/%s", c);
    }
    if (n == 0) strcpy(out, "/");
    free(joined);
    return out;
}

static bool is_kind(const char *p, bool dir) {
    struct stat st;
    return stat(p, &st) == 0 && (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

/* glob.glob(pattern), sorted, into s */
static bool glob_sorted(const char *pattern, Sources *s, char *err, int errcap) {
    glob_t g;
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (rc == GLOB_NOMATCH) return true;
    if (rc != 0) return errf(err, errcap, "%s: cannot list (%s)", pattern, rc == GLOB_NOSPACE ? "out of memory" : "read error");
    int first = s->n;
    bool ok = true;
    for (size_t i = 0; ok && i < g.gl_pathc; i++) ok = push(s, strdup(g.gl_pathv[i])) || errf(err, errcap, "out of memory");
    globfree(&g);
    if (ok) qsort(s->path + first, (size_t)(s->n - first), sizeof *s->path, str_cmp);
    return ok;
}

/* One entry: a pattern, a directory, a file, or (in a list) a file relative to the list's folder. */
static bool add_entry(const char *p, const char *parent, Sources *files, char *err, int errcap) {
    char *a = absolute(p);
    if (!a) return errf(err, errcap, "out of memory");
    bool ok;
    if (strchr(a, '*')) {
        ok = glob_sorted(a, files, err, errcap);
    } else if (is_kind(a, true)) {
        size_t n = strlen(a) + 5;
        char *pattern = malloc(n);
        if (pattern) snprintf(pattern, n, "%s%s*.*", a, a[strlen(a) - 1] == '/' ? "" : "/");
        ok = pattern ? glob_sorted(pattern, files, err, errcap) : errf(err, errcap, "out of memory");
        free(pattern);
    } else if (is_kind(a, false)) {
        ok = push(files, a) || errf(err, errcap, "out of memory");
        a = NULL;
    } else {
        char *rel = NULL;
        if (parent) {
            size_t n = strlen(parent) + strlen(p) + 2;
            if ((rel = malloc(n))) snprintf(rel, n, "%s/%s", parent, p);
        }
        char *ra = rel ? absolute(rel) : NULL;
        free(rel);
        if (ra && is_kind(ra, false)) {
            ok = push(files, ra) || errf(err, errcap, "out of memory");
        } else {
            free(ra);
            ok = errf(err, errcap, "%s does not exist", p);
        }
    }
    free(a);
    return ok;
}

/* A .txt or .csv source: its lines, sorted (empty ones skipped); relative ones also tried against the file's folder. */
static bool add_list(const char *list, Sources *files, char *err, int errcap) {
    FILE *f = fopen(list, "r");
    if (!f) return errf(err, errcap, "%s: %s", list, strerror(errno));
    Sources lines = {0};
    char *line = NULL;
    size_t cap = 0;
    bool ok = true;
    for (ssize_t len; ok && (len = getline(&line, &cap, f)) >= 0;) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len > 0) ok = push(&lines, strdup(line)) || errf(err, errcap, "out of memory");
    }
    free(line);
    if (ferror(f)) ok = ok && errf(err, errcap, "%s: read error", list);
    fclose(f);
    qsort(lines.path, (size_t)lines.n, sizeof *lines.path, str_cmp);
    char *slash = strrchr(list, '/'), *parent = slash ? strndup(list, (size_t)(slash - list)) : strdup(".");
    if (!parent) ok = ok && errf(err, errcap, "out of memory");
    for (int i = 0; ok && i < lines.n; i++) ok = add_entry(lines.path[i], parent, files, err, errcap);
    free(parent);
    sources_free(&lines);
    return ok;
}

bool sources_list(const char *source, Sources *s, char *err, int errcap) {
    *s = (Sources){0};
    Sources files = {0};
    const char *dot = strrchr(source, '.'), *slash = strrchr(source, '/');
    bool list = dot && (!slash || dot > slash) && (strcmp(dot, ".txt") == 0 || strcmp(dot, ".csv") == 0) && is_kind(source, false);
    bool ok = list ? add_list(source, &files, err, errcap) : add_entry(source, NULL, &files, err, errcap);
    /* images first, then videos, each in listing order */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; ok && i < files.n; i++)
            if (files.path[i] && (pass == 0 ? dataset_is_image_path(files.path[i]) : dataset_is_video_path(files.path[i]))) {
                ok = push(s, files.path[i]) || errf(err, errcap, "out of memory");
                files.path[i] = NULL;
                s->n_images += pass == 0;
            }
    sources_free(&files);
    if (ok && s->n == 0)
        ok = errf(err, errcap, "%s: no images or videos found (images: bmp, dng, jpeg, jpg, mpo, png, tif, tiff, webp, pfm, heic; videos: asf, avi, gif, m4v, mkv, mov, mp4, mpeg, mpg, ts, wmv, webm)", source);
    if (!ok) sources_free(s);
    return ok;
}
