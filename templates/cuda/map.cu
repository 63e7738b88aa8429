
/* @NAME@: elementwise over [n, c, inner], grid-stride, V consecutive
 * elements a thread at a time: one load or store of up to 16 bytes per
 * element buffer. The launch takes V = @VEC@ where the shape and addresses
 * allow it (cuda_elem_vec), else 1: V divides inner, or c when inner is 1,
 * so a thread's V elements lie in one channel (NCHW) or in V adjacent ones
 * (channels last). The position (n, c, k) of its first element advances
 * by the stride's digits in that radix with carries, so no element pays
 * for a division. Indices are of type I: int where every one the launch
 * forms fits (YkArgs.idx32, the vectorized path), else long long (V = 1). */
template <int V, typename I> __device__ __forceinline__ void @NAME@_run(const YkArgs &a) {
    const I c_ = a.c, inner_ = a.inner, total_ = a.n * c_ * inner_, step_ = (I)gridDim.x * blockDim.x * V;
    const I cstep_ = inner_ == 1; /* channels between a thread's elements: 1 channels last, else 0 */
    (void)cstep_;
    const yk_real count_ = (yk_real)(a.n * a.inner);
    (void)count_;
    I i = (blockIdx.x * (I)blockDim.x + threadIdx.x) * V;
    if (i >= total_) return;
    I k = i % inner_, c = i / inner_ % c_, n = i / inner_ / c_;
    const I dk_ = step_ % inner_, dc_ = step_ / inner_ % c_, dn_ = step_ / inner_ / c_;
    /* what depends on the channel alone (its statistics, scale and shift), computed
     * again only when the channel changes: channels last, never (cuda_launch_geometry) */
    I held_ = -1;
@DECL@
    for (; i < total_; i += step_) {
        (void)n;
        if (c != held_) {
            held_ = c;
@CHAN@
        }
@BODY@
        k += dk_;
        const I kc_ = k >= inner_;
        k -= kc_ * inner_;
        c += dc_ + kc_;
        const I cc_ = c >= c_;
        c -= cc_ * c_;
        n += dn_ + cc_;
    }
}

extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
@ROWS@    if (a.vec == @VEC@ && a.idx32) @NAME@_run<@VEC@, int>(a);
    else @NAME@_run<1, long long>(a);
}
