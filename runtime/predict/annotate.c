/* runtime/predict/annotate.c — detections drawn on an RGB image with libgd:
 * Ultralytics' 20-colour palette indexed by class, its line width and label
 * colours; the text in libgd's built-in bitmap font. libgd is opened on the
 * first drawing (dlopen), so yolort links none of its image codecs and runs
 * where it is absent until an annotated image is asked for. Must not touch
 * files. */
#include "annotate.h"

#include <dlfcn.h>
#include <gd.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "../../ir/diag.h"

_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "function pointers must be object-pointer sized (POSIX dlsym)");

/* the libgd calls made here, resolved once from libgd.so.3 */
typedef struct GdApi {
    gdImagePtr (*gdImageCreateTrueColor)(int, int);
    void (*gdImageDestroy)(gdImagePtr);
    void (*gdImageSetThickness)(gdImagePtr, int);
    void (*gdImageRectangle)(gdImagePtr, int, int, int, int, int);
    void (*gdImageFilledRectangle)(gdImagePtr, int, int, int, int, int);
    void (*gdImageString)(gdImagePtr, gdFontPtr, int, int, unsigned char *, int);
    gdFontPtr (*gdFontGetMediumBold)(void);
} GdApi;

static bool gd_api(const GdApi **out, char *err, int errcap) {
    static GdApi api;
    static bool loaded;
    if (loaded) return *out = &api, true;
    static const struct {
        const char *name;
        size_t off;
    } syms[] = {
#define G(f) {#f, offsetof(GdApi, f)}
        G(gdImageCreateTrueColor), G(gdImageDestroy), G(gdImageSetThickness), G(gdImageRectangle), G(gdImageFilledRectangle), G(gdImageString), G(gdFontGetMediumBold),
#undef G
    };
    void *h = dlopen("libgd.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!h) {
        const char *e = dlerror();
        return errf(err, errcap, "drawing the boxes needs libgd (Debian: libgd3): %s; --no-save skips the annotated images", e ? e : "dlopen failed");
    }
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p) return errf(err, errcap, "libgd.so.3 has no %s", syms[i].name);
        memcpy((char *)&api + syms[i].off, &p, sizeof p); /* the field is a function pointer of the same size */
    }
    loaded = true;
    *out = &api;
    return true;
}

/* Ultralytics' Colors.hexs (RGB) and whether Annotator writes a label on it in
 * its dark text colour (its dark_colors set) rather than in white */
static const struct {
    unsigned rgb;
    bool dark_text;
} PALETTE[20] = {
    {0x042AFF, false}, {0x0BDBEB, true},  {0xF3F3F3, true},  {0x00DFB7, true},  {0x111F68, false}, {0xFF6FDD, true},  {0xFF444F, false},
    {0xCCED00, true},  {0x00F344, true},  {0xBD00FF, false}, {0x00B4FF, false}, {0xDD00BA, false}, {0x00FFFF, true},  {0x26C000, false},
    {0x01FFB3, true},  {0x7D24FF, false}, {0x7B0068, false}, {0xFF1B6C, false}, {0xFC6D2F, false}, {0xA2FF0B, true},
};

unsigned annotate_class_rgb(int cls) { return PALETTE[(unsigned)cls % 20].rgb; }

int annotate_line_width(int w, int h) {
    /* sum(im.shape) of an HWC array counts the 3 channels too */
    int lw = (int)nearbyint((double)(w + h + 3) / 2 * 0.003);
    return lw > 2 ? lw : 2;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

bool annotate_detections(Image *im, const Detection *dets, int n, const char *const *names, const AnnotateStyle *style, char *err,
                         int errcap) {
    const GdApi *gd;
    if (!gd_api(&gd, err, errcap)) return false;
    gdImagePtr g = gd->gdImageCreateTrueColor(im->w, im->h);
    if (!g) return errf(err, errcap, "out of memory drawing on a %dx%d image", im->w, im->h);
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++) {
            const uint8_t *p = im->px + ((size_t)y * (size_t)im->w + (size_t)x) * 3;
            g->tpixels[y][x] = gdTrueColor(p[0], p[1], p[2]);
        }
    const int lw = style->line_width > 0 ? style->line_width : annotate_line_width(im->w, im->h);
    gdFontPtr font = gd->gdFontGetMediumBold();
    gd->gdImageSetThickness(g, lw); /* the outlines'; filled rectangles and text ignore it */
    for (int i = 0; i < n; i++) {
        const Detection *d = &dets[i];
        unsigned c = PALETTE[(unsigned)d->cls % 20].rgb;
        int color = gdTrueColor((int)(c >> 16), (int)(c >> 8 & 0xff), (int)(c & 0xff));
        int x1 = clampi((int)d->x1, 0, im->w - 1), y1 = clampi((int)d->y1, 0, im->h - 1);
        int x2 = clampi((int)d->x2, 0, im->w - 1), y2 = clampi((int)d->y2, 0, im->h - 1);
        gd->gdImageRectangle(g, x1, y1, x2, y2, color);
        if (!names && !style->class_ids) continue;
        char label[160], id[16];
        snprintf(id, sizeof id, "%d", d->cls);
        const char *name = names ? names[d->cls] : id;
        if (style->conf_digits >= 0) snprintf(label, sizeof label, "%s %.*f", name, style->conf_digits, (double)d->score);
        else snprintf(label, sizeof label, "%s", name);
        int tw = (int)strlen(label) * font->w + 2, th = font->h + 2;
        /* above the box when it fits, else inside it; never past the right edge */
        bool outside = y1 >= th;
        int lx = x1 > im->w - tw ? im->w - tw : x1, ly = outside ? y1 - th : y1;
        if (lx < 0) lx = 0;
        gd->gdImageFilledRectangle(g, lx, ly, lx + tw - 1, ly + th - 1, color);
        int txt = PALETTE[(unsigned)d->cls % 20].dark_text ? gdTrueColor(17, 31, 104) : gdTrueColor(255, 255, 255);
        gd->gdImageString(g, font, lx + 1, ly + 1, (unsigned char *)label, txt);
    }
    for (int i = 0; i < style->n_texts; i++) {
        const AnnotateText *t = &style->texts[i];
        const unsigned c = t->rgb;
        gd->gdImageString(g, font, t->x, t->y, (unsigned char *)t->text, gdTrueColor((int)(c >> 16), (int)(c >> 8 & 0xff), (int)(c & 0xff)));
    }
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++) {
            int v = g->tpixels[y][x];
            uint8_t *p = im->px + ((size_t)y * (size_t)im->w + (size_t)x) * 3;
            p[0] = (uint8_t)gdTrueColorGetRed(v), p[1] = (uint8_t)gdTrueColorGetGreen(v), p[2] = (uint8_t)gdTrueColorGetBlue(v);
        }
    gd->gdImageDestroy(g);
    return true;
}
