/* runtime/data/datagen.c — renders the synthetic shapes dataset of datagen.h
 * and writes it (images through image_io.c, everything atomically). Must not
 * touch: dataset loading, augmentation, training, the CLI. */
#include "datagen.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../ir/atomic_file.h"
#include "../../ir/diag.h"
#include "image_io.h"

enum { MAX_OBJECTS = 5, PLACE_TRIES = 40, COLOUR_TRIES = 30, PATH_MAX_LEN = 4096 };
#define MARKER ".yolort-datagen"

static const char *const NAMES[DATAGEN_MAX_CLASSES] = {"rectangle", "ellipse", "triangle", "ring", "cross", "diamond", "bars", "star"};

DatagenOptions datagen_defaults(void) { return (DatagenOptions){.images = 1000, .size = 256, .classes = 3, .seed = 0, .val_fraction = 0.2}; }

const char *datagen_class_name(int k) { return k >= 0 && k < DATAGEN_MAX_CLASSES ? NAMES[k] : NULL; }

/* ------------------------------------------------------------------ random */

/* xoshiro256** seeded through splitmix64 (Blackman & Vigna); its own copy so
 * the files stay the same whatever other random streams do. */
typedef struct Rand {
    uint64_t s[4];
} Rand;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(Rand *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return out;
}

/* Each image has its own stream, so image i does not depend on the others. */
static void rand_for(Rand *r, uint64_t seed, uint64_t index) {
    uint64_t x = seed;
    uint64_t h = splitmix(&x) ^ (index * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&h);
}

static double uni(Rand *r, double lo, double hi) { return lo + (hi - lo) * (double)(next_u64(r) >> 11) * 0x1.0p-53; }
static int below(Rand *r, int n) { return (int)((next_u64(r) >> 33) % (uint64_t)n); }

/* ------------------------------------------------------------------ render */

typedef struct Rgb {
    double r, g, b;
} Rgb;

static Rgb hsv(double h, double s, double v) {
    double c = v * s, hp = fmod(h, 1.0) * 6, x = c * (1 - fabs(fmod(hp, 2) - 1)), m = v - c;
    Rgb o = hp < 1 ? (Rgb){c, x, 0} : hp < 2 ? (Rgb){x, c, 0} : hp < 3 ? (Rgb){0, c, x} : hp < 4 ? (Rgb){0, x, c} : hp < 5 ? (Rgb){x, 0, c} : (Rgb){c, 0, x};
    return (Rgb){255 * (o.r + m), 255 * (o.g + m), 255 * (o.b + m)};
}

static uint8_t clamp8(double v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lround(v)); }
static double smooth(double t) { return t * t * (3 - 2 * t); }

/* Muted two-colour gradient plus value noise and/or stripes: enough texture
 * that a detector cannot key on flat colour, weak enough that shapes stay
 * clearly visible. */
static void background(Rand *r, uint8_t *px, int n) {
    double hue = uni(r, 0, 1);
    Rgb c0 = hsv(hue, uni(r, 0.05, 0.35), uni(r, 0.3, 0.75));
    Rgb c1 = hsv(hue + uni(r, -0.15, 0.15) + 1, uni(r, 0.05, 0.35), uni(r, 0.3, 0.75));
    double ang = uni(r, 0, 2 * M_PI), ca = cos(ang), sa = sin(ang);
    int kind = below(r, 3);
    enum { G = 8 };
    double grid[G + 1][G + 1];
    for (int i = 0; i <= G; i++)
        for (int j = 0; j <= G; j++) grid[i][j] = uni(r, -1, 1);
    int cells = 3 + below(r, G - 2);
    double namp = kind != 1 ? uni(r, 8, 22) : 0, samp = kind != 0 ? uni(r, 6, 16) : 0;
    double sf = uni(r, 3, 12), sang = uni(r, 0, M_PI), sph = uni(r, 0, 2 * M_PI);
    double sc = cos(sang), ss = sin(sang);
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            double u = (x + 0.5) / n, v = (y + 0.5) / n;
            double t = ((u - 0.5) * ca + (v - 0.5) * sa) / M_SQRT2 + 0.5;
            double gx = u * cells, gy = v * cells;
            int ix = (int)gx, iy = (int)gy;
            double fx = smooth(gx - ix), fy = smooth(gy - iy);
            double nz = (grid[iy][ix] * (1 - fx) + grid[iy][ix + 1] * fx) * (1 - fy) + (grid[iy + 1][ix] * (1 - fx) + grid[iy + 1][ix + 1] * fx) * fy;
            double tex = namp * nz + samp * sin(2 * M_PI * sf * (u * sc + v * ss) + sph);
            uint8_t *p = px + ((size_t)y * (size_t)n + (size_t)x) * 3;
            p[0] = clamp8(c0.r + (c1.r - c0.r) * t + tex);
            p[1] = clamp8(c0.g + (c1.g - c0.g) * t + tex);
            p[2] = clamp8(c0.b + (c1.b - c0.b) * t + tex);
        }
}

/* Even-odd test against the 5-pointed star inscribed in [-1,1]^2. */
static bool in_star(double u, double v) {
    double xs[10], ys[10];
    for (int k = 0; k < 10; k++) {
        double a = -M_PI / 2 + k * M_PI / 5, rad = k % 2 ? 0.42 : 1.0;
        xs[k] = rad * cos(a), ys[k] = rad * sin(a);
    }
    bool in = false;
    for (int i = 0, j = 9; i < 10; j = i++)
        if ((ys[i] > v) != (ys[j] > v) && u < (xs[j] - xs[i]) * (v - ys[i]) / (ys[j] - ys[i]) + xs[i]) in = !in;
    return in;
}

/* Whether (u, v) in [-1,1]^2 (v down) is inside shape kind. */
static bool inside(int kind, double u, double v) {
    double au = fabs(u), av = fabs(v), r2 = u * u + v * v;
    switch (kind) {
    case 0: return true;
    case 1: return r2 <= 1;
    case 2: return au <= (v + 1) / 2;
    case 3: return r2 <= 1 && r2 >= 0.3;
    case 4: return au <= 0.3 || av <= 0.3;
    case 5: return au + av <= 1;
    case 6: return av >= 0.3;
    default: return in_star(u, v);
    }
}

typedef struct Obj {
    int kind, x, y, w, h;
} Obj;

static bool overlap_ok(const Obj *a, const Obj *b) {
    int ix = (a->x + a->w < b->x + b->w ? a->x + a->w : b->x + b->w) - (a->x > b->x ? a->x : b->x);
    int iy = (a->y + a->h < b->y + b->h ? a->y + a->h : b->y + b->h) - (a->y > b->y ? a->y : b->y);
    if (ix <= 0 || iy <= 0) return true;
    double in = (double)ix * iy, aa = (double)a->w * a->h, ab = (double)b->w * b->h;
    /* IoU < 0.3, and no shape more than half hidden by or hiding another */
    return in / (aa + ab - in) < 0.3 && in < 0.5 * (aa < ab ? aa : ab);
}

static int by_area_desc(const void *pa, const void *pb) {
    const Obj *a = pa, *b = pb;
    long d = (long)b->w * b->h - (long)a->w * a->h;
    return d > 0 ? 1 : d < 0 ? -1 : 0;
}

static double luma(Rgb c) { return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b; }

/* A saturated colour far from the mean under the box, so every shape stands
 * out from what is behind it. */
static Rgb pick_colour(Rand *r, const uint8_t *px, int n, const Obj *o) {
    Rgb m = {0, 0, 0};
    for (int y = o->y; y < o->y + o->h; y++)
        for (int x = o->x; x < o->x + o->w; x++) {
            const uint8_t *p = px + ((size_t)y * (size_t)n + (size_t)x) * 3;
            m.r += p[0], m.g += p[1], m.b += p[2];
        }
    double k = 1.0 / ((double)o->w * o->h);
    m.r *= k, m.g *= k, m.b *= k;
    for (int t = 0; t < COLOUR_TRIES; t++) {
        bool dark = below(r, 3) == 0;
        Rgb c = hsv(uni(r, 0, 1), uni(r, 0.55, 1), dark ? uni(r, 0.05, 0.2) : uni(r, 0.8, 1));
        double dr = c.r - m.r, dg = c.g - m.g, db = c.b - m.b;
        if (fabs(luma(c) - luma(m)) >= 60 && sqrt(dr * dr + dg * dg + db * db) >= 140) return c;
    }
    return luma(m) > 128 ? (Rgb){10, 10, 10} : (Rgb){245, 245, 245};
}

/* Renders image i; its label text goes to lab. Returns the box count. */
static int render(uint64_t seed, int i, int n, int classes, uint8_t *px, char *lab, size_t labcap) {
    Rand r;
    rand_for(&r, seed, (uint64_t)i);
    background(&r, px, n);
    Obj objs[MAX_OBJECTS];
    int want = 1 + below(&r, MAX_OBJECTS), got = 0;
    for (int k = 0; k < want; k++)
        for (int t = 0; t < PLACE_TRIES; t++) {
            double side = uni(&r, 0.08, 0.45) * n, asp = sqrt(uni(&r, 0.75, 1.33));
            int w = (int)lround(fmin(fmax(side * asp, 0.08 * n), 0.45 * n));
            int h = (int)lround(fmin(fmax(side / asp, 0.08 * n), 0.45 * n));
            Obj o = {below(&r, classes), below(&r, n - w + 1), below(&r, n - h + 1), w, h};
            bool ok = true;
            for (int j = 0; ok && j < got; j++) ok = overlap_ok(&o, &objs[j]);
            if (ok) {
                objs[got++] = o;
                break;
            }
        }
    /* large first, so a smaller shape overlapping a larger one stays whole */
    qsort(objs, (size_t)got, sizeof objs[0], by_area_desc);
    size_t used = 0;
    for (int k = 0; k < got; k++) {
        const Obj *o = &objs[k];
        Rgb c = pick_colour(&r, px, n, o);
        uint8_t col[3] = {clamp8(c.r), clamp8(c.g), clamp8(c.b)};
        int x0 = n, y0 = n, x1 = -1, y1 = -1;
        for (int y = o->y; y < o->y + o->h; y++)
            for (int x = o->x; x < o->x + o->w; x++) {
                double u = (x + 0.5 - o->x) / o->w * 2 - 1, v = (y + 0.5 - o->y) / o->h * 2 - 1;
                if (!inside(o->kind, u, v)) continue;
                memcpy(px + ((size_t)y * (size_t)n + (size_t)x) * 3, col, 3);
                if (x < x0) x0 = x;
                if (x > x1) x1 = x;
                if (y < y0) y0 = y;
                if (y > y1) y1 = y;
            }
        if (x1 < 0) continue;
        int k2 = snprintf(lab + used, labcap - used, "%d %.6f %.6f %.6f %.6f\n", o->kind, (x0 + x1 + 1) / 2.0 / n, (y0 + y1 + 1) / 2.0 / n,
                          (x1 - x0 + 1) / (double)n, (y1 - y0 + 1) / (double)n);
        if (k2 > 0 && (size_t)k2 < labcap - used) used += (size_t)k2;
    }
    return got;
}

/* ------------------------------------------------------------------ files */

static bool write_text(const char *path, const char *text, char *err, int errcap) {
    const void *chunks[1] = {text};
    size_t lens[1] = {strlen(text)};
    return atomic_write(path, chunks, lens, 1, err, errcap);
}

static bool mkdirs(const char *path, char *err, int errcap) {
    char p[PATH_MAX_LEN];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return errf(err, errcap, "%s: path too long", path);
    for (char *s = p + 1;; s++) {
        bool end = *s == 0;
        if (*s == '/' || end) {
            *s = 0;
            struct stat st;
            if (mkdir(p, 0777) != 0 && !(errno == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode)))
                return errf(err, errcap, "cannot create directory %s: %s", p, errno == EEXIST ? "exists and is not a directory" : strerror(errno));
            if (end) return true;
            *s = '/';
        }
    }
}

/* NNNNNN.ext, or a temp file atomic_write left behind (NNNNNN.ext.tmp.PID). */
static bool generated_name(const char *name, const char *ext) {
    for (int i = 0; i < 6; i++)
        if (name[i] < '0' || name[i] > '9') return false;
    if (strncmp(name + 6, ext, 4) != 0) return false;
    return name[10] == 0 || strncmp(name + 10, ".tmp.", 5) == 0;
}

static const char *const SUBDIRS[4] = {"images/train", "images/val", "labels/train", "labels/val"};

/* What a previous run may have left, folder by folder (Ultralytics adds the
 * .cache files); ext: the generated files' suffix there. */
static const struct {
    const char *sub, *ext;
    const char *names[5];
} LAYOUT[] = {
    {"", NULL, {MARKER, "data.yaml", "images", "labels", NULL}},
    {"images", NULL, {"train", "val", NULL}},
    {"labels", NULL, {"train", "val", "train.cache", "val.cache", NULL}},
    {"images/train", ".jpg", {NULL}},
    {"images/val", ".jpg", {NULL}},
    {"labels/train", ".txt", {NULL}},
    {"labels/val", ".txt", {NULL}},
};

/* Checks (wipe false) or deletes (wipe true) the files a previous run
 * wrote; false when the directory holds anything else. */
static bool sweep(const char *dir, bool wipe, char *err, int errcap) {
    for (size_t li = 0; li < sizeof LAYOUT / sizeof LAYOUT[0]; li++) {
        char p[PATH_MAX_LEN];
        snprintf(p, sizeof p, "%s/%s", dir, LAYOUT[li].sub);
        DIR *d = opendir(p);
        if (!d) {
            if (errno == ENOENT) continue;
            return errf(err, errcap, "cannot read directory %s: %s", p, strerror(errno));
        }
        bool ok = true;
        for (struct dirent *e; ok && (e = readdir(d)) != NULL;) {
            const char *nm = e->d_name;
            if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0) continue;
            bool generated = LAYOUT[li].ext ? generated_name(nm, LAYOUT[li].ext) : li == 0 && strncmp(nm, "data.yaml.tmp.", 14) == 0;
            bool known = generated;
            for (int k = 0; !known && LAYOUT[li].names[k]; k++) known = strcmp(nm, LAYOUT[li].names[k]) == 0;
            if (!known) {
                ok = errf(err, errcap, "%s is not empty and not only a yolort datagen output (found %s/%s); use an empty or new directory", dir,
                          LAYOUT[li].sub, nm);
                break;
            }
            bool removable = generated || strstr(nm, ".cache") || strcmp(nm, "data.yaml") == 0;
            char full[2 * PATH_MAX_LEN];
            snprintf(full, sizeof full, "%s/%s", p, nm);
            if (wipe && removable && unlink(full) != 0) ok = errf(err, errcap, "cannot remove %s: %s", full, strerror(errno));
        }
        closedir(d);
        if (!ok) return false;
    }
    return true;
}

static bool prepare(const char *dir, char *err, int errcap) {
    if (!mkdirs(dir, err, errcap)) return false;
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s/" MARKER, dir);
    struct stat st;
    bool previous = stat(p, &st) == 0;
    if (!previous) {
        DIR *d = opendir(dir);
        if (!d) return errf(err, errcap, "cannot read directory %s: %s", dir, strerror(errno));
        int n = 0;
        for (struct dirent *e; (e = readdir(d)) != NULL;) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
        closedir(d);
        if (n) return errf(err, errcap, "%s is not empty and not a yolort datagen output; use an empty or new directory", dir);
    } else if (!sweep(dir, false, err, errcap) || !sweep(dir, true, err, errcap)) {
        return false;
    }
    if (!write_text(p, "yolort datagen output: the next `yolort datagen` into this folder replaces it\n", err, errcap)) return false;
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, SUBDIRS[i]);
        if (!mkdirs(p, err, errcap)) return false;
    }
    return true;
}

bool datagen_write(const char *dir, const DatagenOptions *o, FILE *progress, char *err, int errcap) {
    if (o->images < 2 || o->images > DATAGEN_MAX_IMAGES) return errf(err, errcap, "datagen: --images must be in 2..%d", DATAGEN_MAX_IMAGES);
    if (o->size < 32 || o->size > 4096) return errf(err, errcap, "datagen: --size must be in 32..4096");
    if (o->classes < 1 || o->classes > DATAGEN_MAX_CLASSES) return errf(err, errcap, "datagen: --classes must be in 1..%d", DATAGEN_MAX_CLASSES);
    if (!(o->val_fraction > 0 && o->val_fraction < 1)) return errf(err, errcap, "datagen: the val fraction must be in (0, 1)");
    if (!dir[0] || strlen(dir) + 64 >= PATH_MAX_LEN) return errf(err, errcap, "datagen: %s: path too long", dir);
    if (!prepare(dir, err, errcap)) return false;
    int n = o->size, nval = (int)lround(o->images * o->val_fraction);
    if (nval < 1) nval = 1;
    if (nval > o->images - 1) nval = o->images - 1;
    int ntrain = o->images - nval;
    Image im = {n, n, malloc((size_t)n * (size_t)n * 3)};
    if (!im.px) return errf(err, errcap, "datagen: out of memory");
    char lab[MAX_OBJECTS * 64 + 1], path[PATH_MAX_LEN], why[600];
    long boxes = 0;
    bool ok = true;
    for (int i = 0; ok && i < o->images; i++) {
        const char *split = i < ntrain ? "train" : "val";
        lab[0] = 0;
        boxes += render(o->seed, i, n, o->classes, im.px, lab, sizeof lab);
        snprintf(path, sizeof path, "%s/images/%s/%06d.jpg", dir, split, i);
        ok = image_write_jpeg(path, &im, 90, why, sizeof why);
        if (ok) {
            snprintf(path, sizeof path, "%s/labels/%s/%06d.txt", dir, split, i);
            ok = write_text(path, lab, why, sizeof why);
        }
        if (!ok) errf(err, errcap, "datagen: %s", why);
        if (ok && progress && ((i + 1) % (o->images / 10 > 0 ? o->images / 10 : 1) == 0)) {
            fprintf(progress, "datagen: %d/%d images\n", i + 1, o->images);
            fflush(progress);
        }
    }
    free(im.px);
    if (!ok) return false;
    char yaml[2048];
    int used = snprintf(yaml, sizeof yaml,
                        "# Synthetic shapes written by yolort datagen: %d images (%d train, %d val), %dx%d, seed %llu.\n"
                        "# No 'path:' key: the dataset root is this file's folder.\n"
                        "train: images/train\nval: images/val\nnames:\n",
                        o->images, ntrain, nval, n, n, (unsigned long long)o->seed);
    for (int k = 0; k < o->classes && used > 0 && (size_t)used < sizeof yaml; k++)
        used += snprintf(yaml + used, sizeof yaml - (size_t)used, "  %d: %s\n", k, NAMES[k]);
    snprintf(path, sizeof path, "%s/data.yaml", dir);
    if (!write_text(path, yaml, why, sizeof why)) return errf(err, errcap, "datagen: %s", why);
    if (progress) {
        fprintf(progress, "datagen: wrote %d images (%d train, %d val) with %ld boxes to %s\n", o->images, ntrain, nval, boxes, dir);
        fflush(progress);
    }
    return true;
}
