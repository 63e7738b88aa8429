/* Library kernel: a reshape or detach whose input or output is stored
 * channels last (--layout nhwc: the images and weights into that layout, the
 * head's levels out of it). Both sides hold the same elements in the same
 * logical (NCHW, row-major) order; a.cl, a.ch, a.plane and a.per say how
 * each stores them. One thread per output element in its storage order
 * (grid-stride), so the writes are coalesced; the type changes on the way
 * as the loads and stores convert. */
#ifdef YL_RELAYOUT
/* Stored offset of logical element i (of the whole tensor) of operand s. */
__device__ __forceinline__ long long yl_stored(const YlArgs &a, int s, long long i) {
    const long long n = i / a.per[s], r = i - n * a.per[s];
    if (!(a.cl >> s & 1)) return n * a.bs[s] + r;
    const long long ch = r / a.plane[s];
    return n * a.bs[s] + yl_at(true, ch, r - ch * a.plane[s], a.ch[s], a.plane[s]);
}
/* relayout with x (XC) and y (YC) stored channels last or not: the loop of
 * each pair compiled on its own, with no branch on them inside */
template <bool XC, bool YC> __device__ __forceinline__ void @NAME@_run(const YlArgs &a) {
    /* offsets within an image in 32 bits, where the products cost one instruction */
    const unsigned ch0 = (unsigned)a.ch[0], plane0 = (unsigned)a.plane[0], ch1 = (unsigned)a.ch[1], plane1 = (unsigned)a.plane[1];
    const YlDiv by_ch1 = yl_div_by(ch1), by_plane0 = yl_div_by(plane0);
    /* y's stored element r of image n is its logical element q of that image */
    auto logical = [&](unsigned r) {
        if (!YC) return r;
        const unsigned p = yl_quot(r, by_ch1);
        return (r - p * ch1) * plane1 + p;
    };
    if (a.per[0] != a.per[1]) { /* a reshape across images, which no plan has yet: the slow way */
        yl_each_in_images(a, a.per[1], [&](long long n, long long r) {
            yk_st_@T1@(a.t[1], n * a.bs[1] + r, yk_ld_@T0@(a.t[0], yl_stored(a, 0, n * a.per[1] + logical((unsigned)r))));
        });
        return;
    }
    yl_each_in_images(a, a.per[1], [&](long long n, long long r) {
        unsigned q = logical((unsigned)r);
        if (XC) {
            const unsigned ch = yl_quot(q, by_plane0);
            q = (q - ch * plane0) * ch0 + ch;
        }
        yk_st_@T1@(a.t[1], n * a.bs[1] + r, yk_ld_@T0@(a.t[0], n * a.bs[0] + q));
    });
}
/* @NAME@: relayout(x) -> y, y's logical elements equal to x's */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    switch (a.cl & 3) {
    case 0: @NAME@_run<false, false>(a); break;
    case 1: @NAME@_run<true, false>(a); break;
    case 2: @NAME@_run<false, true>(a); break;
    default: @NAME@_run<true, true>(a); break;
    }
}
#endif
