/* runtime/plan_read.h — loads a plan file: validates every length, offset and
 * checksum before allocating, then rebuilds the graph through the op
 * registry (so every shape rule re-checks it). Errors name the byte offset. */
#ifndef YOLOCC_PLAN_READ_H
#define YOLOCC_PLAN_READ_H
#include <cjson/cJSON.h>

#include "../ir/ir.h"
#include "../passes/fuse.h"
#include "../passes/memplan.h"

typedef struct Plan {
    Arena arena;
    Graph g;
    cJSON *meta;            /* the META object */
    size_t file_bytes;
    Precision precision;
    int64_t arena_bytes;    /* the step arena */
    int64_t *offset;        /* per tensor: arena offset, -1 for its own storage, or
                             * MEMPLAN_INTERNAL (lives inside its fusion group only) */
    Fusion fusion;          /* the fusion groups (GROUPS section), checked against their rules */
    const unsigned char *kernels;   /* the KERNELS payload (a copy in the arena), or NULL when empty */
    size_t kernels_len;
    struct Plan *eval;      /* a training plan's validation graph (EVAL section), or NULL */
} Plan;

bool plan_parse(const unsigned char *buf, size_t len, Plan *p, char *err, int errcap);
bool plan_read(const char *path, Plan *p, char *err, int errcap);
void plan_free(Plan *p);
/* META lookups: a tensor id stored under key (top level or "inputs"/"outputs"), or -1 */
int plan_meta_tensor(const Plan *p, const char *group, const char *key);
/* A number in a JSON object (a plan's META, a state file's scalars); dflt when absent or not a number. */
double cjson_number(const cJSON *obj, const char *key, double dflt);
/* The box, cls and dfl gains of the graph's detection loss (the op's own
 * attributes, what the step computes with); false when it has none. */
bool plan_loss_gains(const Plan *p, double gains[3]);

/* A validation graph's inputs and outputs (from its META) and their sizes. */
typedef struct EvalIO {
    int images, boxes, counts, pred, items;   /* tensor ids */
    int batch, imgsz, nc, anchors, max_boxes;
    int h, w;                                 /* the input's height and width (imgsz: the larger) */
    bool end2end;                             /* a v10Detect head: top-k selection instead of NMS */
} EvalIO;
/* False when META lacks one of them or their shapes are not those of a
 * detection model's validation graph (images [B, 3, H, W], boxes [B, M, 5],
 * predictions [B, 4 + nc, anchors]). */
bool plan_eval_io(const Plan *ep, EvalIO *io);

#endif
