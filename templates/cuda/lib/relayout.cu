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
/* @NAME@: relayout(x) -> y, y's logical elements equal to x's */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YlArgs a) {
    YL_EACH(j) {
        /* j: y's j-th stored element of its packed images; i: its logical index */
        const long long n = j / a.per[1], r = j - n * a.per[1];
        long long i = j;
        if (a.cl >> 1 & 1) {
            const long long p = r / a.ch[1], ch = r - p * a.ch[1];
            i = n * a.per[1] + ch * a.plane[1] + p;
        }
        yk_st_@T1@(a.t[1], n * a.bs[1] + r, yk_ld_@T0@(a.t[0], yl_stored(a, 0, i)));
    }
}
#endif
