/* compiler/summary.h — `yolocc summary`: Ultralytics' per-row table and totals
 * line, or a JSON object; `yolocc state-dict`: parameter and buffer names. */
#ifndef YOLOCC_SUMMARY_H
#define YOLOCC_SUMMARY_H
#include <stdio.h>

#include "lower.h"

void summary_print_table(FILE *f, const Model *m, const ModelSummary *s);
/* Returns a malloc'd JSON string (caller frees), or NULL when out of memory. */
char *summary_json(const Model *m, const ModelSummary *s);
char *state_dict_json(const Model *m);
void state_dict_print(FILE *f, const Model *m);
/* "3,157,200" */
void format_thousands(int64_t v, char *buf, int cap);

#endif
