/* runtime/cuda/conv_gemm.h — a 1x1 convolution (stride 1, no padding, one group) as one
 * cuBLASLt product: forward, data gradient or weight gradient, NCHW or channels last, packed or
 * a zero-copy view. Pure: built from the convolution's cuDNN key (cudnn_conv.h), no device and
 * no library calls; whether the product is faster than cuDNN is the caller's to measure. */
#ifndef YOLOCC_CONV_GEMM_H
#define YOLOCC_CONV_GEMM_H
#include "cudnn_conv.h"
#include "gemm_desc.h"

/* which of the convolution's tensors a product operand is: x (dx), w (dw) or y (dy) */
typedef enum { CG_X, CG_W, CG_Y } ConvGemmTensor;

typedef struct ConvGemm {
    GemmDesc g;
    ConvGemmTensor a, b, d;   /* the logical operands of g: D = A B (+ D when accumulating) */
} ConvGemm;

/* Pure: the product computing convolution k. False with a message naming why a convolution
 * is no single product (a kernel wider than 1x1, a stride, padding, dilation or groups; an
 * NCHW weight gradient, which sums over images; what gemm_desc_make refuses). */
bool conv_gemm_from_key(const ConvKey *k, ConvGemm *cg, char *err, int errcap);
/* the tensor's element type as the key gives it */
DType conv_gemm_dtype(int dnn_type);

#endif
