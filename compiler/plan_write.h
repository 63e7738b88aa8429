/* compiler/plan_write.h — writes a compiled graph and its metadata as a plan
 * file (format: ir/plan_format.h), atomically. Knows nothing of execution. */
#ifndef YOLOCC_PLAN_WRITE_H
#define YOLOCC_PLAN_WRITE_H
#include "../passes/memplan.h"

/* meta_json: the META section, a JSON object (the caller builds it);
 * mp: the memory plan of g. */
bool plan_write(const char *path, const Graph *g, const MemPlan *mp, const char *meta_json, char *err, int errcap);

#endif
