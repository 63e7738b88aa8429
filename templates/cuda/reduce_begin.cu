
/* @NAME@: one block per channel; per-thread fp64 sums in a fixed stride
 * order, a fixed tree across the block, then thread 0 runs the finalize */
extern "C" __global__ void __launch_bounds__(YK_BLOCK) @NAME@(YkArgs a) {
    __shared__ double red_[YK_BLOCK];
    __shared__ double var_[@NVARS@];
    const long long c = blockIdx.x, c_ = a.c, inner_ = a.inner;
    const yk_real count_ = (yk_real)(a.n * a.inner);
    (void)count_;
    (void)red_;
    (void)var_;
