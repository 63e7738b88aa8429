/* ir/print.c — the readable text dump of a graph (`yolocc ir`). One line per
 * input, state tensor and op; attributes shown are the ones each op uses. */
#include <inttypes.h>
#include <stdio.h>

#include "ir.h"

static void print_shape(FILE *f, const Tensor *t) {
    fprintf(f, "%s[", dtype_name(t->dtype));
    for (int i = 0; i < t->shape.nd; i++) fprintf(f, "%s%" PRId64, i ? "," : "", t->shape.d[i]);
    fputc(']', f);
}

static void print_attrs(FILE *f, const Op *op) {
    const OpAttrs *a = &op->a;
    switch (op->kind) {
    case OP_CONV2D:
    case OP_CONV_TRANSPOSE2D:
        fprintf(f, " stride=%d,%d pad=%d,%d,%d,%d dilation=%d,%d groups=%d", a->stride[0], a->stride[1], a->pad[0], a->pad[1],
                a->pad[2], a->pad[3], a->dilation[0], a->dilation[1], a->groups);
        break;
    case OP_MAXPOOL2D:
    case OP_AVGPOOL2D:
        fprintf(f, " kernel=%d,%d stride=%d,%d pad=%d,%d,%d,%d", a->kernel[0], a->kernel[1], a->stride[0], a->stride[1], a->pad[0],
                a->pad[1], a->pad[2], a->pad[3]);
        break;
    case OP_ZEROPAD2D: fprintf(f, " pad=%d,%d,%d,%d", a->pad[0], a->pad[1], a->pad[2], a->pad[3]); break;
    case OP_BATCHNORM: fprintf(f, " eps=%g momentum=%g", a->eps, a->momentum); break;
    case OP_LEAKY_RELU: fprintf(f, " alpha=%g", a->alpha); break;
    case OP_CONCAT: fprintf(f, " axis=%d", a->axis); break;
    case OP_SPLIT:
        fprintf(f, " axis=%d sizes=", a->axis);
        for (int i = 0; i < a->nsplit; i++) fprintf(f, "%s%d", i ? "," : "", a->split[i]);
        break;
    case OP_RESIZE_NEAREST: fprintf(f, " size=%d,%d", a->out_hw[0], a->out_hw[1]); break;
    case OP_ATTENTION:
        fprintf(f, " heads=%d key_dim=%d head_dim=%d area=%d scale=%g", a->heads, a->key_dim, a->head_dim, a->area, a->scale);
        break;
    case OP_DFL: fprintf(f, " reg_max=%d", a->reg_max); break;
    case OP_DIST2BBOX:
        fprintf(f, " xywh=%d strides=", a->xywh);
        for (int i = 0; i < a->nlevels; i++) fprintf(f, "%s%g", i ? "," : "", a->strides[i]);
        break;
    default: break;
    }
}

void graph_print(const Graph *g, void *file) {
    FILE *f = file;
    for (int i = 0; i < g->n_tensors; i++) {
        const Tensor *t = &g->tensors[i];
        if (t->kind == TK_ACTIVATION) continue;
        const char *kind = t->kind == TK_INPUT ? "input " : t->kind == TK_PARAM ? (t->frozen ? "frozen" : "param ") : "buffer";
        fprintf(f, "%s %%%d ", kind, t->id);
        print_shape(f, t);
        fprintf(f, " %s\n", t->name ? t->name : "");
    }
    for (int o = 0; o < g->n_ops; o++) {
        const Op *op = &g->ops[o];
        for (int i = 0; i < op->n_out; i++) fprintf(f, "%s%%%d", i ? ", " : "", op->out[i]);
        fprintf(f, " = %s(", op_def(op->kind)->name);
        for (int i = 0; i < op->n_in; i++) fprintf(f, "%s%%%d", i ? ", " : "", op->in[i]);
        fputc(')', f);
        print_attrs(f, op);
        fputs(" : ", f);
        for (int i = 0; i < op->n_out; i++) {
            if (i) fputs(", ", f);
            print_shape(f, &g->tensors[op->out[i]]);
        }
        fprintf(f, "   # row %d %s\n", op->row, op->scope ? op->scope : "");
    }
    fputs("outputs", f);
    for (int i = 0; i < g->n_outputs; i++) fprintf(f, " %%%d", g->outputs[i]);
    fputc('\n', f);
}
