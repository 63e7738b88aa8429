/* Shared by the library kernel families that take YlArgs (emitted before
 * each by compiler/lib_kernels.c; the detection loss has its own block):
 * the grid-stride loop over a.total elements, one per thread, and the walk
 * over an image stack that splits each element's index into image, channel
 * and pixel ([c][h][w] or, channels last, [h][w][c]) without a 64-bit
 * division per element. */
#define YL_EACH(i) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < a.total; i += (long long)gridDim.x * blockDim.x)
/* Division by a divisor fixed for the launch as a multiply-high, an add and
 * a shift (Granlund and Montgomery, "Division by invariant integers using
 * multiplication", 1994): exact for dividends below 2^32 and divisors in
 * [1, 2^32), where a 64-bit division per element would cost more than the
 * element's loads and stores. lib_program_build refuses images of 2^32
 * elements or more, so offsets within an image qualify. */
struct YlDiv {
    unsigned m, s;
};
__device__ __forceinline__ YlDiv yl_div_by(long long d) {
    const unsigned long long ud = d > 1 ? (unsigned long long)d : 1;
    unsigned s = 0;
    while ((1ull << s) < ud) s++;
    return YlDiv{(unsigned)((((1ull << s) - ud) << 32) / ud + 1), s};
}
__device__ __forceinline__ unsigned yl_quot(unsigned x, YlDiv q) { return (unsigned)(((unsigned long long)__umulhi(x, q.m) + x) >> q.s); }
/* This thread's grid-stride share of an image stack of `per` elements each,
 * in storage order: body(n, r) with image n and offset r within it. (n, r)
 * advance by the stride's quotient and remainder, so the loop itself does
 * not divide. */
template <typename F> __device__ __forceinline__ void yl_each_in_images(const YlArgs &a, long long per, F body) {
    const long long step = (long long)gridDim.x * blockDim.x;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= a.total || per < 1) return;
    long long n = i / per, r = i - n * per;
    const long long dn = step / per, dr = step - dn * per;
    for (; i < a.total; i += step) {
        body(n, r);
        r += dr;
        const long long carry = r >= per;
        r -= carry * per;
        n += dn + carry;
    }
}
/* n: image, r: offset within the image as stored, ch: channel, p: offset
 * within the plane, y and x: its row and column */
struct YlPix {
    long long n, r, ch, p, y, x;
};
/* body(pix) for this thread's elements (grid-stride) of an image stack of c
 * channels over h x w planes in storage order, NCHW or (cl) [h][w][c], so
 * consecutive threads write consecutive addresses either way. */
template <typename F> __device__ __forceinline__ void yl_each_pix(const YlArgs &a, bool cl, long long c, long long h, long long w, F body) {
    const unsigned uc = (unsigned)c, uw = (unsigned)w, plane = uw * (unsigned)h;
    /* an offset's first split: by c into pixel and channel (channels last), else by the plane into channel and pixel */
    const YlDiv by_first = yl_div_by(cl ? uc : plane), by_w = yl_div_by(w);
    yl_each_in_images(a, c * h * w, [&](long long n, long long r) {
        /* within an image in 32 bits, where the products cost one instruction */
        const unsigned ur = (unsigned)r, q = yl_quot(ur, by_first), ch = cl ? ur - q * uc : q, p = cl ? q : ur - q * plane;
        const unsigned y = yl_quot(p, by_w);
        body(YlPix{n, r, ch, p, y, p - y * uw});
    });
}
/* Offset within an image of channel ch at plane offset p. */
__device__ __forceinline__ long long yl_at(bool cl, long long ch, long long p, long long c, long long plane) { return cl ? p * c + ch : ch * plane + p; }
/* Offset within its image of operand s's channel ch at plane offset p: a
 * channels-last operand's pixels sit a.ps[s] apart (a channel slice of a
 * wider tensor: the base's channels). */
__device__ __forceinline__ long long yl_pos(const YlArgs &a, int s, long long ch, long long p, long long plane) {
    return yl_at((a.cl >> s) & 1, ch, p, a.ps[s], plane);
}
