/* compiler/memory_svg.c — SVG rendering of the memory plan (inspect
 * --memory-svg), written atomically. */
#include "memory_svg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/atomic_file.h"

bool memory_svg_write(const Plan *p, const char *path, char *err, int errcap) {
    const Graph *g = &p->g;
    if (!p->offset || p->arena_bytes <= 0) return snprintf(err, (size_t)errcap, "the plan has no step arena to draw"), false;
    int *last = calloc((size_t)g->n_tensors + 1, sizeof(int));
    char *svg = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&svg, &len);
    if (!last || !f) {
        free(last);
        if (f) fclose(f);
        return snprintf(err, (size_t)errcap, "out of memory"), false;
    }
    graph_last_use(g, last);
    int loss_op = -1;
    for (int o = 0; o < g->n_ops; o++)
        if (g->ops[o].kind == OP_DETECT_LOSS) loss_op = o;
    const double W = 1600, H = 900, left = 70, top = 40;
    double sx = (W - left - 20) / (g->n_ops > 0 ? g->n_ops : 1), sy = (H - top - 40) / (double)p->arena_bytes;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(p->meta, "model"));
    fprintf(f, "<text x=\"%.0f\" y=\"20\">%s: step arena %.1f MB over %d ops (x: op index; y: arena offset). blue forward, red backward, green recomputed</text>\n",
            left, model ? model : "plan", p->arena_bytes / 1e6, g->n_ops);
    for (int t = 0; t < g->n_tensors; t++) {
        if (p->offset[t] < 0) continue;
        int d = g->tensors[t].producer;
        const Op *op = &g->ops[d];
        bool recomputed = loss_op >= 0 && d > loss_op && (op->kind == OP_BN_APPLY || (op_def(op->kind)->grad != NULL && op->kind != OP_DETECT_LOSS));
        const char *colour = recomputed ? "#2ca02c" : loss_op >= 0 && d > loss_op ? "#d62728" : "#1f77b4";
        double bytes = (double)memplan_tensor_bytes(g, t, false, p->precision);
        /* graph outputs live to the end of the step: draw them to the last op */
        int end = last[t] < g->n_ops ? last[t] : g->n_ops - 1;
        double x = left + d * sx, w = (end - d + 1) * sx, y = top + p->offset[t] * sy, h = bytes * sy;
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\" fill-opacity=\"0.6\" stroke=\"%s\" stroke-width=\"0.3\"><title>%%%d %s (%.2f MB), ops %d-%d</title></rect>\n",
                x, y, w > 0.5 ? w : 0.5, h > 0.5 ? h : 0.5, colour, colour, t, op_def(op->kind)->name, bytes / 1e6, d, end);
    }
    if (loss_op >= 0) fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"black\" stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%.0f\">loss</text>\n",
                              left + loss_op * sx, top, left + loss_op * sx, H - 40, left + loss_op * sx + 4, H - 25);
    fprintf(f, "<text x=\"4\" y=\"%.0f\">0</text><text x=\"4\" y=\"%.0f\">%.0f MB</text>\n", top + 10, H - 40, p->arena_bytes / 1e6);
    fprintf(f, "</svg>\n");
    bool ok = fclose(f) == 0;
    free(last);
    if (!ok) {
        free(svg);
        return snprintf(err, (size_t)errcap, "cannot render the SVG"), false;
    }
    const void *chunks[1] = {svg};
    ok = atomic_write(path, chunks, &len, 1, err, errcap);
    free(svg);
    return ok;
}
