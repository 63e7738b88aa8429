
/* @NAME@: elementwise over [n, c, inner], grid-stride */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    const long long c_ = a.c, inner_ = a.inner, total_ = a.n * c_ * inner_;
    const yk_real count_ = (yk_real)(a.n * a.inner);
    (void)count_;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total_; i += (long long)gridDim.x * blockDim.x) {
        const long long c = (i / inner_) % c_;
        (void)c;
@BODY@
    }
}
