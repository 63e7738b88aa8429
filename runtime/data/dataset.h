/* runtime/data/dataset.h — an Ultralytics detection dataset on disk: the data
 * YAML (path, train, val, names/nc), the image lists it names (directories,
 * .txt lists, or lists of those) and the YOLO label files beside them.
 * Validates everything up front (training-semantics §2.1-2.2): each bad image
 * or label line is reported once as a warning naming file:line and skipped,
 * and the counts are kept so the trainer can print them before training.
 * Must not touch: pixels beyond a header probe, augmentation, batching.
 *
 * Deviations from Ultralytics, on purpose:
 * - a relative `path` is taken relative to the YAML's directory (Ultralytics
 *   resolves it under its settings' datasets dir, which depends on the user);
 * - a bad label line is skipped alone and the image kept with its other
 *   boxes (Ultralytics drops the whole image); every box must also have
 *   w, h > 0, and the class must be an integer in [0, nc);
 * - a row is a box (5 values) or a polygon (class plus >= 3 x,y pairs,
 *   converted to its bounding box) on its own; Ultralytics reads every row
 *   of a file as a polygon once one row is;
 * - blank lines and a UTF-8 BOM are ignored; after 20 warnings for one label
 *   file the rest are counted and summarised in one more line;
 * - a label file that exists but cannot be read (or is over 16 MiB) skips its
 *   image instead of training it as a background. */
#ifndef YOLOCC_DATASET_H
#define YOLOCC_DATASET_H
#include <stdbool.h>
#include <stdio.h>

/* One object, normalised to the image: class, centre, size. */
typedef struct Label {
    int cls;
    float cx, cy, w, h;
} Label;

typedef struct Sample {
    char *image;        /* path of the image file */
    int w, h;           /* original size from the header probe */
    Label *labels;      /* n_labels entries (0: background image) */
    int n_labels;
} Sample;

/* What was skipped while loading one split, by reason. */
typedef struct DataIssues {
    int missing_images;     /* listed but not found */
    int unreadable_images;  /* not a decodable JPEG/PNG, or smaller than 10 px a side */
    int bad_lines;          /* label lines with the wrong field count or a non-number */
    int bad_classes;        /* class id < 0, >= nc, or not an integer */
    int bad_coords;         /* a coordinate outside [0, 1] (or a size <= 0) */
    int duplicate_lines;    /* identical label lines after the first */
    int unreadable_labels;  /* label file present but unreadable or over the size limit: image skipped */
} DataIssues;

typedef struct DataSplit {
    Sample *samples;    /* in sorted path order */
    int n;
    int n_labels;       /* objects over all samples */
    DataIssues issues;
    int backgrounds;    /* samples without labels (missing or empty label file) */
    char *source;       /* the YAML's path for the split joined to the root; NULL when it lists several */
} DataSplit;

typedef struct Dataset {
    char *yaml_path;
    char *root;         /* resolved `path` */
    int nc;
    char **names;       /* nc class names */
    DataSplit train, val, test;   /* the splits asked for; the others stay empty */
} Dataset;

enum { DATASET_TRAIN = 1, DATASET_VAL = 2, DATASET_TEST = 4 };

/* Which splits to load and how (Ultralytics' fraction and single_cls). */
typedef struct DatasetOptions {
    unsigned splits;    /* DATASET_* bits (0: train and val); asking for test without a `test:` key is an error */
    double fraction;    /* the first round(n x fraction) images of the sorted training list, before any is checked (0 or 1: all) */
    bool single_cls;    /* every label becomes class 0 and the names one "item" (nc 1); any non-negative integer class is read */
} DatasetOptions;

/* Loads the data YAML and the splits o asks for (NULL: train and val). Warnings (one line each, "FILE:LINE:
 * warning: ..." or "IMAGE: warning: ...") go to warn (NULL: silent). Fails,
 * with one line in err naming the YAML file and line:col where possible, on a
 * missing/unreadable YAML, missing `train`/`val`, bad names/nc, a split
 * with no usable image. */
bool dataset_load(const char *yaml_path, const DatasetOptions *o, Dataset *ds, FILE *warn, char *err, int errcap);
void dataset_free(Dataset *ds);
/* One line like "train: 1000 images, 3120 boxes; skipped 2 missing images, 1 bad label line". */
void dataset_issues_format(const char *split_name, const DataSplit *s, char *out, int cap);

/* Bounds on hostile input. A polygon row may be long, hence the line size. */
#define DATASET_MAX_LABEL_BYTES ((size_t)16 << 20)
#define DATASET_MAX_LINE_BYTES 65536
#define DATASET_MAX_CLASSES 65536
#define DATASET_MAX_IMAGES (1 << 24)

/* Parses one label file's text[0..len) (any bytes) for nc classes: valid
 * boxes go to *out (malloc'd, NULL when *n is 0), duplicates removed; each
 * problem is counted in *iss and reported to warn as "FNAME:LINE: warning:
 * ...". False only when out of memory. */
bool dataset_parse_labels(const char *text, size_t len, const char *fname, int nc, Label **out, int *n, DataIssues *iss, FILE *warn);
/* The label file of an image: the last "/images/" becomes "/labels/" and the
 * extension ".txt". malloc'd; NULL when out of memory. */
char *dataset_label_path(const char *image);
/* The file name in path: what follows its last '/' (the whole path without one). */
const char *dataset_file_name(const char *path);
/* True when path ends in one of Ultralytics' IMG_FORMATS (VID_FORMATS)
 * suffixes (any case). */
bool dataset_is_image_path(const char *path);
bool dataset_is_video_path(const char *path);

#endif
