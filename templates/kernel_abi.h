/* templates/kernel_abi.h — the argument block every generated kernel takes.
 * Embedded verbatim at the top of generated C and CUDA sources and included
 * by the runtime that fills it, so both sides read one definition. */
#ifndef YK_KERNEL_ABI_H
#define YK_KERNEL_ABI_H
#define YK_MAX_BUFS 16
typedef struct YkArgs {
    void *t[YK_MAX_BUFS];               /* buffers in the kernel's slot order */
    long long n, c, inner;              /* map / channel-reduce extents: [n, c, inner] */
    long long bs[YK_MAX_BUFS];          /* strided slots (views): elements between images */
    long long outer, len, src_stride, src_off, dst_stride, dst_off; /* slice copy */
    void *const *list;                  /* tensor-list reduce: the tensors, */
    const long long *list_len;          /* their element counts, */
    long long list_n;                   /* and how many */
    long long phase;                    /* channel reduce: the phase this launch runs */
    void *part;                         /* channel reduce, list norm: the blocks' partial sums (and the reduce's variables) */
    unsigned *arrived;                  /* the same: per channel group (per tensor, then the list), the blocks done (zero between launches) */
    long long lanes;                    /* channel reduce: consecutive channels a block reduces side by side (CUDA) */
    long long vec;                      /* map, slice copy: consecutive elements a thread takes at a time, in one access of up to 16 bytes (CUDA) */
    long long idx32;                    /* map, channel reduce: every element index the launch forms is below 2^31, so a thread counts in 32-bit integers (CUDA) */
} YkArgs;
/* channel reduce: sums and variables per channel in YkArgs.part (KIR_MAX_ACCS, KIR_MAX_VARS) */
#define YK_RED_ACCS 4
#define YK_RED_VARS 4
#endif
