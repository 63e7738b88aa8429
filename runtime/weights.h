/* runtime/weights.h — a model's parameters and buffers as values: fresh
 * initialisation from the IR's init hints, loading and saving safetensors by
 * state_dict name. Must not touch: graph construction (it only reads graphs),
 * the storage's allocation, or the file format (runtime/safetensors.c). */
#ifndef YOLOCC_WEIGHTS_H
#define YOLOCC_WEIGHTS_H
#include <stdbool.h>
#include <stdint.h>

#include "../ir/ir.h"
#include "safetensors.h"

/* Storage convention shared by all three calls: buf is indexed by tensor id
 * (like Interp.buf, so `it.buf` can be passed as is) and, for every tensor id
 * in g->state, buf[id] must already point to shape_numel(shape) elements of
 * its dtype (float for DT_F32, int64_t for DT_I64; a scalar has one element),
 * e.g. allocated with interp_tensor. The caller owns the storage; these calls
 * only read or write its bytes. Only DT_F32 and DT_I64 state is supported.
 * Every call checks all of g->state before writing anything, so a call that
 * fails leaves buf (and, for weights_save, the file) untouched. err may be
 * NULL; messages are one line. */

/* Fills every parameter and buffer as a freshly built Ultralytics model holds
 * it (semantics §8.3), following each tensor's InitKind (ir/ir.h):
 *   INIT_KAIMING_UNIFORM  U(-b, b), b = 1/sqrt(fan_in), fan_in = d1*d2*...
 *   INIT_BIAS_UNIFORM     U(-b, b), b = 1/sqrt(init_arg) (0 if init_arg <= 0)
 *   INIT_CONST            init_arg
 *   INIT_ARANGE           0, 1, 2, ... in storage order
 *   INIT_TRUNC_NORMAL     normal(0, init_arg) redrawn outside [-2, 2]
 *   INIT_NONE             0
 * The random numbers come from this file's own generator (xoshiro256**), so
 * the distributions match PyTorch's but not its values. Each tensor draws
 * from a stream keyed by (seed, its name), so the same seed gives identical
 * bytes and a tensor's values do not change when layers are added elsewhere.
 * v10Detect's one2one_cv2/one2one_cv3 tensors share the stream of their
 * cv2/cv3 originals: upstream they are deep copies (§7.3) and start equal. */
bool weights_init(const Graph *g, void **buf, uint64_t seed, char *err, int errcap);

enum { WEIGHTS_REPORT_NAMES = 4, WEIGHTS_NAME_CAP = 128 };

/* What weights_load did, in the terms of Ultralytics' "Transferred a/b items
 * from pretrained weights". */
typedef struct WeightsLoadReport {
    int matched;        /* state tensors copied from the file (a) */
    int total;          /* state tensors of the graph (b) */
    int file_tensors;   /* tensors in the file whose name starts with the prefix */
    int unknown;        /* of those, how many name no state tensor (ignored) */
    int mismatched;     /* of those, how many name one but with another shape (ignored) */
    /* the first few of each, names without the prefix (cut to fit) */
    char unknown_names[WEIGHTS_REPORT_NAMES][WEIGHTS_NAME_CAP];
    char mismatched_names[WEIGHTS_REPORT_NAMES][WEIGHTS_NAME_CAP];
} WeightsLoadReport;

/* Reads the safetensors file at path and copies into buf every tensor whose
 * name is prefix + a state_dict name (prefix NULL or "" for plain files; e.g.
 * "init/" for the parity fixtures) and whose shape equals that state
 * tensor's, as Ultralytics' intersect_dicts + load_state_dict(strict=False)
 * do. Values are converted like torch's copy_: F32/F16/BF16/F64 and the
 * integer dtypes to float; integers and floats to int64 (floats truncate
 * toward zero; a non-finite or out-of-range one is an error). State tensors
 * the file lacks keep their values. Fails (buf untouched) when the file
 * cannot be read or parsed, a storage pointer is NULL, or a value cannot be
 * converted; a file sharing no tensor with the graph is not an error (check
 * rep->matched). rep may be NULL. */
bool weights_load(const Graph *g, void **buf, const char *path, const char *prefix, WeightsLoadReport *rep, char *err, int errcap);
/* weights_load from a file already read (st_read) from path, for callers that also read its metadata. */
bool weights_load_parsed(const Graph *g, void **buf, const StFile *f, const char *path, const char *prefix, WeightsLoadReport *rep, char *err, int errcap);

/* One line like Ultralytics' log: "Transferred 195/195 items from pretrained
 * weights", plus the counts of ignored tensors and the first names. */
void weights_report_format(const WeightsLoadReport *rep, char *out, int cap);

/* Writes every parameter and buffer in state_dict order (g->state) under its
 * name and shape: F32, and I64 for int64 buffers (num_batches_tracked, shape
 * []). Atomic: the old file stays intact on failure (st_write). meta_kv is
 * key, value, ..., NULL, or NULL for no metadata. */
bool weights_save(const Graph *g, void *const *buf, const char *path, const char *const *meta_kv, char *err, int errcap);

#endif
