/* templates/lib_abi.h — the argument block of the CUDA library kernels
 * (templates/cuda/lib: pooling, nearest resize, zero pad / crop, the
 * compute-copy cast). Embedded at the top of their NVRTC sources and included
 * by compiler/lib_kernels.h, which fills it, so both sides read one definition. */
#ifndef YL_LIB_ABI_H
#define YL_LIB_ABI_H
#define YL_MAX_OPERANDS 3
typedef struct YlArgs {
    void *t[YL_MAX_OPERANDS];           /* the op's inputs, then its output */
    long long bs[YL_MAX_OPERANDS];      /* per operand: elements between images (a view's base stride, else its own image) */
    long long total;                    /* elements the kernel writes, one thread each (grid-stride) */
    long long c;                        /* channels */
    long long h, w, oh, ow;             /* the forward op's input and output planes */
    int kh, kw, sh, sw, ph, pw, dh, dw; /* pooling window; ph, pw: padding before (zeropad / crop: rows above, columns left) */
} YlArgs;
#endif
