/* runtime/predict/crop.h — `yolort predict --save-crop`: Ultralytics'
 * save_one_box for each detection, into RUN/crops/CLASS/STEM.jpg. Owns the
 * crop geometry and its files; must not touch the detections or the image. */
#ifndef YOLOCC_CROP_H
#define YOLOCC_CROP_H
#include <stdbool.h>

#include "../data/image.h"
#include "../train/metrics.h"

/* The pixels save_one_box cuts for box d of a w x h image: the box's width
 * and height times 1.02 plus 10 around its centre (float32, as torch),
 * truncated toward zero, clamped to the image: columns [r[0], r[2]), rows
 * [r[1], r[3]); empty when r[2] <= r[0] or r[3] <= r[1]. */
void crop_rect(const Detection *d, int w, int h, int r[4]);

/* The crop of d from im as CROPS/NAME/STEM.jpg, where STEM is the label
 * file's stem (the source's name without extension, "_FRAME" after it for a
 * video frame) cut at its last dot as Ultralytics derives it (a -> a,
 * a.b -> a), or STEM2.jpg, STEM3.jpg, ... when taken (increment_path);
 * JPEG quality 95 without chroma subsampling, as Ultralytics saves it with
 * PIL. An empty crop is skipped (true). */
bool crop_save(const char *crops, const char *name, const char *label_stem, const Image *im, const Detection *d, char *err, int errcap);

#endif
