/* runtime/synthetic.c — generated images and boxes (splitmix64 RNG). */
#include "synthetic.h"

#include <string.h>

static uint64_t next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { return (double)(next(s) >> 11) / 9007199254740992.0; }

void synthetic_batch(uint64_t seed, int batch, int size, int nc, int max_boxes, float *images, float *boxes, int64_t *counts) {
    uint64_t s = seed;
    int64_t plane = (int64_t)size * size;
    memset(boxes, 0, sizeof(float) * 5 * (size_t)batch * (size_t)max_boxes);
    for (int b = 0; b < batch; b++) {
        float *img = images + (int64_t)b * 3 * plane;
        for (int64_t i = 0; i < 3 * plane; i++) img[i] = (float)(0.1 + 0.3 * uniform(&s));
        int n = 1 + (int)(next(&s) % 4);
        if (n > max_boxes) n = max_boxes;
        counts[b] = n;
        for (int k = 0; k < n; k++) {
            int cls = (int)(next(&s) % (uint64_t)nc);
            double w = 0.15 + 0.35 * uniform(&s), h = 0.15 + 0.35 * uniform(&s);
            double cx = w / 2 + (1 - w) * uniform(&s), cy = h / 2 + (1 - h) * uniform(&s);
            float *row = boxes + ((int64_t)b * max_boxes + k) * 5;
            row[0] = (float)cls;
            row[1] = (float)cx;
            row[2] = (float)cy;
            row[3] = (float)w;
            row[4] = (float)h;
            /* the class sets the colour, so classes are learnable */
            float colour[3] = {(float)(0.6 + 0.4 * ((cls >> 0) & 1)), (float)(0.6 + 0.4 * ((cls >> 1) & 1)), (float)(0.6 + 0.4 * ((cls >> 2) & 1))};
            int x0 = (int)((cx - w / 2) * size), x1 = (int)((cx + w / 2) * size), y0 = (int)((cy - h / 2) * size), y1 = (int)((cy + h / 2) * size);
            for (int c = 0; c < 3; c++)
                for (int y = y0; y < y1 && y < size; y++)
                    for (int x = x0; x < x1 && x < size; x++) img[c * plane + (int64_t)y * size + x] = colour[c];
        }
    }
}
