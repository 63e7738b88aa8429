/* runtime/synthetic.h — a generated detection batch for smoke tests and
 * `yolort train --synthetic`: textured noise with bright class-coloured
 * rectangles, and their YOLO labels. Deterministic for a seed. */
#ifndef YOLOCC_SYNTHETIC_H
#define YOLOCC_SYNTHETIC_H
#include <stdint.h>

/* images [batch, 3, size, size] in 0..1; boxes [batch, max_boxes, 5] =
 * cls, cx, cy, w, h (normalised); counts [batch] (1..4 per image, at most max_boxes). */
void synthetic_batch(uint64_t seed, int batch, int size, int nc, int max_boxes, float *images, float *boxes, int64_t *counts);

#endif
