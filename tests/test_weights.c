/* tests/test_weights.c — suite `weights`: runtime/weights.c's fresh
 * initialisation (statistics, Detect/BN/DFL/A2C2f constants, determinism),
 * safetensors save/load (round trip, partial transfer, dtype conversion,
 * corrupt files), and the real Ultralytics initial state_dict of the v8tiny
 * parity fixture (its init/ tensors). Owns these tests only; reads fixtures. */
#include <math.h>

#include "../runtime/interp.h"
#include "../runtime/safetensors.h"
#include "../runtime/weights.h"
#include "test_util.h"

#define V8TINY_YAML "tests/parity/v8tiny.yaml"
#define V8TINY_FIXTURE "tests/parity/v8tiny.safetensors"

/* ---- helpers ---- */

typedef struct WModel {
    Compiled c;
    Interp it;
} WModel;

/* Compiles a model file and gives every state tensor zeroed storage. */
static void model_open(WModel *m, const char *path, const char *scale, int64_t nc, int imgsz) {
    cr_assert(tu_compile(&m->c, path, scale, nc, imgsz), "%s: %s", path, m->c.d.msg);
    const Graph *g = &m->c.m.g;
    cr_assert(interp_init(&m->it, g));
    for (int i = 0; i < g->n_state; i++) cr_assert(interp_tensor(&m->it, g->state[i]));
}

static void model_open_text(WModel *m, const char *name, const char *yaml, const char *scale, int64_t nc) {
    cr_assert(tu_compile_text(&m->c, name, yaml, scale, nc), "%s: %s", name, m->c.d.msg);
    const Graph *g = &m->c.m.g;
    cr_assert(interp_init(&m->it, g));
    for (int i = 0; i < g->n_state; i++) cr_assert(interp_tensor(&m->it, g->state[i]));
}

static void model_close(WModel *m) {
    interp_free(&m->it);
    tu_release(&m->c);
}

static void model_init(WModel *m, uint64_t seed) {
    char err[256];
    cr_assert(weights_init(&m->c.m.g, m->it.buf, seed, err, sizeof err), "%s", err);
}

static const Graph *G(const WModel *m) { return &m->c.m.g; }

static int find(const WModel *m, const char *name) {
    const Graph *g = G(m);
    for (int i = 0; i < g->n_state; i++)
        if (strcmp(g->tensors[g->state[i]].name, name) == 0) return g->state[i];
    cr_assert_fail("no state tensor %s", name);
    return -1;
}

static const float *F(const WModel *m, const char *name) { return m->it.buf[find(m, name)]; }
static int64_t N(const WModel *m, int t) { return shape_numel(&G(m)->tensors[t].shape); }
static size_t bytes(const WModel *m, int t) { return (size_t)N(m, t) * (G(m)->tensors[t].dtype == DT_I64 ? 8 : 4); }

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* A copy of all state bytes, to show a failed call changed nothing. */
static unsigned char *snapshot(const WModel *m, size_t *len) {
    size_t n = 0;
    for (int i = 0; i < G(m)->n_state; i++) n += bytes(m, G(m)->state[i]);
    unsigned char *s = malloc(n + 1), *p = s;
    cr_assert(s);
    for (int i = 0; i < G(m)->n_state; i++) {
        int t = G(m)->state[i];
        memcpy(p, m->it.buf[t], bytes(m, t));
        p += bytes(m, t);
    }
    *len = n;
    return s;
}

static bool same_as(const WModel *m, const unsigned char *snap) {
    for (int i = 0; i < G(m)->n_state; i++) {
        int t = G(m)->state[i];
        if (memcmp(snap, m->it.buf[t], bytes(m, t))) return false;
        snap += bytes(m, t);
    }
    return true;
}

typedef struct TmpDir {
    char dir[64], file[128];
} TmpDir;

static void tmp_open(TmpDir *d) {
    snprintf(d->dir, sizeof d->dir, "/tmp/yolocc-weights-XXXXXX");
    cr_assert(mkdtemp(d->dir), "mkdtemp failed");
    snprintf(d->file, sizeof d->file, "%s/w.safetensors", d->dir);
}

static void tmp_close(TmpDir *d) {
    unlink(d->file);
    cr_assert_eq(rmdir(d->dir), 0, "rmdir %s failed", d->dir);
}

static void put_f32(float *dst, const float *src, int n) { memcpy(dst, src, (size_t)n * sizeof *dst); }

/* ---- initialisation ---- */

/* Mean and variance of U(-b, b) are 0 and b^2/3; the sample variance of n
 * draws has relative standard deviation sqrt(0.8/n), so 5% is > 5 sigma at
 * n >= 10000, and the mean's bound is 6 sigma. */
static void check_uniform(const char *name, const float *w, int64_t n, double b, bool stats) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        cr_assert_leq(fabsf(w[i]), (float)b, "%s[%ld] = %g outside +-%g", name, (long)i, w[i], b);
        s += w[i];
        s2 += (double)w[i] * w[i];
    }
    if (!stats) return;
    double mean = s / n, var = s2 / n - mean * mean;
    cr_expect_leq(fabs(mean), 6 * b / sqrt(3.0 * n), "%s: mean %g", name, mean);
    cr_expect_leq(fabs(var / (b * b / 3) - 1), 0.05, "%s: variance %g, want %g", name, var, b * b / 3);
}

Test(weights, init_v8n_statistics) {
    WModel m;
    model_open(&m, "models/yolov8.yaml", "n", 80, 640);
    model_init(&m, 1);
    const Graph *g = G(&m);
    cr_assert_eq(g->n_state, 355, "YOLOv8n has 355 state_dict keys");
    /* Detect bias_init for nc 80 at strides 8, 16, 32 (semantics §7.2) */
    const double cls_bias[3] = {-11.5366, -10.1503, -8.7641};
    int checked = 0, big = 0, head_bias = 0;
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        const float *v = m.it.buf[t->id];
        int64_t n = N(&m, t->id);
        const char *nm = t->name;
        if (strcmp(nm, "model.22.dfl.conv.weight") == 0) {
            cr_assert_eq(n, 16);
            for (int k = 0; k < 16; k++) cr_assert_eq(v[k], (float)k, "DFL bin %d = %g", k, v[k]);
        } else if (t->kind == TK_PARAM && t->shape.nd == 4) {
            double fan_in = (double)t->shape.d[1] * t->shape.d[2] * t->shape.d[3];
            check_uniform(nm, v, n, 1 / sqrt(fan_in), n >= 10000);
            big += n >= 10000;
        } else if (ends_with(nm, ".bn.weight") || ends_with(nm, ".bn.running_var")) {
            for (int64_t k = 0; k < n; k++) cr_assert_eq(v[k], 1.0f, "%s[%ld] = %g", nm, (long)k, v[k]);
        } else if (ends_with(nm, ".bn.bias") || ends_with(nm, ".bn.running_mean")) {
            for (int64_t k = 0; k < n; k++) cr_assert_eq(v[k], 0.0f, "%s[%ld] = %g", nm, (long)k, v[k]);
        } else if (ends_with(nm, ".bn.num_batches_tracked")) {
            cr_assert_eq(t->dtype, DT_I64);
            cr_assert_eq(t->shape.nd, 0);
            cr_assert_eq(*(const int64_t *)m.it.buf[t->id], 0);
        } else if (ends_with(nm, ".2.bias") && strncmp(nm, "model.22.cv", 11) == 0) {
            int level = nm[13] - '0';   /* model.22.cv{2,3}.<level>.2.bias */
            cr_assert(level >= 0 && level < 3 && nm[14] == '.', "%s", nm);
            bool box = nm[11] == '2';
            cr_assert_eq(n, box ? 64 : 80, "%s", nm);
            /* Ultralytics computes math.log in double and stores it as float */
            float want = box ? 1.0f : (float)log(5.0 / 80 / pow(640.0 / (8 << level), 2));
            if (!box) cr_assert_leq(fabs(want - cls_bias[level]), 1e-4, "doc value for level %d", level);
            for (int64_t k = 0; k < n; k++) cr_assert_eq(v[k], want, "%s[%ld] = %.7g, want %.7g", nm, (long)k, v[k], want);
            head_bias++;
        } else {
            cr_assert_fail("unclassified state tensor %s", nm);
        }
        checked++;
    }
    cr_assert_eq(checked, 355);
    cr_assert_eq(head_bias, 6);
    cr_assert_gt(big, 20, "too few big conv weights for the variance check");
    /* the two named in the brief, by name */
    cr_assert_eq(F(&m, "model.22.cv2.0.2.bias")[0], 1.0f);
    cr_assert_leq(fabs(F(&m, "model.22.cv3.0.2.bias")[0] - -11.5366), 1e-4);
    cr_assert_leq(fabs(F(&m, "model.22.cv3.1.2.bias")[79] - -10.1503), 1e-4);
    cr_assert_leq(fabs(F(&m, "model.22.cv3.2.2.bias")[0] - -8.7641), 1e-4);
    model_close(&m);
}

Test(weights, init_is_deterministic) {
    WModel a, b, c;
    model_open(&a, V8TINY_YAML, NULL, 3, 64);
    model_open(&b, V8TINY_YAML, NULL, 3, 64);
    model_open(&c, V8TINY_YAML, NULL, 3, 64);
    model_init(&a, 42);
    model_init(&b, 42);
    model_init(&c, 43);
    size_t len;
    unsigned char *sa = snapshot(&a, &len);
    cr_assert(same_as(&b, sa), "same seed, different bytes");
    cr_assert(!same_as(&c, sa), "different seeds, same bytes");
    /* a re-init overwrites whatever was there */
    memset(b.it.buf[find(&b, "model.0.conv.weight")], 0x7f, bytes(&b, find(&b, "model.0.conv.weight")));
    model_init(&b, 42);
    cr_assert(same_as(&b, sa));
    /* every random tensor differs between seeds; constants do not */
    for (int i = 0; i < G(&a)->n_state; i++) {
        const Tensor *t = &G(&a)->tensors[G(&a)->state[i]];
        bool random = t->init == INIT_KAIMING_UNIFORM || t->init == INIT_BIAS_UNIFORM || t->init == INIT_TRUNC_NORMAL;
        int differ = memcmp(a.it.buf[t->id], c.it.buf[t->id], bytes(&a, t->id));
        if (random) cr_expect(differ, "%s is equal under seeds 42 and 43", t->name);
        else cr_expect(!differ, "%s depends on the seed", t->name);
    }
    free(sa);
    model_close(&a);
    model_close(&b);
    model_close(&c);
}

/* A YOLO12-l-style stem with one A2C2f: scale l makes parse_model append
 * residual=True, mlp_ratio=1.2, so gamma exists. */
static const char *yolo12_yaml =
    "nc: 80\n"
    "scales:\n"
    "  l: [1.00, 1.00, 512]\n"
    "backbone:\n"
    "  - [-1, 1, Conv, [64, 3, 2]]\n"
    "  - [-1, 1, Conv, [128, 3, 2]]\n"
    "  - [-1, 1, Conv, [256, 3, 2]]\n"
    "  - [-1, 2, A2C2f, [256, True, 4]]\n"
    "head:\n"
    "  - [[3], 1, Detect, [nc]]\n";

Test(weights, init_yolo12_ablock_and_gamma) {
    WModel m;
    model_open_text(&m, "yolo12-mini.yaml", yolo12_yaml, "l", 80);
    model_init(&m, 3);
    const Graph *g = G(&m);
    const float *gamma = F(&m, "model.3.gamma");
    cr_assert_eq(N(&m, find(&m, "model.3.gamma")), 256);
    for (int k = 0; k < 256; k++) cr_assert_eq(gamma[k], 0.01f, "gamma[%d] = %g", k, gamma[k]);
    /* ABlock convs: attn.{qkv,proj,pe}, mlp.{0,1}, in both ABlocks of both repeats */
    double s = 0, s2 = 0, n = 0;
    int tensors = 0;
    for (int i = 0; i < g->n_state; i++) {
        const Tensor *t = &g->tensors[g->state[i]];
        bool in_ablock = strncmp(t->name, "model.3.m.", 10) == 0 && ends_with(t->name, ".conv.weight");
        cr_assert_eq(in_ablock, t->init == INIT_TRUNC_NORMAL, "%s: init %d", t->name, (int)t->init);
        if (!in_ablock) continue;
        const float *v = m.it.buf[t->id];
        for (int64_t k = 0; k < N(&m, t->id); k++) {
            cr_assert(v[k] >= -2.0f && v[k] <= 2.0f, "%s[%ld] = %g", t->name, (long)k, v[k]);
            s += v[k];
            s2 += (double)v[k] * v[k];
            n++;
        }
        tensors++;
    }
    cr_assert_eq(tensors, 2 * 2 * 5, "2 repeats x 2 ABlocks x 5 convs");
    double mean = s / n, sd = sqrt(s2 / n - mean * mean);
    cr_expect_leq(fabs(mean), 1e-3, "mean %g", mean);
    cr_expect_leq(fabs(sd / 0.02 - 1), 0.02, "std %g over %.0f values, want 0.02", sd, n);
    /* the A2C2f's own convs stay kaiming-uniform */
    check_uniform("model.3.cv1.conv.weight", F(&m, "model.3.cv1.conv.weight"), N(&m, find(&m, "model.3.cv1.conv.weight")), 1 / 16.0, true);
    model_close(&m);
}

/* ConvTranspose2d: weight [Cin, Cout, k, k], PyTorch fan_in = Cout*k*k, and
 * its bias is U(-b, b) with the same b. */
Test(weights, init_conv_transpose_bias_uniform) {
    static const char *yaml =
        "nc: 2\n"
        "backbone:\n"
        "  - [-1, 1, Conv, [64, 3, 2]]\n"
        "  - [-1, 1, Conv, [64, 3, 2]]\n"
        "  - [-1, 1, Conv, [64, 3, 2]]\n"
        "  - [-1, 1, nn.ConvTranspose2d, [512, 2, 2, 0]]\n"
        "head:\n"
        "  - [[3], 1, Detect, [nc]]\n";
    WModel m;
    model_open_text(&m, "convt.yaml", yaml, NULL, 2);
    model_init(&m, 5);
    int w = find(&m, "model.3.weight"), b = find(&m, "model.3.bias");
    cr_assert_eq(G(&m)->tensors[w].shape.d[0], 64);
    cr_assert_eq(G(&m)->tensors[w].shape.d[1], 512);
    double bound = 1 / sqrt(512.0 * 2 * 2);
    check_uniform("model.3.weight", m.it.buf[w], N(&m, w), bound, true);
    const float *bias = m.it.buf[b];
    double maxabs = 0;
    for (int k = 0; k < 512; k++) {
        cr_assert_leq(fabsf(bias[k]), (float)bound, "bias[%d] = %g", k, bias[k]);
        maxabs = fmax(maxabs, fabsf(bias[k]));
    }
    cr_assert_geq(maxabs, 0.9 * bound, "512 draws of U(-b, b) all inside 0.9b");
    model_close(&m);
}

/* v10Detect's one2one branches are deep copies upstream: same initial values. */
Test(weights, init_v10_one2one_equals_original) {
    const char *corpus = tu_corpus();
    if (!corpus) cr_skip_test("no Ultralytics corpus at ../shared/reference/ultralytics-cfg");
    char path[512];
    snprintf(path, sizeof path, "%s/yolov10n.yaml", corpus);
    WModel m;
    model_open(&m, path, "n", 80, 640);
    model_init(&m, 9);
    int pairs = 0;
    for (int i = 0; i < G(&m)->n_state; i++) {
        const Tensor *t = &G(&m)->tensors[G(&m)->state[i]];
        const char *o = strstr(t->name, ".one2one_");
        if (!o) continue;
        char orig[256];
        snprintf(orig, sizeof orig, "%.*s.%s", (int)(o - t->name), t->name, o + 9);
        int u = find(&m, orig);
        cr_assert_eq(bytes(&m, u), bytes(&m, t->id));
        cr_assert(!memcmp(m.it.buf[u], m.it.buf[t->id], bytes(&m, u)), "%s differs from %s", t->name, orig);
        pairs++;
    }
    cr_assert_gt(pairs, 50);
    model_close(&m);
}

Test(weights, init_rejects_missing_storage) {
    WModel m;
    model_open(&m, V8TINY_YAML, NULL, 3, 64);
    int t = find(&m, "model.4.m.0.cv2.bn.running_var");
    void *keep = m.it.buf[t];
    m.it.buf[t] = NULL;
    char err[256] = "";
    cr_assert(!weights_init(G(&m), m.it.buf, 1, err, sizeof err));
    cr_assert(strstr(err, "model.4.m.0.cv2.bn.running_var"), "%s", err);
    m.it.buf[t] = keep;
    /* nothing written before the check failed */
    const float *w0 = F(&m, "model.0.conv.weight");
    for (int k = 0; k < 8 * 27; k++) cr_assert_eq(w0[k], 0.0f);
    model_close(&m);
}

/* ---- save and load ---- */

Test(weights, save_load_round_trip_is_exact) {
    WModel a, b;
    TmpDir d;
    tmp_open(&d);
    model_open(&a, "models/yolov8.yaml", "n", 80, 640);
    model_open(&b, "models/yolov8.yaml", "n", 80, 640);
    model_init(&a, 11);
    /* a counter that is not 0, so I64 storage is exercised */
    *(int64_t *)a.it.buf[find(&a, "model.0.bn.num_batches_tracked")] = 123456789012345;
    char err[256];
    const char *meta[] = {"format", "pt", "producer", "yolocc test", NULL};
    cr_assert(weights_save(G(&a), a.it.buf, d.file, meta, err, sizeof err), "%s", err);
    WeightsLoadReport rep;
    cr_assert(weights_load(G(&b), b.it.buf, d.file, NULL, &rep, err, sizeof err), "%s", err);
    cr_assert_eq(rep.matched, 355);
    cr_assert_eq(rep.total, 355);
    cr_assert_eq(rep.file_tensors, 355);
    cr_assert_eq(rep.unknown, 0);
    cr_assert_eq(rep.mismatched, 0);
    size_t len;
    unsigned char *sa = snapshot(&a, &len);
    cr_assert(same_as(&b, sa), "loaded bytes differ from saved ones");
    free(sa);
    char line[512];
    weights_report_format(&rep, line, sizeof line);
    cr_assert_str_eq(line, "Transferred 355/355 items from pretrained weights");
    /* the file itself: state_dict order, names, shapes, dtypes, metadata */
    StFile f;
    cr_assert(st_read(d.file, &f, err, sizeof err), "%s", err);
    cr_assert_eq(f.n, 355);
    for (int i = 0; i < f.n; i++) {
        const Tensor *t = &G(&a)->tensors[G(&a)->state[i]];
        cr_assert_str_eq(f.tensors[i].name, t->name);
        cr_assert_eq(f.tensors[i].nd, t->shape.nd, "%s", t->name);
        for (int k = 0; k < t->shape.nd; k++) cr_assert_eq(f.tensors[i].shape[k], t->shape.d[k], "%s", t->name);
        cr_assert_eq(f.tensors[i].dtype, ends_with(t->name, "num_batches_tracked") ? ST_I64 : ST_F32, "%s", t->name);
    }
    cr_assert_eq(f.n_meta, 2);
    cr_assert_str_eq(f.meta_keys[0], "format");
    cr_assert_str_eq(f.meta_values[0], "pt");
    st_free(&f);
    model_close(&a);
    model_close(&b);
    tmp_close(&d);
}

Test(weights, save_failure_reports_path) {
    WModel m;
    model_open(&m, V8TINY_YAML, NULL, 3, 64);
    model_init(&m, 1);
    char err[256] = "";
    cr_assert(!weights_save(G(&m), m.it.buf, "/nonexistent-dir-yolocc/w.safetensors", NULL, err, sizeof err));
    cr_assert(strstr(err, "/nonexistent-dir-yolocc"), "%s", err);
    model_close(&m);
}

Test(weights, load_reports_unknown_and_mismatched) {
    WModel m;
    TmpDir d;
    tmp_open(&d);
    model_open(&m, V8TINY_YAML, NULL, 3, 64);
    model_init(&m, 1);
    float wrong[8 * 3 * 3 * 2] = {0}, bogus[2] = {1, 2}, bnw[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.25f};
    const int64_t s_wrong[4] = {8, 3, 3, 2}, s_bogus[1] = {2}, s_bnw[1] = {8};
    StWriteItem items[] = {
        {"model.0.conv.weight", ST_F32, 4, s_wrong, wrong},   /* model: [8, 3, 3, 3] */
        {"model.99.bogus", ST_F32, 1, s_bogus, bogus},
        {"model.0.bn.weight", ST_F32, 1, s_bnw, bnw},
    };
    char err[256];
    cr_assert(st_write(d.file, items, 3, NULL, err, sizeof err), "%s", err);
    float conv0[8 * 27];
    put_f32(conv0, F(&m, "model.0.conv.weight"), 8 * 27);
    WeightsLoadReport rep;
    cr_assert(weights_load(G(&m), m.it.buf, d.file, "", &rep, err, sizeof err), "%s", err);
    cr_assert_eq(rep.matched, 1);
    cr_assert_eq(rep.total, 195);
    cr_assert_eq(rep.file_tensors, 3);
    cr_assert_eq(rep.unknown, 1);
    cr_assert_str_eq(rep.unknown_names[0], "model.99.bogus");
    cr_assert_eq(rep.mismatched, 1);
    cr_assert_str_eq(rep.mismatched_names[0], "model.0.conv.weight");
    cr_assert(!memcmp(F(&m, "model.0.bn.weight"), bnw, sizeof bnw), "matched tensor not copied");
    cr_assert(!memcmp(F(&m, "model.0.conv.weight"), conv0, sizeof conv0), "mismatched tensor was written");
    char line[512];
    weights_report_format(&rep, line, sizeof line);
    cr_assert_str_eq(line, "Transferred 1/195 items from pretrained weights; ignored 1 not in the model (model.99.bogus); "
                           "ignored 1 with another shape (model.0.conv.weight)");
    model_close(&m);
    tmp_close(&d);
}

static uint16_t f16(float x) {
    /* exact for the values used here (small integers and halves) */
    if (x == 0) return 0;
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)((b >> 16 & 0x8000) | (((b >> 23 & 0xff) - 112) << 10) | (b >> 13 & 0x3ff));
}

Test(weights, load_converts_dtypes) {
    WModel m;
    TmpDir d;
    tmp_open(&d);
    model_open(&m, V8TINY_YAML, NULL, 3, 64);
    const int64_t s8[1] = {8}, s16[1] = {16};
    uint16_t h[8], bf[8];
    double f64[8];
    int64_t i64[8];
    int32_t i32[16];
    for (int k = 0; k < 8; k++) {
        float x = (float)k - 3.5f;
        h[k] = f16(x);
        uint32_t bits;
        memcpy(&bits, &x, 4);
        bf[k] = (uint16_t)(bits >> 16);   /* k - 3.5 is exact in bf16 */
        f64[k] = 0.1 * k;
        i64[k] = 1000 + k;
    }
    for (int k = 0; k < 16; k++) i32[k] = -k;
    float nbt_f = 7.9f;
    double nbt_d = 3e15;
    StWriteItem items[] = {
        {"model.0.bn.weight", ST_F16, 1, s8, h},
        {"model.0.bn.bias", ST_BF16, 1, s8, bf},
        {"model.0.bn.running_mean", ST_F64, 1, s8, f64},
        {"model.0.bn.running_var", ST_I64, 1, s8, i64},
        {"model.1.bn.weight", ST_I32, 1, s16, i32},   /* model.1 has 16 channels */
        {"model.0.bn.num_batches_tracked", ST_F32, 0, NULL, &nbt_f},
        {"model.1.bn.num_batches_tracked", ST_F64, 0, NULL, &nbt_d},
    };
    char err[256];
    cr_assert(st_write(d.file, items, 7, NULL, err, sizeof err), "%s", err);
    WeightsLoadReport rep;
    cr_assert(weights_load(G(&m), m.it.buf, d.file, NULL, &rep, err, sizeof err), "%s", err);
    cr_assert_eq(rep.matched, 7);
    for (int k = 0; k < 8; k++) {
        cr_assert_eq(F(&m, "model.0.bn.weight")[k], (float)k - 3.5f);
        cr_assert_eq(F(&m, "model.0.bn.bias")[k], (float)k - 3.5f);
        cr_assert_eq(F(&m, "model.0.bn.running_mean")[k], (float)(0.1 * k));
        cr_assert_eq(F(&m, "model.0.bn.running_var")[k], (float)(1000 + k));
    }
    cr_assert_eq(F(&m, "model.1.bn.weight")[15], -15.0f);
    cr_assert_eq(*(const int64_t *)m.it.buf[find(&m, "model.0.bn.num_batches_tracked")], 7, "float -> int64 truncates");
    cr_assert_eq(*(const int64_t *)m.it.buf[find(&m, "model.1.bn.num_batches_tracked")], 3000000000000000);
    model_close(&m);
    tmp_close(&d);
}

/* Every way a load can fail leaves the buffers exactly as they were. */
Test(weights, load_failures_leave_buffers_untouched) {
    WModel m;
    TmpDir d;
    tmp_open(&d);
    model_open(&m, V8TINY_YAML, NULL, 3, 64);
    model_init(&m, 2);
    char err[256];
    cr_assert(weights_save(G(&m), m.it.buf, d.file, NULL, err, sizeof err), "%s", err);
    model_init(&m, 3);   /* now the buffers differ from the file */
    size_t len;
    unsigned char *before = snapshot(&m, &len);
    WeightsLoadReport rep = {.matched = -7};

    /* missing file */
    err[0] = 0;
    cr_assert(!weights_load(G(&m), m.it.buf, "/nonexistent-yolocc.safetensors", NULL, &rep, err, sizeof err));
    cr_assert(strstr(err, "/nonexistent-yolocc.safetensors"), "%s", err);

    /* truncated: the data buffer no longer covers the last tensor */
    size_t n;
    char *bytes_ = tu_slurp(d.file, &n);
    cr_assert(bytes_ && n > 100);
    FILE *f = fopen(d.file, "wb");
    cr_assert(f && fwrite(bytes_, 1, n - 6, f) == n - 6 && fclose(f) == 0);
    err[0] = 0;
    cr_assert(!weights_load(G(&m), m.it.buf, d.file, NULL, &rep, err, sizeof err));
    cr_assert(err[0], "no error message");

    /* garbage in the JSON header */
    memcpy(bytes_ + 8, "{\"x\" ", 5);
    f = fopen(d.file, "wb");
    cr_assert(f && fwrite(bytes_, 1, n, f) == n && fclose(f) == 0);
    err[0] = 0;
    cr_assert(!weights_load(G(&m), m.it.buf, d.file, NULL, &rep, err, sizeof err));
    cr_assert(err[0], "no error message");
    free(bytes_);

    /* a valid file whose later tensor cannot be converted: the earlier,
     * convertible tensors must not have been copied either */
    const int64_t s8[1] = {8};
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1}, nan_ = NAN;
    StWriteItem items[] = {
        {"model.0.bn.weight", ST_F32, 1, s8, ones},
        {"model.0.bn.num_batches_tracked", ST_F32, 0, NULL, &nan_},
    };
    cr_assert(st_write(d.file, items, 2, NULL, err, sizeof err), "%s", err);
    err[0] = 0;
    cr_assert(!weights_load(G(&m), m.it.buf, d.file, NULL, &rep, err, sizeof err));
    cr_assert(strstr(err, "model.0.bn.num_batches_tracked"), "%s", err);

    cr_assert(same_as(&m, before), "a failed load changed the buffers");
    cr_assert_eq(rep.matched, -7, "a failed load filled the report");
    free(before);
    model_close(&m);
    tmp_close(&d);
}

/* ---- the real Ultralytics initial state_dict ---- */

/* tests/parity/v8tiny.safetensors holds, under init/, the state_dict of
 * ultralytics.nn.tasks.DetectionModel(v8tiny.yaml, nc=3) as built by
 * Ultralytics 8.3.253 (tests/parity/make_fixtures.py). */
Test(weights, loads_ultralytics_v8tiny_state_dict) {
    WModel m;
    model_open(&m, V8TINY_YAML, NULL, 3, 64);
    char err[256];
    WeightsLoadReport rep;
    cr_assert(weights_load(G(&m), m.it.buf, V8TINY_FIXTURE, "init/", &rep, err, sizeof err), "%s", err);
    cr_assert_eq(rep.total, 195);
    cr_assert_eq(rep.matched, 195, "Transferred %d/%d", rep.matched, rep.total);
    cr_assert_eq(rep.file_tensors, 195);
    cr_assert_eq(rep.unknown, 0, "first unknown: %s", rep.unknown_names[0]);
    cr_assert_eq(rep.mismatched, 0, "first mismatch: %s", rep.mismatched_names[0]);
    StFile f;
    cr_assert(st_read(V8TINY_FIXTURE, &f, err, sizeof err), "%s", err);
    for (int i = 0; i < G(&m)->n_state; i++) {
        const Tensor *t = &G(&m)->tensors[G(&m)->state[i]];
        char key[256];
        snprintf(key, sizeof key, "init/%s", t->name);
        const StTensor *v = st_find(&f, key);
        cr_assert(v && v->nbytes == bytes(&m, t->id), "%s", key);
        cr_assert(!memcmp(v->data, m.it.buf[t->id], v->nbytes), "%s: loaded bytes differ", key);
    }
    st_free(&f);
    /* without the prefix nothing in that file is a state_dict name */
    cr_assert(weights_load(G(&m), m.it.buf, V8TINY_FIXTURE, NULL, &rep, err, sizeof err), "%s", err);
    cr_assert_eq(rep.matched, 0);
    cr_assert_eq(rep.unknown, rep.file_tensors);
    cr_assert_gt(rep.file_tensors, 195);
    model_close(&m);
}

/* The init hints against what Ultralytics really builds: deterministic
 * tensors (BN, DFL, Detect bias_init) are bit-identical, and each random
 * tensor of Ultralytics lies within our bound and fills it (so the bound is
 * right, not merely large enough). */
Test(weights, init_agrees_with_ultralytics_v8tiny) {
    WModel ours, real;
    model_open(&ours, V8TINY_YAML, NULL, 3, 64);
    model_open(&real, V8TINY_YAML, NULL, 3, 64);
    model_init(&ours, 0);
    char err[256];
    WeightsLoadReport rep;
    cr_assert(weights_load(G(&real), real.it.buf, V8TINY_FIXTURE, "init/", &rep, err, sizeof err), "%s", err);
    cr_assert_eq(rep.matched, 195);
    int exact = 0, random = 0;
    for (int i = 0; i < G(&ours)->n_state; i++) {
        const Tensor *t = &G(&ours)->tensors[G(&ours)->state[i]];
        if (t->init == INIT_KAIMING_UNIFORM || t->init == INIT_BIAS_UNIFORM) {
            double fan_in = t->init == INIT_BIAS_UNIFORM ? t->init_arg : (double)t->shape.d[1] * t->shape.d[2] * t->shape.d[3];
            float b = (float)(1 / sqrt(fan_in));
            const float *r = real.it.buf[t->id], *o = ours.it.buf[t->id];
            float rmax = 0, omax = 0;
            for (int64_t k = 0; k < N(&ours, t->id); k++) {
                rmax = fmaxf(rmax, fabsf(r[k]));
                omax = fmaxf(omax, fabsf(o[k]));
            }
            cr_assert_leq(rmax, b, "%s: Ultralytics value %g outside our bound %g", t->name, rmax, b);
            cr_assert_leq(omax, b, "%s", t->name);
            /* 0.9^256 ~ 2e-12: a too-large bound cannot pass by chance */
            if (N(&ours, t->id) >= 256) {
                cr_assert_geq(rmax, 0.9f * b, "%s: Ultralytics max %g, our bound %g", t->name, rmax, b);
                cr_assert_geq(omax, 0.9f * b, "%s: our max %g, bound %g", t->name, omax, b);
            }
            random++;
        } else {
            cr_assert(!memcmp(ours.it.buf[t->id], real.it.buf[t->id], bytes(&ours, t->id)), "%s (init %d) differs from Ultralytics' initial value", t->name, (int)t->init);
            exact++;
        }
    }
    /* 35 kaiming conv weights; the rest: BN (5 x 31), DFL, 4 Detect biases */
    cr_assert_eq(random, 35);
    cr_assert_eq(exact, 160);
    model_close(&ours);
    model_close(&real);
}
