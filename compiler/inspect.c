/* compiler/inspect.c — plan contents: META, tensor and op counts by kind,
 * the runtime's inputs and outputs. */
#include "../ir/plan_format.h"
#include "inspect.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "../runtime/plan_read.h"
#include "codegen.h"
#include "kernel_ir.h"
#include "memory_svg.h"

static const char *KIND_NAMES[] = {"activations", "inputs", "parameters", "buffers", "optimizer_state"};

static cJSON *shape_array(const Shape *s) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < s->nd; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s->d[i]));
    return a;
}

/* by_kernel's row of one generated kernel: its launches a step and the bytes they move */
static void add_launch(cJSON *by_kernel, const char *name, int64_t bytes) {
    cJSON *row = cJSON_GetObjectItemCaseSensitive(by_kernel, name);
    if (!row) {
        row = cJSON_AddObjectToObject(by_kernel, name);
        cJSON_AddNumberToObject(row, "launches", 0);
        cJSON_AddNumberToObject(row, "bytes", 0);
    }
    cJSON *n = cJSON_GetObjectItemCaseSensitive(row, "launches"), *b = cJSON_GetObjectItemCaseSensitive(row, "bytes");
    cJSON_SetNumberHelper(n, n->valuedouble + 1);
    cJSON_SetNumberHelper(b, b->valuedouble + (double)bytes);
}

/* The bytes a step's launches move (kernel_launch_bytes): the library ops'
 * inputs and outputs, the generated kernels' by skeleton and by fusion pattern;
 * a step cannot take less than "total" over the device's bandwidth. */
static cJSON *traffic_report(const KProgram *kp, const Graph *g, const Fusion *f) {
    int64_t library = 0, skel[KS_COUNT] = {0}, pattern[PATTERN_COUNT] = {0};
    cJSON *r = cJSON_CreateObject(), *by_op = cJSON_CreateObject(), *by_kernel = cJSON_CreateObject();
    for (int gi = 0; gi < kp->n_groups; gi++)
        for (int l = kp->group_first[gi]; l < kp->group_first[gi + 1]; l++) {
            const KLaunch *ln = &kp->launches[l];
            char what[96];
            if (ln->kernel < 0) {
                library += ln->bytes;
                snprintf(what, sizeof what, "library %s", op_def(g->ops[ln->op_lo].kind)->name);
            } else {
                skel[kp->kernels[ln->kernel].skel] += ln->bytes;
                pattern[f->groups[gi].pattern] += ln->bytes;
                snprintf(what, sizeof what, "%s %s (%s ...)", kernel_skel_name(kp->kernels[ln->kernel].skel), group_pattern_name(f->groups[gi].pattern),
                         op_def(g->ops[ln->op_lo].kind)->name);
                add_launch(by_kernel, kp->kernels[ln->kernel].name, ln->bytes);
            }
            cJSON *row = cJSON_GetObjectItemCaseSensitive(by_op, what);
            if (row) cJSON_SetNumberHelper(row, row->valuedouble + (double)ln->bytes);
            else cJSON_AddNumberToObject(by_op, what, (double)ln->bytes);
        }
    int64_t generated = 0;
    for (int i = 0; i < KS_COUNT; i++) generated += skel[i];
    cJSON_AddNumberToObject(r, "total", (double)(library + generated));
    cJSON_AddNumberToObject(r, "library", (double)library);
    cJSON_AddNumberToObject(r, "generated", (double)generated);
    cJSON *by = cJSON_AddObjectToObject(r, "generated_by_skeleton");
    for (int i = 0; i < KS_COUNT; i++) cJSON_AddNumberToObject(by, kernel_skel_name((KSkel)i), (double)skel[i]);
    by = cJSON_AddObjectToObject(r, "generated_by_pattern");
    for (int i = 0; i < PATTERN_COUNT; i++)
        if (pattern[i]) cJSON_AddNumberToObject(by, group_pattern_name((GroupPattern)i), (double)pattern[i]);
    cJSON_AddItemToObject(r, "by_launch_kind", by_op);
    cJSON_AddItemToObject(r, "by_kernel", by_kernel);
    return r;
}

/* groups by kind and by pattern, and the launches they cost (the kernel IR's
 * lowering of them: library calls and generated-kernel launches) */
static cJSON *fusion_report(const Plan *p) {
    const Graph *g = &p->g;
    const Fusion *f = &p->fusion;
    int by_kind[GROUP_KINDS] = {0}, by_pattern[PATTERN_COUNT] = {0}, library = 0, generated = 0;
    for (int i = 0; i < f->n_groups; i++) {
        by_kind[f->groups[i].kind]++;
        by_pattern[f->groups[i].pattern]++;
    }
    KProgram kp;
    char err[256];
    bool lowered = kernel_lower(g, f, p->precision, &kp, err, sizeof err);
    if (lowered) kernel_count_launches(&kp, 0, kp.n_groups, &library, &generated);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "total", f->n_groups);
    cJSON *k = cJSON_AddObjectToObject(r, "by_kind");
    for (int i = 0; i < GROUP_KINDS; i++) cJSON_AddNumberToObject(k, group_kind_name((GroupKind)i), by_kind[i]);
    cJSON *pt = cJSON_AddObjectToObject(r, "by_pattern");
    for (int i = 0; i < PATTERN_COUNT; i++) cJSON_AddNumberToObject(pt, group_pattern_name((GroupPattern)i), by_pattern[i]);
    if (lowered) {
        cJSON_AddNumberToObject(r, "library_calls", library);
        cJSON_AddNumberToObject(r, "generated_launches", generated);
        cJSON_AddNumberToObject(r, "generated_kernels", kp.n_kernels);
        int copies = 0;
        for (int l = 0; l < kp.n_launches; l++) copies += kp.launches[l].kernel >= 0 && kp.kernels[kp.launches[l].kernel].skel == KS_COPY;
        cJSON_AddNumberToObject(r, "copy_launches", copies);
        cJSON_AddItemToObject(r, "traffic_bytes", traffic_report(&kp, g, f));
        kernel_program_free(&kp);
    } else {
        cJSON_AddStringToObject(r, "lowering_error", err);
    }
    int64_t internal = 0;
    for (int t = 0; t < g->n_tensors; t++) internal += f->internal[t];
    cJSON_AddNumberToObject(r, "internal_tensors", (double)internal);
    /* zero-copy concat and split: tensors living inside another's buffer */
    cJSON_AddNumberToObject(r, "views", f->views.n_views);
    return r;
}

/* "kernel_target", "kernels" and (CUDA) "library_kernels": what the KERNELS
 * section holds, without the blob offsets ({"name", "archs", "cubin_bytes",
 * "ptx_bytes"} for CUDA) */
static void kernels_report(cJSON *r, const Plan *p) {
    cJSON *idx = NULL, *out = cJSON_AddArrayToObject(r, "kernels");
    const unsigned char *blobs;
    size_t blobs_len;
    char err[256];
    if (!p->kernels) {
        cJSON_AddStringToObject(r, "kernel_target", "none");
        return;
    }
    if (!codegen_parse_section(p->kernels, p->kernels_len, &idx, &blobs, &blobs_len, err, sizeof err)) {
        cJSON_AddStringToObject(r, "kernel_error", err);
        return;
    }
    cJSON_AddStringToObject(r, "kernel_target", cJSON_GetStringValue(cJSON_GetObjectItem(idx, "target")));
    const cJSON *so = cJSON_GetObjectItem(idx, "so"), *k;
    if (so) cJSON_AddNumberToObject(r, "so_bytes", cJSON_GetNumberValue(cJSON_GetObjectItem(so, "bytes")));
    cJSON_ArrayForEach(k, cJSON_GetObjectItem(idx, "kernels")) {
        cJSON *e = cJSON_Duplicate(k, true);
        cJSON_DeleteItemFromObject(e, "blobs");
        cJSON_AddItemToArray(out, e);
    }
    /* CUDA: the library kernels (pooling, resize, pad/crop, the compute-copy cast), listed alike */
    if (cJSON_GetObjectItem(idx, "library")) {
        cJSON *lib = cJSON_AddArrayToObject(r, "library_kernels");
        cJSON_ArrayForEach(k, cJSON_GetObjectItem(idx, "library")) {
            cJSON *e = cJSON_Duplicate(k, true);
            cJSON_DeleteItemFromObject(e, "blobs");
            cJSON_AddItemToArray(lib, e);
        }
    }
    cJSON_Delete(idx);
}

static cJSON *build_report(const char *path, const Plan *p) {
    const Graph *g = &p->g;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "file", path);
    cJSON_AddNumberToObject(r, "bytes", (double)p->file_bytes);
    cJSON_AddItemToObject(r, "meta", cJSON_Duplicate(p->meta, true));
    int64_t count[5] = {0}, numel[5] = {0}, bytes[5] = {0};
    for (int i = 0; i < g->n_tensors; i++) {
        const Tensor *t = &g->tensors[i];
        count[t->kind]++;
        numel[t->kind] += shape_numel(&t->shape);
        bytes[t->kind] += shape_numel(&t->shape) * (t->dtype == DT_I64 ? 8 : t->dtype == DT_F32 ? 4 : 2);
    }
    cJSON *tensors = cJSON_AddObjectToObject(r, "tensors");
    for (int k = 0; k < 5; k++) {
        cJSON *e = cJSON_AddObjectToObject(tensors, KIND_NAMES[k]);
        cJSON_AddNumberToObject(e, "count", (double)count[k]);
        cJSON_AddNumberToObject(e, "elements", (double)numel[k]);
        cJSON_AddNumberToObject(e, "bytes", (double)bytes[k]);
    }
    /* the memory plan's numbers, also at the top level for scripts */
    const cJSON *mem = cJSON_GetObjectItemCaseSensitive(p->meta, "memory"), *field;
    cJSON_ArrayForEach(field, mem) cJSON_AddNumberToObject(r, field->string, field->valuedouble);
    cJSON_AddStringToObject(r, "precision", precision_name(p->precision));
    int by_kind[OP_COUNT] = {0};
    for (int o = 0; o < g->n_ops; o++) by_kind[g->ops[o].kind]++;
    cJSON *ops = cJSON_AddObjectToObject(r, "ops");
    cJSON_AddNumberToObject(ops, "total", g->n_ops);
    cJSON *bk = cJSON_AddObjectToObject(ops, "by_kind");
    for (int k = 0; k < OP_COUNT; k++)
        if (by_kind[k]) cJSON_AddNumberToObject(bk, op_def((OpKind)k)->name, by_kind[k]);
    cJSON_AddItemToObject(r, "groups", fusion_report(p));
    kernels_report(r, p);
    if (p->eval) {
        cJSON *ev = cJSON_AddObjectToObject(r, "eval");
        cJSON_AddItemToObject(ev, "meta", cJSON_Duplicate(p->eval->meta, true));
        cJSON_AddNumberToObject(ev, "ops", p->eval->g.n_ops);
        cJSON_AddNumberToObject(ev, "arena_bytes", (double)p->eval->arena_bytes);
    }
    cJSON *in = cJSON_AddArrayToObject(r, "inputs");
    for (int i = 0; i < g->n_inputs; i++) {
        const Tensor *t = &g->tensors[g->inputs[i]];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", t->name);
        cJSON_AddStringToObject(e, "dtype", dtype_name(t->dtype));
        cJSON_AddItemToObject(e, "shape", shape_array(&t->shape));
        cJSON_AddItemToArray(in, e);
    }
    return r;
}

int inspect_main(const char *path, bool json, const char *svg_path) {
    Plan p;
    char err[512];
    if (!plan_read(path, &p, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        plan_free(&p);
        return 2;
    }
    if (svg_path && !memory_svg_write(&p, svg_path, err, sizeof err)) {
        fprintf(stderr, "yolocc: error: %s\n", err);
        plan_free(&p);
        return 1;
    }
    cJSON *r = build_report(path, &p);
    int rc = 0;
    if (json) {
        char *txt = cJSON_Print(r);
        if (txt) puts(txt);
        else rc = 1;
        free(txt);
    } else {
        const cJSON *m = p.meta;
        const char *s_model = cJSON_GetStringValue(cJSON_GetObjectItem(m, "model")), *s_opt = cJSON_GetStringValue(cJSON_GetObjectItem(m, "optimizer"));
        printf("plan %s: %zu bytes, format v%d\n", path, p.file_bytes, PLAN_VERSION);
        printf("model %s: nc %g, imgsz %g, batch %g, max_boxes %g, target %s, precision %s, optimizer %s\n", s_model ? s_model : "?",
               cJSON_GetNumberValue(cJSON_GetObjectItem(m, "nc")), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "imgsz")),
               cJSON_GetNumberValue(cJSON_GetObjectItem(m, "batch")), cJSON_GetNumberValue(cJSON_GetObjectItem(m, "max_boxes")),
               cJSON_GetStringValue(cJSON_GetObjectItem(m, "target")), cJSON_GetStringValue(cJSON_GetObjectItem(m, "precision")), s_opt ? s_opt : "?");
        double gains[3];
        if (plan_loss_gains(&p, gains)) printf("loss gains: box %g, cls %g, dfl %g\n", gains[0], gains[1], gains[2]);
        printf("memory (%s): arena %.1f MB (lower bound %.1f MB, no reuse %.1f MB), persistent %.1f MB, inputs %.1f MB, saved activations %.1f MB; step %.3f GFLOP\n",
               precision_name(p.precision), cJSON_GetNumberValue(cJSON_GetObjectItem(r, "arena_bytes")) / 1e6,
               cJSON_GetNumberValue(cJSON_GetObjectItem(r, "lower_bound_bytes")) / 1e6, cJSON_GetNumberValue(cJSON_GetObjectItem(r, "naive_bytes")) / 1e6,
               cJSON_GetNumberValue(cJSON_GetObjectItem(r, "persistent_bytes")) / 1e6, cJSON_GetNumberValue(cJSON_GetObjectItem(r, "input_bytes")) / 1e6,
               cJSON_GetNumberValue(cJSON_GetObjectItem(r, "saved_activation_bytes")) / 1e6, cJSON_GetNumberValue(cJSON_GetObjectItem(r, "step_flops")) / 1e9);
        const cJSON *t = cJSON_GetObjectItem(r, "tensors");
        printf("tensors:");
        for (int k = 0; k < 5; k++) {
            const cJSON *e = cJSON_GetObjectItem(t, KIND_NAMES[k]);
            printf(" %s %g (%.0f elements)%s", KIND_NAMES[k], cJSON_GetNumberValue(cJSON_GetObjectItem(e, "count")),
                   cJSON_GetNumberValue(cJSON_GetObjectItem(e, "elements")), k < 4 ? "," : "\n");
        }
        const cJSON *ops = cJSON_GetObjectItem(r, "ops"), *op;
        printf("ops: %g\n", cJSON_GetNumberValue(cJSON_GetObjectItem(ops, "total")));
        cJSON_ArrayForEach(op, cJSON_GetObjectItem(ops, "by_kind")) printf("  %-20s %g\n", op->string, op->valuedouble);
        printf("inputs:");
        for (int i = 0; i < p.g.n_inputs; i++) {
            const Tensor *x = &p.g.tensors[p.g.inputs[i]];
            printf(" %s %s[", x->name, dtype_name(x->dtype));
            for (int k = 0; k < x->shape.nd; k++) printf("%s%" PRId64, k ? "," : "", x->shape.d[k]);
            printf("]");
        }
        printf("\n");
        const cJSON *ks = cJSON_GetObjectItem(r, "kernels"), *gr = cJSON_GetObjectItem(r, "groups");
        printf("groups: %g (library calls %g, generated launches %g of %g kernels); compiled kernels: %d for %s\n", cJSON_GetNumberValue(cJSON_GetObjectItem(gr, "total")),
               cJSON_GetNumberValue(cJSON_GetObjectItem(gr, "library_calls")), cJSON_GetNumberValue(cJSON_GetObjectItem(gr, "generated_launches")),
               cJSON_GetNumberValue(cJSON_GetObjectItem(gr, "generated_kernels")), cJSON_GetArraySize(ks),
               cJSON_GetStringValue(cJSON_GetObjectItem(r, "kernel_target")) ? cJSON_GetStringValue(cJSON_GetObjectItem(r, "kernel_target")) : "?");
        const cJSON *tr = cJSON_GetObjectItem(gr, "traffic_bytes"), *tp;
        if (tr) {
            printf("device memory a step moves: at least %.3f GB (library ops' inputs and outputs %.3f GB, generated kernels %.3f GB:",
                   cJSON_GetNumberValue(cJSON_GetObjectItem(tr, "total")) / 1e9, cJSON_GetNumberValue(cJSON_GetObjectItem(tr, "library")) / 1e9,
                   cJSON_GetNumberValue(cJSON_GetObjectItem(tr, "generated")) / 1e9);
            cJSON_ArrayForEach(tp, cJSON_GetObjectItem(tr, "generated_by_pattern")) printf(" %s %.3f", tp->string, tp->valuedouble / 1e9);
            printf(")\n");
        }
        const cJSON *lib = cJSON_GetObjectItem(r, "library_kernels"), *lk;
        if (lib) {
            printf("library kernels: %d", cJSON_GetArraySize(lib));
            cJSON_ArrayForEach(lk, lib) printf("%s%s", lk == lib->child ? " (" : ", ", cJSON_GetStringValue(cJSON_GetObjectItem(lk, "name")));
            printf("%s\n", cJSON_GetArraySize(lib) ? ")" : "");
        }
        if (p.eval)
            printf("validation graph: batch %g, %d ops, arena %.1f MB\n", cJSON_GetNumberValue(cJSON_GetObjectItem(p.eval->meta, "batch")), p.eval->g.n_ops,
                   (double)p.eval->arena_bytes / 1e6);
    }
    cJSON_Delete(r);
    plan_free(&p);
    return rc;
}
