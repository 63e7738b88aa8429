/* runtime/data/npy_image.h — Ultralytics' disk cache of decoded images
 * (cache='disk'): IMAGE.npy beside each image, what np.save writes for
 * cv2.imread's array (NumPy format 1.0, uint8, C order, shape (h, w, 3),
 * channels B, G, R). Reads any such file (format 1.0 to 3.0), writes
 * format 1.0 atomically. Must not touch datasets, labels or transforms;
 * never a crash on hostile bytes. */
#ifndef YOLOCC_NPY_IMAGE_H
#define YOLOCC_NPY_IMAGE_H
#include <stdbool.h>
#include <stddef.h>

#include "image.h"

/* Path(image).with_suffix(".npy"): the file name's last suffix replaced
 * (a.jpg -> a.npy, a.b.png -> a.b.npy), or ".npy" added when it has none
 * (a -> a.npy, .hidden -> .hidden.npy). False when out does not hold it. */
bool npy_image_path(const char *image, char *out, size_t cap);

typedef enum {
    NPY_ABSENT,         /* no such file */
    NPY_READ,           /* *out holds the image (RGB) */
    NPY_CORRUPT,        /* not a NumPy file, or cut short: np.load would fail (Ultralytics removes it) */
    NPY_SKIPPED         /* cannot serve, kept: unreadable, or an array other than (h, w, 3) uint8 in C order */
} NpyRead;

/* Reads path into *out; err says why for NPY_CORRUPT and NPY_SKIPPED. */
NpyRead npy_image_read(const char *path, Image *out, char *err, int errcap);
/* Bytes npy_image_write writes for a w x h image. */
size_t npy_image_bytes(int w, int h);
/* Writes im as path (atomically: readers never see half a file). */
bool npy_image_write(const char *path, const Image *im, char *err, int errcap);

#endif
