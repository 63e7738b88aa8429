}

extern "C" __global__ void __launch_bounds__(YK_BLOCK, YK_MIN_BLOCKS) @NAME@(YkArgs a) {
    __shared__ double red_[YK_BLOCK];
    __shared__ int last_;
    if (a.vec == @VEC@ && a.idx32) @NAME@_run<@VEC@, int>(a, red_, last_);
    else @NAME@_run<1, long long>(a, red_, last_);
}
