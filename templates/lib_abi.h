/* templates/lib_abi.h — the argument block of the CUDA library kernels
 * (templates/cuda/lib: pooling, nearest resize, zero pad / crop, the
 * compute-copy cast, attention, the box decode, the layout change). Embedded at the top of their NVRTC sources and included
 * by compiler/lib_kernels.h, which fills it, so both sides read one definition. */
#ifndef YL_LIB_ABI_H
#define YL_LIB_ABI_H
#define YL_MAX_OPERANDS 3
#define YL_MAX_LEVELS 8
typedef struct YlArgs {
    void *t[YL_MAX_OPERANDS];           /* the op's inputs, then its output */
    long long bs[YL_MAX_OPERANDS];      /* per operand: elements between images (a view's base stride, else its own image) */
    long long total;                    /* elements the kernel writes, one thread each (grid-stride) */
    long long c;                        /* channels */
    long long h, w, oh, ow;             /* the forward op's input and output planes */
    int kh, kw, sh, sw, ph, pw, dh, dw; /* pooling window; ph, pw: padding before (zeropad / crop: rows above, columns left) */
    /* attention and attention_bwd only, after the older fields so kernels compiled before them read the same block */
    void *t3;                           /* a fourth operand: attention_bwd's output d_qkv */
    long long bs3;                      /* its image stride */
    void *ws;                           /* attention_bwd's device scratch: 3 doubles per (image, head, token) */
    double scale;
    int heads, key_dim, head_dim, area;
    /* the validation graph's box decode (dfl, dist2bbox) only */
    int reg_max, nlevels, xywh;         /* dfl: bins per side; dist2bbox: levels, xywh (else xyxy) output */
    int level_h[YL_MAX_LEVELS], level_w[YL_MAX_LEVELS];         /* dist2bbox: each level's grid, anchors in level-then-row-major order */
    double strides[YL_MAX_LEVELS];                /* dist2bbox: each level's stride in pixels */
    float ema_d, ema_e;                 /* ema: the decay d and 1 - d, rounded to fp32 as the host rounds them */
    /* --layout nhwc: bit s set when operand s (inputs, then outputs; attention_bwd's d_qkv is
     * bit 3) is stored channels last, element (image, ch, plane offset p) at image base + p * C + ch.
     * Per operand (the first three): channels, plane (h * w) and elements per image of its
     * logical shape, which relayout (a reshape between layouts) reads. */
    int cl;
    long long ch[YL_MAX_OPERANDS], plane[YL_MAX_OPERANDS], per[YL_MAX_OPERANDS];
    /* attention through cuBLASLt (runtime/cuda/attention_gemm.h): one slice's score rows
     * (images x tokens per area) and their length; att_bwd: the gradient's pass (the
     * softmax's gradient, d_v into d_qkv) instead of the forward's */
    long long att_rows, att_len;
    int att_bwd;
    /* pooling and nearest resize (lib_op_pixel_stride): per channels-last operand, the elements
     * between its pixels, its channels or, for a channel slice of another tensor, the base's */
    long long ps[YL_MAX_OPERANDS];
} YlArgs;
#endif
