/* runtime/cuda/conv_gemm.c — 1x1 convolutions as matrix products (conv_gemm.h). Pure arithmetic
 * on the key's shapes and strides; must not call a library or decide a route. */
#include "conv_gemm.h"

#include <stdio.h>

#include "../../ir/diag.h"
#include "cuda_abi.h"

DType conv_gemm_dtype(int dnn_type) { return dnn_type == DNN_DATA_BFLOAT16 ? DT_BF16 : dnn_type == DNN_DATA_HALF ? DT_F16 : DT_F32; }

static GemmView view(int dnn_type, int64_t rs, int64_t cs, int64_t bs) { return (GemmView){conv_gemm_dtype(dnn_type), rs, cs, bs}; }

/* In a 1x1 convolution every output pixel p is the weight matrix (co x ci) times the input's
 * pixel p: channels last, the images' pixels are the rows of one matrix (or of one matrix per
 * image when views put the images apart); NCHW, each image is a ci x P matrix, and the
 * product is batched over images with the weights shared. */
bool conv_gemm_from_key(const ConvKey *k, ConvGemm *cg, char *err, int errcap) {
    if (k->kh != 1 || k->kw != 1 || k->stride[0] != 1 || k->stride[1] != 1 || k->dilation[0] != 1 || k->dilation[1] != 1 || k->groups != 1 ||
        k->pre_pad[0] || k->pre_pad[1] || k->post_pad[0] || k->post_pad[1] || k->ho != k->h || k->wo != k->w)
        return errf(err, errcap, "not a 1x1 convolution with stride 1, no padding and one group");
    const int64_t P = k->h * k->w, ci = k->ci, co = k->co, n = k->n;
    const int64_t xbs = k->x_bs ? k->x_bs : P * ci, ybs = k->y_bs ? k->y_bs : P * co;
    const float beta = k->accumulate ? 1.0f : 0.0f;
    GemmView x, y, w;
    if (k->channels_last) {
        /* rows: pixels; packed images are one matrix of n * P rows */
        const bool packed = xbs == P * ci && ybs == P * co;
        const int64_t rows = packed ? n * P : P;
        const int64_t batch = packed ? 1 : n;
        x = view(k->x_type, ci, 1, xbs), y = view(k->y_type, co, 1, ybs);
        switch (k->dir) {
        case CONV_FWD: /* y (rows x co) = x (rows x ci) w^T (ci x co) */
            *cg = (ConvGemm){.a = CG_X, .b = CG_W, .d = CG_Y};
            w = view(k->w_type, 1, ci, 0);
            return gemm_desc_make(&cg->g, rows, co, ci, batch, x, w, y, 1.0f, beta, err, errcap);
        case CONV_DGRAD: /* dx (rows x ci) = dy (rows x co) w (co x ci) */
            *cg = (ConvGemm){.a = CG_Y, .b = CG_W, .d = CG_X};
            w = view(k->w_type, ci, 1, 0);
            return gemm_desc_make(&cg->g, rows, ci, co, batch, y, w, x, 1.0f, beta, err, errcap);
        default: /* dw (co x ci) = dy^T (co x n P) x (n P x ci) */
            if (!packed) return errf(err, errcap, "a channels-last weight gradient over images %lld and %lld elements apart sums over images", (long long)xbs, (long long)ybs);
            *cg = (ConvGemm){.a = CG_Y, .b = CG_X, .d = CG_W};
            GemmView yt = view(k->y_type, 1, co, 0);
            w = view(k->w_type, ci, 1, 0);
            return gemm_desc_make(&cg->g, co, ci, n * P, 1, yt, x, w, 1.0f, beta, err, errcap);
        }
    }
    /* NCHW: image b is a channels x P matrix at b * bs */
    x = view(k->x_type, P, 1, xbs), y = view(k->y_type, P, 1, ybs);
    switch (k->dir) {
    case CONV_FWD: /* y[b] (co x P) = w (co x ci) x[b] (ci x P) */
        *cg = (ConvGemm){.a = CG_W, .b = CG_X, .d = CG_Y};
        w = view(k->w_type, ci, 1, 0);
        return gemm_desc_make(&cg->g, co, P, ci, n, w, x, y, 1.0f, beta, err, errcap);
    case CONV_DGRAD: /* dx[b] (ci x P) = w^T (ci x co) dy[b] (co x P) */
        *cg = (ConvGemm){.a = CG_W, .b = CG_Y, .d = CG_X};
        w = view(k->w_type, 1, ci, 0);
        return gemm_desc_make(&cg->g, ci, P, co, n, w, y, x, 1.0f, beta, err, errcap);
    default:
        if (n != 1) return errf(err, errcap, "an NCHW weight gradient sums a product per image over %lld images", (long long)n);
        /* dw (co x ci) = dy (co x P) x^T (P x ci) */
        *cg = (ConvGemm){.a = CG_Y, .b = CG_X, .d = CG_W};
        GemmView xt = view(k->x_type, 1, P, 0);
        w = view(k->w_type, ci, 1, 0);
        return gemm_desc_make(&cg->g, co, ci, P, 1, y, xt, w, 1.0f, beta, err, errcap);
    }
}
