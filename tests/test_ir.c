/* tests/test_ir.c — the op registry's shape and MAC rules on hand-built
 * graphs, the verifier's rejections, and the text dump. */
#include "test_util.h"

static int conv(Graph *g, int x, int co, int k, int s, int p, int groups) {
    int ci = (int)g->tensors[x].shape.d[1];
    char name[32];
    snprintf(name, sizeof name, "w%d", g->n_tensors);
    int w = graph_add_state(g, TK_PARAM, arena_strdup(g->arena, name), shape4(co, ci / groups, k, k), DT_F32);
    int in[2] = {x, w};
    OpAttrs a = {.stride = {s, s}, .pad = {p, p, p, p}, .dilation = {1, 1}, .groups = groups};
    int op = graph_add_op(g, OP_CONV2D, in, 2, &a, 1, 0, "t");
    return op < 0 ? -1 : g->ops[op].out[0];
}

Test(ir, conv_shape_rule) {
    Arena a;
    arena_init(&a, 0);
    Graph g;
    graph_init(&g, &a);
    int x = graph_add_input(&g, "x", shape4(2, 8, 17, 17), DT_F32);
    int y = conv(&g, x, 16, 3, 2, 1, 1);
    cr_assert(y >= 0, "%s", g.err);
    cr_expect_eq(g.tensors[y].shape.d[2], 9); /* floor((17 + 2 - 3) / 2) + 1 */
    int z = conv(&g, y, 16, 3, 1, 1, 16);
    cr_assert(z >= 0, "%s", g.err);
    /* MACs: out_numel * (Cin / groups) * k*k */
    cr_expect_float_eq(op_def(OP_CONV2D)->thop_macs(&g, &g.ops[1]), 2.0 * 16 * 9 * 9 * 1 * 9, 1e-9);
    cr_expect_eq(conv(&g, y, 10, 3, 1, 1, 4), -1, "groups must divide channels");
    cr_expect(strstr(g.err, "groups"), "%s", g.err);
    cr_expect_eq(conv(&g, y, 16, 11, 1, 0, 1), -1, "an 11x11 kernel does not fit 9x9");
    char err[256];
    cr_expect(graph_verify(&g, err, sizeof err), "%s", err);
    arena_free(&a);
}

Test(ir, concat_and_split_rules) {
    Arena a;
    arena_init(&a, 0);
    Graph g;
    graph_init(&g, &a);
    int x = graph_add_input(&g, "x", shape4(1, 6, 4, 4), DT_F32);
    int y = graph_add_input(&g, "y", shape4(1, 2, 8, 8), DT_F32);
    OpAttrs cat = {.axis = 1};
    int in[2] = {x, y};
    cr_expect_eq(graph_add_op(&g, OP_CONCAT, in, 2, &cat, 1, 0, NULL), -1);
    cr_expect(strstr(g.err, "dimension 2"), "%s", g.err);
    OpAttrs sp = {.axis = 1, .nsplit = 2, .split = {4, 2}};
    int op = graph_add_op(&g, OP_SPLIT, &x, 1, &sp, 2, 0, NULL);
    cr_assert(op >= 0, "%s", g.err);
    cr_expect_eq(g.tensors[g.ops[op].out[0]].shape.d[1], 4);
    cr_expect_eq(g.tensors[g.ops[op].out[1]].shape.d[1], 2);
    sp.split[1] = 3;
    cr_expect_eq(graph_add_op(&g, OP_SPLIT, &x, 1, &sp, 2, 0, NULL), -1, "sizes must add up");
    arena_free(&a);
}

Test(ir, attention_rule) {
    Arena a;
    arena_init(&a, 0);
    Graph g;
    graph_init(&g, &a);
    /* YOLO11n C2PSA: 128 channels, 2 heads, key_dim 32, head_dim 64 -> qkv 256 */
    int x = graph_add_input(&g, "x", shape4(1, 256, 20, 20), DT_F32);
    OpAttrs at = {.heads = 2, .key_dim = 32, .head_dim = 64, .area = 1, .scale = 1};
    int op = graph_add_op(&g, OP_ATTENTION, &x, 1, &at, 2, 0, NULL);
    cr_assert(op >= 0, "%s", g.err);
    cr_expect_eq(g.tensors[g.ops[op].out[0]].shape.d[1], 128);
    at.area = 7; /* 400 tokens do not cut into 7 areas */
    cr_expect_eq(graph_add_op(&g, OP_ATTENTION, &x, 1, &at, 2, 0, NULL), -1);
    arena_free(&a);
}

Test(ir, verifier_rejects_broken_graphs) {
    Arena a;
    arena_init(&a, 0);
    Graph g;
    graph_init(&g, &a);
    int x = graph_add_input(&g, "x", shape4(1, 4, 8, 8), DT_F32);
    int y = conv(&g, x, 4, 3, 1, 1, 1);
    int z = conv(&g, y, 4, 3, 1, 1, 1);
    cr_assert(z >= 0);
    char err[256];
    cr_assert(graph_verify(&g, err, sizeof err), "%s", err);
    /* use before definition: swap the two ops */
    Op t = g.ops[0];
    g.ops[0] = g.ops[1];
    g.ops[1] = t;
    g.ops[0].id = 0;
    g.ops[1].id = 1;
    cr_expect_not(graph_verify(&g, err, sizeof err));
    cr_expect(strstr(err, "before it is produced"), "%s", err);
    g.ops[1] = g.ops[0];
    g.ops[0] = t;
    g.ops[0].id = 0;
    g.ops[1].id = 1;
    cr_assert(graph_verify(&g, err, sizeof err), "%s", err);
    /* a stored shape that disagrees with the shape rule */
    g.tensors[z].shape.d[2] = 7;
    cr_expect_not(graph_verify(&g, err, sizeof err));
    cr_expect(strstr(err, "shape"), "%s", err);
    g.tensors[z].shape.d[2] = 8;
    /* two producers of one tensor */
    g.ops[1].out[0] = y;
    cr_expect_not(graph_verify(&g, err, sizeof err));
    g.ops[1].out[0] = z;
    /* duplicate state names */
    g.tensors[3].name = g.tensors[1].name; /* both conv weights */
    cr_expect_not(graph_verify(&g, err, sizeof err));
    cr_expect(strstr(err, "used twice"), "%s", err);
    arena_free(&a);
}

Test(ir, every_registered_op_has_rules) {
    for (int k = 0; k < OP_COUNT; k++) {
        const OpDef *d = op_def((OpKind)k);
        cr_assert(d && d->name && d->infer && d->flops && d->thop_macs, "op %d", k);
        cr_expect(d->min_in >= 0 && d->max_in >= d->min_in, "%s arity", d->name);
    }
}

Test(ir, text_dump) {
    CliResult r = tu_run("ir models/tiny.yaml --imgsz 64");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "input  %0 f32[1,3,64,64] images"), "%.200s", r.out);
    cr_expect(strstr(r.out, "param  %1 f32[8,3,3,3] model.0.conv.weight"));
    cr_expect(strstr(r.out, "frozen"), "the DFL weight is listed as frozen");
    cr_expect(strstr(r.out, "= conv2d(%0, %1) stride=2,2 pad=1,1,1,1 dilation=1,1 groups=1 : f32[1,8,32,32]   # row 0 model.0.conv"), "%.400s", r.out);
    cr_expect(strstr(r.out, "\noutputs %"));
    tu_free(&r);
}
