/* tests/test_models.c — the project's models/ against Ultralytics' published
 * figures (semantics §11: summary table, YOLOv8n/YOLO11n rows, state_dict
 * names), and the scaling rules on hand-written YAMLs. */
#include "test_util.h"

typedef struct Published {
    const char *file, *scale;
    int64_t layers, params, grads;
    const char *gflops;
} Published;

/* Ultralytics 8.3 build-time summaries (docs / YAML comments) */
static const Published PUBLISHED[] = {
    {"models/yolov8.yaml", "n", 225, 3157200, 3157184, "8.9"},     {"models/yolov8.yaml", "s", 225, 11166560, 11166544, "28.8"},
    {"models/yolov8.yaml", "m", 295, 25902640, 25902624, "79.3"},  {"models/yolov8.yaml", "l", 365, 43691520, 43691504, "165.7"},
    {"models/yolov8.yaml", "x", 365, 68229648, 68229632, "258.5"}, {"models/yolo11.yaml", "n", 319, 2624080, 2624064, "6.6"},
    {"models/yolo11.yaml", "s", 319, 9458752, 9458736, "21.7"},    {"models/yolo11.yaml", "m", 409, 20114688, 20114672, "68.5"},
    {"models/yolo11.yaml", "l", 631, 25372160, 25372144, "87.6"},  {"models/yolo11.yaml", "x", 631, 56966176, 56966160, "196.0"},
};

Test(models, published_yolov8_and_yolo11_summaries) {
    for (size_t i = 0; i < sizeof PUBLISHED / sizeof PUBLISHED[0]; i++) {
        const Published *p = &PUBLISHED[i];
        Compiled c;
        cr_assert(tu_compile(&c, p->file, p->scale, 0, 640), "%s %s: %s", p->file, p->scale, c.d.msg);
        char g[32];
        snprintf(g, sizeof g, "%.1f", c.s.gflops);
        cr_expect_eq(c.s.layers, p->layers, "%s%s layers %lld", p->file, p->scale, (long long)c.s.layers);
        cr_expect_eq(c.s.parameters, p->params, "%s%s params %lld", p->file, p->scale, (long long)c.s.parameters);
        cr_expect_eq(c.s.gradients, p->grads, "%s%s grads %lld", p->file, p->scale, (long long)c.s.gradients);
        cr_expect_str_eq(g, p->gflops, "%s%s GFLOPs", p->file, p->scale);
        tu_release(&c);
    }
}

/* §9 worked example: YOLOv8n at s = 32 has 11,071,936 MACs -> 8.857 GFLOPs */
Test(models, yolov8n_gflops_worked_example) {
    Compiled c;
    cr_assert(tu_compile(&c, "models/yolov8.yaml", "n", 0, 640), "%s", c.d.msg);
    cr_expect_float_eq(c.s.gflops, 11071936.0 * 2 / 1e9 * 400, 1e-9);
    tu_release(&c);
    cr_assert(tu_compile(&c, "models/yolo11.yaml", "n", 0, 640), "%s", c.d.msg);
    cr_expect_float_eq(c.s.gflops, 8267920.0 * 2 / 1e9 * 400, 1e-9);
    tu_release(&c);
}

typedef struct RowExpect {
    int64_t params;
    const char *args;
    int c, h;
} RowExpect;

static void check_rows(const char *file, const RowExpect *rows, int n) {
    Compiled c;
    cr_assert(tu_compile(&c, file, "n", 0, 640), "%s", c.d.msg);
    cr_assert_eq(c.cfg.n_rows, n);
    for (int i = 0; i < n; i++) {
        const RowInfo *r = &c.m.rows[i];
        cr_expect_eq(r->params, rows[i].params, "%s row %d params %lld", file, i, (long long)r->params);
        cr_expect_str_eq(r->args, rows[i].args, "%s row %d", file, i);
        const Shape *s = &c.m.g.tensors[r->out[0]].shape;
        cr_expect(s->d[1] == rows[i].c && s->d[2] == rows[i].h, "%s row %d output %lldx%lld", file, i, (long long)s->d[1], (long long)s->d[2]);
    }
    tu_release(&c);
}

/* semantics §11.2 */
Test(models, yolov8n_rows) {
    static const RowExpect rows[] = {
        {464, "[3, 16, 3, 2]", 16, 320},         {4672, "[16, 32, 3, 2]", 32, 160},       {7360, "[32, 32, 1, True]", 32, 160},
        {18560, "[32, 64, 3, 2]", 64, 80},       {49664, "[64, 64, 2, True]", 64, 80},    {73984, "[64, 128, 3, 2]", 128, 40},
        {197632, "[128, 128, 2, True]", 128, 40}, {295424, "[128, 256, 3, 2]", 256, 20},  {460288, "[256, 256, 1, True]", 256, 20},
        {164608, "[256, 256, 5]", 256, 20},      {0, "[None, 2, 'nearest']", 256, 40},    {0, "[1]", 384, 40},
        {148224, "[384, 128, 1]", 128, 40},      {0, "[None, 2, 'nearest']", 128, 80},    {0, "[1]", 192, 80},
        {37248, "[192, 64, 1]", 64, 80},         {36992, "[64, 64, 3, 2]", 64, 40},       {0, "[1]", 192, 40},
        {123648, "[192, 128, 1]", 128, 40},      {147712, "[128, 128, 3, 2]", 128, 20},   {0, "[1]", 384, 20},
        {493056, "[384, 256, 1]", 256, 20},      {897664, "[80, [64, 128, 256]]", 144, 80},
    };
    check_rows("models/yolov8.yaml", rows, 23);
}

/* semantics §11.3 */
Test(models, yolo11n_rows) {
    static const RowExpect rows[] = {
        {464, "[3, 16, 3, 2]", 16, 320},           {4672, "[16, 32, 3, 2]", 32, 160},          {6640, "[32, 64, 1, False, 0.25]", 64, 160},
        {36992, "[64, 64, 3, 2]", 64, 80},         {26080, "[64, 128, 1, False, 0.25]", 128, 80}, {147712, "[128, 128, 3, 2]", 128, 40},
        {87040, "[128, 128, 1, True]", 128, 40},   {295424, "[128, 256, 3, 2]", 256, 20},     {346112, "[256, 256, 1, True]", 256, 20},
        {164608, "[256, 256, 5]", 256, 20},        {249728, "[256, 256, 1]", 256, 20},        {0, "[None, 2, 'nearest']", 256, 40},
        {0, "[1]", 384, 40},                       {111296, "[384, 128, 1, False]", 128, 40}, {0, "[None, 2, 'nearest']", 128, 80},
        {0, "[1]", 256, 80},                       {32096, "[256, 64, 1, False]", 64, 80},    {36992, "[64, 64, 3, 2]", 64, 40},
        {0, "[1]", 192, 40},                       {86720, "[192, 128, 1, False]", 128, 40},  {147712, "[128, 128, 3, 2]", 128, 20},
        {0, "[1]", 384, 20},                       {378880, "[384, 256, 1, True]", 256, 20},  {464912, "[80, [64, 128, 256]]", 144, 80},
    };
    check_rows("models/yolo11.yaml", rows, 24);
}

static const Tensor *find_state(const Compiled *c, const char *name) {
    for (int i = 0; i < c->m.g.n_state; i++) {
        const Tensor *t = &c->m.g.tensors[c->m.g.state[i]];
        if (strcmp(t->name, name) == 0) return t;
    }
    return NULL;
}

static void expect_state(const Compiled *c, const char *name, int nd, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    const Tensor *t = find_state(c, name);
    cr_assert(t, "missing %s", name);
    int64_t d[4] = {d0, d1, d2, d3};
    cr_expect_eq(t->shape.nd, nd, "%s rank", name);
    for (int i = 0; i < nd; i++) cr_expect_eq(t->shape.d[i], d[i], "%s dim %d", name, i);
}

/* semantics §10: names, shapes, counts and order */
Test(models, state_dict_names) {
    Compiled c;
    cr_assert(tu_compile(&c, "models/yolov8.yaml", "n", 0, 640), "%s", c.d.msg);
    int params = 0, buffers = 0;
    for (int i = 0; i < c.m.g.n_state; i++) {
        if (c.m.g.tensors[c.m.g.state[i]].kind == TK_PARAM) params++;
        else buffers++;
    }
    cr_expect_eq(params, 184);
    cr_expect_eq(buffers, 171);
    expect_state(&c, "model.0.conv.weight", 4, 16, 3, 3, 3);
    expect_state(&c, "model.0.bn.running_mean", 1, 16, 0, 0, 0);
    expect_state(&c, "model.0.bn.num_batches_tracked", 0, 0, 0, 0, 0);
    expect_state(&c, "model.2.m.0.cv1.conv.weight", 4, 16, 16, 3, 3);
    expect_state(&c, "model.22.cv2.0.2.bias", 1, 64, 0, 0, 0);
    expect_state(&c, "model.22.cv3.1.1.bn.weight", 1, 80, 0, 0, 0);
    expect_state(&c, "model.22.dfl.conv.weight", 4, 1, 16, 1, 1);
    cr_expect(find_state(&c, "model.22.dfl.conv.weight")->frozen);
    /* PyTorch order: a BN lists weight, bias, running_mean, running_var, num_batches_tracked;
     * C2f registers cv1, cv2 before m */
    const char *first[] = {"model.0.conv.weight", "model.0.bn.weight", "model.0.bn.bias", "model.0.bn.running_mean",
                           "model.0.bn.running_var", "model.0.bn.num_batches_tracked", "model.1.conv.weight"};
    for (int i = 0; i < 7; i++) cr_expect_str_eq(c.m.g.tensors[c.m.g.state[i]].name, first[i]);
    int cv2 = -1, m0 = -1;
    for (int i = 0; i < c.m.g.n_state; i++) {
        const char *n = c.m.g.tensors[c.m.g.state[i]].name;
        if (strcmp(n, "model.2.cv2.conv.weight") == 0) cv2 = i;
        if (strcmp(n, "model.2.m.0.cv1.conv.weight") == 0) m0 = i;
    }
    cr_expect(cv2 >= 0 && m0 > cv2, "model.2.cv2 must precede model.2.m.0 in state_dict order");
    tu_release(&c);

    cr_assert(tu_compile(&c, "models/yolo11.yaml", "n", 0, 640), "%s", c.d.msg);
    cr_expect_eq(c.m.g.n_state, 499);
    expect_state(&c, "model.6.m.0.m.1.cv2.conv.weight", 4, 32, 32, 3, 3);
    expect_state(&c, "model.10.m.0.attn.qkv.conv.weight", 4, 256, 128, 1, 1);
    expect_state(&c, "model.10.m.0.ffn.1.bn.bias", 1, 128, 0, 0, 0);
    expect_state(&c, "model.23.cv3.0.0.0.conv.weight", 4, 64, 1, 3, 3);
    tu_release(&c);
}

/* The trainer overrides nc before parsing, and a raw width equal to nc is not scaled (§2.2). */
Test(models, c2_equals_nc_quirk) {
    Compiled c;
    cr_assert(tu_compile(&c, "models/yolov8.yaml", "n", 64, 640), "%s", c.d.msg);
    cr_expect_eq(c.m.rows[0].params, 1856);
    cr_expect_str_eq(c.m.rows[0].args, "[3, 64, 3, 2]");
    tu_release(&c);
}

/* Python round() is half-to-even: 3*0.5 = 1.5 -> 2, 5*0.5 = 2.5 -> 2, 7*0.5 = 3.5 -> 4 */
Test(models, depth_rounds_half_to_even) {
    Compiled c;
    static const char ok[] =
        "nc: 2\n"
        "depth_multiple: 0.5\n"
        "width_multiple: 0.3\n"
        "backbone:\n"
        "  - [-1, 1, Conv, [64, 3, 2]]\n"
        "  - [-1, 3, C2f, [64, True]]\n"
        "  - [-1, 5, C2f, [64, True]]\n"
        "  - [-1, 7, C3, [64]]\n"
        "head:\n"
        "  - [[3], 1, Detect, [nc]]\n";
    cr_assert(tu_compile_text(&c, "rounding.yaml", ok, NULL, 0), "%s", c.d.msg);
    cr_expect_eq(c.m.rows[1].n, 2);
    cr_expect_eq(c.m.rows[2].n, 2);
    cr_expect_eq(c.m.rows[3].n, 4);
    /* make_divisible(64 * 0.3, 8) = ceil(19.2 / 8) * 8 = 24 */
    cr_expect_str_eq(c.m.rows[0].args, "[3, 24, 3, 2]");
    tu_release(&c);
}

/* C3k2's c3k is forced True at m/l/x only; A2C2f gains residual and mlp_ratio at l/x (§2.3) */
Test(models, per_scale_rewrites) {
    Compiled c;
    cr_assert(tu_compile(&c, "models/yolo11.yaml", "s", 0, 640), "%s", c.d.msg);
    cr_expect_str_eq(c.m.rows[2].args, "[64, 128, 1, False, 0.25]");
    tu_release(&c);
    cr_assert(tu_compile(&c, "models/yolo11.yaml", "m", 0, 640), "%s", c.d.msg);
    cr_expect_str_eq(c.m.rows[2].args, "[128, 256, 1, True, 0.25]");
    cr_expect_not(c.m.legacy);
    tu_release(&c);
    cr_assert(tu_compile(&c, "models/yolov8.yaml", "n", 0, 640), "%s", c.d.msg);
    cr_expect(c.m.legacy, "no C3k2/A2C2f row: legacy Detect head");
    tu_release(&c);
}

/* yolov8n.yaml does not exist: it resolves to yolov8.yaml with scale n (§1.3) */
Test(models, scaled_name_resolves_to_unified_file) {
    CliResult r = tu_run("summary models/yolov8n.yaml");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "YOLOv8n summary: 225 layers, 3,157,200 parameters, 3,157,184 gradients, 8.9 GFLOPs"), "%s", r.out);
    tu_free(&r);
    r = tu_run("summary models/yolo11x.yaml --json");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"parameters\":\t56966176"), "%s", r.out);
    cr_expect(strstr(r.out, "\"gflops_printed\":\t\"196.0\""));
    tu_free(&r);
}

Test(models, imgsz_rounds_up_with_warning) {
    CliResult r = tu_run("summary models/tiny.yaml --imgsz 100 --json");
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_expect(strstr(r.err, "updating to 128"), "%s", r.err);
    cr_expect(strstr(r.out, "\"imgsz\":\t128"));
    tu_free(&r);
}

Test(models, every_project_model_builds_every_scale) {
    const char *files[] = {"models/yolov3.yaml", "models/yolov5.yaml", "models/yolov8.yaml", "models/yolo11.yaml", "models/tiny.yaml"};
    for (int f = 0; f < 5; f++) {
        const char *scales[] = {"n", "s", "m", "l", "x"};
        bool has_scales = strstr(files[f], "yolov5") || strstr(files[f], "yolov8") || strstr(files[f], "yolo11");
        for (int s = 0; s < (has_scales ? 5 : 1); s++) {
            Compiled c;
            cr_assert(tu_compile(&c, files[f], has_scales ? scales[s] : NULL, 0, 640), "%s: %s", files[f], c.d.msg);
            char err[256];
            cr_expect(graph_verify(&c.m.g, err, sizeof err), "%s", err);
            cr_expect_gt(c.s.gflops, 0);
            tu_release(&c);
        }
    }
}
