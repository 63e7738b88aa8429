/* tests/test_plan.c — plan files: a written plan reads back as the same graph
 * and trains identically; every truncation and every flipped byte of a plan
 * is rejected with an error naming an offset; the CLI round trip. */
#include <cjson/cJSON.h>
#include <math.h>

#include "../compiler/plan_write.h"
#include "../compiler/train_compile.h"
#include "../ir/plan_codec.h"
#include "../runtime/plan_read.h"
#include "../runtime/predict/eval_shape.h"
#include "../runtime/synthetic.h"
#include "../runtime/train_step.h"
#include "../runtime/weights.h"
#include "test_util.h"

typedef struct Fresh {
    Arena arena;
    ModelConfig cfg;
    TrainCompiled tc;
    Diag d;
} Fresh;

/* gains: the loss's box, cls and dfl gains (NULL: Ultralytics' defaults) */
static void compile_tiny_gains(Fresh *f, int imgsz, int batch, const double *gains) {
    arena_init(&f->arena, 0);
    diag_init(&f->d, "models/tiny.yaml");
    ModelOptions mo = {0};
    TrainOptions to = {.imgsz = imgsz, .batch = batch, .max_boxes = 8, .optimizer = OPT_SGD, .weight_decay = 5e-4, .fuse = FUSE_FULL};
    if (gains) memcpy(to.gains, gains, sizeof to.gains);
    cr_assert(model_cfg_load(&f->arena, "models/tiny.yaml", &mo, &f->cfg, &f->d) && compile_training(&f->arena, &f->cfg, &to, &f->tc, &f->d), "%s", f->d.msg);
}

static void compile_tiny(Fresh *f, int imgsz, int batch) { compile_tiny_gains(f, imgsz, batch, NULL); }

static void release(Fresh *f) {
    train_compiled_free(&f->tc);
    arena_free(&f->arena);
}

static void attr_bytes(const OpAttrs *a, PlanCodec *c) {
    OpAttrs copy = *a;
    pc_writer(c);
    cr_assert(pc_attrs(c, &copy));
}

Test(plan, round_trip_is_the_same_graph) {
    Fresh f;
    compile_tiny(&f, 64, 2);
    char path[] = "/tmp/yolocc-plan-XXXXXX", err[512];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert(plan_write(path, (PlanPart){&f.tc.m.g, &f.tc.mp, &f.tc.fu, f.tc.meta_json, NULL, 0}, &(PlanPart){&f.tc.ev.em.g, &f.tc.ev.emp, &f.tc.ev.efu, f.tc.ev.meta_json, NULL, 0}, err, sizeof err), "%s", err);
    Plan p;
    cr_assert(plan_read(path, &p, err, sizeof err), "%s", err);
    const Graph *a = &f.tc.m.g, *b = &p.g;
    cr_assert_eq(a->n_tensors, b->n_tensors);
    cr_assert_eq(a->n_ops, b->n_ops);
    for (int i = 0; i < a->n_tensors; i++) {
        const Tensor *x = &a->tensors[i], *y = &b->tensors[i];
        cr_expect(x->kind == y->kind && x->dtype == y->dtype && shape_eq(&x->shape, &y->shape) && x->frozen == y->frozen && x->init == y->init &&
                      x->init_arg == y->init_arg,
                  "tensor %d differs", i);
        cr_expect((!x->name && !y->name) || (x->name && y->name && strcmp(x->name, y->name) == 0), "tensor %d name", i);
    }
    for (int o = 0; o < a->n_ops; o++) {
        const Op *x = &a->ops[o], *y = &b->ops[o];
        cr_expect(x->kind == y->kind && x->n_in == y->n_in && x->n_out == y->n_out && x->row == y->row, "op %d differs", o);
        cr_expect(memcmp(x->in, y->in, sizeof(int) * (size_t)x->n_in) == 0 && memcmp(x->out, y->out, sizeof(int) * (size_t)x->n_out) == 0, "op %d wiring", o);
        PlanCodec ca, cb;
        attr_bytes(&x->a, &ca);
        attr_bytes(&y->a, &cb);
        cr_expect(ca.len == cb.len && memcmp(ca.out, cb.out, ca.len) == 0, "op %d attributes", o);
        pc_free(&ca);
        pc_free(&cb);
    }
    cr_expect_eq(a->n_state, b->n_state);
    cr_expect(memcmp(a->state, b->state, sizeof(int) * (size_t)a->n_state) == 0);
    cr_expect_eq(a->n_outputs, b->n_outputs);

    /* the loaded plan trains exactly like the graph it was written from */
    Plan mem = {.g = f.tc.m.g, .meta = cJSON_Parse(f.tc.meta_json)};
    Plan *plans[2] = {&mem, &p};
    StepResult r[2][2];
    for (int k = 0; k < 2; k++) {
        TrainStep ts;
        cr_assert(train_step_init(&ts, plans[k], err, sizeof err), "%s", err);
        cr_assert(weights_init(&plans[k]->g, ts.it.buf, 7, err, sizeof err), "%s", err);
        synthetic_batch(3, ts.batch, ts.imgsz, ts.nc, ts.max_boxes, train_step_images(&ts), train_step_boxes(&ts), train_step_counts(&ts));
        double lr[3] = {0.01, 0.01, 0.01};
        for (int s = 0; s < 2; s++) cr_assert(train_step_run(&ts, lr, 0.937, &r[k][s], err, sizeof err), "%s", err);
        train_step_free(&ts);
    }
    for (int s = 0; s < 2; s++)
        cr_expect(r[0][s].total == r[1][s].total && r[0][s].box == r[1][s].box && r[0][s].cls == r[1][s].cls,
                  "step %d: %.9g vs %.9g", s, r[0][s].total, r[1][s].total);
    cJSON_Delete(mem.meta);
    plan_free(&p);
    unlink(path);
    release(&f);
}

static unsigned char *tiny_plan_bytes(size_t *len) {
    Fresh f;
    compile_tiny(&f, 32, 1);
    char path[] = "/tmp/yolocc-plan-XXXXXX", err[512];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert(plan_write(path, (PlanPart){&f.tc.m.g, &f.tc.mp, &f.tc.fu, f.tc.meta_json, NULL, 0}, &(PlanPart){&f.tc.ev.em.g, &f.tc.ev.emp, &f.tc.ev.efu, f.tc.ev.meta_json, NULL, 0}, err, sizeof err), "%s", err);
    unsigned char *buf = (unsigned char *)tu_slurp(path, len);
    unlink(path);
    release(&f);
    cr_assert(buf);
    return buf;
}

static void expect_rejected(const unsigned char *buf, size_t len, const char *what, size_t at) {
    Plan p;
    char err[512] = "";
    bool ok = plan_parse(buf, len, &p, err, sizeof err);
    plan_free(&p);
    cr_expect_not(ok, "%s at %zu was accepted", what, at);
    cr_expect(strstr(err, "offset") || strstr(err, "verification"), "%s at %zu: error without an offset: %s", what, at, err);
}

Test(plan, every_truncation_is_rejected) {
    size_t len;
    unsigned char *buf = tiny_plan_bytes(&len);
    Plan p;
    char err[512];
    cr_assert(plan_parse(buf, len, &p, err, sizeof err), "%s", err);
    plan_free(&p);
    size_t step = len > 4000 ? len / 4000 : 1;
    for (size_t n = 0; n < len; n += (n < 256 ? 1 : step)) expect_rejected(buf, n, "truncation", n);
    free(buf);
}

Test(plan, every_flipped_byte_is_rejected) {
    size_t len;
    unsigned char *buf = tiny_plan_bytes(&len);
    size_t step = len > 3000 ? len / 3000 : 1;
    for (size_t at = 0; at < len; at += (at < 512 ? 1 : step)) {
        buf[at] ^= 0x5A;
        expect_rejected(buf, len, "flipped byte", at);
        buf[at] ^= 0x5A;
    }
    free(buf);
}

Test(plan, huge_lengths_are_rejected) {
    size_t len;
    unsigned char *buf = tiny_plan_bytes(&len);
    /* section 3's length field (table entry 2, +16): 2^63, then 2^64 - 1 */
    size_t field = 24 + 2 * 32 + 16;
    uint64_t vals[2] = {(uint64_t)1 << 63, UINT64_MAX};
    for (int k = 0; k < 2; k++) {
        unsigned char save[8];
        memcpy(save, buf + field, 8);
        for (int i = 0; i < 8; i++) buf[field + (size_t)i] = (unsigned char)(vals[k] >> (8 * i));
        expect_rejected(buf, len, "huge section length", field);
        memcpy(buf + field, save, 8);
    }
    /* the header's file size */
    for (int i = 0; i < 8; i++) buf[16 + i] = 0xFF;
    expect_rejected(buf, len, "huge file size", 16);
    free(buf);
}

Test(plan, cli_compile_and_inspect) {
    CliResult r = tu_run("models/tiny.yaml --imgsz 64 --batch 2 -o /tmp/yolocc-cli.plan");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "-> /tmp/yolocc-cli.plan"), "%s", r.out);
    tu_free(&r);
    r = tu_run("inspect /tmp/yolocc-cli.plan --json");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cJSON *j = cJSON_Parse(r.out);
    cr_assert(j, "inspect --json is not JSON");
    const cJSON *meta = cJSON_GetObjectItem(j, "meta");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(meta, "batch")), 2);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(meta, "imgsz")), 64);
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(meta, "parameters")), 210078);
    const cJSON *by_kind = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "ops"), "by_kind");
    cr_expect_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(by_kind, "detect_loss")), 1);
    cr_expect_gt(cJSON_GetNumberValue(cJSON_GetObjectItem(by_kind, "sgd_step")), 90);
    const char *mem_keys[] = {"arena_bytes", "lower_bound_bytes", "naive_bytes", "persistent_bytes", "saved_activation_bytes", "recompute_flops", "step_flops"};
    for (int k = 0; k < 7; k++) cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(j, mem_keys[k])), "inspect --json lacks %s", mem_keys[k]);
    cr_expect_leq(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "lower_bound_bytes")), cJSON_GetNumberValue(cJSON_GetObjectItem(j, "arena_bytes")));
    cJSON *groups = cJSON_GetObjectItem(j, "groups");
    cr_assert(cJSON_IsObject(groups));
    /* by_kernel splits the generated launches and their bytes by kernel: the sums are the totals */
    cJSON *traffic = cJSON_GetObjectItem(groups, "traffic_bytes"), *by_kernel = cJSON_GetObjectItem(traffic, "by_kernel"), *row;
    double launches = 0, bytes = 0;
    int named = 0;
    cJSON_ArrayForEach(row, by_kernel) {
        named += strncmp(row->string, "yk_", 3) == 0;
        launches += cJSON_GetNumberValue(cJSON_GetObjectItem(row, "launches"));
        bytes += cJSON_GetNumberValue(cJSON_GetObjectItem(row, "bytes"));
    }
    cr_expect_gt(named, 3);
    cr_expect_eq(named, cJSON_GetArraySize(by_kernel));
    cr_expect_eq(launches, cJSON_GetNumberValue(cJSON_GetObjectItem(groups, "generated_launches")));
    cr_expect_eq(bytes, cJSON_GetNumberValue(cJSON_GetObjectItem(traffic, "generated")));
    cJSON_Delete(j);
    tu_free(&r);
    r = tu_run("inspect /tmp/yolocc-cli.plan --memory-svg /tmp/yolocc-cli.svg");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "model tiny: nc 3, imgsz 64, batch 2"), "%s", r.out);
    tu_free(&r);
    size_t svg_len;
    char *svg = tu_slurp("/tmp/yolocc-cli.svg", &svg_len);
    cr_assert(svg, "no SVG written");
    cr_expect(strncmp(svg, "<svg ", 5) == 0 && strstr(svg, "</svg>") && strstr(svg, "<rect x="), "not an SVG drawing");
    free(svg);
    unlink("/tmp/yolocc-cli.svg");
    /* not a plan */
    r = tu_run("inspect models/tiny.yaml");
    cr_expect_eq(r.status, 2);
    cr_expect_eq(tu_lines(r.err), 1, "%s", r.err);
    cr_expect(strstr(r.err, "offset 0: not a yolocc plan"), "%s", r.err);
    tu_free(&r);
    /* a failed compile writes no file */
    unlink("/tmp/yolocc-cli-bad.plan");
    r = tu_run("tests/bad/unknown_module.yaml -o /tmp/yolocc-cli-bad.plan");
    cr_expect_eq(r.status, 2);
    cr_expect_neq(access("/tmp/yolocc-cli-bad.plan", F_OK), 0, "a failed compile left an output file");
    tu_free(&r);
    unlink("/tmp/yolocc-cli.plan");
}

/* f's plan at path with its META changed: model_yaml replaced by yaml, or removed (yaml NULL) */
static void write_with_model_yaml(Fresh *f, const char *path, const char *yaml) {
    cJSON *m = cJSON_Parse(f->tc.meta_json);
    cr_assert(m);
    cJSON_DeleteItemFromObjectCaseSensitive(m, "model_yaml");
    if (yaml) cJSON_AddStringToObject(m, "model_yaml", yaml);
    char *meta = cJSON_PrintUnformatted(m), err[512];
    cr_assert(plan_write(path, (PlanPart){&f->tc.m.g, &f->tc.mp, &f->tc.fu, meta, NULL, 0}, &(PlanPart){&f->tc.ev.em.g, &f->tc.ev.emp, &f->tc.ev.efu, f->tc.ev.meta_json, NULL, 0}, err, sizeof err), "%s", err);
    free(meta);
    cJSON_Delete(m);
}

/* Other input shapes come from the model YAML the plan carries (META
 * model_yaml): a 96x64 graph of the same parameters; a plan without it, a
 * YAML that does not parse, a shape off the stride, or another model's YAML
 * are each one error, and nothing is left open. The plan's loss gains are
 * not Ultralytics' defaults, and the other shape's validation loss keeps them. */
Test(plan, other_shapes_come_from_the_model_yaml_and_bad_ones_are_refused) {
    Fresh f;
    const double gains[3] = {3, 0.25, 2};
    compile_tiny_gains(&f, 64, 2, gains);
    char path[] = "/tmp/yolocc-plan-XXXXXX", err[1600];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    char *other = tu_slurp("tests/parity/v11tiny.yaml", NULL);
    cr_assert(other);
    const struct {
        const char *yaml; /* NULL: no model_yaml; "": keep the plan's own */
        int h, w;
        const char *want; /* NULL: builds */
    } cases[] = {
        {"", 96, 64, NULL},
        {NULL, 96, 64, "does not carry its model YAML (compiled by an older yolocc); recompile it"},
        {"nc: [\n", 96, 64, "the validation graph at 96x64: "},
        {"", 100, 64, "height and width must be multiples of the stride 32"},
        {other, 96, 64, "the validation graph at 96x64 has other parameters than the plan's own"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_with_model_yaml(&f, path, cases[k].yaml && !cases[k].yaml[0] ? f.cfg.source : cases[k].yaml);
        Plan p;
        cr_assert(plan_read(path, &p, err, sizeof err), "%s", err);
        EvalShapes s = {.train = &p};
        err[0] = 0;
        EvalGraph *eg = eval_shapes_get(&s, 1, cases[k].h, cases[k].w, err, sizeof err);
        if (!cases[k].want) {
            cr_assert(eg, "case %zu: %s", k, err);
            const Shape *im = &eg->plan->g.tensors[eg->io.images].shape;
            cr_expect(im->d[0] == 1 && im->d[1] == 3 && im->d[2] == 96 && im->d[3] == 64, "images [%lld, %lld, %lld, %lld]", (long long)im->d[0], (long long)im->d[1],
                      (long long)im->d[2], (long long)im->d[3]);
            cr_expect_eq(graph_state_differs(&eg->plan->g, &p.eval->g), -1, "the 96x64 graph's parameters are not the plan's");
            double g[3];
            cr_assert(plan_loss_gains(eg->plan, g), "the 96x64 graph has no detection loss");
            cr_expect(g[0] == 3 && g[1] == 0.25 && g[2] == 2, "the 96x64 graph's loss gains are %g, %g, %g", g[0], g[1], g[2]);
            /* a grid cell per stride of each level, over the 96x64 input */
            const cJSON *st = cJSON_GetObjectItem(p.meta, "strides");
            int cells = 0;
            for (int i = 0; i < cJSON_GetArraySize(st); i++) {
                const int sv = cJSON_GetArrayItem(st, i)->valueint;
                cells += (96 / sv) * (64 / sv);
            }
            cr_expect(cells > 0 && eg->io.anchors == cells, "anchors %d, the strides make %d", eg->io.anchors, cells);
        } else {
            cr_expect_null(eg, "case %zu built", k);
            cr_expect(strstr(err, cases[k].want) && !strchr(err, '\n'), "case %zu: '%s' lacks '%s'", k, err, cases[k].want);
            cr_expect_eq(s.n, 0, "case %zu kept a graph", k);
        }
        if (k == 2) cr_expect(strstr(err, "error:"), "no parser diagnostic in '%s'", err);
        eval_shapes_free(&s);
        plan_free(&p);
    }
    free(other);
    unlink(path);
    release(&f);
}

/* The predictions of `model` (tests/parity) at 64 px from a graph that ran
 * with labels (every op) or without (only what they need), on the generated
 * kernels or the oracle; *skipped: the ops before the predictions' fusion
 * group ends that a run without labels leaves out. */
static float *predictions_of(const Plan *p, bool loss, bool reference, int *skipped, int64_t *n) {
    char err[1024];
    EvalGraph eg = {0};
    cr_assert(eval_graph_open(&eg, p->eval, NULL, reference, false, err, sizeof err), "%s", err);
    cr_assert(weights_init(&p->eval->g, eg.ev.buf, 20251130, err, sizeof err), "%s", err);
    const EvalIO *io = &eg.io;
    float *im = eg.ev.buf[io->images];
    for (int64_t i = 0; i < shape_numel(&p->eval->g.tensors[io->images].shape); i++) im[i] = (float)((i * 2654435761u) % 256) / 255.0f;
    memset(eg.ev.buf[io->boxes], 0, sizeof(float) * (size_t)io->batch * (size_t)io->max_boxes * 5);
    memset(eg.ev.buf[io->counts], 0, sizeof(int64_t) * (size_t)io->batch);
    cr_assert(eval_graph_run(&eg, loss, err, sizeof err), "%s", err);
    *n = shape_numel(&p->eval->g.tensors[io->pred].shape);
    float *out = malloc(sizeof(float) * (size_t)*n);
    memcpy(out, eg.ev.buf[io->pred], sizeof(float) * (size_t)*n);
    /* of the ops a run without labels reaches (the loss after them never runs without labels) */
    *skipped = 0;
    for (int o = 0; o < eg.pred_end; o++) *skipped += eg.skip_pred[o];
    eval_graph_close(&eg);
    return out;
}

/* tests/parity's `model` compiled at 64 px and `batch` into a new folder
 * dir (a mkdtemp template), read back into *p. */
static void parity_plan(const char *model, int batch, char *dir, Plan *p) {
    char args[512], err[1024];
    cr_assert(mkdtemp(dir));
    snprintf(args, sizeof args, "tests/parity/%s.yaml --imgsz 64 --batch %d -o %s/m.plan", model, batch, dir);
    CliResult r = tu_run_bin(tu_env_bin("YOLOCC_FAST_BIN", tu_bin()), args);
    cr_assert_eq(r.status, 0, "%s", r.err);
    tu_free(&r);
    snprintf(args, sizeof args, "%s/m.plan", dir);
    cr_assert(plan_read(args, p, err, sizeof err), "%s", err);
}

static void remove_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_expect_eq(system(cmd), 0);
}

/* A run without labels (predict) leaves out what the predictions do not
 * need: YOLOv10's one-to-many head, nothing of a YOLOv8 head; its
 * predictions equal those of a graph that ran every op, bit for bit, on
 * the generated kernels and on the oracle (each graph fresh, so a skipped
 * op's stale output cannot stand in for it). */
Test(plan, predictions_alone_leave_out_what_they_do_not_need, .timeout = 300) {
    static const char *const models[] = {"v10tiny", "v8tiny"};
    for (int m = 0; m < 2; m++) {
        char dir[] = "/tmp/yolocc-plan-XXXXXX";
        Plan p;
        parity_plan(models[m], 1, dir, &p);
        for (int reference = 0; reference < 2; reference++) {
            int skipped, full_skipped;
            int64_t n, n2;
            float *alone = predictions_of(&p, false, reference, &skipped, &n), *full = predictions_of(&p, true, reference, &full_skipped, &n2);
            cr_assert_eq(n, n2);
            cr_expect_eq(memcmp(alone, full, sizeof(float) * (size_t)n), 0, "%s (%s): the predictions of a run without labels differ", models[m],
                         reference ? "oracle" : "generated kernels");
            if (m == 0) cr_expect_gt(skipped, 10, "%s: the one-to-many head (%d ops left out)", models[m], skipped);
            else cr_expect_eq(skipped, 0, "%s: every op up to the predictions makes them (%d left out)", models[m], skipped);
            cr_log_info("%s (%s): %d of the %d ops up to the predictions left out without labels", models[m], reference ? "oracle" : "generated", skipped,
                        p.eval->g.n_ops);
            free(alone), free(full);
        }
        plan_free(&p);
        remove_dir(dir);
    }
}

/* Opens p's validation graph, unfolded (the weights weights_init makes, the
 * BN statistics and affine parameters then drawn at random) or, with
 * `from` (the unfolded graph), folded on that graph's state; the images
 * a fixed pattern, no labels. */
static void open_for_folding(EvalGraph *eg, const Plan *p, const EvalGraph *from) {
    char err[1024];
    const Graph *g = &p->eval->g;
    void **state = NULL;
    if (from) {
        state = malloc(sizeof *state * (size_t)g->n_state);
        for (int i = 0; i < g->n_state; i++) state[i] = from->ev.buf[g->state[i]];
    }
    memset(eg, 0, sizeof *eg);
    cr_assert(eval_graph_open(eg, p->eval, state, false, from != NULL, err, sizeof err), "%s", err);
    free(state);
    if (!from) {
        cr_assert(weights_init(g, eg->ev.buf, 20251201, err, sizeof err), "%s", err);
        unsigned r = 7;
        for (int o = 0; o < g->n_ops; o++) {
            const Op *op = &g->ops[o];
            if (op->kind != OP_BATCHNORM) continue;
            /* gamma, beta, mean in [0.5, 1.5), [-0.5, 0.5), [-0.5, 0.5); var in [0.5, 2.5) */
            for (int k = 1; k <= 4; k++) {
                float *v = eg->ev.buf[op->in[k]];
                for (int64_t i = 0; i < shape_numel(&g->tensors[op->in[k]].shape); i++) {
                    r = r * 1664525u + 1013904223u;
                    const float u = (float)((r >> 8) & 0xFFFF) / 65536.0f;
                    v[i] = k == 1 ? 0.5f + u : k == 4 ? 0.5f + 2 * u : u - 0.5f;
                }
            }
        }
    }
    float *im = eg->ev.buf[eg->io.images];
    for (int64_t i = 0; i < shape_numel(&g->tensors[eg->io.images].shape); i++) im[i] = (float)((i * 2654435761u) % 256) / 255.0f;
}

/* yolort predict and val run each conv-BN(-activation) group as one folded
 * convolution, as Ultralytics' predictor fuses a .pt model: on v8tiny and
 * v10tiny at 64 px (their own generated kernels; random BN statistics)
 * every conv_bn_act group without a residual add folds, and the folded
 * graph's predictions equal the unfolded graph's within 1e-4 of 1 + |value|
 * (boxes in pixels of the 64 px input, scores in (0, 1)). */
Test(plan, predict_folds_conv_bn_groups_and_predicts_the_same, .timeout = 300) {
    static const char *const models[] = {"v8tiny", "v10tiny"};
    for (int m = 0; m < 2; m++) {
        char dir[] = "/tmp/yolocc-plan-XXXXXX", err[1024];
        Plan p;
        parity_plan(models[m], 2, dir, &p);
        EvalGraph plain, folded;
        open_for_folding(&plain, &p, NULL);
        open_for_folding(&folded, &p, &plain);
        int groups = 0;
        for (int i = 0; i < p.eval->fusion.n_groups; i++)
            groups += p.eval->fusion.groups[i].pattern == PATTERN_CONV_BN_ACT && p.eval->fusion.groups[i].n <= 3;
        cr_expect_eq(plain.fold.n, 0);
        cr_expect(folded.fold.n == groups && groups > 5, "%s: %d groups folded of %d", models[m], folded.fold.n, groups);
        cr_assert(eval_graph_run(&plain, false, err, sizeof err), "%s", err);
        cr_assert(eval_graph_run(&folded, false, err, sizeof err), "%s", err);
        const float *a = plain.ev.buf[plain.io.pred], *b = folded.ev.buf[folded.io.pred];
        double worst = 0;
        for (int64_t i = 0; i < shape_numel(&p.eval->g.tensors[plain.io.pred].shape); i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / (1 + fabs((double)a[i])));
        cr_expect(worst <= 1e-4, "%s: folded predictions differ by %.3g of 1 + |value|", models[m], worst);
        cr_log_info("%s: %d conv-BN groups folded, predictions within %.3g of 1 + |value|", models[m], folded.fold.n, worst);
        eval_graph_close(&folded);
        eval_graph_close(&plain);
        plan_free(&p);
        remove_dir(dir);
    }
}
