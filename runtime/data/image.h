/* runtime/data/image.h — an 8-bit RGB image in memory, the unit every data
 * stage passes on: decode (image_io.c) -> augment.c -> loader.c. Owns only the
 * type; no file formats, no transforms. */
#ifndef YOLOCC_IMAGE_H
#define YOLOCC_IMAGE_H
#include <stdint.h>
#include <stdlib.h>

/* Interleaved HWC, channels R, G, B, row-major, no row padding:
 * px[(y * w + x) * 3 + c]. px is malloc'd and owned by the Image. */
typedef struct Image {
    int w, h;
    uint8_t *px;
} Image;

static inline void image_free(Image *im) {
    free(im->px);
    im->px = NULL;
    im->w = im->h = 0;
}

#endif
