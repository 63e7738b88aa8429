/* compiler/plan_write.h — writes a compiled graph and its metadata as a plan
 * file (format: ir/plan_format.h), atomically. Knows nothing of execution. */
#ifndef YOLOCC_PLAN_WRITE_H
#define YOLOCC_PLAN_WRITE_H
#include "../passes/fuse.h"
#include "../passes/memplan.h"

/* One graph of a plan: g, its fusion groups and memory plan, and the META section (a JSON
 * object the caller builds). */
typedef struct PlanPart {
    const Graph *g;
    const MemPlan *mp;
    const Fusion *fu;
    const char *meta_json;
    const unsigned char *kernels;   /* the KERNELS payload (compiler/codegen.h), or NULL */
    size_t kernels_len;
} PlanPart;

/* Writes the training plan; eval (may be NULL) is the validation graph,
 * stored as a complete plan inside the EVAL section. */
bool plan_write(const char *path, PlanPart train, const PlanPart *eval, char *err, int errcap);
/* One graph's plan bytes in memory (no EVAL section), for a reader in the
 * same process; *out is the caller's to free. */
bool plan_encode_bytes(const PlanPart *part, unsigned char **out, size_t *len, char *err, int errcap);

#endif
