/* runtime/data/datagen.h — a synthetic detection dataset on disk for demos,
 * tests and benchmarks: simple filled shapes (the class is the shape) on
 * textured backgrounds, in the Ultralytics layout that dataset_load reads.
 * Must not touch: training, augmentation, the CLI (the lead's `yolort
 * datagen` calls datagen_write). */
#ifndef YOLOCC_DATAGEN_H
#define YOLOCC_DATAGEN_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define DATAGEN_MAX_CLASSES 8
#define DATAGEN_MAX_IMAGES 1000000

typedef struct DatagenOptions {
    int images;             /* total, 2..DATAGEN_MAX_IMAGES (default 1000) */
    int size;               /* square side in pixels, 32..4096 (default 256) */
    int classes;            /* shape kinds used, 1..8 (default 3) */
    uint64_t seed;          /* same seed and options -> identical files (default 0) */
    double val_fraction;    /* share of images in val, in (0, 1); at least 1 each (default 0.2) */
} DatagenOptions;

DatagenOptions datagen_defaults(void);

/* Class k's name: rectangle, ellipse, triangle, ring, cross, diamond, bars,
 * star; NULL outside 0..7. */
const char *datagen_class_name(int k);

/* Writes DIR/images/{train,val}/NNNNNN.jpg (quality 90), DIR/labels/{train,
 * val}/NNNNNN.txt ("cls cx cy w h", 6 decimals, tight pixel boxes) and, last,
 * DIR/data.yaml (no `path:`, so the root is the YAML's folder). Every file is
 * written atomically. DIR is created (with parents) if missing; an existing
 * DIR must be empty or a previous datagen output (marked by the file
 * DIR/.yolort-datagen, which is written first), whose generated files are
 * then deleted; anything else is refused, so no user file is ever removed.
 * Progress lines go to progress (NULL: quiet). False with one line in err. */
bool datagen_write(const char *dir, const DatagenOptions *o, FILE *progress, char *err, int errcap);

#endif
