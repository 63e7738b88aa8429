/* tests/test_conv_gemm.c — 1x1 convolutions as cuBLASLt products (runtime/cuda/conv_gemm.c)
 * without a GPU: each product carried out on the host with cuBLAS's meaning
 * (tests/test_gemm_host.h) equals the convolution summed from its definition, forward and both
 * gradients, NCHW and channels last, packed and with images apart, fp32/bf16/fp16, overwriting
 * and accumulating; the convolutions it refuses; and every 1x1 convolution of YOLOv8n's plans
 * as a product the real cuBLASLt describes. Owns no runtime code. */
#include <math.h>

#include "../passes/memplan.h"
#include "../runtime/cuda/conv_gemm.h"
#include "../runtime/cuda/cublaslt_gemm.h"
#include "../runtime/cuda/cuda_abi.h"
#include "test_gemm_host.h"
#include "test_gpu.h"

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static float uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

static int dnn(DType t) { return t == DT_BF16 ? DNN_DATA_BFLOAT16 : t == DT_F16 ? DNN_DATA_HALF : DNN_DATA_FLOAT; }

static ConvKey key_1x1(int dir, bool accumulate, bool cl, int64_t n, int64_t ci, int64_t co, int64_t h, int64_t w, int64_t x_gap, int64_t y_gap, DType io,
                       DType wt) {
    ConvKey k;
    memset(&k, 0, sizeof k);
    k.dir = dir, k.accumulate = accumulate, k.channels_last = cl;
    k.x_type = k.y_type = dnn(io), k.w_type = dnn(wt);
    k.n = n, k.ci = ci, k.h = h, k.w = w, k.co = co, k.ho = h, k.wo = w;
    k.kh = k.kw = k.groups = 1;
    k.stride[0] = k.stride[1] = k.dilation[0] = k.dilation[1] = 1;
    k.x_bs = x_gap ? h * w * ci + x_gap : 0, k.y_bs = y_gap ? h * w * co + y_gap : 0;
    k.x_align = k.y_align = 16;
    return k;
}

/* A convolution tensor as stored: element (image b, channel c, pixel p) at at(). */
typedef struct Stored {
    DType type;
    int64_t chans, pixels, bs, images;
    bool cl;
    unsigned char *bytes;
    int64_t span;
} Stored;

static int64_t at(const Stored *s, int64_t b, int64_t c, int64_t p) { return b * s->bs + (s->cl ? p * s->chans + c : c * s->pixels + p); }

static void stored_fill(Stored *s, DType type, int64_t images, int64_t chans, int64_t pixels, int64_t bs, bool cl) {
    *s = (Stored){type, chans, pixels, bs ? bs : chans * pixels, images, cl, NULL, 0};
    s->span = (images - 1) * s->bs + chans * pixels;
    s->bytes = malloc((size_t)s->span * gemm_host_esz(type));
    cr_assert_not_null(s->bytes);
    /* the gaps between images hold a pattern the product must leave alone */
    memset(s->bytes, 0x5a, (size_t)s->span * gemm_host_esz(type));
    for (int64_t b = 0; b < images; b++)
        for (int64_t c = 0; c < chans; c++)
            for (int64_t p = 0; p < pixels; p++) {
                float v = uniform();
                cuda_f32_to_storage(type, &v, s->bytes + (size_t)at(s, b, c, p) * gemm_host_esz(type), 1);
            }
}

static double stored_get(const Stored *s, int64_t b, int64_t c, int64_t p) {
    float v;
    cuda_storage_to_f32(s->type, s->bytes + (size_t)at(s, b, c, p) * gemm_host_esz(s->type), &v, 1);
    return v;
}

static bool in_gap(const Stored *s, int64_t e) { return e % s->bs >= s->chans * s->pixels; }

/* The convolution of key k summed in double from the stored values (d's old values added when
 * accumulating) against the ConvGemm run on the host: worst error over d's largest value. */
static double check_key(const ConvKey *k, const char *what) {
    char err[256];
    ConvGemm cg;
    cr_assert(conv_gemm_from_key(k, &cg, err, sizeof err), "%s: %s", what, err);
    const int64_t P = k->h * k->w;
    Stored x, y, w;
    stored_fill(&x, conv_gemm_dtype(k->x_type), k->n, k->ci, P, k->x_bs, k->channels_last);
    stored_fill(&y, conv_gemm_dtype(k->y_type), k->n, k->co, P, k->y_bs, k->channels_last);
    /* weights: K x C for a 1x1 kernel in either layout (KCRS and KRSC agree) */
    stored_fill(&w, conv_gemm_dtype(k->w_type), 1, k->co, k->ci, 0, false);
    Stored *t[3] = {&x, &w, &y}, *d = t[cg.d];
    Stored old = *d;
    old.bytes = malloc((size_t)d->span * gemm_host_esz(d->type));
    cr_assert_not_null(old.bytes);
    memcpy(old.bytes, d->bytes, (size_t)d->span * gemm_host_esz(d->type));
    gemm_host_run(&cg.g, t[cg.a]->bytes, t[cg.b]->bytes, d->bytes);

    double worst = 0, largest = 0;
    int64_t images = k->dir == CONV_WGRAD ? 1 : k->n, chans = d->chans, pixels = d->pixels;
    double *want = malloc(sizeof(double) * (size_t)(images * chans * pixels));
    cr_assert_not_null(want);
    for (int64_t b = 0; b < images; b++)
        for (int64_t c = 0; c < chans; c++)
            for (int64_t p = 0; p < pixels; p++) {
                double s = k->accumulate ? stored_get(&old, b, c, p) : 0;
                if (k->dir == CONV_FWD)
                    for (int64_t q = 0; q < k->ci; q++) s += stored_get(&w, 0, c, q) * stored_get(&x, b, q, p);
                else if (k->dir == CONV_DGRAD)
                    for (int64_t q = 0; q < k->co; q++) s += stored_get(&w, 0, q, c) * stored_get(&y, b, q, p);
                else /* dw[c = out channel][p = in channel] */
                    for (int64_t im = 0; im < k->n; im++)
                        for (int64_t q = 0; q < P; q++) s += stored_get(&y, im, c, q) * stored_get(&x, im, p, q);
                want[(b * chans + c) * pixels + p] = s;
                largest = fmax(largest, fabs(s));
            }
    for (int64_t b = 0; b < images; b++)
        for (int64_t c = 0; c < chans; c++)
            for (int64_t p = 0; p < pixels; p++) {
                double got = stored_get(d, b, c, p), e = isfinite(got) ? fabs(got - want[(b * chans + c) * pixels + p]) / fmax(largest, 1e-30) : INFINITY;
                worst = fmax(worst, e);
            }
    const size_t es = gemm_host_esz(d->type);
    int64_t gap_changed = 0;
    for (int64_t e = 0; e < d->span; e++) gap_changed += in_gap(d, e) && memcmp(d->bytes + e * es, old.bytes + e * es, es) != 0;
    cr_expect_eq(gap_changed, 0, "%s: %lld elements between the images changed", what, (long long)gap_changed);
    free(want);
    free(old.bytes);
    for (int i = 0; i < 3; i++) free(t[i]->bytes);
    return worst;
}

static const char *tname(DType t) { return t == DT_BF16 ? "bf16" : t == DT_F16 ? "fp16" : "fp32"; }

/* Odd sizes, each direction and layout, packed and with images apart, overwriting and
 * accumulating: within a few roundings of the output's type of its largest value. */
static void each_key(DType io, double tol) {
    static const char *const dirs[] = {"forward", "dgrad", "wgrad"};
    double worst = 0;
    int keys = 0;
    for (int dir = CONV_FWD; dir <= CONV_WGRAD; dir++)
        for (int v = 0; v < 8; v++) {
            const bool cl = v & 1, acc = v & 2, gap = v & 4;
            /* NCHW weight gradients take one image; channels last ones take packed images */
            const int64_t n = dir == CONV_WGRAD && !cl ? 1 : 3;
            if (dir == CONV_WGRAD && cl && gap) continue;
            ConvKey k = key_1x1(dir, acc, cl, n, 5, 7, 3, 4, gap ? 9 : 0, gap ? 13 : 0, io, io);
            /* the weight gradient of a 16-bit plan lands in fp32, as memplan stores parameter gradients */
            if (dir == CONV_WGRAD && io != DT_F32 && !acc) k.w_type = DNN_DATA_FLOAT;
            char what[128];
            snprintf(what, sizeof what, "%s %s %s%s%s", dirs[dir], tname(io), cl ? "NHWC" : "NCHW", acc ? " accumulating" : "", gap ? " images apart" : "");
            const double e = check_key(&k, what), t = conv_gemm_dtype(dir == CONV_WGRAD ? k.w_type : k.x_type) == DT_F32 ? 2e-6 : tol;
            cr_expect_leq(e, t, "%s: worst error %.3g of the largest (tolerance %.3g)", what, e, t);
            worst = fmax(worst, e);
            keys++;
        }
    cr_log_info("%s: %d keys, worst error %.3g of the largest", tname(io), keys, worst);
}

Test(conv_gemm, products_equal_the_convolution_fp32) { each_key(DT_F32, 2e-6); }
Test(conv_gemm, products_equal_the_convolution_bf16) { each_key(DT_BF16, 8e-3); }
Test(conv_gemm, products_equal_the_convolution_fp16) { each_key(DT_F16, 1e-3); }

Test(conv_gemm, convolutions_that_are_no_single_product_are_refused) {
    char err[256];
    ConvGemm cg;
    ConvKey k = key_1x1(CONV_FWD, false, true, 2, 4, 8, 5, 5, 0, 0, DT_BF16, DT_BF16);
    cr_assert(conv_gemm_from_key(&k, &cg, err, sizeof err), "%s", err);
    ConvKey wide = k, strided = k, padded = k, grouped = k, nchw_wgrad = k, apart_wgrad = k, mixed = k;
    wide.kh = wide.kw = 3;
    strided.stride[0] = strided.stride[1] = 2, strided.ho = strided.wo = 3;
    padded.pre_pad[0] = padded.post_pad[0] = 1, padded.ho = 7;
    grouped.groups = 2;
    nchw_wgrad.dir = CONV_WGRAD, nchw_wgrad.channels_last = 0;
    apart_wgrad.dir = CONV_WGRAD, apart_wgrad.x_bs = 5 * 5 * 4 + 8;
    mixed.w_type = DNN_DATA_HALF;
    const struct {
        const ConvKey *k;
        const char *says;
    } bad[] = {
        {&wide, "not a 1x1 convolution"},         {&strided, "not a 1x1 convolution"},       {&padded, "not a 1x1 convolution"},
        {&grouped, "not a 1x1 convolution"},      {&nchw_wgrad, "sums a product per image over 2 images"},
        {&apart_wgrad, "sums over images"},       {&mixed, "cuBLASLt multiplies one input type"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        cr_expect_not(conv_gemm_from_key(bad[i].k, &cg, err, sizeof err), "case %zu taken", i);
        cr_expect(strstr(err, bad[i].says), "case %zu: \"%s\" does not say \"%s\"", i, err, bad[i].says);
    }
}

/* YOLOv8n at the benchmark's shape, both layouts: every 1x1 convolution without a bias (and
 * every gradient of one, but NCHW weight gradients) is a product, its types what the plan
 * stores, and the real cuBLASLt builds its descriptors (the heuristic needs a device). */
Test(conv_gemm, every_1x1_convolution_of_yolov8n_is_a_product_cublaslt_describes) {
    const bool lt = tu_cuda_host_libs();
    CudaLibs L;
    char err[1024];
    CudaLibNames names = {.cuda = CUDA_TOOLKIT_STUB};
    if (lt) cr_assert(cuda_libs_open(&L, &names, false, err, sizeof err), "%s", err);
    else cr_log_warn("no CUDA toolkit stub, cuDNN 9 or cuBLASLt here: the descriptors are not built");
    for (int cl = 0; cl < 2; cl++) {
        Plan p;
        compile_plan(cl ? "models/yolov8.yaml --scale n --imgsz 640 --batch 16 --precision bf16 --layout nhwc"
                        : "models/yolov8.yaml --scale n --imgsz 640 --batch 16 --precision bf16",
                     &p);
        bool *persistent = calloc((size_t)p.g.n_tensors + 1, sizeof *persistent);
        cr_assert_not_null(persistent);
        memplan_mark_persistent(&p.g, persistent);
        int products = 0, by_dir[3] = {0};
        for (int o = 0; o < p.g.n_ops; o++) {
            const Op *op = &p.g.ops[o];
            if (op->kind != OP_CONV2D && op->kind != OP_CONV2D_DGRAD && op->kind != OP_CONV2D_WGRAD) continue;
            ConvKey k;
            cr_assert(conv_key_from_op(&p.g, op, p.precision, persistent, &p.fusion.views, &k, err, sizeof err), "%s", err);
            const bool is_1x1 = k.kh == 1 && k.kw == 1 && k.stride[0] == 1 && k.stride[1] == 1 && k.groups == 1;
            const bool biased = op->kind == OP_CONV2D && op->n_in > 2;
            ConvGemm cg;
            const bool made = conv_gemm_from_key(&k, &cg, err, sizeof err);
            cr_expect_eq(made, is_1x1 && (cl || k.dir != CONV_WGRAD), "op %d (%s, %s): %s", o, op_def(op->kind)->name, op->scope ? op->scope : "", made ? "made" : err);
            if (!made || biased) continue;
            products++, by_dir[k.dir]++;
            const DType want_d = conv_gemm_dtype(k.dir == CONV_FWD ? k.y_type : k.dir == CONV_DGRAD ? k.x_type : k.w_type);
            cr_expect(cg.g.a.type == DT_BF16 && cg.g.b.type == DT_BF16 && cg.g.d.type == want_d, "op %d: bf16 inputs into the stored type", o);
            if (!lt) continue;
            CublasGemm g;
            cr_assert(cublas_gemm_describe(&g, &L, &cg.g, err, sizeof err), "op %d: %s", o, err);
            cublas_gemm_destroy(&g, &L);
        }
        /* YOLOv8n: 8 C2f blocks with a 1x1 cv1 and cv2 each, and SPPF's two, are 18 forward products; Detect's six
         * last convolutions are 1x1 too, but their bias keeps the forward in cuDNN: 24 data and weight gradients */
        cr_expect_eq(by_dir[CONV_FWD], 18, "%s: %d forward products", cl ? "NHWC" : "NCHW", by_dir[CONV_FWD]);
        cr_expect_eq(by_dir[CONV_DGRAD], 24, "%s: %d data-gradient products", cl ? "NHWC" : "NCHW", by_dir[CONV_DGRAD]);
        cr_expect_eq(by_dir[CONV_WGRAD], cl ? 24 : 0, "%s: %d weight-gradient products", cl ? "NHWC" : "NCHW", by_dir[CONV_WGRAD]);
        cr_log_info("YOLOv8n %s: %d products (forward %d, dgrad %d, wgrad %d)", cl ? "NHWC" : "NCHW", products, by_dir[0], by_dir[1], by_dir[2]);
        free(persistent);
        plan_free(&p);
    }
    if (lt) cuda_libs_close(&L);
}
