/* runtime/data/augment_color.c — RandomHSV of augment.h as Ultralytics 8.3.63
 * does it through OpenCV 4.x: 8-bit RGB -> HSV (H 0..179), per-channel lookup
 * tables, HSV -> RGB by OpenCV's vector path (float, truncation). Owns only
 * colour; must not touch geometry, boxes, files or threads. */
#include "augment.h"

#include <math.h>
#include <pthread.h>

/* Tables that depend on nothing but the conversion itself. */
static struct {
    int sdiv[256], hdiv[256];   /* 12-bit reciprocals of RGB2HSV */
    /* Per (H, S): the factor each of R, G, B applies to V: one of 1, 1 - S,
     * 1 - S H, 1 - S (1 - H) as OpenCV's sector table picks them, the last
     * two fused (one rounding) as OpenCV's compiled vector code computes them.
     * V * 1 is exact, so multiplying by the factor equals OpenCV's select. */
    float f[180][256][3];
} T;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
    T.sdiv[0] = T.hdiv[0] = 0;
    for (int i = 1; i < 256; i++) {
        /* saturate_cast<int>(double) rounds half to even */
        T.sdiv[i] = (int)nearbyint((255 << 12) / (double)i);
        T.hdiv[i] = (int)nearbyint((180 << 12) / (6.0 * i));
    }
    /* (b, g, r) pick among 1, 1-S, 1-SH, 1-S(1-H) per sector */
    static const uint8_t pick[6][3] = {{1, 3, 0}, {1, 0, 2}, {3, 0, 1}, {0, 2, 1}, {0, 1, 3}, {2, 1, 0}};
    const float hscale = 6.0f / 180.0f, inv255 = 1.0f / 255.0f;
    for (int h = 0; h < 180; h++) {
        float H = (float)h * hscale, pre = truncf(H);
        H -= pre;
        const uint8_t *k = pick[(int)pre % 6];
        for (int s = 0; s < 256; s++) {
            float S = (float)s * inv255;
            float tab[4] = {1.0f, 1.0f - S, fmaf(-S, H, 1.0f), fmaf(-S, 1.0f - H, 1.0f)};
            T.f[h][s][0] = tab[k[2]];
            T.f[h][s][1] = tab[k[1]];
            T.f[h][s][2] = tab[k[0]];
        }
    }
}

static int floor_shift12(int v) { return v >= 0 ? v >> 12 : ~(~v >> 12); }

void hsv_luts(const double g[3], uint8_t lut[3][256]) {
    for (int x = 0; x < 256; x++) {
        /* numpy float64 arithmetic, Python's non-negative %, astype truncation */
        double h = fmod(x * g[0], 180.0);
        if (h < 0) h += 180.0;
        double s = fmin(fmax(x * g[1], 0.0), 255.0), v = fmin(fmax(x * g[2], 0.0), 255.0);
        lut[0][x] = (uint8_t)h;
        lut[1][x] = (uint8_t)s;
        lut[2][x] = (uint8_t)v;
    }
}

void hsv_apply(Image *im, const uint8_t lut[3][256]) {
    if (pthread_once(&tables_once, tables_init) != 0) abort();
    const float inv255 = 1.0f / 255.0f;
    size_t n = (size_t)im->w * im->h;
    uint8_t *p = im->px;
    /* neighbouring pixels often repeat (padding, flat regions): reuse the last result */
    int last = -1;
    uint8_t out[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++, p += 3) {
        int r = p[0], g = p[1], b = p[2], key = r << 16 | g << 8 | b;
        if (key != last) {
            last = key;
            int v = r > g ? r : g, vmin = r < g ? r : g;
            v = b > v ? b : v;
            vmin = b < vmin ? b : vmin;
            int diff = v - vmin;
            int s = (diff * T.sdiv[v] + (1 << 11)) >> 12;
            int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
            h = floor_shift12(h * T.hdiv[diff] + (1 << 11));
            if (h < 0) h += 180;
            const float *f = T.f[lut[0][h]][lut[1][s]];
            float V = (float)lut[2][v] * inv255;
            /* OpenCV's vector path truncates */
            out[0] = (uint8_t)(V * f[0] * 255.0f);
            out[1] = (uint8_t)(V * f[1] * 255.0f);
            out[2] = (uint8_t)(V * f[2] * 255.0f);
        }
        p[0] = out[0];
        p[1] = out[1];
        p[2] = out[2];
    }
}

void random_hsv(Rng *r, float hgain, float sgain, float vgain, Image *im) {
    if (hgain == 0 && sgain == 0 && vgain == 0) return;
    double g[3] = {rng_uniform(r, -1, 1) * hgain + 1, rng_uniform(r, -1, 1) * sgain + 1, rng_uniform(r, -1, 1) * vgain + 1};
    uint8_t lut[3][256];
    hsv_luts(g, lut);
    hsv_apply(im, lut);
}
