/* runtime/data/image_io.h — image files <-> Image: JPEG through libjpeg-turbo,
 * PNG through libpng, chosen by the file's magic bytes (not its suffix).
 * Grey, grey+alpha, RGBA, palette and 16-bit inputs become 8-bit RGB (alpha
 * dropped). Must not touch: labels, datasets, transforms. Every error is one
 * line naming the path (or "<memory>") and what was wrong; never a crash on
 * hostile bytes. */
#ifndef YOLOCC_IMAGE_IO_H
#define YOLOCC_IMAGE_IO_H
#include <stdbool.h>
#include <stddef.h>

#include "image.h"

/* Largest side accepted, so a hostile header cannot ask for gigabytes. */
#define IMAGE_MAX_SIDE 16384
/* Largest file read, so a stray huge file is refused before it is read. */
#define IMAGE_MAX_FILE_BYTES ((size_t)256 << 20)

/* Decodes a whole file held in memory. On failure *out is left empty. */
bool image_decode(const unsigned char *buf, size_t len, Image *out, char *err, int errcap);
/* Reads and decodes a file. */
bool image_load(const char *path, Image *out, char *err, int errcap);
/* Reads only the header: format check and size, without decoding pixels.
 * A file that does not end the way a complete JPEG/PNG does (truncated, or
 * with trailing bytes) is decoded in full to decide. Sizes and pixels of
 * JPEGs follow their EXIF orientation (as OpenCV's imread does). */
bool image_probe(const char *path, int *w, int *h, char *err, int errcap);
/* Writes atomically (ir/atomic_file.h): quality 1..100 for JPEG; chroma
 * at half resolution (4:2:0, as OpenCV's imwrite), or at full (4:4:4, as
 * PIL's subsampling=0). */
bool image_write_jpeg(const char *path, const Image *im, int quality, char *err, int errcap);
bool image_write_jpeg_444(const char *path, const Image *im, int quality, char *err, int errcap);
bool image_write_png(const char *path, const Image *im, char *err, int errcap);

#endif
