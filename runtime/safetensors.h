/* runtime/safetensors.h — reads and writes safetensors files, the weights
 * format shared with PyTorch. Owns the file format only: it knows nothing of
 * graphs, plans or devices, and never interprets a tensor's name. */
#ifndef YOLOCC_SAFETENSORS_H
#define YOLOCC_SAFETENSORS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The dtypes this project reads and writes; the spec's others (U16, U32,
 * U64, F8_*) are rejected on read as unknown. */
typedef enum { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL } StDType;

#define ST_MAX_DIMS 8
/* Bytes of JSON header accepted (and written). Real headers are far smaller
 * (yolov9e: ~2,000 tensors, ~200 KB; about 100 bytes per tensor, so 16 MiB is
 * 150,000 tensors). The cap bounds the parser's memory: jansson allocates a
 * node per value, measured at up to ~80x the text for a header of tiny
 * objects ({"a":[{},{},...]}), so a hostile 16 MiB header costs ~1.3 GB for the
 * moment of the parse; the 100 MB cap of the Rust reader would allow ~8 GB. */
#define ST_MAX_HEADER ((uint64_t)16 << 20)
#define ST_MAX_FILE ((uint64_t)16 << 30)      /* bytes st_read accepts */

typedef struct StTensor {
    const char *name;
    StDType dtype;
    int nd;                          /* 0 = scalar */
    int64_t shape[ST_MAX_DIMS];
    uint64_t offset, nbytes;         /* offset is relative to the data buffer */
    /* little-endian bytes inside StFile.buf; only as aligned as the file
     * makes them, so read through memcpy (or st_to_f32) */
    const void *data;
} StTensor;

typedef struct StFile {
    unsigned char *buf;              /* the whole file, owned */
    size_t size;
    StTensor *tensors;               /* in header order */
    int n;
    const char **meta_keys, **meta_values;   /* "__metadata__", in header order */
    int n_meta;
    char *strings;                   /* owns every name, key and value */
} StFile;

/* Copies buf and validates everything (header syntax, dtypes, shapes, sizes,
 * offsets, exact coverage of the data buffer; shape entries and offsets are
 * JSON integers of at most 2^63-1). On failure returns false with
 * one line in err (naming the byte offset or the tensor) and leaves *out
 * empty; st_free on it is harmless either way. err may be NULL. */
bool st_parse(const unsigned char *buf, size_t size, StFile *out, char *err, int errcap);
/* Reads a regular file of at most ST_MAX_FILE bytes, then validates it like
 * st_parse (without a second copy). Errors start with the path. */
bool st_read(const char *path, StFile *out, char *err, int errcap);
/* First tensor with that name (names are unique in a parsed file), or NULL. */
const StTensor *st_find(const StFile *f, const char *name);
void st_free(StFile *f);

size_t st_dtype_size(StDType t);        /* 0 for a value outside the enum */
const char *st_dtype_name(StDType t);   /* "F32", ...; "?" outside the enum */
uint64_t st_numel(const StTensor *t);   /* 1 for a scalar */

typedef struct StWriteItem {
    const char *name;
    StDType dtype;
    int nd;
    const int64_t *shape;            /* may be NULL when nd == 0 */
    const void *data;                /* numel * dtype size bytes; may be NULL when that is 0 */
} StWriteItem;

/* Writes atomically through atomic_write (ir/atomic_file.h): the temp file
 * PATH.tmp.PID in the same directory, write, fsync, rename over PATH, fsync
 * of the directory. Tensors are
 * stored in the order given (header lists them in that order, offsets
 * increasing); "__metadata__" comes first when meta_kv has pairs. The header
 * is padded with spaces to a multiple of 8 so the data starts 8-aligned.
 * meta_kv is key, value, ..., NULL (or NULL for none). Names and metadata
 * must be valid UTF-8 and unique; names may not be "__metadata__".
 * On a failure before the rename PATH is untouched and the temp file removed.
 * A failed fsync of the directory after the rename is reported too (returns
 * false) although PATH already holds the new file: its durability is unknown. */
bool st_write(const char *path, const StWriteItem *items, int n, const char *const *meta_kv, char *err, int errcap);

/* A malloc'd float copy of an F32/F16/BF16/F64 tensor (F64 rounds to nearest,
 * overflowing to +-inf); NULL for other dtypes or out of memory. A 0-element
 * tensor gives a non-NULL pointer to free. */
float *st_to_f32(const StTensor *t);

#endif
